// flash_tma.h — internal (CUDA builds only): TMA descriptions of the attention operands for the Hopper
// kernels. A TmaTensor maps a strided (B, H, N, D) tensor (flash_params.h's TensorRef) for copies of
// boxes of box_rows rows x 128 bytes (64 16-bit or 32 fp32 elements) between it and 128-byte-swizzled
// shared memory: the D axis is innermost and the other three are ordered by stride, so (B, H, N, D) and
// (B, N, H, D) layouts both map.
#pragma once

#include <cuda.h>

#include "ops/attention/cuda/flash_params.h"

namespace ft::flash {

struct TmaTensor {
  CUtensorMap map;  // 4 dims: D first, then rows, heads and batch in stride order
  int dim_of_row = 1, dim_of_head = 2;  // batch takes the remaining one of dims 1..3
};

enum class TmaElem { fp16, bf16, fp32 };

// The map of `t` (`batch` x `heads` x `rows` x `cols` elements of type `elem`) for boxes of 128 bytes of
// columns x box_rows rows. Base and strides of the dims larger than 1 must be positive 16-byte multiples
// (flash_api.cu checks); throws ft::Error (device) when the driver refuses the map.
TmaTensor make_tma_tensor(const TensorRef& t, TmaElem elem, int batch, int heads, int rows, int cols, int box_rows);

}  // namespace ft::flash
