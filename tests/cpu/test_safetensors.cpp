// test_safetensors.cpp — safetensors: round trips of several dtypes/shapes with metadata, a file laid out
// byte by byte as the Python library writes it, every kind of corruption as an io error naming the file,
// atomic writes (no temporary file left, the old file intact when a write fails), lookup errors.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "common/file_bytes.h"
#include "common/temp_folder.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "model/safetensors.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, removed afterwards.
using testing_util::TempFolder;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

using testing_util::write_file;
using testing_util::le64;

// A safetensors file from a header text (padded with spaces to 8 bytes) and data bytes.
std::string make_file(std::string header, const std::string& data) {
  return testing_util::safetensors_bytes(std::move(header), data);
}

// The contiguous bytes of a tensor's values (reads through any strides).
std::string bytes_of(const Tensor& t) {
  OwnedTensor contiguous(t.shape(), t.dtype(), Device::cpu(), "test");
  copy(contiguous, t);
  return std::string(static_cast<const char*>(contiguous->data()), t.numel() * t.element_size());
}

// Runs fn, expecting an io error whose message contains every part.
void expect_io_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  testing_util::expect_error(ErrorKind::io, fn, parts);
}

TEST(Safetensors, RoundTripOfDtypesShapesAndMetadata) {
  TempFolder folder;
  OwnedTensor a({2, 3}, DType::f32, Device::cpu(), "test");        // (2, 3)
  OwnedTensor b({5}, DType::bf16, Device::cpu(), "test");          // (5)
  OwnedTensor c({1, 2, 3}, DType::f16, Device::cpu(), "test");     // (1, 2, 3)
  OwnedTensor scalar({}, DType::f32, Device::cpu(), "test");       // ()
  OwnedTensor empty({0, 4}, DType::f32, Device::cpu(), "test");    // (0, 4)
  OwnedTensor base({3, 4}, DType::f32, Device::cpu(), "test");     // (3, 4), stored transposed below
  fill_normal(a, 1);
  fill_normal(b, 2);
  fill_normal(c, 3);
  fill_normal(scalar, 4);
  fill_normal(base, 5);
  const Tensor transposed = base->transpose(0, 1);  // (4, 3), not contiguous
  const std::vector<NamedTensor> tensors = {{"b.bf16", b},     {"a.f32", a},           {"c.f16", c},
                                            {"scalar", scalar}, {"empty", empty},      {"transposed", transposed}};
  const SafetensorsMetadata metadata = {{"format", "pt"}, {"note", "héllo \"quoted\""}};
  const std::string path = folder.file("model.safetensors");
  save_safetensors(path, tensors, metadata);

  const SafetensorsFile file(path);
  EXPECT_EQ(file.metadata(), metadata);
  ASSERT_EQ(file.entries().size(), tensors.size());
  const std::string raw = read_file(path);
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, raw.data(), 8);
  EXPECT_EQ(header_bytes % 8, 0u);  // data section 8-byte aligned
  for (const auto& entry : file.entries()) EXPECT_EQ(entry.begin % size_of(entry.dtype), 0u) << entry.name;
  // Data order: the 4-byte tensors first, in the given order, then the 2-byte ones.
  std::vector<std::string> order;
  for (const auto& entry : file.entries())
    if (entry.bytes() > 0) order.push_back(entry.name);
  EXPECT_EQ(order, (std::vector<std::string>{"a.f32", "scalar", "transposed", "b.bf16", "c.f16"}));

  for (const auto& [name, tensor] : tensors) {
    const SafetensorsEntry& entry = file.entry(name);
    EXPECT_EQ(entry.shape, tensor.shape()) << name;
    EXPECT_EQ(ft_dtype(entry.dtype), tensor.dtype()) << name;
    const OwnedTensor loaded = file.load(name);
    EXPECT_EQ(bytes_of(loaded), bytes_of(tensor)) << name;  // bit-exact
  }
  // A strided destination receives the values through its strides.
  OwnedTensor target({3, 4}, DType::f32, Device::cpu(), "test");  // (3, 4)
  file.read_into("transposed", target->transpose(0, 1));
  EXPECT_EQ(bytes_of(target), bytes_of(base));
  EXPECT_EQ(folder.listing(), std::vector<std::string>{"model.safetensors"});  // no temporary file
}

// The layout safetensors.torch.save_file produces for {"w": f32 (2, 2), "b": bf16 (3), "step": int64 (1)}
// with metadata {"format": "pt"}: compact JSON, "__metadata__" first, tensors by descending dtype
// alignment then name, header padded with spaces to 8 bytes, little-endian data.
std::string python_reference_file(bool with_step) {
  const std::string step_entry = with_step ? R"("step":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)" : "";
  const std::uint64_t base = with_step ? 8 : 0;
  const std::string header = R"({"__metadata__":{"format":"pt"},)" + step_entry +
                             R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[)" + std::to_string(base) + "," +
                             std::to_string(base + 16) +
                             R"(]},"b":{"dtype":"BF16","shape":[3],"data_offsets":[)" + std::to_string(base + 16) +
                             "," + std::to_string(base + 22) + "]}}";
  const std::string step = with_step ? std::string("\x07\0\0\0\0\0\0\0", 8) : "";
  // 1.0f, -2.0f, 0.5f, 3.25f, then bf16 1.0, -2.0, 0.5
  const std::string w("\x00\x00\x80\x3f\x00\x00\x00\xc0\x00\x00\x00\x3f\x00\x00\x50\x40", 16);
  const std::string b("\x80\x3f\x00\xc0\x00\x3f", 6);
  return make_file(header, step + w + b);
}

TEST(Safetensors, ReadsTheLayoutOfThePythonLibrary) {
  TempFolder folder;
  const std::string path = folder.file("reference.safetensors");
  write_file(path, python_reference_file(true));
  const SafetensorsFile file(path);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  ASSERT_EQ(file.entries().size(), 3u);
  EXPECT_EQ(file.entry("w").describe(), "F32[2, 2]");
  EXPECT_EQ(file.entry("b").describe(), "BF16[3]");
  EXPECT_EQ(file.entry("step").describe(), "I64[1]");
  EXPECT_EQ(read_as_double(file.load("w")), (std::vector<double>{1.0, -2.0, 0.5, 3.25}));
  EXPECT_EQ(read_as_double(file.load("b")), (std::vector<double>{1.0, -2.0, 0.5}));
  std::int64_t step = 0;
  std::memcpy(&step, file.bytes(file.entry("step")), 8);
  EXPECT_EQ(step, 7);
  expect_io_error([&] { file.load("step"); }, {"'step'", "I64[1]", "F32, F16 or BF16"});
}

TEST(Safetensors, WriterMatchesThePythonLibraryByteForByte) {
  TempFolder folder;
  const std::vector<double> w_values = {1.0, -2.0, 0.5, 3.25}, b_values = {1.0, -2.0, 0.5};
  OwnedTensor w({2, 2}, DType::f32, Device::cpu(), "test");  // (2, 2)
  OwnedTensor b({3}, DType::bf16, Device::cpu(), "test");    // (3)
  write_from_double(w, w_values);
  write_from_double(b, b_values);
  const std::string path = folder.file("ours.safetensors");
  save_safetensors(path, {{"b", b}, {"w", w}}, {{"format", "pt"}});  // reordered by element size
  EXPECT_EQ(read_file(path), python_reference_file(false));
}

struct CorruptCase {
  const char* label;
  std::string bytes;
  std::string expected;  // a part of the message
};

TEST(Safetensors, CorruptFilesRaiseIoErrorsNamingTheFileAndTheProblem) {
  TempFolder folder;
  const std::string valid = python_reference_file(true);
  std::string huge_length = valid;
  std::memcpy(huge_length.data(), le64(1ull << 40).data(), 8);
  std::string short_length = valid;
  std::memcpy(short_length.data(), le64(16).data(), 8);
  const std::string data24(24, '\0');
  const std::vector<CorruptCase> cases = {
      {"empty file", "", "shorter than the 8-byte header length"},
      {"truncated inside the length", valid.substr(0, 5), "shorter than the 8-byte header length"},
      {"truncated data", valid.substr(0, valid.size() - 3), "out of range"},
      {"truncated header", valid.substr(0, 40), "only 32 bytes follow"},
      {"header length past the end", huge_length, "header length is 1099511627776 bytes"},
      {"header length cutting the JSON", short_length, "not valid JSON"},
      {"bad JSON", make_file(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})", std::string(16, '\0')),
       "not valid JSON"},
      {"not an object", make_file("[1, 2]", ""), "expected an object"},
      {"unknown dtype", make_file(R"({"w":{"dtype":"F33","shape":[2,2],"data_offsets":[0,16]}})", std::string(16, '\0')),
       "unknown dtype \"F33\""},
      {"dtype not a string", make_file(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
       "dtype is 4"},
      {"missing data_offsets", make_file(R"({"w":{"dtype":"F32","shape":[1]}})", std::string(4, '\0')),
       "has no \"data_offsets\""},
      {"negative dimension", make_file(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, '\0')),
       "non-negative integer"},
      {"bytes disagree with dtype and shape",
       make_file(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
       "F32[3] is 12 bytes but data_offsets [0,8] span 8"},
      {"offsets out of range", make_file(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0')),
       "out of range: the data section holds 8 bytes"},
      {"offsets reversed", make_file(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", std::string(8, '\0')),
       "end before they begin"},
      {"overlapping tensors",
       make_file(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                 data24),
       "'b' at bytes [8, 24) overlaps tensor 'a' at [0, 16)"},
      {"gap between tensors",
       make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
                 data24),
       "bytes [8, 16) of the data section belong to no tensor"},
      {"trailing bytes", valid + std::string(8, '\0'), "trailing bytes"},
      {"name given twice",
       make_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                 std::string(8, '\0')),
       "names 'a' twice"},
      {"metadata value not a string", make_file(R"({"__metadata__":{"step":3}})", ""), "__metadata__ entry 'step' is 3"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    const std::string path = folder.file("corrupt.safetensors");
    write_file(path, c.bytes);
    expect_io_error([&] { SafetensorsFile file(path); }, {path, "is corrupt", c.expected});
  }
  expect_io_error([&] { SafetensorsFile file(folder.file("absent.safetensors")); },
                  {"cannot open", "absent.safetensors", "No such file"});
  expect_io_error([&] { SafetensorsFile file(folder.path().string()); }, {"it is a folder"});
}

TEST(Safetensors, LookupAndDestinationMismatchesAreNamed) {
  TempFolder folder;
  const std::string path = folder.file("reference.safetensors");
  write_file(path, python_reference_file(true));
  const SafetensorsFile file(path);
  EXPECT_EQ(file.find("nope"), nullptr);
  expect_io_error([&] { file.entry("nope"); }, {"has no tensor 'nope'", path});
  OwnedTensor bf16_dst({2, 2}, DType::bf16, Device::cpu(), "test");
  expect_io_error([&] { file.read_into("w", bf16_dst); }, {"'w'", "is F32[2, 2] but the destination is bf16[2, 2]"});
  OwnedTensor shape_dst({4}, DType::f32, Device::cpu(), "test");
  expect_io_error([&] { file.read_into("w", shape_dst); }, {"is F32[2, 2] but the destination is fp32[4]"});
}

TEST(Safetensors, WriterRejectsBadNames) {
  TempFolder folder;
  OwnedTensor t({2}, DType::f32, Device::cpu(), "test");
  const std::string path = folder.file("x.safetensors");
  EXPECT_THROW(save_safetensors(path, {{"a", t}, {"a", t}}), Error);
  EXPECT_THROW(save_safetensors(path, {{"__metadata__", t}}), Error);
  EXPECT_THROW(save_safetensors(path, {{"", t}}), Error);
  EXPECT_THROW(save_safetensors(path, {{"undefined", Tensor()}}), Error);
  EXPECT_TRUE(folder.listing().empty());
}

TEST(Safetensors, OverwriteReplacesTheFileWholeAndLeavesNoTemporary) {
  TempFolder folder;
  const std::string path = folder.file("state.safetensors");
  OwnedTensor small({2}, DType::f32, Device::cpu(), "test");
  OwnedTensor large({64}, DType::f32, Device::cpu(), "test");
  fill_normal(small, 1);
  fill_normal(large, 2);
  save_safetensors(path, {{"x", small}});
  save_safetensors(path, {{"x", large}});
  EXPECT_EQ(bytes_of(SafetensorsFile(path).load("x")), bytes_of(large));
  EXPECT_EQ(folder.listing(), std::vector<std::string>{"state.safetensors"});
}

TEST(Safetensors, FailedWritesLeaveTheOldFileIntactAndNoTemporary) {
  TempFolder folder;
  const std::string path = folder.file("state.safetensors");
  OwnedTensor old_tensor({4}, DType::f32, Device::cpu(), "test");
  fill_normal(old_tensor, 1);
  save_safetensors(path, {{"x", old_tensor}});
  const std::string old_bytes = read_file(path);
  OwnedTensor big({1 << 16}, DType::f32, Device::cpu(), "test");  // 256 KiB
  fill_normal(big, 2);

  // The disk "fills" in the middle of the data: a file-size limit makes write() fail with EFBIG.
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit limited = saved;
  limited.rlim_cur = 4096;
  auto* previous_handler = ::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  bool raised = false;
  try {
    save_safetensors(path, {{"x", big}});
  } catch (const Error& e) {
    raised = e.kind() == ErrorKind::io && e.message().find("File too large") != std::string::npos;
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::signal(SIGXFSZ, previous_handler);
  EXPECT_TRUE(raised);
  EXPECT_EQ(read_file(path), old_bytes);
  EXPECT_EQ(folder.listing(), std::vector<std::string>{"state.safetensors"});

  // A missing folder, and a target that is a folder (the rename fails after the data is written).
  expect_io_error([&] { save_safetensors(folder.file("absent/x.safetensors"), {{"x", big}}); },
                  {"cannot create", "absent/x.safetensors", "No such file"});
  fs::create_directory(folder.file("a_folder"));
  expect_io_error([&] { save_safetensors(folder.file("a_folder"), {{"x", big}}); }, {"cannot rename", "a_folder"});
  EXPECT_EQ(folder.listing().size(), 2u);  // state.safetensors and a_folder only
  EXPECT_EQ(read_file(path), old_bytes);
}

TEST(Safetensors, UnwritableFolderIsAnIoError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into read-only folders";
  TempFolder folder;
  const std::string path = folder.file("state.safetensors");
  OwnedTensor t({4}, DType::f32, Device::cpu(), "test");
  fill_normal(t, 1);
  save_safetensors(path, {{"x", t}});
  const std::string old_bytes = read_file(path);
  ::chmod(folder.path().c_str(), 0555);
  expect_io_error([&] { save_safetensors(path, {{"x", t}}); }, {"cannot create", "Permission denied"});
  ::chmod(folder.path().c_str(), 0755);
  EXPECT_EQ(read_file(path), old_bytes);
}

}  // namespace
}  // namespace ft
