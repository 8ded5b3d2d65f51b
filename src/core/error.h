// error.h — flashtrain's one error type and the check macros that raise it.
// Messages say what was expected and what was given; every throw records file and line.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ft {

enum class ErrorKind {
  invalid_argument,  // bad shape, dtype, value, option
  unsupported,       // a valid request this build or device cannot serve (head dim, no CUDA, ...)
  out_of_memory,     // an allocation failed
  device,            // a CUDA / cuBLAS / NCCL call failed
  io,                // files: missing, corrupt, mismatched
  runtime,           // anything else, including timeouts of collective operations
};

const char* to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, const char* file, int line);
  ErrorKind kind() const { return kind_; }
  // The message without the "(file:line)" suffix.
  const std::string& message() const { return message_; }
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  ErrorKind kind_;
  std::string message_;
  const char* file_;
  int line_;
};

namespace detail {
template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}
}  // namespace detail

// str(a, b, c): the arguments streamed one after another.
template <class... Args>
std::string str(Args&&... args) {
  return detail::concat(std::forward<Args>(args)...);
}

// Runs fn(), prefixing any ft::Error's message with the option (or other input) it was working on.
template <class Fn>
auto for_option(const char* option, Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(e.kind(), str(option, ": ", e.message()), e.file(), e.line());
  }
}

}  // namespace ft

// FT_THROW(kind, parts...): throw ft::Error with the streamed parts as message.
#define FT_THROW(kind, ...) \
  throw ::ft::Error(::ft::ErrorKind::kind, ::ft::str(__VA_ARGS__), __FILE__, __LINE__)

// FT_CHECK(cond, parts...): invalid_argument unless cond holds.
#define FT_CHECK(cond, ...)                    \
  do {                                         \
    if (!(cond)) FT_THROW(invalid_argument, __VA_ARGS__); \
  } while (0)

// FT_CHECK_KIND(kind, cond, parts...): as FT_CHECK with another kind.
#define FT_CHECK_KIND(kind, cond, ...)   \
  do {                                   \
    if (!(cond)) FT_THROW(kind, __VA_ARGS__); \
  } while (0)
