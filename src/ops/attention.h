// attention.h — the public attention entry point: forward and backward for every variant of the
// attention contract (docs/design.md): GQA/MQA, causal with bottom-right alignment, sliding window,
// sink tokens, gpt-oss sink logits, custom scale. Dispatches on the tensors' device and the chosen
// implementation:
//   cpu  + naive : materialises S and P, accumulates in double — the oracle
//   cpu  + flash : tiled FlashAttention-2 (Algorithms 1 and 2) with configurable tiles
//   cuda + naive : materialises S and P with cuBLASLt GEMMs (the "standard attention" baseline)
//   cuda + flash : the FlashAttention-2 CUDA kernels
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/stream.h"
#include "core/tensor.h"

namespace ft {

enum class AttentionImpl { naive, flash };
const char* name_of(AttentionImpl impl);
AttentionImpl parse_attention_impl(std::string_view text);  // "naive" | "flash"

// Which CUDA flash kernels run. auto_select: the Hopper (sm_90a: TMA, wgmma, warp-specialised) kernels on
// a compute capability 9.0 GPU (H100, H200) for bf16/fp16 at head dims 64, 80, 96, 128 and 256 with
// 16-byte aligned base pointers and positive strides (no broadcast dims), the portable sm80 (mma.sync)
// kernels otherwise; sm80: always the portable ones; sm90: the Hopper ones, or an error saying why they
// cannot run. Both compute the same function, to rounding.
enum class FlashKernels { auto_select, sm80, sm90 };
const char* name_of(FlashKernels kernels);        // "auto" | "sm80" | "sm90"
FlashKernels parse_flash_kernels(std::string_view text);

struct AttentionOptions {
  bool causal = false;             // same as window_right = 0
  std::int64_t window_left = -1;   // keys j >= i + off - window_left; -1 = unbounded
  std::int64_t window_right = -1;  // keys j <= i + off + window_right; -1 = unbounded
  std::int64_t sink_tokens = 0;    // keys j < sink_tokens bypass the left window bound
  std::optional<double> scale;     // default 1/sqrt(D)
  AttentionImpl impl = AttentionImpl::flash;
  int block_q = 64;                // CPU tiled implementation only: query tile (>= 16)
  int block_k = 64;                // CPU tiled implementation only: key tile (>= 16)
  // CUDA flash backward only. true (the default): every sum runs in a fixed order, so repeated runs give
  // bit-identical gradients. false: dQ is accumulated in fp32 by the dK/dV kernel in whatever order its
  // blocks come — atomics on the sm80 kernels, which saves their dQ kernel's recomputation; TMA reductions
  // on the Hopper ones, which accumulate dQ in the deterministic mode too, there in a fixed order (faster
  // on both; dQ may differ between runs in its last bits).
  // The CPU and naive implementations are deterministic either way and ignore it.
  bool deterministic = true;
  FlashKernels kernels = FlashKernels::auto_select;  // CUDA flash only
  Stream stream;                   // CUDA work is ordered on this stream
};

// Tensors of one attention call. Shapes are logical; memory layout comes from the strides (last dim
// contiguous), so (B,H,N,D) and (B,N,H,D) storage both work without copies.
struct AttentionTensors {
  Tensor q;      // (B, Hq, Nq, D)   bf16 | fp16 | fp32
  Tensor k;      // (B, Hkv, Nk, D)  same dtype, Hq % Hkv == 0
  Tensor v;      // (B, Hkv, Nk, D)  same dtype
  Tensor sinks;  // (Hq) fp32, optional gpt-oss sink logits (undefined = none)
  Tensor o;      // (B, Hq, Nq, D)   forward output, backward input
  Tensor lse;    // (B, Hq, Nq) fp32 natural-log logsumexp: forward output, backward input
};

struct AttentionGrads {
  Tensor d_o;     // (B, Hq, Nq, D)  gradient of the loss with respect to o
  Tensor dq;      // (B, Hq, Nq, D)  outputs, same dtype as q
  Tensor dk;      // (B, Hkv, Nk, D)
  Tensor dv;      // (B, Hkv, Nk, D)
  Tensor dsinks;  // (Hq) fp32, required exactly when sinks are given
};

// Validated sizes of one call (also used by the implementations).
struct AttentionShape {
  std::int64_t batch = 0, heads_q = 0, heads_kv = 0, len_q = 0, len_k = 0, head_dim = 0;
  double scale = 0;              // resolved: options.scale or 1/sqrt(head_dim)
  std::int64_t window_left = -1;   // resolved: -1 = unbounded
  std::int64_t window_right = -1;  // resolved: 0 when causal, -1 = unbounded
  std::int64_t sink_tokens = 0;
  bool has_sinks = false;
};

// Checks shapes, dtypes, devices, strides and options; throws ft::Error naming what was expected
// and what was given. `backward` also checks o, lse and the gradients.
AttentionShape validate_attention(const AttentionTensors& t, const AttentionOptions& options,
                                  const AttentionGrads* grads = nullptr);

// Throws ft::Error (unsupported) unless `impl` on `device` computes attention of head dim `head_dim`: every
// implementation takes 1 to 256, the CUDA flash kernels 16, 32, 64, 80, 96, 128 or 256 (as a call would).
void check_attention_head_dim(std::int64_t head_dim, AttentionImpl impl, Device device);

// The kernel family a CUDA flash call with these tensors and options runs (sm80 or sm90); throws as
// the call would where options.kernels asks for what cannot run.
FlashKernels flash_kernels_for(const AttentionTensors& t, const AttentionOptions& options);

// o, lse <- attention(q, k, v). NaN in an input reaches the outputs it feeds (a NaN score makes its row's O
// and L NaN, never an empty row). An output that shares memory with another output or an
// input (the same array twice, or a dense one overlapping) is invalid_argument.
void attention_forward(const AttentionTensors& t, const AttentionOptions& options);
// dq, dk, dv (and dsinks) <- gradients, given q, k, v, o, lse and d_o. Outputs are overwritten.
void attention_backward(const AttentionTensors& t, const AttentionGrads& grads, const AttentionOptions& options);

}  // namespace ft
