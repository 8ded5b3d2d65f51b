// rope.h — rotary position embedding, in place, on interleaved pairs (x[2i], x[2i+1]) of each head:
//   angle(t, i) = (position_offset + p(b, t)) * theta^(-2i / Dh), p(b, t) = t, or positions[b, t] when given
//   (packed documents: positions restart at each document's start, see Note [Packed documents])
//   forward   (x0, x1) <- (x0 cos - x1 sin, x0 sin + x1 cos)
//   backward  the inverse rotation (the transpose), applied in place to the gradient.
// x is (B, H, T, Dh) logically, with any strides and a contiguous last dim, so both (B, H, T, Dh) and
// (B, T, H, Dh) memory layouts work (pass the latter as permute({0, 2, 1, 3})); Dh even; fp32, bf16 or
// fp16 (rotated in fp32, rounded once). Angles are computed in double (a (T, Dh/2) table of fp32 cos/sin
// on both devices). Dispatches on the device: CPU or CUDA.
#pragma once

#include <cstdint>

#include "core/stream.h"
#include "core/tensor.h"
#include "ops/token_ids.h"

namespace ft {

struct RopeOptions {
  double theta = 10000.0;
  std::int64_t position_offset = 0;  // position of t = 0 (e.g. the cache length in a decode step)
  Stream stream;                     // CUDA work is ordered on this stream
  // Optional (B, T) int32 per-token positions on x's device, each in [0, T) (data null: p(b, t) = t). The CPU
  // checks them (invalid_argument naming the first bad one); a CUDA call cannot without a sync, and writes NaN
  // over a row whose position is out of range instead.
  TokenIds positions = {};
};

// x <- rope(x).
void rope_forward(const Tensor& x, const RopeOptions& options = {});
// dx <- rope^-1(dx): the gradient with respect to the unrotated input.
void rope_backward(const Tensor& dx, const RopeOptions& options = {});

// A decode step's RoPE and KV-cache append in one pass, at a position read from memory when the work runs
// (so the enqueued step is the same at every position and a CUDA graph can hold it): with p = *position,
//   q (B, Hq, T, Dh)           <- rope(q) at positions p + t, in place
//   k_cache[:, :, p + t, :]    <- rope(k) at positions p + t     k (B, Hkv, T, Dh), k_cache (B, Hkv, capacity, Dh)
//   v_cache[:, :, p + t, :]    <- v                              v (B, Hkv, T, Dh), v_cache like k_cache
// Any strides with a contiguous last dim; one dtype. The same rotation as rope_forward (angles in double,
// rounded to fp32; fp32 products; rounded once). position: one int32 in the tensors' device memory; positions
// past the capacity are not written (the caller keeps p + T <= capacity). options.position_offset is unused.
void rope_append(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& k_cache, const Tensor& v_cache,
                 const std::int32_t* position, const RopeOptions& options = {});

// table (T, Dh/2, 2) fp32 <- (cos, sin) of t * theta^(-2i / Dh) for positions t in [0, T) and pairs i: the angles
// rope_forward and rope_append compute for themselves (value for value on the same device), computed once for
// every position a decode may reach (see SkinnyLinearArgs::rope_table). options.theta; the other options unused.
void rope_table(const Tensor& table, const RopeOptions& options = {});

}  // namespace ft
