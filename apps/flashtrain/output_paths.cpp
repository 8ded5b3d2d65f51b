// output_paths.cpp — writability probes (create and remove a uniquely named file) and the removal of
// stale checkpoint temporaries.
#include "flashtrain/output_paths.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace ft::cli {

namespace {

namespace fs = std::filesystem;

// io error unless a new file can be created in folder.
void probe_folder(const fs::path& folder, const char* option, const std::string& given) {
  const fs::path probe = folder / (".flashtrain-write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  FT_CHECK_KIND(io, fd >= 0, option, " ", given, ": cannot create files in ", folder.string(), ": ",
                std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace

void check_output_file(const std::string& path, const char* option) {
  if (path.empty()) return;
  std::error_code error;
  FT_CHECK_KIND(io, !fs::is_directory(path, error), option, " ", path, ": it is a folder, expected a file path");
  // The writers create missing folders: the nearest existing one must take new entries.
  fs::path folder = fs::path(path).parent_path();
  while (!folder.empty() && !fs::exists(folder, error)) folder = folder.parent_path();
  if (folder.empty()) folder = ".";
  FT_CHECK_KIND(io, fs::is_directory(folder, error), option, " ", path, ": ", folder.string(),
                " is not a folder");
  probe_folder(folder, option, path);
  if (fs::exists(path, error))
    FT_CHECK_KIND(io, ::access(path.c_str(), W_OK) == 0, option, " ", path, ": the file exists and cannot be "
                  "replaced: ", std::strerror(errno));
}

void prepare_checkpoint_folder(const std::string& folder, const char* option, std::ostream& log) {
  std::error_code error;
  fs::create_directories(folder, error);
  FT_CHECK_KIND(io, fs::is_directory(folder), option, " ", folder, ": cannot create the folder",
                error ? ": " + error.message() : std::string(" (a file of that name exists?)"));
  probe_folder(folder, option, folder);
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(folder, error)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && name.find(".tmp") != std::string::npos && fs::remove(entry.path(), error))
      ++removed;
  }
  if (removed > 0)
    log << "  removed " << removed << " temporary file(s) an interrupted checkpoint write left in " << folder << "\n";
}

}  // namespace ft::cli
