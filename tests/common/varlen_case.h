// varlen_case.h — one varlen attention test case (packed sequences, a variant of the contract) and what the
// CPU and GPU varlen tests build from it: cumulative lengths and the attention options.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "ops/attention.h"

namespace ft::testing_util {

struct VarlenCase {
  std::string name;
  DType dtype = DType::f32;
  std::int64_t Hq = 2, Hkv = 2, D = 16;
  std::vector<std::int32_t> len_q, len_k;  // per sequence
  bool causal = false;
  std::int64_t left = -1, right = -1, sink_tokens = 0;
  bool sinks = false;
  double scale = 0;  // 0 = default 1/sqrt(D)
  bool deterministic = true;                         // CUDA flash backward only
  FlashKernels kernels = FlashKernels::auto_select;  // CUDA flash only
};

inline void PrintTo(const VarlenCase& c, std::ostream* out) { *out << c.name; }

// (B + 1) cumulative lengths of B sequence lengths.
inline std::vector<std::int32_t> cumulative(const std::vector<std::int32_t>& lengths) {
  std::vector<std::int32_t> cu(lengths.size() + 1, 0);
  std::partial_sum(lengths.begin(), lengths.end(), cu.begin() + 1);
  return cu;
}

inline std::int64_t longest(const std::vector<std::int32_t>& lengths) {
  return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
}

// The case's options with `impl`; CPU tiles of 16 so that sequences span several of them.
inline AttentionOptions options_of(const VarlenCase& c, AttentionImpl impl) {
  AttentionOptions options;
  options.causal = c.causal;
  options.window_left = c.left;
  options.window_right = c.right;
  options.sink_tokens = c.sink_tokens;
  if (c.scale != 0) options.scale = c.scale;
  options.impl = impl;
  options.block_q = 16;
  options.block_k = 16;
  options.deterministic = c.deterministic;
  options.kernels = c.kernels;
  return options;
}

}  // namespace ft::testing_util
