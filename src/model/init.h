// init.h — parameter initialisation per docs/design.md's model contract, seeded and deterministic:
//   linear weights (d_out, d_in)  truncated normal, std sqrt(2 / (d_in + d_out)), cut at +-3 std
//   token embeddings              truncated normal, std 1, cut at +-3
//   RMSNorm weights               1
// Element i of parameter p is a pure function of (seed, p, i) (ops/random_fill.h: counter-based draws,
// rejection outside the cut), so any slice of the flat parameter buffer can be initialised on its own, on the
// device where it lives (a ZeRO-3 rank's shard on its GPU), with exactly the values the whole-model
// initialisation gives it; nothing is staged on the host, and values do not depend on thread count or device.
#pragma once

#include <cstdint>

#include "core/stream.h"
#include "core/tensor.h"
#include "model/parameters.h"

namespace ft {

// Every parameter of the buffer, on its device (CUDA work ordered on stream).
void init_parameters(const ParameterLayout& layout, const ParameterBuffer& params, std::uint64_t seed,
                     const Stream& stream = {});

// slice (n) fp32, contiguous, any device <- elements [begin, begin + n) of the flat buffer init_parameters
// fills. Throws ft::Error (invalid_argument) unless 0 <= begin and begin + n <= layout.numel().
void init_parameters_range(const ParameterLayout& layout, const Tensor& slice, std::int64_t begin,
                           std::uint64_t seed, const Stream& stream = {});

// The standard deviation a parameter is drawn with (before the +-3 std cut); 0 for norms (constant 1).
double init_std(const ParameterInfo& info);

}  // namespace ft
