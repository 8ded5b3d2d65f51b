// attention_impls.h — internal: the implementations behind attention_forward / attention_backward.
// Each receives validated tensors and the resolved shape (validate_attention).
#pragma once

#include "ops/attention.h"
#include "ops/attention_varlen.h"

namespace ft::attention_impl {

// CPU, materialised S and P with double accumulation: the oracle (cpu_naive.cpp).
void cpu_naive_forward(const AttentionTensors& t, const AttentionShape& s);
void cpu_naive_backward(const AttentionTensors& t, const AttentionGrads& g, const AttentionShape& s);

// CPU, tiled FlashAttention-2 (Algorithms 1 and 2) with block_q x block_k tiles (cpu_tiled.cpp).
void cpu_tiled_forward(const AttentionTensors& t, const AttentionShape& s, int block_q, int block_k);
void cpu_tiled_backward(const AttentionTensors& t, const AttentionGrads& g, const AttentionShape& s, int block_q,
                        int block_k);

#if FT_HAS_CUDA
// CUDA FlashAttention-2 kernels (cuda/flash_*.cu), the family chosen by `kernels` (flash_kernels_for).
// deterministic = false accumulates dQ with fp32 atomics (AttentionOptions::deterministic).
FlashKernels cuda_flash_kernels(const AttentionTensors& t, const AttentionGrads* g, const AttentionShape& s,
                                FlashKernels kernels);
void cuda_flash_forward(const AttentionTensors& t, const AttentionShape& s, const Stream& stream,
                        FlashKernels kernels);
void cuda_flash_backward(const AttentionTensors& t, const AttentionGrads& g, const AttentionShape& s,
                         const Stream& stream, bool deterministic, FlashKernels kernels);
// Test hooks of the Hopper kernels' tile scheduling (flash_sm90_scheduler.{cuh,cu}).
// The Hopper kernels launch their heads in sections sized to the L2 (Note [L2 head sections]); heads > 0 forces
// sections of that many grid heads from now on (tests, so that sections engage at small sizes), 0 returns to
// the L2-sized ones.
void force_flash_section_heads(int heads);
// The Hopper forward runs one persistent block per SM, each taking query tiles until none are left
// (Note [Persistent forward tiles]); blocks > 0 launches that many instead from now on (tests, so that every
// block takes many tiles at small sizes), 0 returns to one per SM.
void force_flash_forward_blocks(int blocks);
// The deterministic Hopper backward adds the dQ pieces of its last grid heads in ascending key-tile order
// and of the others in descending order (Note [Ordered dQ additions]); heads >= 0 forces that
// many ascending heads from now on (tests, so that both orders run at small sizes), -1 returns to the rule.
void force_flash_ascending_heads(int heads);
// CUDA flash kernels over packed sequences (ops/attention_varlen.h), scheduled per sequence so that no work is
// spent past a sequence's end. Same families and determinism rule as the dense calls.
void cuda_flash_varlen_forward(const VarlenAttentionTensors& t, const VarlenAttentionShape& s, const Stream& stream,
                               FlashKernels kernels);
void cuda_flash_varlen_backward(const VarlenAttentionTensors& t, const VarlenAttentionGrads& g,
                                const VarlenAttentionShape& s, const Stream& stream, bool deterministic,
                                FlashKernels kernels);
// CUDA naive baseline: cuBLASLt GEMMs and a softmax kernel, S and P materialised (cuda/naive_*.cu).
void cuda_naive_forward(const AttentionTensors& t, const AttentionShape& s, const Stream& stream);
void cuda_naive_backward(const AttentionTensors& t, const AttentionGrads& g, const AttentionShape& s,
                         const Stream& stream);
#endif

}  // namespace ft::attention_impl
