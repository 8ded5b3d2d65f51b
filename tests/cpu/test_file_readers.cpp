// test_file_readers.cpp — the readers under hostile input (issue 36's crafted cases): safetensors headers
// nested 60,000 deep, of 200,000 entries (parsed in time linear in the entries), with a byte-order mark,
// invalid UTF-8, duplicate names or fields; FIFOs, folders and devices given as files (refused, never
// blocking); token files told apart by content (.npy named .bin, raw named .npy), uint32 ids (.npy '<u4'
// and raw for vocabularies above 65536), an out-of-vocabulary id anywhere in a multi-chunk file found at
// open (in time comparable to one linear pass over the ids); resumed optimiser state that is not finite or
// has a negative second moment. Every message names the file.
#include <gtest/gtest.h>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <future>
#include <limits>
#include <string>
#include <vector>

#include "common/file_bytes.h"
#include "common/temp_folder.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "model/checkpoint.h"
#include "model/data_loader.h"
#include "model/safetensors.h"

namespace ft {
namespace {

using testing_util::TempFolder;
using testing_util::safetensors_bytes;
using testing_util::write_file;

bool is_printable_ascii(const std::string& text) {
  for (unsigned char c : text)
    if (c < 0x20 || c >= 0x7f) return false;
  return true;
}

// Runs fn, expecting an ft::Error of `kind` whose message contains every part and is printable ASCII.
void expect_error(ErrorKind kind, const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_TRUE(is_printable_ascii(e.message())) << e.message();
  }
  testing_util::expect_error(kind, fn, parts);
}

// The CPU time this thread spends in fn, in seconds: the least of 3 runs. Other processes on a loaded
// machine and the scheduler's pauses do not count, so timings taken this way can be compared with each other.
double least_cpu_seconds(const std::function<void()>& fn) {
  const auto now = [] {
    timespec t{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
  };
  double least = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 3; ++run) {
    const double start = now();
    fn();
    least = std::min(least, now() - start);
  }
  return least;
}

// A safetensors header of n one-float entries t0 .. t<n-1>.
std::string wide_header(int n) {
  std::string header = "{";
  for (int i = 0; i < n; ++i)
    header += (i ? "," : "") + ("\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" +
                                std::to_string(4 * i) + "," + std::to_string(4 * i + 4) + "]}");
  return header + "}";
}

TEST(SafetensorsHeader, DeepNestingIsRefusedWithoutRecursion) {
  TempFolder folder;
  const std::string path = folder.file("deep.safetensors");
  constexpr int kDepth = 60000;
  // 60,000 nested arrays as an entry's unknown field, as the top-level value, and unclosed.
  const std::string open(kDepth, '['), close(kDepth, ']');
  for (const std::string& header :
       {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":)" + open + close + "}}", open + close,
        std::string(R"({"w":)") + open}) {
    write_file(path, safetensors_bytes(header, std::string(4, '\0')));
    expect_error(ErrorKind::io, [&] { SafetensorsFile file(path); }, {path, "is corrupt"});
  }
  write_file(path, safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":)" + open + close + "}}",
                                     std::string(4, '\0')));
  expect_error(ErrorKind::io, [&] { SafetensorsFile file(path); }, {"nests deeper than 64 levels"});
  // Nesting within the limit in an unknown field is skipped, as the Python library skips it.
  write_file(path, safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":[[{"y":[1]}]]}})",
                                     std::string(4, '\0')));
  EXPECT_EQ(SafetensorsFile(path).entries().size(), 1u);
}

// Parsing stays linear in the entries: 4 times the entries may take at most 8 times as long (linear: 4 times,
// quadratic: 16). Thread CPU time, the least of 3 runs, so a loaded machine does not move the ratio.
TEST(SafetensorsHeader, TwoHundredThousandEntriesParseInLinearTime) {
  TempFolder folder;
  constexpr int kEntries = 200000, kQuarter = kEntries / 4;
  const std::string header = wide_header(kEntries);
  const std::string path = folder.file("wide.safetensors"), quarter_path = folder.file("quarter.safetensors");
  write_file(path, safetensors_bytes(header, std::string(4 * kEntries, '\0')));
  write_file(quarter_path, safetensors_bytes(wide_header(kQuarter), std::string(4 * kQuarter, '\0')));
  std::size_t entries = 0;
  bool found_last = false;
  const double seconds = least_cpu_seconds([&] {
    const SafetensorsFile file(path);
    entries = file.entries().size();
    found_last = file.find("t199999") != nullptr;
  });
  const double quarter_seconds = least_cpu_seconds([&] { SafetensorsFile file(quarter_path); });
  EXPECT_EQ(entries, static_cast<std::size_t>(kEntries));
  EXPECT_TRUE(found_last);
  EXPECT_LT(seconds, 8 * quarter_seconds) << kEntries << " entries took " << seconds << " s, " << kQuarter
                                          << " took " << quarter_seconds << " s: worse than linear";
  std::cout << "[ timing   ] " << kEntries << "-entry header (" << header.size() << " bytes) parsed in " << seconds
            << " s CPU (" << kQuarter << " entries: " << quarter_seconds << " s)\n";
}

TEST(SafetensorsHeader, MalformedHeadersAreIoErrorsInPrintableText) {
  TempFolder folder;
  const std::string path = folder.file("bad.safetensors");
  const std::string entry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  struct Case {
    const char* label;
    std::string header;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"byte-order mark", "\xEF\xBB\xBF{\"w\":" + entry + "}", "byte-order mark"},
      {"invalid UTF-8 in a name", "{\"w\xff\xfe\":" + entry + "}", "not valid JSON"},
      {"invalid UTF-8 in metadata", "{\"__metadata__\":{\"k\":\"\xc3\x28\"},\"w\":" + entry + "}", "not valid JSON"},
      {"name given twice", "{\"w\":" + entry + ",\"w\":" + entry + "}", "names 'w' twice"},
      {"field given twice", R"({"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})",
       "tensor 'w' names \"dtype\" twice"},
      {"metadata key twice", "{\"__metadata__\":{\"k\":\"a\",\"k\":\"b\"},\"w\":" + entry + "}",
       "__metadata__ names 'k' twice"},
      {"metadata named twice", "{\"__metadata__\":{},\"__metadata__\":{},\"w\":" + entry + "}",
       "names '__metadata__' twice"},
      {"three offsets", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", "more than 2 values"},
      {"one offset", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "data_offsets is [0]"},
      {"float dimension", R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
       "shape dimension is 1.5, expected a non-negative integer"},
      {"entry an array", R"({"w":[1]})", "tensor 'w' is an array, expected an object"},
      {"metadata an array", "{\"__metadata__\":[],\"w\":" + entry + "}", "__metadata__ is an array"},
      {"top-level string", R"("w")", "the header is the JSON value \"w\", expected an object"},
      {"nested metadata", "{\"__metadata__\":{\"k\":{}},\"w\":" + entry + "}", "entry 'k' is an object"},
      {"shape overflow", R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
       "overflows the byte count"},
      {"control character in a name", "{\"w\\u0001\":" + entry + ",\"w\\u0001\":" + entry + "}", "names 'w\\x01' twice"},
      {"trailing garbage", "{\"w\":" + entry + "} x", "not valid JSON"},
      {"empty header", "", "not valid JSON"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.label);
    write_file(path, safetensors_bytes(c.header, std::string(4, '\0')));
    expect_error(ErrorKind::io, [&] { SafetensorsFile file(path); }, {path, "is corrupt", c.expected});
  }
}

// Runs fn on a FIFO, a folder and a character device: each an io error naming what it is, none blocking.
// A reader that opened the FIFO would wait for a writer: the checks run on a thread of their own, and should
// they not end within 30 s (they take microseconds) the test fails and a writer opens the FIFO to free them.
void expect_non_regular_refused(const std::function<void(const std::string&)>& fn) {
  TempFolder folder;
  const std::string fifo = folder.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::future<void> checks = std::async(std::launch::async, [&] {
    expect_error(ErrorKind::io, [&] { fn(fifo); }, {fifo, "a FIFO (named pipe), not a regular file"});
    expect_error(ErrorKind::io, [&] { fn(folder.path().string()); }, {"a folder, not a regular file"});
    expect_error(ErrorKind::io, [&] { fn("/dev/null"); }, {"/dev/null", "a character device"});
    expect_error(ErrorKind::invalid_argument, [&] { fn(fifo + std::string(1, '\0') + "x"); },
                 {"the path holds a NUL character"});
  });
  if (checks.wait_for(std::chrono::seconds(30)) == std::future_status::ready) return checks.get();
  ADD_FAILURE() << "a reader blocked on the FIFO " << fifo;
  const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // a blocked reader's open returns
  checks.get();
  if (writer >= 0) ::close(writer);
}

TEST(FileReaders, NonRegularFilesAreRefusedBeforeOpening) {
  expect_non_regular_refused([](const std::string& path) { MappedFile file(path); });
  expect_non_regular_refused([](const std::string& path) { SafetensorsFile file(path); });
  expect_non_regular_refused([](const std::string& path) { TokenFile file(path, 1000); });
  expect_non_regular_refused([](const std::string& path) { DataLoader loader(path, {.batch = 1, .context = 4}); });
  OwnedTensor w({2}, DType::f32, Device::cpu(), "test");  // (2)
  expect_non_regular_refused([&](const std::string& path) { load_checkpoint(path, {{"w", w}}, {}); });
  expect_non_regular_refused([&](const std::string& path) { load_parameters(path, {{"w", w}}); });
  expect_non_regular_refused([](const std::string& path) { check_regular_file(path, "file"); });
}

// A .npy file as numpy.save writes it (format 1.0; the data starts at a multiple of 64).
std::string npy_bytes(const std::string& descr, std::size_t elements, const std::string& data) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + std::to_string(elements) + ",), }";
  const std::size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header.push_back('\n');
  const auto length = static_cast<std::uint16_t>(header.size());
  return std::string("\x93NUMPY\x01\x00", 8) + std::string(reinterpret_cast<const char*>(&length), 2) + header + data;
}

template <class Id>
std::string raw(const std::vector<Id>& ids) {
  return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(Id));
}

TEST(TokenFiles, RecognisedByContentNotByName) {
  TempFolder folder;
  std::vector<std::uint16_t> ids(100);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::uint16_t>(i * 7 % 100);
  const std::string npy_named_bin = folder.file("tokens.bin");
  write_file(npy_named_bin, npy_bytes("<u2", ids.size(), raw(ids)));
  const TokenFile a(npy_named_bin, 100);
  EXPECT_TRUE(a.is_npy());
  ASSERT_EQ(a.size(), 100);  // not the header read as tokens
  for (std::int64_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], ids[i]);

  const std::string raw_named_npy = folder.file("tokens.npy");
  write_file(raw_named_npy, raw(ids));
  const TokenFile b(raw_named_npy, 100);
  EXPECT_FALSE(b.is_npy());
  EXPECT_EQ(b.size(), 100);
  EXPECT_EQ(b.describe(), raw_named_npy + " (100 uint16 tokens, raw)");
}

TEST(TokenFiles, Uint32IdsFromNpyAndFromRawFilesOfLargeVocabularies) {
  TempFolder folder;
  constexpr std::int64_t kVocab = 151936;  // the 8b shape's
  std::vector<std::uint32_t> ids(64);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::uint32_t>(65000 + i * 1300);  // > 65535 too
  const std::string npy = folder.file("tokens32.npy");
  write_file(npy, npy_bytes("<u4", ids.size(), raw(ids)));
  const std::string bin = folder.file("tokens32.bin");
  write_file(bin, raw(ids));
  for (const std::string& path : {npy, bin}) {
    SCOPED_TRACE(path);
    const TokenFile file(path, kVocab);
    EXPECT_EQ(file.id_bytes(), 4);
    ASSERT_EQ(file.size(), 64);
    for (std::int64_t i = 0; i < file.size(); ++i) ASSERT_EQ(file[i], ids[i]);
    DataLoader loader(path, {.batch = 2, .context = 8, .vocab = kVocab, .seed = 1});
    TokenBatch batch;
    loader.next(batch);
    for (std::int32_t id : batch.inputs) EXPECT_TRUE(id >= 65000 && id < kVocab) << id;
  }
  // The same bytes with a vocabulary that fits uint16 are 128 uint16 ids.
  EXPECT_EQ(TokenFile(bin, 65536).size(), 128);
  EXPECT_EQ(TokenFile(bin, 65536).id_bytes(), 2);
  // A raw uint32 file must be a whole number of ids; a too-small vocabulary is caught at open.
  write_file(bin, raw(ids) + "xy");
  expect_error(ErrorKind::io, [&] { TokenFile file(bin, kVocab); }, {bin, "not a multiple of 4", "above 65536"});
  expect_error(ErrorKind::io, [&] { DataLoader loader(npy, {.batch = 1, .context = 8, .vocab = 100000}); },
               {npy, "token id 100100 at position 27 is outside the vocabulary of 100000 ids"});
}

// The linear baseline of the vocabulary check: the uint16 file read into memory and searched id by id for the
// first id >= vocab (-1: none).
std::int64_t first_id_outside(const std::string& path, std::int64_t vocab) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<std::uint16_t> ids(static_cast<std::size_t>(in.tellg()) / sizeof(std::uint16_t));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(ids.size() * sizeof(std::uint16_t)));
  const auto it = std::find_if(ids.begin(), ids.end(), [vocab](std::uint16_t id) { return id >= vocab; });
  return it == ids.end() ? -1 : it - ids.begin();
}

// OpenMP runs on one thread while it lives, so parallel work is all on this thread's CPU clock (and no
// worker spins at a barrier, which the process clock would count).
class OneOpenMpThread {
 public:
#if defined(_OPENMP)
  OneOpenMpThread() : threads_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneOpenMpThread() { omp_set_num_threads(threads_); }

 private:
  int threads_;
#endif
};

// The check at open finds the first bad id in whichever chunk holds it (with every OpenMP thread), in time
// comparable to one linear pass over the ids: on one thread, at most 20 times the CPU time of
// first_id_outside on the same file (it takes about a fifth; a conversion, a read or a message per id makes
// it tens to hundreds of times slower, and a quadratic scan does not end within the test's timeout). Thread
// CPU time, the least of 3 runs, so a loaded machine does not move the ratio.
TEST(TokenFiles, WholeFileVocabularyCheckAtOpenFindsTheFirstBadIdInAnyChunk) {
  TempFolder folder;
  const std::string path = folder.file("big.bin");
  std::vector<std::uint16_t> ids(3 * (1 << 20) + 12345, 7);  // several 2^20-id chunks and a partial one
  const std::int64_t bad = static_cast<std::int64_t>(ids.size()) - 5;
  ids[bad] = 999;
  ids.back() = 1000;
  write_file(path, raw(ids));
  const auto open = [&] { DataLoader loader(path, {.batch = 1, .context = 8, .vocab = 999}); };
  expect_error(ErrorKind::io, open, {path, "token id 999 at position " + std::to_string(bad)});
  const OneOpenMpThread one_thread;
  const double seconds = least_cpu_seconds([&] {
    try {
      open();
    } catch (const Error&) {
    }
  });
  std::int64_t baseline_bad = -1;
  const double baseline_seconds = least_cpu_seconds([&] { baseline_bad = first_id_outside(path, 999); });
  EXPECT_EQ(baseline_bad, bad);
  EXPECT_LT(seconds, 20 * baseline_seconds) << "the check of " << ids.size() << " ids took " << seconds
                                            << " s CPU, one linear pass " << baseline_seconds << " s";
  std::cout << "[ timing   ] " << ids.size() << "-id vocabulary check at open: " << seconds
            << " s CPU (one linear pass: " << baseline_seconds << " s)\n";
  DataLoader fine(path, {.batch = 1, .context = 8, .vocab = 1001});
  EXPECT_EQ(fine.file().size(), static_cast<std::int64_t>(ids.size()));
}

TEST(CheckpointState, NonFiniteOrNegativeSecondMomentsAreRefusedOnResume) {
  TempFolder folder;
  const std::string path = folder.file("ckpt.safetensors");
  OwnedTensor w({4}, DType::f32, Device::cpu(), "test");  // (4)
  OwnedTensor m({4}, DType::f32, Device::cpu(), "test");  // (4)
  OwnedTensor v({4}, DType::f32, Device::cpu(), "test");  // (4)
  write_from_double(w, {1, 2, 3, 4});
  const std::vector<NamedTensor> params = {{"w", w}};
  const std::vector<NamedTensor> state = {{optimizer_state_name("m", "w"), m},
                                          {optimizer_state_name("v", "w"), v}};
  struct Case {
    std::vector<double> m, v;
    std::string expected;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const std::vector<Case> cases = {
      {{0, 0, 0, 0}, {0, 0, -1e-3, 0}, "'optimizer.v.w' holds -0.001 at element 2 (second moments must be finite and >= 0)"},
      {{0, 0, 0, 0}, {0, nan, 0, 0}, "'optimizer.v.w' holds nan at element 1"},
      {{0, 0, 0, inf}, {0, 0, 0, 0}, "'optimizer.m.w' holds inf at element 3 (the state must be finite)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.expected);
    write_from_double(m, c.m);
    write_from_double(v, c.v);
    save_checkpoint(path, params, state, {});
    write_from_double(w, {0, 0, 0, 0});
    expect_error(ErrorKind::io, [&] { load_checkpoint(path, params, state); }, {path, c.expected});
    EXPECT_EQ(read_as_double(w), (std::vector<double>{0, 0, 0, 0}));  // nothing copied
    write_from_double(w, {1, 2, 3, 4});
  }
  write_from_double(m, {0.5, -0.5, 0, 1});
  write_from_double(v, {0, 0.25, 1, 2});
  save_checkpoint(path, params, state, {});
  load_checkpoint(path, params, state);
}

}  // namespace
}  // namespace ft
