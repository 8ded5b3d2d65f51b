// safetensors_header.h — the safetensors JSON header parsed in one linear pass without recursion: a SAX
// handler over nlohmann's iterative parser builds the entries and the metadata directly (no JSON tree),
// so neither a deeply nested nor a very long header can exhaust the stack or take quadratic time, and
// no error message dumps JSON. See Note [Safetensors header limits].
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/safetensors.h"

namespace ft {

// Note [Safetensors header limits]
// A header is refused (ft::Error kind io naming the file) when it is longer than kMaxHeaderBytes, nests
// containers deeper than kMaxHeaderDepth (a real header needs 3 levels: the object, an entry, its shape),
// starts with a UTF-8 byte-order mark, is not one JSON object, names a tensor, a metadata key or an
// entry's field twice, or holds an entry whose dtype, shape or data_offsets are malformed. Unknown fields
// of an entry are skipped (within the depth limit), as the Python library does.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;  // the Python library's limit too
constexpr int kMaxHeaderDepth = 64;

struct SafetensorsHeader {
  SafetensorsMetadata metadata;
  std::vector<SafetensorsEntry> entries;  // in header order; each checked against data_bytes
};

// Parses header text of a file at `path` (named in errors) whose data section holds data_bytes bytes:
// every entry's byte size matches its dtype and shape and its offsets lie within the data section.
SafetensorsHeader parse_safetensors_header(std::string_view text, std::uint64_t data_bytes, const std::string& path);

}  // namespace ft
