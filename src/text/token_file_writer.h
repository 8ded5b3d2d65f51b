// token_file_writer.h — writes token ids to a .npy file as a 1-D array of '<u2' (uint16) or '<u4'
// (uint32), streamed: the header is written with room for any length and rewritten with the final one on
// close(). The file appears under its name only once complete (written as NAME.tmp, then renamed).
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

namespace ft::text {

class TokenFileWriter {
 public:
  // bytes_per_id: 2 or 4. ft::Error kind io when the file cannot be created.
  TokenFileWriter(const std::string& path, int bytes_per_id);
  ~TokenFileWriter();  // an unclosed writer removes its temporary file
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  // Appends ids; each must fit the file's id width (an ft::Error otherwise).
  void write(std::span<const std::int32_t> ids);
  // Writes the final header and renames the file into place.
  void close();
  std::int64_t count() const { return count_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_, temp_path_;
  int bytes_per_id_;
  std::FILE* file_ = nullptr;
  std::int64_t count_ = 0;
};

// 2 when every id of a vocabulary of vocab_size fits uint16, else 4.
int token_bytes_for_vocab(std::int64_t vocab_size);

}  // namespace ft::text
