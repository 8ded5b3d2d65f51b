// rmsnorm.cu — CUDA RMSNorm forward and backward in fp32, row sums in double as on the CPU.
//   forward   one warp per row: sum of squares, rstd, y = x * rstd * w (fp32 or bf16 out).
//   backward  dx: one warp per row (dot = sum dy w xhat, then dx (+)= rstd (dy w - xhat mean(dot)), and its
//             16-bit cast when wanted, from the same fp32 value);
//             dw: each thread owns a column and sums a fixed group of rows into a partial (groups, d)
//             buffer, then one pass adds the groups in order — deterministic, no atomics.
#include <cstdint>

#include "core/buffer.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace ft::gpu {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kRowThreads = kWarpsPerBlock * 32;
constexpr int kColumnThreads = 256;
constexpr std::int64_t kRowGroups = 64;  // dw partials: at most this many row groups (fixed: one order)

__device__ __forceinline__ std::int64_t warp_row() {
  return static_cast<std::int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
}

// y (rows, d) T, rstd (rows) <- rmsnorm of x (rows, d) with w (d); N-element packs.
template <class T, int N>
__global__ void __launch_bounds__(kRowThreads)
    forward_kernel(T* __restrict__ y, std::int64_t y_stride, float* __restrict__ rstd, const float* __restrict__ x,
                   std::int64_t x_stride, const float* __restrict__ w, std::int64_t rows, std::int64_t d, float eps) {
  const std::int64_t r = warp_row();
  if (r >= rows) return;
  const int lane = threadIdx.x % 32;
  const float* xr = x + r * x_stride;  // (d)
  T* yr = y + r * y_stride;            // (d)
  double ss = 0;
  for (std::int64_t c = lane * N; c < d; c += 32 * N) {
    const Pack<float, N> xv = load_pack<N>(xr + c);
#pragma unroll
    for (int i = 0; i < N; ++i) ss += static_cast<double>(xv.v[i]) * xv.v[i];
  }
  ss = warp_reduce(ss, SumOp{});
  const float s = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(d) + eps));
  if (lane == 0) rstd[r] = s;
  for (std::int64_t c = lane * N; c < d; c += 32 * N) {
    const Pack<float, N> xv = load_pack<N>(xr + c), wv = load_pack<N>(w + c);
    Pack<T, N> out;
#pragma unroll
    for (int i = 0; i < N; ++i) out.v[i] = from_f32<T>(__fmul_rn(__fmul_rn(xv.v[i], s), wv.v[i]));
    store_pack<N>(yr + c, out);
  }
}

// dx (rows, d) fp32 (+)= rstd (dy w - xhat mean(dy w xhat)), dy (rows, d) T; dx_cast (rows, d) C (null: not
// wanted) <- the new dx rounded; N-element packs.
template <class T, class C, int N>
__global__ void __launch_bounds__(kRowThreads)
    dx_kernel(float* __restrict__ dx, std::int64_t dx_stride, bool accumulate, C* __restrict__ dx_cast,
              std::int64_t cast_stride, const T* __restrict__ dy, std::int64_t dy_stride, const float* __restrict__ x,
              std::int64_t x_stride, const float* __restrict__ w, const float* __restrict__ rstd, std::int64_t rows,
              std::int64_t d) {
  const std::int64_t r = warp_row();
  if (r >= rows) return;
  const int lane = threadIdx.x % 32;
  const float* xr = x + r * x_stride;  // (d)
  const T* gr = dy + r * dy_stride;    // (d)
  float* dxr = dx + r * dx_stride;     // (d)
  const float s = rstd[r];
  double dot = 0;
  for (std::int64_t c = lane * N; c < d; c += 32 * N) {
    const Pack<float, N> xv = load_pack<N>(xr + c), wv = load_pack<N>(w + c);
    const Pack<T, N> gv = load_pack<N>(gr + c);
#pragma unroll
    for (int i = 0; i < N; ++i)
      dot += static_cast<double>(__fmul_rn(to_f32(gv.v[i]), wv.v[i])) * __fmul_rn(xv.v[i], s);
  }
  dot = warp_reduce(dot, SumOp{});
  const float mean_dot = static_cast<float>(dot / static_cast<double>(d));
  for (std::int64_t c = lane * N; c < d; c += 32 * N) {
    const Pack<float, N> xv = load_pack<N>(xr + c), wv = load_pack<N>(w + c);
    const Pack<T, N> gv = load_pack<N>(gr + c);
    Pack<float, N> out = accumulate ? load_pack<N>(dxr + c) : Pack<float, N>{};
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float value = __fmul_rn(s, __fsub_rn(__fmul_rn(to_f32(gv.v[i]), wv.v[i]),
                                                 __fmul_rn(__fmul_rn(xv.v[i], s), mean_dot)));
      out.v[i] = accumulate ? __fadd_rn(out.v[i], value) : value;
    }
    store_pack<N>(dxr + c, out);
    if (dx_cast) {
      Pack<C, N> rounded;
#pragma unroll
      for (int i = 0; i < N; ++i) rounded.v[i] = from_f32<C>(out.v[i]);
      store_pack<N>(dx_cast + r * cast_stride + c, rounded);
    }
  }
}

// partial (groups, d) <- per row group g (rows [g * per_group, ...)), sum over its rows of dy * x * rstd.
template <class T>
__global__ void dw_partial_kernel(float* __restrict__ partial, const T* __restrict__ dy, std::int64_t dy_stride,
                                  const float* __restrict__ x, std::int64_t x_stride, const float* __restrict__ rstd,
                                  std::int64_t rows, std::int64_t per_group, std::int64_t d) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kColumnThreads + threadIdx.x;
  if (c >= d) return;
  const std::int64_t g = blockIdx.y, r0 = g * per_group, r1 = r0 + per_group < rows ? r0 + per_group : rows;
  float acc = 0;
  for (std::int64_t r = r0; r < r1; ++r)
    acc = __fadd_rn(acc, __fmul_rn(to_f32(dy[r * dy_stride + c]), __fmul_rn(x[r * x_stride + c], rstd[r])));
  partial[g * d + c] = acc;
}

// dw (d) (+)= sum over groups, in group order, of partial (groups, d).
__global__ void dw_finish_kernel(float* __restrict__ dw, bool accumulate, const float* __restrict__ partial,
                                 std::int64_t groups, std::int64_t d) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kColumnThreads + threadIdx.x;
  if (c >= d) return;
  float acc = accumulate ? dw[c] : 0.0f;
  for (std::int64_t g = 0; g < groups; ++g) acc += partial[g * d + c];
  dw[c] = acc;
}

// True when rows of every view (and w) can move in 4-element packs.
bool packs_fit(std::int64_t d, std::initializer_list<ops::RowView> views, const float* w) {
  if (d % 4 != 0 || !pack_aligned(w, 4, sizeof(float))) return false;
  for (const ops::RowView& v : views)
    if (v.row_stride % 4 != 0 || !pack_aligned(v.data, 4, size_of(v.dtype))) return false;
  return true;
}

unsigned row_blocks(std::int64_t rows) { return static_cast<unsigned>(ceil_div(rows, kWarpsPerBlock)); }

// dx_kernel<T, C, N> for dx_cast's dtype C (bf16 when there is no dx_cast: the kernel skips it).
template <class T, int N>
void launch_dx(const ops::RowView& dx, bool accumulate, const ops::RowView& dx_cast, const T* dy,
               std::int64_t dy_stride, const ops::RowView& x, const float* w, const float* rstd, cudaStream_t s) {
  const auto launch = [&](auto cast_tag) {
    using C = decltype(cast_tag);
    dx_kernel<T, C, N><<<row_blocks(x.rows), kRowThreads, 0, s>>>(
        static_cast<float*>(dx.data), dx.row_stride, accumulate, static_cast<C*>(dx_cast.data), dx_cast.row_stride,
        dy, dy_stride, static_cast<const float*>(x.data), x.row_stride, w, rstd, x.rows, x.cols);
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
    if (packs)
      forward_kernel<T, 4><<<row_blocks(x.rows), kRowThreads, 0, s>>>(yp, y.row_stride, rstd, xp, x.row_stride, w,
                                                                       x.rows, x.cols, eps);
    else
      forward_kernel<T, 1><<<row_blocks(x.rows), kRowThreads, 0, s>>>(yp, y.row_stride, rstd, xp, x.row_stride, w,
                                                                       x.rows, x.cols, eps);
  });
  FT_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(const ops::RowView& dx, bool accumulate_dx, const ops::RowView& dx_cast, float* dw,
                      bool accumulate_dw, const ops::RowView& dy, const ops::RowView& x, const float* w,
                      const float* rstd, Device device, const Stream& stream) {
  CudaDeviceGuard guard(device.index);
  const cudaStream_t s = cuda_stream(stream);
  const std::int64_t rows = x.rows, d = x.cols;
  with_cuda_dtype(dy.dtype, [&](auto tag) {
    using T = decltype(tag);
    const auto* gp = static_cast<const T*>(dy.data);
    const auto* xp = static_cast<const float*>(x.data);
    if (dx.data && rows > 0) {
      const bool packs = dx_cast.data ? packs_fit(d, {x, dy, dx, dx_cast}, w) : packs_fit(d, {x, dy, dx}, w);
      if (packs)
        launch_dx<T, 4>(dx, accumulate_dx, dx_cast, gp, dy.row_stride, x, w, rstd, s);
      else
        launch_dx<T, 1>(dx, accumulate_dx, dx_cast, gp, dy.row_stride, x, w, rstd, s);
      FT_CUDA_CHECK_LAUNCH();
    }
    if (dw) {
      const std::int64_t groups = rows < kRowGroups ? rows : kRowGroups;
      const std::int64_t per_group = groups > 0 ? ceil_div(rows, groups) : 0;
      const auto column_blocks = static_cast<unsigned>(ceil_div(d, kColumnThreads));
      Buffer partial(static_cast<std::size_t>((groups > 0 ? groups : 1) * d) * sizeof(float), device,
                     "rmsnorm dw partials", stream);  // (groups, d)
      auto* pp = static_cast<float*>(partial.data());
      if (groups > 0) {
        dw_partial_kernel<T><<<dim3(column_blocks, static_cast<unsigned>(groups)), kColumnThreads, 0, s>>>(
            pp, gp, dy.row_stride, xp, x.row_stride, rstd, rows, per_group, d);
        FT_CUDA_CHECK_LAUNCH();
      }
      dw_finish_kernel<<<column_blocks, kColumnThreads, 0, s>>>(dw, accumulate_dw, pp, groups, d);
      FT_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace ft::gpu
