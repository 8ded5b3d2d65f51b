// scratch_file.h — the one file a fuzz target writes each input to, so the readers under test (which
// take paths and memory-map them) see it as a real file. Removed when the process ends normally.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace ft::fuzz {

class ScratchFile {
 public:
  explicit ScratchFile(const char* name) {
    const char* folder = std::getenv("TMPDIR");
    path_ = std::string(folder && *folder ? folder : "/tmp") + "/ft_fuzz_" + std::to_string(::getpid()) + "_" + name;
  }
  ~ScratchFile() { ::unlink(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Replaces the file's contents with data; aborts (a harness failure, not a finding) when it cannot.
  const std::string& write(const std::uint8_t* data, std::size_t size) {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) std::abort();
    for (std::size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<std::size_t>(n);
    }
    ::close(fd);
    return path_;
  }

 private:
  std::string path_;
};

}  // namespace ft::fuzz
