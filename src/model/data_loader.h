// data_loader.h — training batches of token ids. TokenFile memory-maps a file of uint16 or uint32 ids
// (see Note [Token file formats]); DataLoader samples B random windows of T+1 tokens from it into int32 inputs
// (B, T) and targets (B, T) (the inputs shifted one ahead), from a counter-based generator whose whole
// state is a (seed, counter) pair, so a checkpoint can resume the exact batch sequence.
// random_token_batch makes the uniform-id batches the benchmarks use. File problems (missing, too short,
// byte length not a multiple of the id size, bad .npy header, ids outside the vocabulary) are ft::Error
// kind io naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "ops/token_ids.h"

namespace ft {

// The generator's whole state: draw number `counter` of the stream `seed` comes next.
struct RngState {
  std::uint64_t seed = 0;
  std::uint64_t counter = 0;
  friend bool operator==(const RngState&, const RngState&) = default;
};

// SplitMix64 as a counter-based generator: draw i is mix(seed + (i + 1) * golden gamma).
class Rng {
 public:
  explicit Rng(std::uint64_t seed = 0) : state_{seed, 0} {}
  explicit Rng(const RngState& state) : state_(state) {}

  std::uint64_t next();                   // the next 64 random bits
  std::uint64_t below(std::uint64_t n);   // uniform in [0, n), unbiased (Lemire's method); n >= 1
  const RngState& state() const { return state_; }
  void set_state(const RngState& state) { state_ = state; }

 private:
  RngState state_;
};

// One batch on the host; input_ids()/target_ids() view it for the embedding and cross-entropy ops.
struct TokenBatch {
  std::int64_t batch = 0;
  std::int64_t context = 0;
  std::vector<std::int32_t> inputs;   // (batch, context)
  std::vector<std::int32_t> targets;  // (batch, context): targets[b][t] follows inputs[b][t]

  TokenIds input_ids() const { return {inputs.data(), {batch, context}, Device::cpu()}; }
  TokenIds target_ids() const { return {targets.data(), {batch, context}, Device::cpu()}; }
};

// Note [Token file formats]
// A token file is recognised by its content, never by its name: one that starts with the .npy magic
// ("\x93NUMPY") is a .npy array, which must be C-order (or one-dimensional) of dtype '<u2' (uint16) or
// '<u4' (uint32), read flattened; any other file is raw little-endian ids, uint16 when the vocabulary
// fits them (<= 65536 ids) and uint32 when it does not (> 65536 ids: the 8b shape's 151936, say), so its
// byte length must be a multiple of 2 or 4. A raw file whose first bytes happen to be the .npy magic is
// read as .npy (and then refused when its header is not one).
class TokenFile {
 public:
  // vocab: the vocabulary the ids index (>= 1); chooses the width of raw files.
  TokenFile(const std::string& path, std::int64_t vocab);

  const std::string& path() const { return file_.path(); }
  std::int64_t size() const { return size_; }  // tokens
  int id_bytes() const { return id_bytes_; }    // 2 (uint16) or 4 (uint32)
  bool is_npy() const { return npy_; }
  std::uint32_t operator[](std::int64_t i) const {
    if (id_bytes_ == 2) return reinterpret_cast<const std::uint16_t*>(tokens_)[i];
    return reinterpret_cast<const std::uint32_t*>(tokens_)[i];
  }
  // io error naming the first id >= vocab in tokens [begin, begin + count) and its position. Whole-file
  // scans run over threads in chunks that find the chunk's largest id first (a vectorised max) and look
  // for the position only in a chunk that holds a bad id.
  void check_ids(std::int64_t vocab, std::int64_t begin, std::int64_t count) const;
  std::string describe() const;  // "PATH (N uint16 tokens, raw)"

 private:
  MappedFile file_;
  const std::uint8_t* tokens_ = nullptr;  // (size_) ids of id_bytes_ each
  std::int64_t size_ = 0;
  int id_bytes_ = 2;
  bool npy_ = false;
};

// When ids are checked against the vocabulary: never, in each sampled window, or the whole file once.
enum class IdCheck { none, per_batch, whole_file };

struct DataLoaderOptions {
  std::int64_t batch = 4;
  std::int64_t context = 512;
  std::int64_t vocab = 10000;
  std::uint64_t seed = 0;  // data-parallel ranks should use distinct seeds
  IdCheck check = IdCheck::whole_file;  // at open: a bad id is found before training, not when sampled
};

class DataLoader {
 public:
  DataLoader(const std::string& path, const DataLoaderOptions& options);

  // Fills out with the next batch: row b is the window at a uniform start in [0, size - context - 1].
  // A per-batch id check that fails leaves the generator where it was.
  void next(TokenBatch& out);
  const RngState& state() const { return rng_.state(); }
  void set_state(const RngState& state) { rng_.set_state(state); }
  const TokenFile& file() const { return file_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  TokenFile file_;
  DataLoaderOptions options_;
  Rng rng_;
};

// A benchmark batch: each row is context + 1 ids uniform in [0, vocab), split into inputs and targets.
void random_token_batch(Rng& rng, std::int64_t batch, std::int64_t context, std::int64_t vocab, TokenBatch& out);

}  // namespace ft
