// random_fill.h — counter-based random fills: element i of a fill is a pure function of (key, first + i),
// so any slice of a long random sequence can be computed on its own, on any device, with the values the
// whole sequence has there (e.g. one rank's shard of a model's initial parameters, made on its GPU):
//   fill_truncated_normal  out[i] = stddev * z(key, first + i),  z a standard normal truncated to [-cut, cut]
// See Note [Counter-based truncated normal] (ops/truncated_normal_draw.h) for the draw. out: fp32,
// contiguous. Dispatches on the device: CPU (OpenMP) or CUDA, bit for bit the same values.
#pragma once

#include <cstdint>

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

struct TruncatedNormalFill {
  std::uint64_t key = 0;    // the sequence
  std::int64_t first = 0;   // the sequence index of out[0]
  double stddev = 1.0;      // the scale applied after the cut
  double cut = 3.0;         // |z| <= cut (in standard deviations), > 0
  Stream stream;            // CUDA work is ordered on this stream
};

void fill_truncated_normal(const Tensor& out, const TruncatedNormalFill& fill);

// The key of sub-sequence `id` of a seed (splitmix64 mixing), e.g. one sequence per parameter of a model.
std::uint64_t derive_key(std::uint64_t seed, std::uint64_t id);

}  // namespace ft
