// mapped_file.h — a read-only memory map of a whole file (safetensors checkpoints, token files).
#pragma once

#include <cstdint>
#include <string>

namespace ft {

// ft::Error kind io naming `what` (e.g. "checkpoint") and path unless path is an existing regular file
// (after following links): missing, a folder, a FIFO, a device or a socket. A path holding a NUL character
// (which the C library would cut short) is invalid_argument, as Python's open() makes it a ValueError.
void check_regular_file(const std::string& path, const char* what);

class MappedFile {
 public:
  // ft::Error kind io when the file is missing, unreadable, not a regular file (a folder, FIFO, device or
  // socket: refused before it is opened, so a FIFO cannot block); invalid_argument when its path holds a
  // NUL. An empty file maps to no bytes.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const std::uint8_t* data() const { return data_; }
  std::uint64_t size() const { return size_; }

 private:
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace ft
