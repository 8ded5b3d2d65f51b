// error.cpp — ft::Error: message, kind and the place it was raised.
#include "core/error.h"

namespace ft {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::invalid_argument: return "invalid argument";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::out_of_memory: return "out of memory";
    case ErrorKind::device: return "device error";
    case ErrorKind::io: return "i/o error";
    case ErrorKind::runtime: return "runtime error";
  }
  return "error";
}

namespace {
std::string base_name(const char* path) {
  std::string p(path ? path : "");
  auto slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}
}  // namespace

Error::Error(ErrorKind kind, std::string message, const char* file, int line)
    : std::runtime_error(message + " (" + base_name(file) + ":" + std::to_string(line) + ")"),
      kind_(kind),
      message_(std::move(message)),
      file_(file),
      line_(line) {}

}  // namespace ft
