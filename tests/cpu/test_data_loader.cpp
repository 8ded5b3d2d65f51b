// test_data_loader.cpp — token data: the SplitMix64 generator (reference values, range), windows checked
// against the file contents, determinism per seed, bit-exact resume from a saved state, .npy files, the
// errors (missing, too short, odd length, bad .npy, ids outside the vocabulary) and random batches.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/file_bytes.h"
#include "common/temp_folder.h"
#include "core/error.h"
#include "model/data_loader.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

using testing_util::TempFolder;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string raw_bytes(const std::vector<std::uint16_t>& tokens) {
  return std::string(reinterpret_cast<const char*>(tokens.data()), tokens.size() * 2);
}

// A .npy file as numpy.save writes it: magic, version, header dict padded with spaces and a newline so
// the data starts at a multiple of 64.
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  const std::size_t preamble = major == 1 ? 10 : 12;
  std::string header = dict;
  const std::size_t total = (preamble + header.size() + 1 + 63) / 64 * 64;
  header.append(total - preamble - header.size() - 1, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  const auto length = static_cast<std::uint32_t>(header.size());
  out.append(reinterpret_cast<const char*>(&length), major == 1 ? 2 : 4);
  return out + header + data;
}

// Tokens whose value identifies their position: token i = (i * 37) mod n, a bijection for n = 1000.
std::vector<std::uint16_t> position_tokens(std::size_t n) {
  std::vector<std::uint16_t> tokens(n);
  for (std::size_t i = 0; i < n; ++i) tokens[i] = static_cast<std::uint16_t>((i * 37) % n);
  return tokens;
}

using testing_util::expect_error;

std::vector<TokenBatch> draw(DataLoader& loader, int count) {
  std::vector<TokenBatch> batches(count);
  for (auto& b : batches) loader.next(b);
  return batches;
}

bool same(const std::vector<TokenBatch>& a, const std::vector<TokenBatch>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].inputs != b[i].inputs || a[i].targets != b[i].targets) return false;
  return true;
}

TEST(Rng, SplitMix64ReferenceValuesAndRange) {
  Rng zero(0);
  EXPECT_EQ(zero.next(), 0xe220a8397b1dcdafull);  // SplitMix64's published first outputs for seed 0
  EXPECT_EQ(zero.next(), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(zero.next(), 0x06c45d188009454full);
  EXPECT_EQ(zero.state(), (RngState{0, 3}));
  EXPECT_EQ(Rng(1234567).next(), 0x599ed017fb08fc85ull);
  Rng resumed(RngState{0, 2});
  EXPECT_EQ(resumed.next(), 0x06c45d188009454full);

  Rng rng(42);
  EXPECT_EQ(rng.below(1), 0u);
  EXPECT_THROW(rng.below(0), Error);
  std::vector<int> counts(6, 0);
  const int draws = 60000;
  for (int i = 0; i < draws; ++i) ++counts[rng.below(6)];
  for (int c : counts) EXPECT_NEAR(c, draws / 6, draws / 6 * 0.05);
  const std::uint64_t huge = (1ull << 63) + 12345;  // rejection path: 2^64 mod n is large
  for (int i = 0; i < 1000; ++i) EXPECT_LT(rng.below(huge), huge);
}

TEST(DataLoader, WindowsMatchTheFileAndCoverEveryStart) {
  TempFolder folder;
  const std::size_t n = 1000;
  const std::vector<std::uint16_t> tokens = position_tokens(n);
  std::vector<std::size_t> position(n);
  for (std::size_t i = 0; i < n; ++i) position[tokens[i]] = i;
  const std::string path = folder.file("tokens.bin");
  write_bytes(path, raw_bytes(tokens));

  DataLoaderOptions options{.batch = 3, .context = 8, .vocab = 1000, .seed = 5};
  DataLoader loader(path, options);
  EXPECT_EQ(loader.file().size(), static_cast<std::int64_t>(n));
  TokenBatch batch;
  for (int step = 0; step < 20; ++step) {
    loader.next(batch);
    ASSERT_EQ(batch.inputs.size(), 24u);
    ASSERT_EQ(batch.targets.size(), 24u);
    EXPECT_EQ(batch.input_ids().shape, (Shape{3, 8}));
    for (int b = 0; b < 3; ++b) {
      const std::size_t start = position[batch.inputs[b * 8]];
      ASSERT_LE(start + 8, n - 1);
      for (int t = 0; t < 8; ++t) {
        EXPECT_EQ(batch.inputs[b * 8 + t], tokens[start + t]);
        EXPECT_EQ(batch.targets[b * 8 + t], tokens[start + t + 1]);
      }
    }
  }

  // With 20 tokens and context 4 there are 16 starts, [0, 15]: all of them come up, none beyond.
  const std::string small = folder.file("small.bin");
  write_bytes(small, raw_bytes(std::vector<std::uint16_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                                          17, 18, 19}));
  DataLoader small_loader(small, {.batch = 1, .context = 4, .vocab = 20, .seed = 9});
  std::set<int> starts;
  for (int i = 0; i < 2000; ++i) {
    small_loader.next(batch);
    starts.insert(batch.inputs[0]);
    EXPECT_EQ(batch.targets[3], batch.inputs[0] + 4);
  }
  EXPECT_EQ(starts.size(), 16u);
  EXPECT_EQ(*starts.begin(), 0);
  EXPECT_EQ(*starts.rbegin(), 15);
}

TEST(DataLoader, DeterministicPerSeedAndResumesFromSavedState) {
  TempFolder folder;
  const std::string path = folder.file("tokens.bin");
  write_bytes(path, raw_bytes(position_tokens(1000)));
  const DataLoaderOptions options{.batch = 4, .context = 16, .vocab = 1000, .seed = 123};

  DataLoader a(path, options), b(path, options);
  EXPECT_TRUE(same(draw(a, 5), draw(b, 5)));
  DataLoaderOptions other = options;
  other.seed = 124;
  DataLoader c(path, other);
  EXPECT_FALSE(same(draw(c, 5), draw(a, 5)));

  // Save after 3 batches; a fresh loader restored to that state continues with the same batches.
  DataLoader first(path, options);
  draw(first, 3);
  const RngState saved = first.state();
  EXPECT_EQ(saved.seed, 123u);
  const std::vector<TokenBatch> expected = draw(first, 4);
  DataLoader resumed(path, options);
  resumed.set_state(saved);
  EXPECT_TRUE(same(draw(resumed, 4), expected));
}

TEST(DataLoader, ReadsNpyFilesLikeRawOnes) {
  TempFolder folder;
  const std::vector<std::uint16_t> tokens = position_tokens(1000);
  const std::string raw = folder.file("tokens.bin");
  write_bytes(raw, raw_bytes(tokens));
  const DataLoaderOptions options{.batch = 2, .context = 32, .vocab = 1000, .seed = 77};
  DataLoader reference(raw, options);
  const std::vector<TokenBatch> expected = draw(reference, 3);

  const std::string v1 = folder.file("tokens.npy");
  write_bytes(v1, npy_bytes("{'descr': '<u2', 'fortran_order': False, 'shape': (1000,), }", raw_bytes(tokens)));
  DataLoader from_v1(v1, options);
  EXPECT_EQ(from_v1.file().size(), 1000);
  EXPECT_TRUE(same(draw(from_v1, 3), expected));

  const std::string v2 = folder.file("tokens_v2.npy");  // format 2.0, a 2-D array read flattened
  write_bytes(v2, npy_bytes("{'descr': '<u2', 'fortran_order': False, 'shape': (500, 2), }", raw_bytes(tokens), 2));
  DataLoader from_v2(v2, options);
  EXPECT_TRUE(same(draw(from_v2, 3), expected));
}

TEST(DataLoader, FileErrorsAreIoErrors) {
  TempFolder folder;
  const DataLoaderOptions options{.batch = 2, .context = 8, .vocab = 1000, .seed = 1};
  expect_error(ErrorKind::io, [&] { DataLoader(folder.file("absent.bin"), options); },
               {"cannot open", "absent.bin", "No such file"});

  const std::string short_file = folder.file("short.bin");
  write_bytes(short_file, raw_bytes(position_tokens(8)));
  expect_error(ErrorKind::io, [&] { DataLoader(short_file, options); },
               {"short.bin holds 8 tokens, fewer than the 9 one window of context 8 needs"});
  write_bytes(short_file, "");
  expect_error(ErrorKind::io, [&] { DataLoader(short_file, options); }, {"holds 0 tokens"});

  const std::string odd = folder.file("odd.bin");
  write_bytes(odd, raw_bytes(position_tokens(100)) + "x");
  expect_error(ErrorKind::io, [&] { DataLoader(odd, options); }, {"odd.bin is 201 bytes, not a multiple of 2"});

  const std::string data = raw_bytes(position_tokens(100));
  const std::string npy = folder.file("bad.npy");
  write_bytes(npy, npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (50,), }", data));
  expect_error(ErrorKind::io, [&] { DataLoader(npy, options); }, {"holds dtype '<i4', expected '<u2'"});
  write_bytes(npy, npy_bytes("{'descr': '<u2', 'fortran_order': False, 'shape': (101,), }", data));
  expect_error(ErrorKind::io, [&] { DataLoader(npy, options); }, {"header says 101 uint16 ids (202 bytes) but 200"});
  write_bytes(npy, npy_bytes("{'descr': '<u2', 'fortran_order': True, 'shape': (10, 10), }", data));
  expect_error(ErrorKind::io, [&] { DataLoader(npy, options); }, {"Fortran-order"});
  write_bytes(npy, std::string("\x93NUMPY\x01", 7));
  expect_error(ErrorKind::io, [&] { DataLoader(npy, options); }, {"bad.npy", "truncated inside its .npy preamble"});
  write_bytes(npy, npy_bytes("{'descr': '<u2', 'fortran_order': False, 'shape': (100,), }", data, 7));
  expect_error(ErrorKind::io, [&] { DataLoader(npy, options); }, {"format version 7"});

  const std::string ok = folder.file("ok.bin");
  write_bytes(ok, data);
  expect_error(ErrorKind::invalid_argument, [&] { DataLoader(ok, {.batch = 0, .context = 8}); }, {"batch"});
  expect_error(ErrorKind::invalid_argument, [&] { DataLoader(ok, {.batch = 1, .context = 0}); }, {"context"});
}

TEST(DataLoader, IdsOutsideTheVocabulary) {
  TempFolder folder;
  const std::string path = folder.file("tokens.bin");
  write_bytes(path, raw_bytes(position_tokens(1000)));  // token 14 is 518, the first >= 500
  expect_error(ErrorKind::io, [&] { DataLoader(path, {.batch = 1, .context = 8, .vocab = 500}); },
               {"tokens.bin", "token id 518 at position 14 is outside the vocabulary of 500 ids"});

  // Per batch: the first window with a bad id raises, and the generator stays where it was.
  DataLoader loader(path, {.batch = 2, .context = 8, .vocab = 500, .seed = 3, .check = IdCheck::per_batch});
  const RngState before = loader.state();
  TokenBatch batch;
  expect_error(ErrorKind::io, [&] { loader.next(batch); }, {"is outside the vocabulary of 500 ids"});
  EXPECT_EQ(loader.state(), before);

  DataLoader unchecked(path, {.batch = 2, .context = 8, .vocab = 500, .seed = 3, .check = IdCheck::none});
  unchecked.next(batch);
  EXPECT_NE(unchecked.state(), before);
}

TEST(RandomTokenBatch, UniformIdsShiftedTargetsDeterministic) {
  Rng rng(8);
  TokenBatch batch;
  random_token_batch(rng, 4, 256, 7, batch);
  ASSERT_EQ(batch.inputs.size(), 1024u);
  std::vector<int> counts(7, 0);
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 256; ++t) {
      const int id = batch.inputs[b * 256 + t];
      ASSERT_GE(id, 0);
      ASSERT_LT(id, 7);
      ++counts[id];
      if (t + 1 < 256) EXPECT_EQ(batch.targets[b * 256 + t], batch.inputs[b * 256 + t + 1]);
    }
  for (int c : counts) EXPECT_NEAR(c, 1024 / 7, 1024 / 7 * 0.3);
  EXPECT_EQ(rng.state().counter, 4u * 257u);  // context + 1 draws per row (n = 7 rejects a draw with odds 2^-63)

  Rng again(8);
  TokenBatch repeat;
  random_token_batch(again, 4, 256, 7, repeat);
  EXPECT_EQ(repeat.inputs, batch.inputs);
  EXPECT_EQ(repeat.targets, batch.targets);
  EXPECT_THROW(random_token_batch(again, 4, 256, 0, repeat), Error);
}

}  // namespace
}  // namespace ft
