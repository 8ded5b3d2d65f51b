// peer_reduce.h — internal (CUDA builds): the one kernel of the copy-engine all-reduce
// (peer_communicator.h): dst (n) <- (dst + src) * scale, fp32 or bf16, added in fp32 and rounded once.
// Declares no CUDA types.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace ft::gpu {

// dst, src: n elements of dtype (f32 or bf16) on the current device; stream: a cudaStream_t.
void peer_reduce(void* dst, const void* src, std::int64_t n, DType dtype, float scale, void* stream);

}  // namespace ft::gpu
