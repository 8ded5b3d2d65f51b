// atomic_file.cpp — AtomicFile over POSIX calls: open(O_EXCL) of a unique temporary name, write loops
// that resume after EINTR, fsync, rename, and a best-effort fsync of the folder.
#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <utility>

#include "core/error.h"

namespace ft {

namespace {

std::string errno_text(int error) { return std::strerror(error); }

}  // namespace

AtomicFile::AtomicFile(std::string target) : target_(std::move(target)) {
  static std::atomic<std::uint64_t> sequence{0};
  temporary_ = target_ + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(sequence++);
  fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  FT_CHECK_KIND(io, fd_ >= 0, "cannot create ", temporary_, " (the temporary file for ", target_,
                "): ", errno_text(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temporary_.c_str());
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (bytes > 0) {
    const std::size_t chunk = std::min<std::size_t>(bytes, std::size_t{1} << 30);
    const ssize_t written = ::write(fd_, p, chunk);
    if (written < 0) {
      if (errno == EINTR) continue;
      FT_THROW(io, "writing ", temporary_, " failed: ", errno_text(errno));
    }
    p += written;
    bytes -= static_cast<std::size_t>(written);
  }
}

void AtomicFile::commit() {
  FT_CHECK_KIND(io, ::fsync(fd_) == 0, "fsync of ", temporary_, " failed: ", errno_text(errno));
  const int fd = std::exchange(fd_, -1);
  FT_CHECK_KIND(io, ::close(fd) == 0, "closing ", temporary_, " failed: ", errno_text(errno));
  FT_CHECK_KIND(io, ::rename(temporary_.c_str(), target_.c_str()) == 0, "cannot rename ", temporary_, " to ",
                target_, ": ", errno_text(errno));
  committed_ = true;
  const std::filesystem::path parent = std::filesystem::path(target_).parent_path();
  const int folder = ::open(parent.empty() ? "." : parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder >= 0) {
    ::fsync(folder);  // best effort: some file systems refuse folder fsync
    ::close(folder);
  }
}

void write_file_atomic(const std::string& path, std::string_view text) {
  AtomicFile file(path);
  file.write(text);
  file.commit();
}

}  // namespace ft
