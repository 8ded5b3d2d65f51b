// rmsnorm.cu — CUDA RMSNorm forward and backward in fp32, row sums in double as on the CPU; a block per row at a
// time, the row held in registers, so x (and dy) are read once.
//   forward   sum of squares (a block reduction), rstd, y = x * rstd * w (fp32 or bf16 out).
//   backward  one block per fixed group of rows: per row dot = sum dy w xhat (a block reduction),
//             dx (+)= rstd (dy w - xhat mean(dot)) and its 16-bit cast when wanted, from the same fp32 value;
//             each thread sums its columns' dw terms over the group's rows into a partial (groups, d) buffer,
//             then one pass adds the groups in a fixed order — deterministic, no atomics.
#include <cstdint>

#include "core/buffer.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace ft::gpu {

namespace {

// dw's finishing pass: columns and group slices of a block (see dw_finish_kernel).
constexpr int kFinishColumns = 32, kFinishSlices = 32;
// A block works on one row at a time, each thread holding kHeldElements of it in registers (see Note [RMSNorm
// rows in registers]), with at most kMaxRowThreads threads. The backward's dw partials: at most kRowGroups row
// groups (fixed: one summation order; see Note [RMSNorm backward in one pass]).
constexpr int kHeldElements = 8;
constexpr int kMaxRowThreads = 1024;
constexpr std::int64_t kRowGroups = 512;

// Note [RMSNorm rows in registers]
// A block takes a row at a time. Thread t owns the columns of packs t, t + blockDim, ... of the row; the first
// kHeldElements of them stay in registers between the row's reduction (a block reduction in double: the sum
// of squares, or the backward's dot product) and the pass that uses it (y, or dx), so x (and dy) are read once.
// Columns past those (d above kHeldElements * kMaxRowThreads) are read again in the second pass.

// y (rows, d) T, rstd (rows) <- rmsnorm of x (rows, d) with w (d): a block per row at a time (see Note [RMSNorm
// rows in registers]); N-element packs.
template <class T, int N>
__global__ void __launch_bounds__(kMaxRowThreads)
    forward_kernel(T* __restrict__ y, std::int64_t y_stride, float* __restrict__ rstd, const float* __restrict__ x,
                   std::int64_t x_stride, const float* __restrict__ w, std::int64_t rows, std::int64_t d, float eps) {
  constexpr int P = kHeldElements / N;  // packs held in registers
  __shared__ double scratch[32];
  const std::int64_t first = static_cast<std::int64_t>(threadIdx.x) * N;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * N;  // columns between a thread's packs
  const std::int64_t spill = first + P * step;  // this thread's first column not held in registers
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * x_stride;  // (d)
    T* yr = y + r * y_stride;            // (d)
    Pack<float, N> xv[P];
    double ss = 0;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const std::int64_t c = first + k * step;
      xv[k] = Pack<float, N>{};
      if (c < d) {
        xv[k] = load_pack<N>(xr + c);
#pragma unroll
        for (int i = 0; i < N; ++i) ss += static_cast<double>(xv[k].v[i]) * xv[k].v[i];
      }
    }
    for (std::int64_t c = spill; c < d; c += step) {
      const Pack<float, N> xs = load_pack<N>(xr + c);
#pragma unroll
      for (int i = 0; i < N; ++i) ss += static_cast<double>(xs.v[i]) * xs.v[i];
    }
    ss = block_reduce(ss, SumOp{}, scratch);
    const float s = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(d) + eps));
    if (threadIdx.x == 0) rstd[r] = s;
    // y at columns [c, c + N) from their x.
    const auto store_y = [&](std::int64_t c, const Pack<float, N>& xs) {
      const Pack<float, N> wv = load_pack<N>(w + c);
      Pack<T, N> out;
#pragma unroll
      for (int i = 0; i < N; ++i) out.v[i] = from_f32<T>(__fmul_rn(__fmul_rn(xs.v[i], s), wv.v[i]));
      store_pack<N>(yr + c, out);
    };
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const std::int64_t c = first + k * step;
      if (c < d) store_y(c, xv[k]);
    }
    for (std::int64_t c = spill; c < d; c += step) store_y(c, load_pack<N>(xr + c));
  }
}

// Note [RMSNorm backward in one pass]
// One block per fixed group of rows (kRowGroups at most, whatever the GPU: one summation order) walks its
// rows in order, each as Note [RMSNorm rows in registers] says: the row's dot product, then its dx. The
// held columns' dw terms dy * x * rstd are summed over the group's rows in registers; the re-read columns'
// in the group's partial row in global memory, which only their thread touches: the same order, so the same
// bits. So x and dy are read once for dx and dw together. A second kernel adds the groups' partials in a
// fixed order.

// dx (rows, d) fp32 (+)= rstd (dy w - xhat mean(dy w xhat)) (dx null: not wanted), dx_cast (rows, d) C (null:
// not wanted) <- the new dx rounded; partial (groups, d) (null: not wanted) <- per row group, the sum over its
// rows in order of dy * x * rstd. dy (rows, d) T; N-element packs. See Note [RMSNorm backward in one pass].
template <class T, class C, int N>
__global__ void __launch_bounds__(kMaxRowThreads)
    backward_kernel(float* __restrict__ dx, std::int64_t dx_stride, bool accumulate, C* __restrict__ dx_cast,
                    std::int64_t cast_stride, float* __restrict__ partial, const T* __restrict__ dy,
                    std::int64_t dy_stride, const float* __restrict__ x, std::int64_t x_stride,
                    const float* __restrict__ w, const float* __restrict__ rstd, std::int64_t rows,
                    std::int64_t per_group, std::int64_t d) {
  constexpr int P = kHeldElements / N;  // packs held in registers
  __shared__ double scratch[32];
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * per_group;
  const std::int64_t r1 = r0 + per_group < rows ? r0 + per_group : rows;
  const std::int64_t first = static_cast<std::int64_t>(threadIdx.x) * N;
  const std::int64_t step = static_cast<std::int64_t>(blockDim.x) * N;  // columns between a thread's packs
  const std::int64_t spill = first + P * step;  // this thread's first column not held in registers
  float* group_dw = partial ? partial + static_cast<std::int64_t>(blockIdx.x) * d : nullptr;  // (d)

  // The three per-element formulas, shared by held and re-read columns.
  const auto dot_term = [](float g, float wv, float xv, float s) {
    return static_cast<double>(__fmul_rn(g, wv)) * __fmul_rn(xv, s);
  };
  const auto dx_term = [](float g, float wv, float xv, float s, float mean_dot) {
    return __fmul_rn(s, __fsub_rn(__fmul_rn(g, wv), __fmul_rn(__fmul_rn(xv, s), mean_dot)));
  };
  const auto dw_term = [](float g, float xv, float s) { return __fmul_rn(g, __fmul_rn(xv, s)); };
  // dx (+)= value at row r, columns [c, c + N), and its rounded copy.
  const auto store_dx = [&](std::int64_t r, std::int64_t c, const Pack<float, N>& value) {
    float* dxp = dx + r * dx_stride + c;
    Pack<float, N> out = accumulate ? load_pack<N>(dxp) : value;
    if (accumulate) {
#pragma unroll
      for (int i = 0; i < N; ++i) out.v[i] = __fadd_rn(out.v[i], value.v[i]);
    }
    store_pack<N>(dxp, out);
    if (dx_cast) {
      Pack<C, N> rounded;
#pragma unroll
      for (int i = 0; i < N; ++i) rounded.v[i] = from_f32<C>(out.v[i]);
      store_pack<N>(dx_cast + r * cast_stride + c, rounded);
    }
  };

  Pack<float, N> dw_sum[P] = {};  // the dw sums of the held columns (w is read from cache where needed)
  for (std::int64_t r = r0; r < r1; ++r) {
    const float s = rstd[r];
    const float* xr = x + r * x_stride;  // (d)
    const T* gr = dy + r * dy_stride;    // (d)
    Pack<float, N> xv[P], gv[P];
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const std::int64_t c = first + k * step;
      xv[k] = gv[k] = Pack<float, N>{};  // columns past d: zeros, never stored
      if (c < d) {
        xv[k] = load_pack<N>(xr + c);
        const Pack<T, N> g = load_pack<N>(gr + c);
#pragma unroll
        for (int i = 0; i < N; ++i) gv[k].v[i] = to_f32(g.v[i]);
      }
    }
    if (dx) {
      double dot = 0;
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const std::int64_t c = first + k * step;
        if (c < d) {
          const Pack<float, N> wv = load_pack<N>(w + c);
#pragma unroll
          for (int i = 0; i < N; ++i) dot += dot_term(gv[k].v[i], wv.v[i], xv[k].v[i], s);
        }
      }
      for (std::int64_t c = spill; c < d; c += step) {
        const Pack<float, N> xs = load_pack<N>(xr + c), ws = load_pack<N>(w + c);
        const Pack<T, N> g = load_pack<N>(gr + c);
#pragma unroll
        for (int i = 0; i < N; ++i) dot += dot_term(to_f32(g.v[i]), ws.v[i], xs.v[i], s);
      }
      dot = block_reduce(dot, SumOp{}, scratch);
      const float mean_dot = static_cast<float>(dot / static_cast<double>(d));
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const std::int64_t c = first + k * step;
        if (c < d) {
          const Pack<float, N> wv = load_pack<N>(w + c);
          Pack<float, N> value;
#pragma unroll
          for (int i = 0; i < N; ++i) value.v[i] = dx_term(gv[k].v[i], wv.v[i], xv[k].v[i], s, mean_dot);
          store_dx(r, c, value);
        }
      }
      for (std::int64_t c = spill; c < d; c += step) {
        const Pack<float, N> xs = load_pack<N>(xr + c), ws = load_pack<N>(w + c);
        const Pack<T, N> g = load_pack<N>(gr + c);
        Pack<float, N> value;
#pragma unroll
        for (int i = 0; i < N; ++i) value.v[i] = dx_term(to_f32(g.v[i]), ws.v[i], xs.v[i], s, mean_dot);
        store_dx(r, c, value);
      }
    }
    if (group_dw) {
#pragma unroll
      for (int k = 0; k < P; ++k) {
#pragma unroll
        for (int i = 0; i < N; ++i)
          dw_sum[k].v[i] = __fadd_rn(dw_sum[k].v[i], dw_term(gv[k].v[i], xv[k].v[i], s));
      }
      for (std::int64_t c = spill; c < d; c += step) {
        const Pack<float, N> xs = load_pack<N>(xr + c);
        const Pack<T, N> g = load_pack<N>(gr + c);
        Pack<float, N> sum = r == r0 ? Pack<float, N>{} : load_pack<N>(group_dw + c);
#pragma unroll
        for (int i = 0; i < N; ++i) sum.v[i] = __fadd_rn(sum.v[i], dw_term(to_f32(g.v[i]), xs.v[i], s));
        store_pack<N>(group_dw + c, sum);
      }
    }
  }
  if (group_dw) {
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const std::int64_t c = first + k * step;
      if (c < d) store_pack<N>(group_dw + c, dw_sum[k]);
    }
  }
}

// dw (d) (+)= the sum over groups of partial (groups, d), in a fixed order: a block takes kFinishColumns
// columns; its slice s (of kFinishSlices) sums groups s, s + kFinishSlices, ... of each column in order, then
// the slices' sums add in slice order.
__global__ void __launch_bounds__(kFinishColumns * kFinishSlices)
    dw_finish_kernel(float* __restrict__ dw, bool accumulate, const float* __restrict__ partial, std::int64_t groups,
                     std::int64_t d) {
  __shared__ float sums[kFinishSlices][kFinishColumns + 1];  // +1: no bank conflicts reading a column
  const int column = static_cast<int>(threadIdx.x) % kFinishColumns;
  const int slice = static_cast<int>(threadIdx.x) / kFinishColumns;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kFinishColumns + column;
  float acc = 0.0f;
  if (c < d)
    for (std::int64_t g = slice; g < groups; g += kFinishSlices) acc += partial[g * d + c];
  sums[slice][column] = acc;
  __syncthreads();
  if (slice != 0 || c >= d) return;
  float total = accumulate ? dw[c] : 0.0f;
  for (int k = 0; k < kFinishSlices; ++k) total += sums[k][column];
  dw[c] = total;
}

// True when rows of every view (and w) can move in 4-element packs.
bool packs_fit(std::int64_t d, std::initializer_list<ops::RowView> views, const float* w) {
  if (d % 4 != 0 || !pack_aligned(w, 4, sizeof(float))) return false;
  for (const ops::RowView& v : views)
    if (v.row_stride % 4 != 0 || !pack_aligned(v.data, 4, size_of(v.dtype))) return false;
  return true;
}

// Threads of a block over rows of d columns: enough to hold a row, whole warps, at most kMaxRowThreads.
int row_threads(std::int64_t d) {
  const std::int64_t wanted = ceil_div(ceil_div(d, std::int64_t{kHeldElements}), 32) * 32;
  return static_cast<int>(wanted < kMaxRowThreads ? wanted : kMaxRowThreads);
}

// backward_kernel<T, C, N> for dx_cast's dtype C (bf16 when there is no dx_cast: the kernel skips it).
template <class T, int N>
void launch_backward(const ops::RowView& dx, bool accumulate, const ops::RowView& dx_cast, float* partial,
                     std::int64_t groups, std::int64_t per_group, const T* dy, std::int64_t dy_stride,
                     const ops::RowView& x, const float* w, const float* rstd, cudaStream_t s) {
  const auto launch = [&](auto cast_tag) {
    using C = decltype(cast_tag);
    backward_kernel<T, C, N><<<static_cast<unsigned>(groups), row_threads(x.cols), 0, s>>>(
        static_cast<float*>(dx.data), dx.row_stride, accumulate, static_cast<C*>(dx_cast.data), dx_cast.row_stride,
        partial, dy, dy_stride, static_cast<const float*>(x.data), x.row_stride, w, rstd, x.rows, per_group,
        x.cols);
  };
  if (dx_cast.data && dx_cast.dtype == DType::f16)
    launch(__half{});
  else
    launch(__nv_bfloat16{});
}

}  // namespace

void rmsnorm_forward(const ops::RowView& y, float* rstd, const ops::RowView& x, const float* w, float eps,
                     Device device, const Stream& stream) {
  if (x.rows == 0) return;
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  const bool packs = packs_fit(x.cols, {x, y}, w);
  with_cuda_dtype(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* yp = static_cast<T*>(y.data);
    const auto* xp = static_cast<const float*>(x.data);
    const unsigned blocks = grid_for(x.rows, 1);  // a row per block at a time
    const int threads = row_threads(x.cols);
    if (packs)
      forward_kernel<T, 4><<<blocks, threads, 0, s>>>(yp, y.row_stride, rstd, xp, x.row_stride, w, x.rows, x.cols, eps);
    else
      forward_kernel<T, 1><<<blocks, threads, 0, s>>>(yp, y.row_stride, rstd, xp, x.row_stride, w, x.rows, x.cols, eps);
  });
  FT_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(const ops::RowView& dx, bool accumulate_dx, const ops::RowView& dx_cast, float* dw,
                      bool accumulate_dw, const ops::RowView& dy, const ops::RowView& x, const float* w,
                      const float* rstd, Device device, const Stream& stream) {
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  const std::int64_t rows = x.rows, d = x.cols;
  const bool want_dx = dx.data && rows > 0, want_dw = dw != nullptr;
  // Row groups of per_group rows (the last may be shorter, none empty): see Note [RMSNorm backward in one pass].
  const std::int64_t per_group = ceil_div(rows, kRowGroups);
  const std::int64_t groups = per_group > 0 ? ceil_div(rows, per_group) : 0;
  Buffer partial;  // (groups, d) dw partials, when dw is wanted
  if (want_dw)
    partial = Buffer(static_cast<std::size_t>((groups > 0 ? groups : 1) * d) * sizeof(float), device,
                     "rmsnorm dw partials", stream);
  auto* pp = static_cast<float*>(partial.data());
  if ((want_dx || want_dw) && groups > 0) {
    with_cuda_dtype(dy.dtype, [&](auto tag) {
      using T = decltype(tag);
      const auto* gp = static_cast<const T*>(dy.data);
      const ops::RowView no_dx{};
      const ops::RowView& dxv = want_dx ? dx : no_dx;
      const bool packs = dxv.data == nullptr      ? packs_fit(d, {x, dy}, w)
                         : dx_cast.data == nullptr ? packs_fit(d, {x, dy, dx}, w)
                                                   : packs_fit(d, {x, dy, dx, dx_cast}, w);
      if (packs)
        launch_backward<T, 4>(dxv, accumulate_dx, dx_cast, pp, groups, per_group, gp, dy.row_stride, x, w, rstd, s);
      else
        launch_backward<T, 1>(dxv, accumulate_dx, dx_cast, pp, groups, per_group, gp, dy.row_stride, x, w, rstd, s);
    });
    FT_CUDA_CHECK_LAUNCH();
  }
  if (want_dw) {
    dw_finish_kernel<<<static_cast<unsigned>(ceil_div(d, kFinishColumns)), kFinishColumns * kFinishSlices, 0, s>>>(
        dw, accumulate_dw, pp, groups, d);
    FT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace ft::gpu
