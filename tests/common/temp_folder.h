// temp_folder.h — a fresh folder under the test temp dir for one test, removed (even if a test made it
// read-only) when the test ends.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <iterator>
#include <string>
#include <vector>

namespace ft::testing_util {

class TempFolder {
 public:
  TempFolder() {
    static int sequence = 0;
    path_ = std::filesystem::path(::testing::TempDir()) /
            ("flashtrain_test_" + std::to_string(::getpid()) + "_" + std::to_string(sequence++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempFolder() {
    ::chmod(path_.c_str(), 0755);
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempFolder(const TempFolder&) = delete;
  TempFolder& operator=(const TempFolder&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_))
      names.push_back(entry.path().filename().string());
    return names;
  }
  std::size_t entries() const { return listing().size(); }

 private:
  std::filesystem::path path_;
};

}  // namespace ft::testing_util
