// results_json.h — the results document every benchmark writes with --json PATH (docs/design.md, "Results
// JSON"): {"benchmark", "commit", "date", "device", "config", "rows"}, written atomically so a
// reader never sees half a file.
#pragma once

#include <iosfwd>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/device.h"

namespace ft {

// Bytes in a GiB: the unit of every *_gib figure.
inline constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

// The current time as ISO-8601 UTC with seconds: "2025-01-31T12:34:56Z".
std::string iso8601_utc_now();

// {"benchmark": benchmark, "commit": git_commit(), "date": now, "device": describe_device(device),
//  "config": config, "rows": rows}. config must be an object and rows an array of objects.
nlohmann::json results_document(std::string_view benchmark, Device device, nlohmann::json config,
                                nlohmann::json rows);

// Writes doc (2-space indented, trailing newline) to path: first to a temporary file in the same
// folder, then renamed over path. Creates missing parent folders. Throws ft::Error (io) on failure.
void write_json_atomic(const std::string& path, const nlohmann::json& doc);

// write_json_atomic, then "wrote <path>" on `log`: how every command reports the document it wrote.
void write_json_reported(const std::string& path, const nlohmann::json& doc, std::ostream& log);

}  // namespace ft
