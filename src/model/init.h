// init.h — parameter initialisation per docs/design.md's model contract, seeded and deterministic:
//   linear weights (d_out, d_in)  truncated normal, std sqrt(2 / (d_in + d_out)), cut at +-3 std
//   token embeddings              truncated normal, std 1, cut at +-3
//   RMSNorm weights               1
// Element i of parameter p is a pure function of (seed, p, i) (counter-based draws, rejection outside the
// cut), so values do not depend on thread count or device; drawn on the host, copied to the device.
#pragma once

#include <cstdint>

#include "model/parameters.h"

namespace ft {

void init_parameters(const ParameterLayout& layout, const ParameterBuffer& params, std::uint64_t seed);

// The standard deviation a parameter is drawn with (before the +-3 std cut); 0 for norms (constant 1).
double init_std(const ParameterInfo& info);

}  // namespace ft
