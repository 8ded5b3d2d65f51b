// test_atomic_file.cpp — core/atomic_file.h: a write replaces the file whole and leaves no temporary file;
// an uncommitted write (an error on the way) leaves the old file intact; failures are io errors naming the path.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/temp_folder.h"
#include "core/atomic_file.h"
#include "core/error.h"

namespace ft {
namespace {

using testing_util::TempFolder;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(AtomicFile, WritesAndReplacesWholeWithoutTemporaryFile) {
  TempFolder folder;
  const std::string path = folder.file("latest");
  write_file_atomic(path, "step_000010.safetensors\n");
  EXPECT_EQ(read_text(path), "step_000010.safetensors\n");
  write_file_atomic(path, "step_000020.safetensors\n");
  EXPECT_EQ(read_text(path), "step_000020.safetensors\n");
  EXPECT_EQ(folder.listing(), std::vector<std::string>{"latest"});
}

TEST(AtomicFile, UncommittedWriteLeavesTheOldFile) {
  TempFolder folder;
  const std::string path = folder.file("data.bin");
  write_file_atomic(path, "old");
  try {
    AtomicFile file(path);
    file.write("new, never committed");
    EXPECT_EQ(folder.entries(), 2u);  // the target and the temporary file beside it
    throw std::runtime_error("an error before commit");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_text(path), "old");
  EXPECT_EQ(folder.listing(), std::vector<std::string>{"data.bin"});
}

TEST(AtomicFile, FailuresAreIoErrorsNamingThePath) {
  TempFolder folder;
  const std::string missing = folder.file("absent/x.txt");
  try {
    write_file_atomic(missing, "x");
    ADD_FAILURE() << "wrote into a missing folder";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(e.message().find(missing), std::string::npos) << e.message();
  }
  std::filesystem::create_directory(folder.file("a_folder"));
  try {
    write_file_atomic(folder.file("a_folder"), "x");  // the rename over a folder fails
    ADD_FAILURE() << "replaced a folder";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(e.message().find("cannot rename"), std::string::npos) << e.message();
  }
  EXPECT_EQ(folder.entries(), 1u);  // a_folder only: no temporary file left
}

}  // namespace
}  // namespace ft
