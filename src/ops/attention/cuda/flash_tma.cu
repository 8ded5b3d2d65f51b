// flash_tma.cu — make_tma_tensor: the driver's cuTensorMapEncodeTiled, reached through the runtime's
// entry-point query so the library needs no link against libcuda (CPU-only machines load it too).
#include "ops/attention/cuda/flash_tma.h"

#include <algorithm>
#include <array>
#include <cstdint>

#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "core/error.h"

namespace ft::flash {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t err =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &found);
    FT_CHECK_KIND(device, err == cudaSuccess && found == cudaDriverEntryPointSuccess && ptr,
                  "flash attention: the CUDA driver does not provide cuTensorMapEncodeTiled (",
                  cudaGetErrorString(err), "); the Hopper kernels need a driver for CUDA 12 or newer");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

}  // namespace

TmaTensor make_tma_tensor(const TensorRef& t, TmaElem elem, int batch, int heads, int rows, int cols, int box_rows) {
  const std::uint64_t elem_bytes = elem == TmaElem::fp32 ? 4 : 2;
  struct Axis {
    int logical;  // 0 rows, 1 heads, 2 batch
    std::uint64_t size, stride_bytes;
  };
  auto axis = [elem_bytes](int logical, int size, std::int64_t stride) {
    return Axis{logical, static_cast<std::uint64_t>(size), static_cast<std::uint64_t>(stride) * elem_bytes};
  };
  std::array<Axis, 3> axes{axis(0, rows, t.row_stride), axis(1, heads, t.head_stride), axis(2, batch, t.batch_stride)};
  // Dims of size 1 are never stepped over: give them a valid stride past every other dim's extent.
  std::uint64_t extent = static_cast<std::uint64_t>(cols) * elem_bytes;
  for (const Axis& a : axes)
    if (a.size > 1) extent = std::max(extent, a.size * a.stride_bytes);
  extent = (extent + 15) / 16 * 16;
  for (Axis& a : axes)
    if (a.size <= 1) a.stride_bytes = extent;
  std::stable_sort(axes.begin(), axes.end(),
                   [](const Axis& x, const Axis& y) { return x.stride_bytes < y.stride_bytes; });

  TmaTensor out{};
  cuuint64_t dims[4] = {static_cast<cuuint64_t>(cols), 0, 0, 0};
  cuuint64_t strides[3] = {};
  cuuint32_t box[4] = {static_cast<cuuint32_t>(128 / elem_bytes), 1, 1, 1};
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  for (int d = 1; d < 4; ++d) {
    const Axis& a = axes[d - 1];
    dims[d] = a.size;
    strides[d - 1] = a.stride_bytes;
    if (a.logical == 0) {
      box[d] = static_cast<cuuint32_t>(box_rows);
      out.dim_of_row = d;
    } else if (a.logical == 1) {
      out.dim_of_head = d;
    }
  }
  const CUtensorMapDataType type = elem == TmaElem::fp32   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : elem == TmaElem::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                           : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  const CUresult res = encode_tiled()(&out.map, type, 4, t.ptr, dims, strides, box, element_strides,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FT_CHECK_KIND(device, res == CUDA_SUCCESS, "flash attention: cuTensorMapEncodeTiled refused a (", batch, ", ",
                heads, ", ", rows, ", ", cols, ") operand with element strides (", t.batch_stride, ", ",
                t.head_stride, ", ", t.row_stride, ") and ", box_rows, "-row boxes (CUresult ", static_cast<int>(res),
                ")");
  return out;
}

}  // namespace ft::flash
