// file_bytes.h — test helpers for file readers: write bytes to a file, build safetensors files byte by
// byte, and expect an ft::Error of a kind whose message holds given parts.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace ft::testing_util {

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string le64(std::uint64_t v) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &v, 8);
  return out;
}

// A safetensors file from a header text (padded with spaces to 8 bytes) and data bytes.
inline std::string safetensors_bytes(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + data;
}

// Runs fn, expecting an ft::Error of `kind` whose message contains every part.
inline void expect_error(ErrorKind kind, const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error raised; expected one containing '" << parts.front() << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const auto& part : parts)
      EXPECT_NE(e.message().find(part), std::string::npos) << "missing '" << part << "' in: " << e.message();
  }
}

}  // namespace ft::testing_util
