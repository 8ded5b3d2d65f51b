// flash_launch.h — internal (CUDA builds only): the launchers of the FlashAttention-2 kernels, one
// explicit instantiation per (input type, head dim) in flash_{fwd,bwd}_hdim*.cu. T is __nv_bfloat16,
// __half or float; D one of kHeadDims (flash_traits.h).
#pragma once

#include <cuda_runtime.h>

#include "ops/attention/cuda/flash_params.h"

namespace ft::flash {

template <class T, int D>
void run_flash_fwd(const FlashFwdParams& p, cudaStream_t stream);

// Runs the pre-pass, the sink-gradient sum (when sinks are given), then the dK/dV and the dQ kernels
// (deterministic) or the atomic dK/dV/dQ kernel and the dQ convert kernel (!p.deterministic); on Hopper
// (p.shape.sm90) the dK/dV kernel with fused dQ, its additions ordered when deterministic, and the
// convert kernel.
template <class T, int D>
void run_flash_bwd(const FlashBwdParams& p, cudaStream_t stream);

// dsinks <- -(sum of the pre-pass partials), in a fixed order (flash_bwd_sink.cu).
void run_flash_bwd_sink(const FlashBwdParams& p, cudaStream_t stream);

}  // namespace ft::flash
