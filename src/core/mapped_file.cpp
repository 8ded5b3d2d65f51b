// mapped_file.cpp — MappedFile over stat/open/fstat/mmap, refusing anything but regular files.
#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/printable.h"

namespace ft {

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

void check_regular_file(const std::string& path, const char* what) {
  FT_CHECK(path.find('\0') == std::string::npos, "cannot open ", what, " ", printable_excerpt(path, 4096),
                ": the path holds a NUL character");
  struct stat st {};
  FT_CHECK_KIND(io, ::stat(path.c_str(), &st) == 0, "cannot open ", what, " ", path, ": ", std::strerror(errno));
  FT_CHECK_KIND(io, S_ISREG(st.st_mode), "cannot read ", what, " ", path, ": it is ", file_kind(st.st_mode),
                ", not a regular file");
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  check_regular_file(path, "file");
  // O_NONBLOCK: should the path become a FIFO after the check, opening it must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FT_CHECK_KIND(io, fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const int stat_errno = errno;
  if (!stat_ok || !S_ISREG(st.st_mode)) ::close(fd);
  FT_CHECK_KIND(io, stat_ok, "cannot stat ", path, ": ", std::strerror(stat_errno));
  FT_CHECK_KIND(io, S_ISREG(st.st_mode), "cannot read file ", path, ": it is ", file_kind(st.st_mode),
                ", not a regular file");
  size_ = static_cast<std::uint64_t>(st.st_size);
  if (size_ == 0) {
    ::close(fd);
    return;
  }
  void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file
  FT_CHECK_KIND(io, mapped != MAP_FAILED, "cannot memory-map ", path, " (", size_, " bytes): ", std::strerror(map_errno));
  data_ = static_cast<const std::uint8_t*>(mapped);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<std::uint8_t*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace ft
