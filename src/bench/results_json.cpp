// results_json.cpp — building the benchmark results document and writing it atomically.
#include "bench/results_json.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/version.h"

namespace ft {

std::string iso8601_utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

nlohmann::json results_document(std::string_view benchmark, Device device, nlohmann::json config,
                                nlohmann::json rows) {
  FT_CHECK(!benchmark.empty(), "results_document: the benchmark name is empty");
  FT_CHECK(config.is_object(), "results_document: config must be a JSON object, given ", config.type_name());
  FT_CHECK(rows.is_array(), "results_document: rows must be a JSON array, given ", rows.type_name());
  for (const auto& row : rows) {
    FT_CHECK(row.is_object(), "results_document: every row must be a JSON object, given ", row.type_name());
  }
  return nlohmann::json{{"benchmark", benchmark},
                        {"commit", git_commit()},
                        {"date", iso8601_utc_now()},
                        {"device", describe_device(device)},
                        {"config", std::move(config)},
                        {"rows", std::move(rows)}};
}

void write_json_atomic(const std::string& path, const nlohmann::json& doc) {
  namespace fs = std::filesystem;
  FT_CHECK_KIND(io, !path.empty(), "write_json_atomic: the output path is empty");
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
    FT_CHECK_KIND(io, !ec, "cannot create the folder ", target.parent_path().string(), " for ", path, ": ",
                  ec.message());
  }
  FT_CHECK_KIND(io, !fs::is_directory(target), "cannot write JSON to ", path, ": it is a folder");

  write_file_atomic(path, doc.dump(2) + "\n");
}

void write_json_reported(const std::string& path, const nlohmann::json& doc, std::ostream& log) {
  write_json_atomic(path, doc);
  log << "wrote " << path << "\n";
}

}  // namespace ft
