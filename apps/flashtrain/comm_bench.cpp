// comm_bench.cpp — `flashtrain bench comm`: size parsing, the timed all-reduce loop per rank, the gather of
// every rank's median, the table and the results document.
#include "flashtrain/comm_bench.h"

#include <algorithm>
#include <chrono>
#include <iostream>

#include "bench/report_table.h"
#include "bench/results_json.h"
#include "bench/statistics.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "flashtrain/cli_parse.h"
#include "ops/cast.h"

namespace ft::cli {

namespace {

struct Unit {
  const char* suffix;
  std::int64_t bytes;
};
// Binary units first: format_bytes prefers them, and "KiB" must not be read as "K" + "iB".
constexpr Unit kUnits[] = {{"GiB", 1LL << 30}, {"MiB", 1LL << 20}, {"KiB", 1LL << 10}, {"GB", 1000000000LL},
                           {"MB", 1000000LL},  {"KB", 1000LL},     {"B", 1}};

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

std::int64_t parse_byte_size(std::string_view item) {
  const std::string_view text = trim(item);
  std::int64_t multiplier = 1;
  std::string_view number = text;
  for (const Unit& unit : kUnits) {
    const std::string_view suffix(unit.suffix);
    if (text.size() > suffix.size() && text.ends_with(suffix)) {
      multiplier = unit.bytes;
      number = trim(text.substr(0, text.size() - suffix.size()));
      break;
    }
  }
  std::int64_t count = 0;
  try {
    count = parse_integer(number);
  } catch (const Error&) {
    FT_THROW(invalid_argument, "expected a size such as 4096, 64KiB, 1MB or 1GiB, given '", text, "'");
  }
  FT_CHECK(count >= 1 && count <= (std::int64_t{1} << 62) / multiplier, "expected a positive size, given '", text, "'");
  const std::int64_t bytes = count * multiplier;
  FT_CHECK(bytes % 4 == 0, "sizes are of float32 buffers: expected a multiple of 4 bytes, given '", text, "' (",
           bytes, " bytes)");
  return bytes;
}

// Each rank's value of one float, over a host communicator: result[r] is rank r's.
std::vector<float> gather_values(Communicator& comm, float value) {
  std::vector<float> all(static_cast<std::size_t>(comm.world_size()));  // (world)
  comm.all_gather(Tensor(all.data(), DType::f32, Device::cpu(), {comm.world_size()}),
                  Tensor(&value, DType::f32, Device::cpu(), {1}))
      ->wait();
  return all;
}

// All ranks fill `data` with rank + 1 and sum it: every element must come back as world (world + 1) / 2.
void check_sum(Communicator& comm, const Tensor& data) {
  const std::int64_t n = data.numel();
  fill(data, comm.rank() + 1);
  comm.all_reduce(data, ReduceOp::sum)->wait();
  std::vector<float> staging;  // (n) a GPU buffer's values, on the host
  const float* values = data.data_as<const float>();  // (n)
  if (!data.device().is_cpu()) {
    staging.resize(static_cast<std::size_t>(n));
    copy(Tensor(staging.data(), DType::f32, Device::cpu(), {n}), data);
    values = staging.data();
  }
  const auto expected = static_cast<float>(comm.world_size() * (comm.world_size() + 1) / 2);
  const auto wrong = std::find_if(values, values + n, [&](float v) { return v != expected; });
  FT_CHECK_KIND(runtime, wrong == values + n, "bench comm: the all-reduce (sum) of ", n, " floats on rank ",
                comm.rank(), " gave ", *wrong, " at element ", wrong - values, ", expected ", expected);
}

std::string gbps_cell(const std::optional<double>& value) { return value ? fixed(*value, 2) : "n/a"; }

nlohmann::json gbps_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

}  // namespace

std::vector<std::int64_t> parse_byte_sizes(std::string_view text) {
  std::vector<std::int64_t> sizes;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    sizes.push_back(parse_byte_size(text.substr(start, comma - start)));
    start = comma + 1;
  }
  return sizes;
}

std::string format_bytes(std::int64_t bytes) {
  for (const Unit& unit : kUnits)
    if (bytes % unit.bytes == 0) return std::to_string(bytes / unit.bytes) + " " + unit.suffix;
  return std::to_string(bytes) + " B";
}

std::vector<CommBenchRow> run_comm_bench(const CommBenchConfig& config, Communicator& comm, Communicator& host,
                                         std::ostream* progress) {
  FT_CHECK(!config.sizes.empty(), "bench comm: expected at least one size");
  FT_CHECK(config.warmup >= 0 && config.iters >= 1, "bench comm: expected warmup >= 0 and iters >= 1, given ",
           config.warmup, " and ", config.iters);
  std::vector<CommBenchRow> rows;
  for (const std::int64_t bytes : config.sizes) {
    FT_CHECK(bytes >= 4 && bytes % 4 == 0, "bench comm: sizes must be positive multiples of 4 bytes, given ", bytes);
    const std::int64_t n = bytes / 4;
    Buffer buffer(static_cast<std::size_t>(bytes), config.device, "bench comm buffer");
    const Tensor data(buffer.data(), DType::f32, config.device, {n});  // (n) fp32
    check_sum(comm, data);
    // Zeros stay zeros under any number of sums: no overflow, no denormals.
    fill(data, 0.0);

    for (int i = 0; i < config.warmup; ++i) comm.all_reduce(data, ReduceOp::sum)->wait();
    std::vector<double> samples;  // (iters) ms
    for (int i = 0; i < config.iters; ++i) {
      comm.barrier()->wait();
      const auto begin = std::chrono::steady_clock::now();
      comm.all_reduce(data, ReduceOp::sum)->wait();
      samples.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count());
    }
    const std::vector<float> medians = gather_values(host, static_cast<float>(summarize(samples).median));

    CommBenchRow row;
    row.world = comm.world_size();
    row.backend = comm.backend();
    row.bytes = bytes;
    row.time_ms = *std::max_element(medians.begin(), medians.end());
    row.min_rank_ms = *std::min_element(medians.begin(), medians.end());
    if (row.time_ms > 0) {
      const double world = row.world;
      row.algbw_gbps = static_cast<double>(bytes) / (row.time_ms * 1e-3) / 1e9;
      row.busbw_gbps = *row.algbw_gbps * 2.0 * (world - 1.0) / world;
    }
    rows.push_back(row);
    if (progress)
      *progress << "  all-reduce " << format_bytes(bytes) << " over " << row.world << " ranks: "
                << fixed(row.time_ms, 3) << " ms\n";
  }
  return rows;
}

std::string format_comm_bench(const std::vector<CommBenchRow>& rows, bool csv) {
  ReportTable table({"world", "backend", "size", "bytes", "time_ms", "min_rank_ms", "algbw_gbps", "busbw_gbps"});
  for (const CommBenchRow& r : rows)
    table.add_row({std::to_string(r.world), r.backend, format_bytes(r.bytes), std::to_string(r.bytes),
                   fixed(r.time_ms, 4), fixed(r.min_rank_ms, 4), gbps_cell(r.algbw_gbps), gbps_cell(r.busbw_gbps)});
  return csv ? table.csv() : table.markdown();
}

nlohmann::json comm_bench_document(const CommBenchConfig& config, const std::vector<CommBenchRow>& rows) {
  FT_CHECK(!rows.empty(), "comm_bench_document: expected at least one row");
  nlohmann::json out_rows = nlohmann::json::array();
  for (const CommBenchRow& r : rows)
    out_rows.push_back({{"world", r.world},
                        {"backend", r.backend},
                        {"bytes", r.bytes},
                        {"time_ms", r.time_ms},
                        {"min_rank_ms", r.min_rank_ms},
                        {"algbw_gbps", gbps_json(r.algbw_gbps)},
                        {"busbw_gbps", gbps_json(r.busbw_gbps)}});
  nlohmann::json cfg{{"world", rows.front().world},
                     {"backend", rows.front().backend},
                     {"collective", "all_reduce"},
                     {"op", "sum"},
                     {"dtype", "fp32"},
                     {"warmup", config.warmup},
                     {"iters", config.iters},
                     {"statistic", "max over ranks of each rank's median iteration (barrier before each, untimed)"},
                     {"timing", "host wall clock from the all-reduce call until its wait() returns (GPU: until its "
                                "completion event has been seen)"},
                     {"bandwidth", "algbw = bytes / time; busbw = algbw * 2 (world - 1) / world; GB = 1e9 bytes"}};
  return results_document("comm", config.device, std::move(cfg), std::move(out_rows));
}

void bench_comm(const CommBenchConfig& config, Communicator& comm, Communicator& host, bool csv,
                const std::string& json_path, std::ostream& out) {
  const bool root = comm.rank() == 0;
  const std::vector<CommBenchRow> rows = run_comm_bench(config, comm, host, root ? &std::cerr : nullptr);
  if (!root) return;
  out << "all-reduce benchmark: " << rows.front().world << " ranks, backend " << rows.front().backend << ", "
      << (config.device.is_cpu() ? "host buffers" : "a buffer on each rank's GPU") << ", fp32 sum, " << config.warmup << " warm-up + " << config.iters << " timed iterations per size\n\n"
      << format_comm_bench(rows, csv);
  if (!json_path.empty()) {
    write_json_reported(json_path, comm_bench_document(config, rows), out);
  }
}

}  // namespace ft::cli
