// mapped_file.cpp — MappedFile over open/fstat/mmap.
#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace ft {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  FT_CHECK_KIND(io, fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const int stat_errno = errno;
  if (!stat_ok || S_ISDIR(st.st_mode)) ::close(fd);
  FT_CHECK_KIND(io, stat_ok, "cannot stat ", path, ": ", std::strerror(stat_errno));
  FT_CHECK_KIND(io, !S_ISDIR(st.st_mode), "cannot read ", path, ": it is a folder");
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
