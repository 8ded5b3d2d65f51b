// mapped_file.h — a read-only memory map of a whole file (safetensors checkpoints, token files).
#pragma once

#include <cstdint>
#include <string>

namespace ft {

class MappedFile {
 public:
  // ft::Error kind io when the file is missing, a folder or unreadable. An empty file maps to no bytes.
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
