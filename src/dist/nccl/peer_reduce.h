// peer_reduce.h — internal (CUDA builds): the one kernel of the copy-engine all-reduce
// and reduce-scatter (peer_communicator.h): dst (n) <- (a + b) * scale, fp32 or bf16, added in fp32 and
// rounded once; dst may be a.
// Declares no CUDA types.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ft::gpu {

// dst, a, b: n elements of dtype (f32 or bf16) on the current device; stream: a cudaStream_t.
void peer_reduce(void* dst, const void* a, const void* b, std::int64_t n, DType dtype, float scale, void* stream);

}  // namespace ft::gpu
