// out_of_memory.h — telling an out-of-memory failure from other errors, so that a benchmark cell that
// does not fit becomes an OOM row ("oom": true) and the sweep goes on: ft::Error of kind out_of_memory
// (the allocator's, on any device) or std::bad_alloc (host containers, such as the naive CPU attention's
// O(N^2) score matrices).
#pragma once

#include <exception>
#include <new>
#include <string>

#include "core/error.h"

namespace ft::cli {

inline bool is_out_of_memory(const std::exception& error) {
  if (const auto* e = dynamic_cast<const Error*>(&error)) return e->kind() == ErrorKind::out_of_memory;
  return dynamic_cast<const std::bad_alloc*>(&error) != nullptr;
}

// The message an OOM row carries.
inline std::string out_of_memory_message(const std::exception& error) {
  if (const auto* e = dynamic_cast<const Error*>(&error)) return e->message();
  return std::string("out of host memory (") + error.what() + ")";
}

}  // namespace ft::cli
