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
// A block works on one row at a time, each thread holding kHeldPacks N-element packs of it in registers (see
// Note [RMSNorm rows in registers]), with at most kMaxRowThreads threads; kForwardBlocks and kBackwardBlocks
// blocks of that size fit an SM (the register budgets). The backward's dw partials: at most kRowGroups row
// groups (fixed: one summation order; see Note [RMSNorm backward in one pass]).
constexpr int kHeldPacks = 8;
constexpr int kMaxRowThreads = 256;
constexpr int kForwardBlocks = 4, kBackwardBlocks = 2;
constexpr std::int64_t kRowGroups = 512;

// Note [RMSNorm rows in registers]
// A block takes a row at a time. Thread t owns the columns of packs t, t + blockDim, ... of the row; the first
// kHeldPacks of them stay in registers between the row's reduction (a block reduction in double: the sum
// of squares, or the backward's dot product) and the pass that uses it (y, or dx), so x (and dy) are read once.
// Columns past those (d above kHeldPacks * N * kMaxRowThreads: 8192 in 4-element packs) are read again in the
// second pass.
// The kernels are memory-bound, so what sets their speed is the bytes in flight per SM: a thread issues all its
// held loads (in the backward also those of the dx it adds to) before the row's reduction, and with 32 columns a
// thread in 4-element packs (d = 4096: blocks of 128 threads) an SM holds several blocks, whose rows' loads go on
// while one block waits at its reduction's barriers. The launch bounds cap a thread at 64 registers (forward) and
// 128 (backward): 8 and 4 such blocks an SM, so the backward's 512 row groups fit one wave of 128 SMs or more.

// y (rows, d) T, rstd (rows) <- rmsnorm of x (rows, d) with w (d): a block per row at a time (see Note [RMSNorm
// rows in registers]); N-element packs.
template <class T, int N>
__global__ void __launch_bounds__(kMaxRowThreads, kForwardBlocks)
    forward_kernel(T* __restrict__ y, std::int64_t y_stride, float* __restrict__ rstd, const float* __restrict__ x,
                   std::int64_t x_stride, const float* __restrict__ w, std::int64_t rows, int d, float eps) {
  constexpr int P = kHeldPacks;
  __shared__ double scratch[32];
  const int first = static_cast<int>(threadIdx.x) * N;
  const int step = static_cast<int>(blockDim.x) * N;  // columns between a thread's packs
  const int spill = first + P * step;  // this thread's first column not held in registers
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * x_stride;  // (d)
    T* yr = y + r * y_stride;            // (d)
    Pack<float, N> xv[P];
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int c = first + k * step;
      xv[k] = c < d ? load_pack<N>(xr + c) : Pack<float, N>{};  // columns past d: zeros, never stored
    }
    double ss = 0;
#pragma unroll
    for (int k = 0; k < P; ++k) {
#pragma unroll
      for (int i = 0; i < N; ++i) ss += static_cast<double>(xv[k].v[i]) * xv[k].v[i];
    }
    for (int c = spill; c < d; c += step) {
      const Pack<float, N> xs = load_pack<N>(xr + c);
#pragma unroll
      for (int i = 0; i < N; ++i) ss += static_cast<double>(xs.v[i]) * xs.v[i];
    }
    ss = block_reduce(ss, SumOp{}, scratch);
    const float s = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(d) + eps));
    if (threadIdx.x == 0) rstd[r] = s;
    // y at columns [c, c + N) from their x.
    const auto store_y = [&](int c, const Pack<float, N>& xs) {
      const Pack<float, N> wv = load_pack<N>(w + c);
      Pack<T, N> out;
#pragma unroll
      for (int i = 0; i < N; ++i) out.v[i] = from_f32<T>(__fmul_rn(__fmul_rn(xs.v[i], s), wv.v[i]));
      store_pack<N>(yr + c, out);
    };
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int c = first + k * step;
      if (c < d) store_y(c, xv[k]);
    }
    for (int c = spill; c < d; c += step) store_y(c, load_pack<N>(xr + c));
  }
}

// Note [RMSNorm backward in one pass]
// One block per fixed group of rows (kRowGroups at most, whatever the GPU: one summation order) walks its
// rows in order, each as Note [RMSNorm rows in registers] says: the row's dot product, then its dx. The
// held columns' dw terms dy * x * rstd are summed over the group's rows in shared memory (each thread its own
// columns: no barrier; registers go to the loads in flight); the re-read columns' in the group's partial row in
// global memory, which only their thread touches: the same order, so the same bits. So x and dy are read once
// for dx and dw together. A second kernel adds the groups' partials in a fixed order.

// dx (rows, d) fp32 (+)= rstd (dy w - xhat mean(dy w xhat)) (dx null: not wanted), dx_cast (rows, d) C (null:
// not wanted) <- the new dx rounded; partial (groups, d) (null: not wanted) <- per row group, the sum over its
// rows in order of dy * x * rstd. dy (rows, d) T; N-element packs; dynamic shared memory: kHeldPacks packs of
// floats a thread. See Note [RMSNorm backward in one pass].
template <class T, class C, int N>
__global__ void __launch_bounds__(kMaxRowThreads, kBackwardBlocks)
    backward_kernel(float* __restrict__ dx, std::int64_t dx_stride, bool accumulate, C* __restrict__ dx_cast,
                    std::int64_t cast_stride, float* __restrict__ partial, const T* __restrict__ dy,
                    std::int64_t dy_stride, const float* __restrict__ x, std::int64_t x_stride,
                    const float* __restrict__ w, const float* __restrict__ rstd, std::int64_t rows,
                    std::int64_t per_group, int d) {
  constexpr int P = kHeldPacks;
  __shared__ double scratch[32];
  extern __shared__ float held_dw[];  // (P, blockDim, N): the held columns' dw sums, thread t's at [k][t]
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.x) * per_group;
  const std::int64_t r1 = r0 + per_group < rows ? r0 + per_group : rows;
  const int first = static_cast<int>(threadIdx.x) * N;
  const int step = static_cast<int>(blockDim.x) * N;  // columns between a thread's packs
  const int spill = first + P * step;  // this thread's first column not held in registers
  float* group_dw = partial ? partial + static_cast<std::int64_t>(blockIdx.x) * d : nullptr;  // (d)
  // Thread t's dw sum of its held pack k.
  const auto held_sum = [&](int k) {
    return reinterpret_cast<Pack<float, N>*>(held_dw + (static_cast<std::int64_t>(k) * blockDim.x + threadIdx.x) * N);
  };

  // The three per-element formulas, shared by held and re-read columns.
  const auto dot_term = [](float g, float wv, float xv, float s) {
    return static_cast<double>(__fmul_rn(g, wv)) * __fmul_rn(xv, s);
  };
  const auto dx_term = [](float g, float wv, float xv, float s, float mean_dot) {
    return __fmul_rn(s, __fsub_rn(__fmul_rn(g, wv), __fmul_rn(__fmul_rn(xv, s), mean_dot)));
  };
  const auto dw_term = [](float g, float xv, float s) { return __fmul_rn(g, __fmul_rn(xv, s)); };
  // dx <- old (dx's value before, when accumulating) + value at row r, columns [c, c + N), and its rounded copy.
  const auto store_dx = [&](std::int64_t r, int c, const Pack<float, N>& old, const Pack<float, N>& value) {
    Pack<float, N> out = value;
    if (accumulate) {
#pragma unroll
      for (int i = 0; i < N; ++i) out.v[i] = __fadd_rn(old.v[i], value.v[i]);
    }
    store_pack<N>(dx + r * dx_stride + c, out);
    if (dx_cast) {
      Pack<C, N> rounded;
#pragma unroll
      for (int i = 0; i < N; ++i) rounded.v[i] = from_f32<C>(out.v[i]);
      store_pack<N>(dx_cast + r * cast_stride + c, rounded);
    }
  };

  if (group_dw) {
#pragma unroll
    for (int k = 0; k < P; ++k) *held_sum(k) = Pack<float, N>{};
  }
  for (std::int64_t r = r0; r < r1; ++r) {
    const float s = rstd[r];
    const float* xr = x + r * x_stride;  // (d)
    const T* gr = dy + r * dy_stride;    // (d)
    // The held packs (and below, dx's old values to add to): all loads issued before the reduction.
    Pack<float, N> xv[P], old[P];
    Pack<T, N> gv[P];
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const int c = first + k * step;
      xv[k] = old[k] = Pack<float, N>{};  // columns past d: zeros, never stored
      gv[k] = Pack<T, N>{};
      if (c < d) {
        xv[k] = load_pack<N>(xr + c);
        gv[k] = load_pack<N>(gr + c);
      }
    }
    if (dx) {
      double dot = 0;
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const int c = first + k * step;
        if (c < d) {
          const Pack<float, N> wv = load_pack<N>(w + c);
#pragma unroll
          for (int i = 0; i < N; ++i) dot += dot_term(to_f32(gv[k].v[i]), wv.v[i], xv[k].v[i], s);
        }
      }
      for (int c = spill; c < d; c += step) {
        const Pack<float, N> xs = load_pack<N>(xr + c), ws = load_pack<N>(w + c);
        const Pack<T, N> g = load_pack<N>(gr + c);
#pragma unroll
        for (int i = 0; i < N; ++i) dot += dot_term(to_f32(g.v[i]), ws.v[i], xs.v[i], s);
      }
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const int c = first + k * step;
        if (accumulate && c < d) old[k] = load_pack<N>(dx + r * dx_stride + c);
      }
      dot = block_reduce(dot, SumOp{}, scratch);
      const float mean_dot = static_cast<float>(dot / static_cast<double>(d));
#pragma unroll
      for (int k = 0; k < P; ++k) {
        const int c = first + k * step;
        if (c < d) {
          const Pack<float, N> wv = load_pack<N>(w + c);
          Pack<float, N> value;
#pragma unroll
          for (int i = 0; i < N; ++i) value.v[i] = dx_term(to_f32(gv[k].v[i]), wv.v[i], xv[k].v[i], s, mean_dot);
          store_dx(r, c, old[k], value);
        }
      }
      for (int c = spill; c < d; c += step) {
        const Pack<float, N> xs = load_pack<N>(xr + c), ws = load_pack<N>(w + c);
        const Pack<T, N> g = load_pack<N>(gr + c);
        Pack<float, N> value;
#pragma unroll
        for (int i = 0; i < N; ++i) value.v[i] = dx_term(to_f32(g.v[i]), ws.v[i], xs.v[i], s, mean_dot);
        store_dx(r, c, accumulate ? load_pack<N>(dx + r * dx_stride + c) : Pack<float, N>{}, value);
      }
    }
    if (group_dw) {
#pragma unroll
      for (int k = 0; k < P; ++k) {
        Pack<float, N> sum = *held_sum(k);
#pragma unroll
        for (int i = 0; i < N; ++i) sum.v[i] = __fadd_rn(sum.v[i], dw_term(to_f32(gv[k].v[i]), xv[k].v[i], s));
        *held_sum(k) = sum;
      }
      for (int c = spill; c < d; c += step) {
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
      const int c = first + k * step;
      if (c < d) store_pack<N>(group_dw + c, *held_sum(k));
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
int row_threads(std::int64_t d, int n) {
  const std::int64_t wanted = ceil_div(ceil_div(d, std::int64_t{kHeldPacks} * n), 32) * 32;
  return static_cast<int>(wanted < kMaxRowThreads ? wanted : kMaxRowThreads);
}

// Rows of at most kMaxColumns columns: the kernels index columns in int.
constexpr std::int64_t kMaxColumns = std::int64_t{1} << 30;

void check_columns(const char* op, std::int64_t d) {
  FT_CHECK(d <= kMaxColumns, op, " (CUDA): rows of at most ", kMaxColumns, " columns, given ", d);
}

// backward_kernel<T, C, N> for dx_cast's dtype C (bf16 when there is no dx_cast: the kernel skips it).
template <class T, int N>
void launch_backward(const ops::RowView& dx, bool accumulate, const ops::RowView& dx_cast, float* partial,
                     std::int64_t groups, std::int64_t per_group, const T* dy, std::int64_t dy_stride,
                     const ops::RowView& x, const float* w, const float* rstd, cudaStream_t s) {
  const auto launch = [&](auto cast_tag) {
    using C = decltype(cast_tag);
    const int threads = row_threads(x.cols, N);
    const std::size_t held_bytes = static_cast<std::size_t>(threads) * kHeldPacks * N * sizeof(float);
    backward_kernel<T, C, N><<<static_cast<unsigned>(groups), threads, held_bytes, s>>>(
        static_cast<float*>(dx.data), dx.row_stride, accumulate, static_cast<C*>(dx_cast.data), dx_cast.row_stride,
        partial, dy, dy_stride, static_cast<const float*>(x.data), x.row_stride, w, rstd, x.rows, per_group,
        static_cast<int>(x.cols));
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
  check_columns("rmsnorm_forward", x.cols);
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  const bool packs = packs_fit(x.cols, {x, y}, w);
  with_cuda_dtype(y.dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* yp = static_cast<T*>(y.data);
    const auto* xp = static_cast<const float*>(x.data);
    const unsigned blocks = grid_for(x.rows, 1);  // a row per block at a time
    const int threads = row_threads(x.cols, packs ? 4 : 1);
    const int d = static_cast<int>(x.cols);
    if (packs)
      forward_kernel<T, 4><<<blocks, threads, 0, s>>>(yp, y.row_stride, rstd, xp, x.row_stride, w, x.rows, d, eps);
    else
      forward_kernel<T, 1><<<blocks, threads, 0, s>>>(yp, y.row_stride, rstd, xp, x.row_stride, w, x.rows, d, eps);
  });
  FT_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(const ops::RowView& dx, bool accumulate_dx, const ops::RowView& dx_cast, float* dw,
                      bool accumulate_dw, const ops::RowView& dy, const ops::RowView& x, const float* w,
                      const float* rstd, Device device, const Stream& stream) {
  check_columns("rmsnorm_backward", x.cols);
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
