// atomic_file.h — writing a file so that a reader sees its old contents or the whole new ones, never a
// part: AtomicFile writes a temporary file beside the target (the rename stays within one file system),
// and commit() fsyncs it, renames it over the target and fsyncs the folder, so the rename itself is
// durable. A file not committed (an error on the way) is removed. write_file_atomic does it for text.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ft {

class AtomicFile {
 public:
  // Creates the temporary file <target>.tmp-<pid>-<n>; ft::Error io naming it and the target otherwise.
  explicit AtomicFile(std::string target);
  ~AtomicFile();  // removes the temporary file unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends bytes; ft::Error io when the write fails (a full disk included).
  void write(const void* data, std::size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }

  // fsync, close, rename over the target, fsync the folder; ft::Error io naming the step that failed.
  void commit();

  const std::string& target() const { return target_; }
  const std::string& temporary_path() const { return temporary_; }

 private:
  std::string target_;
  std::string temporary_;
  int fd_ = -1;
  bool committed_ = false;
};

// Writes text to path through an AtomicFile.
void write_file_atomic(const std::string& path, std::string_view text);

}  // namespace ft
