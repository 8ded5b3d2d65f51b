// token_file_writer.cpp — the streamed .npy writer of token ids (see token_file_writer.h).
#include "text/token_file_writer.h"

#include <cstring>
#include <vector>

#include "core/error.h"

namespace ft::text {

namespace {

constexpr std::size_t kHeaderBytes = 128;  // magic, version, length and the padded dict: room for any count

std::string npy_header(int bytes_per_id, std::int64_t count) {
  std::string dict = str("{'descr': '<u", bytes_per_id, "', 'fortran_order': False, 'shape': (", count, ",), }");
  std::string header = std::string("\x93NUMPY\x01\x00", 8);
  const std::size_t length = kHeaderBytes - 10;
  header.push_back(static_cast<char>(length & 0xFF));
  header.push_back(static_cast<char>(length >> 8));
  dict.resize(length - 1, ' ');
  header += dict + "\n";
  return header;
}

}  // namespace

int token_bytes_for_vocab(std::int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

TokenFileWriter::TokenFileWriter(const std::string& path, int bytes_per_id)
    : path_(path), temp_path_(path + ".tmp"), bytes_per_id_(bytes_per_id) {
  FT_CHECK(bytes_per_id == 2 || bytes_per_id == 4, "TokenFileWriter: ids are 2 or 4 bytes, given ", bytes_per_id);
  file_ = std::fopen(temp_path_.c_str(), "wb");
  FT_CHECK_KIND(io, file_ != nullptr, "cannot create token file ", temp_path_, ": ", std::strerror(errno));
  const std::string header = npy_header(bytes_per_id_, 0);
  FT_CHECK_KIND(io, std::fwrite(header.data(), 1, header.size(), file_) == header.size(), "cannot write ", temp_path_,
                ": ", std::strerror(errno));
}

TokenFileWriter::~TokenFileWriter() {
  if (file_) {
    std::fclose(file_);
    std::remove(temp_path_.c_str());
  }
}

void TokenFileWriter::write(std::span<const std::int32_t> ids) {
  FT_CHECK(file_ != nullptr, "TokenFileWriter: ", path_, " is closed");
  const std::int64_t limit = bytes_per_id_ == 2 ? 65535 : 0x7FFFFFFF;
  std::vector<std::uint8_t> bytes(ids.size() * static_cast<std::size_t>(bytes_per_id_));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    FT_CHECK(ids[i] >= 0 && ids[i] <= limit, "token file ", path_, ": id ", ids[i], " does not fit ", bytes_per_id_ * 8,
             "-bit ids");
    const auto v = static_cast<std::uint32_t>(ids[i]);  // little-endian, byte by byte
    for (int k = 0; k < bytes_per_id_; ++k) bytes[i * bytes_per_id_ + k] = static_cast<std::uint8_t>(v >> (8 * k));
  }
  FT_CHECK_KIND(io, std::fwrite(bytes.data(), 1, bytes.size(), file_) == bytes.size(), "cannot write ", temp_path_,
                ": ", std::strerror(errno));
  count_ += static_cast<std::int64_t>(ids.size());
}

void TokenFileWriter::close() {
  FT_CHECK(file_ != nullptr, "TokenFileWriter: ", path_, " is closed");
  const std::string header = npy_header(bytes_per_id_, count_);
  const bool ok =
      std::fseek(file_, 0, SEEK_SET) == 0 && std::fwrite(header.data(), 1, header.size(), file_) == header.size();
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok || !closed || std::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temp_path_.c_str());
    FT_THROW(io, "cannot finish token file ", path_, ": ", why);
  }
}

}  // namespace ft::text
