// transformer.h — TransformerLM: the model of docs/design.md's contract (token embedding -> num_layers
// pre-norm blocks [x += attn(rmsnorm1(x)); x += ffn(rmsnorm2(x))] -> final RMSNorm -> LM head -> mean
// cross-entropy), forward and backward over a batch of token ids, built only from the public,
// device-dispatching ops (so the same code runs wherever the ops are implemented).
//
// Memory, one allocation per kind (memory() reports the bytes):
//   parameters     fp32 masters, ParameterBuffer (parameters.h)
//   gradients      fp32, same layout
//   activations    an arena (arena.h) sized for (max_batch, max_seq_len), per tensor and layer:
//                  x (B,T,d) fp32, ln1.y (B,T,d) c, ln1.rstd (B,T), attn.qkv (B,T,3,H,Dh) c (q and k
//                  after RoPE), attn.o (B,T,H,Dh) c, attn.lse (B,H,T), x_mid (B,T,d) fp32, ln2.y (B,T,d) c,
//                  ln2.rstd (B,T), ffn.a = w1 y (B,T,d_ff) c, ffn.b = w3 y (B,T,d_ff) c; then ln_final.y,
//                  ln_final.rstd and, with the materialised loss (loss_chunk = 0) only, logits (B,T,V) fp32
//                  (overwritten by their gradient in fp32 mode) and dlogits (B,T,V) bf16 in bf16 training.
//                  c = the compute dtype (fp32 or bf16). The SwiGLU product h is not kept: backward recomputes
//                  it from a and b. With recomputation (see Note [Recomputation]) most of a block's tensors live
//                  once, in slots every block shares, instead of once per block. With offloading (see Note
//                  [Activation offloading]) the per-block tensors and block inputs live in a ring of two
//                  blocks' slots, the rest of the blocks' in pinned host memory (MemoryReport::offloaded).
//   workspace      bf16 mode: the weights as GEMM operands, cast from the masters when needed (as autocast
//                  casts on use; no bf16 copy of the parameters persists): two slots of one block's bf16
//                  parameters — block l's are cast into slot l % 2 right before its forward and again right
//                  before its backward (a block's parameters are contiguous, so one cast fills a slot; its
//                  two norm vectors ride along unused, the norms read the fp32 masters) — and the LM head's
//                  (V, d) bf16 cast, made before its forward GEMM and read again by its backward, which
//                  follows with nothing cast in between; the head's slot overlays the block slots. Every
//                  cast and GEMM is ordered on the model's one stream, so no slot is overwritten while read.
//                  With the fused loss (loss_chunk > 0, see Note [Fused LM head loss] in fused_lm_head.h):
//                  the loss (one double) and the (chunk, V) fp32 logits tile (and in bf16 training the bf16
//                  gradient tile of a group of chunks: as many as fit the room the temporaries leave, at least
//                  one), which overlay the per-layer temporaries below (the loss runs between the last block's
//                  forward and the first block's backward).
//                  Then the temporaries of one layer at a time (gradient of the residual stream, its bf16
//                  copy, the norm output gradient; h and dh; d_o and dqkv — the FFN and attention groups
//                  overlay).
// An inference model (ModelOptions::training = false) allocates no gradients and keeps nothing for backward:
// its arena holds one residual stream x (each layer writes x_next over its x once x_mid is made), x_mid and
// one layer's temporaries shared by every layer (ln1.y, ln1.rstd, qkv, o, lse, ln2.y, ln2.rstd, a, b), then
// ln_final.y, ln_final.rstd and the logits (materialised loss); its workspace holds the bf16 weight slots
// (bf16 mode), ffn.h and the fused loss's tile.
//
// Note [Recomputation]
// Training with ModelOptions::recompute (config.h): the forward writes the recomputed tensors of every block
// into one set of shared slots (each block overwriting the last's), and the backward of block l (but the
// last, whose tensors are still there) first runs the block's forward again from its kept input x_l, with
// the weights the backward casts anyway, up to ffn.a and ffn.b (the w2 GEMM and x_{l+1} are not needed).
//   full       keeps x_l per block; recomputes ln1, qkv (and RoPE), attention, x_mid, ln2, a and b.
//   selective  keeps x_l, attn.o and attn.lse per block (the attention is the expensive part); recomputes
//              ln1, qkv (and RoPE), the output projection (x_mid), ln2, a and b, and skips the attention.
//   selective_qkv  keeps attn.qkv (after RoPE) too; recomputes ln1 (its output is the QKV weight gradient's
//              operand), x_mid, ln2, a and b, and skips the QKV GEMM, RoPE and the attention.
// The same ops run on the same inputs in the same order, so every recomputed tensor, hence every gradient,
// is bit for bit the one `none` gives.
//
// Note [Activation offloading]
// Training with ModelOptions::offload_activations: block l's unit — what its backward reads that was made in
// its forward: x_l and what the policy keeps per block (none: every tensor of the block; selective: attn.o
// and attn.lse; selective_qkv: attn.qkv, attn.o and attn.lse; full: nothing more) — and unit L, the final
// norm's input x_L, live in slot u % R of a ring of R = min(kOffloadRing, L + 1) unit-sized slots of the
// arena instead of a place of their own. A unit is x_l then the kept tensors in the order block l's forward
// makes them, and for l <= L - R it is copied into pinned host memory on a copy stream in parts, each as soon
// as the model's stream has enqueued its last write: x_l when block l starts (before its weights' cast: it is
// the block's input), up to attn.qkv (with ln1's output before it under none) after the QKV GEMM and RoPE, up
// to attn.o and attn.lse after the attention, and the rest (none: x_mid to ffn.b; the other policies:
// nothing) after the block. The parts' bytes come from the layout (the unit's bytes before its first tensor
// made later), so every policy splits alike. The model's stream waits for the unit's copies only right before
// it writes the slot again: block l + R - 1's w2 GEMM writes x_{l+R} there (block l + R's own tensors come
// later), so with R = 2 the copies run from block l's start to block l + 1's last GEMM — almost two blocks'
// compute for one unit's bytes over PCIe, so the copy stream's jitter rarely makes the model's stream wait.
// The last R units stay in their slots until their backward. In backward, once unit u's last reader is done
// (the final norm's backward for x_L, block u's backward) the copy stream brings unit u - R back into the
// same slot, so each copy has the R - 1 blocks between to finish; block u - R's backward waits for it. The
// bytes the backward reads are the bytes the forward wrote, so losses and gradients are bit for bit those
// without offloading, for every policy. See model/activation_offload.h.
// The fused QKV GEMM uses q_proj, k_proj, v_proj as one (3d, d) matrix (they are adjacent in the layout)
// writing (B,T,3,H,Dh); attention reads q, k, v as strided (B,H,T,Dh) views of it without copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/buffer.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "model/activation_offload.h"
#include "model/arena.h"
#include "model/config.h"
#include "model/packed_documents.h"
#include "model/parameter_source.h"
#include "model/parameters.h"
#include "ops/attention.h"
#include "ops/rope.h"
#include "ops/token_ids.h"

namespace ft {

struct ModelOptions {
  Precision precision = Precision::fp32;
  AttentionImpl attention = AttentionImpl::flash;
  std::int64_t max_batch = 4;    // B capacity of the activation arena
  std::int64_t max_seq_len = 0;  // T capacity; 0 = config.context_length
  Device device = Device::cpu();
  std::uint64_t seed = 0;   // parameter initialisation (init.h)
  bool allow_tf32 = false;  // fp32 GEMMs on CUDA may use TF32
  Stream stream;            // every op is ordered on this stream
  bool training = true;     // false: forward only (no gradients, no backward-only activations or workspace)
  // Rows per chunk of the fused LM head loss (fused_lm_head.h; at most max_batch * max_seq_len are used);
  // 0 = the materialised loss: (B, T, V) fp32 logits in the arena, readable through logits().
  std::int64_t loss_chunk = 1024;
  Recompute recompute = Recompute::none;  // training only: see Note [Recomputation]
  // Not null: the parameters and gradients are not allocated here but bound unit by unit from the source
  // (ZeRO-3: model/parameter_source.h); no bf16 weight slots (the source hands out bf16 weights) and no
  // initialisation (the source's). Not owned; it outlives the model.
  ParameterSource* parameter_source = nullptr;
  // Training only: keep the blocks' saved activations in pinned host memory between their forward and their
  // backward, a ring of a few blocks' on the device (see Note [Activation offloading]).
  bool offload_activations = false;
  // Training only: the attention backward's dQ additions in a fixed order, bitwise reproducible (the default);
  // false: atomic additions, faster on Hopper at long context, gradients that differ in the last bits from run
  // to run (and recomputation then no longer bit-identical to none). AttentionOptions::deterministic.
  bool deterministic_attention = true;
};

// Device slots of the activation-offloading ring (see Note [Activation offloading]): two let each copy to
// the host run during the next block's forward (up to its w2 GEMM) and each copy back during the next
// block's backward.
constexpr std::int64_t kOffloadRing = 2;

// Bytes held per kind.
struct MemoryReport {
  std::size_t parameters = 0;
  std::size_t gradients = 0;
  std::size_t optimizer_state = 0;
  std::size_t activations = 0;
  std::size_t workspace = 0;  // with the bf16 weight slots in bf16 mode and the fused loss's tiles
  std::size_t offloaded = 0;  // pinned host memory of offloaded activations (not device memory: not in total())
  std::size_t total() const { return parameters + gradients + optimizer_state + activations + workspace; }
};

// Called during backward right after the last op writing a parameter's gradient has been issued (on CUDA:
// enqueued on the model's stream — record an event there to order other work after it).
using GradientReadyHook = std::function<void(const ParameterInfo& info, const Tensor& grad)>;

struct BackwardOptions {
  double loss_scale = 1.0;  // the gradients are those of loss_scale * loss (1 / micro-batches to accumulate)
  bool accumulate = false;  // gradients += instead of =
  GradientReadyHook on_gradient_ready;  // may be empty
  std::function<void()> on_backward_start;  // called once the forward (and the loss gradient) is done; may be empty
};

class TransformerLM {
 public:
  // Allocates every buffer (for forward only when options.training is false) and initialises the parameters
  // with options.seed.
  TransformerLM(const ModelConfig& config, const ModelOptions& options = {});
  TransformerLM(const TransformerLM&) = delete;
  TransformerLM& operator=(const TransformerLM&) = delete;

  // The mean cross-entropy of inputs (B, T) predicting targets (B, T) (int32 ids on the model's device,
  // B <= max_batch, T <= max_seq_len); no gradients. With the materialised loss (loss_chunk = 0) leaves the
  // logits readable through logits().
  double forward(const TokenIds& inputs, const TokenIds& targets);
  // Forward, then backward: the gradients of loss_scale * loss, written (or added) into gradients(), the
  // hook told as each becomes final (order: gradient_ready_order()). Returns the (unscaled) mean loss.
  // Throws ft::Error (invalid_argument) on a model built with training = false.
  double forward_backward(const TokenIds& inputs, const TokenIds& targets, const BackwardOptions& options = {});
  // forward_backward without reading the loss back: the mean loss is left in *loss, one double in the model's
  // device memory (host memory on the CPU), bit for bit what forward_backward returns. Nothing here waits for
  // the device but the CUDA ops' token-id checks, which a CUDA stream capture skips (ops/embedding.h), so a
  // CUDA graph can capture it.
  void forward_backward_to(double* loss, const TokenIds& inputs, const TokenIds& targets,
                           const BackwardOptions& options = {});

  // Packed documents (see Note [Packed documents]): with documents, the following forward and backward calls
  // confine attention to each document and restart RoPE positions at each document's start; their batch must
  // be the documents' (B, T), and the documents' values must stay as they are until the calls' work is done
  // (a CUDA graph of the calls reads the values at replay, and the count as captured).
  // Not owned; null returns to whole-row causal attention.
  void set_documents(const PackedDocuments* documents) { documents_ = documents; }
  const PackedDocuments* documents() const { return documents_; }

  // (B, T, V) fp32 logits of the last forward() call; throws ft::Error (invalid_argument) with the fused loss,
  // which keeps none.
  Tensor logits() const;

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  const ParameterLayout& layout() const { return layout_; }
  const ParameterBuffer& parameters() const { return params_; }
  const ParameterBuffer& gradients() const;  // throws ft::Error (invalid_argument) when training = false
  // Parameter indices in the order backward finalises their gradients: lm_head, ln_final, then each
  // layer from the last: ffn.w2, ffn.w3, ffn.w1, ln2, attn.output_proj, attn.v_proj, attn.k_proj,
  // attn.q_proj, ln1; token_embeddings last.
  std::vector<std::size_t> gradient_ready_order() const;
  MemoryReport memory() const;  // optimizer_state is the trainer's (0 here)
  // The bytes memory() would report for a model built with (config, options), allocating nothing (memory
  // planning for shapes that need several GPUs).
  static MemoryReport planned_memory(const ModelConfig& config, const ModelOptions& options);
  const ArenaLayout& activation_layout() const { return activation_layout_; }
  const ArenaLayout& workspace_layout() const { return workspace_layout_; }

 private:
  struct PlanOnly {};
  TransformerLM(const ModelConfig& config, const ModelOptions& options, PlanOnly);  // layouts only
  // Byte offsets of one block's saved activations in the activation arena.
  struct LayerSlots {
    std::size_t ln1_y, ln1_rstd, qkv, attn_o, attn_lse, x_mid, ln2_y, ln2_rstd, ffn_a, ffn_b;
  };
  // Byte offsets in the workspace arena.
  struct WorkspaceSlots {
    std::size_t block_weights[2];  // bf16 mode: (block_numel()) bf16 each; block l uses slot l % 2
    std::size_t lm_head_weight;    // bf16 mode: (V, d) bf16, overlaying the block slots
    std::size_t loss;                         // fused loss: (1) double
    std::size_t loss_logits, loss_dlogits;    // fused loss: (chunk, V) fp32; bf16 training: (group chunk, V) bf16
    std::size_t dres, dres_c, dnorm, ffn_h, ffn_dh, attn_do, attn_dqkv;
  };
  // What block_forward runs: the whole block, or its recomputation before the block's backward (see Note
  // [Recomputation]).
  enum class BlockPass { forward, recompute_full, recompute_selective, recompute_selective_qkv };
  // The GEMM weights of one block.
  struct BlockWeights {
    Tensor qkv;          // (3d, d): q_proj, k_proj, v_proj fused
    Tensor output_proj;  // (d, d)
    Tensor w1;           // (d_ff, d)
    Tensor w2;           // (d, d_ff)
    Tensor w3;           // (d_ff, d)
  };
  struct Batch {
    std::int64_t B = 0, T = 0;
  };
  // The attention tensors of layer l: q, k, v views of its qkv activation, o and lse.
  struct AttentionViews {
    AttentionTensors tensors;
    Tensor o_rows;  // (B, T, d) o as the output projection's input
  };

  void plan_memory();
  void check_training(const char* what) const;
  Batch check_batch(const TokenIds& inputs, const TokenIds& targets) const;
  // Enqueues the forward and the loss (with its gradient when backward is given; the fused loss computes the
  // LM head's gradients here too); returns the mean loss read back, or leaves it in *loss_to and returns 0
  // when loss_to is not null.
  double run_forward(const Batch& b, const TokenIds& inputs, const TokenIds& targets, const BackwardOptions* backward,
                     double* loss_to);
  // The final norm's output -> the loss: materialised logits, or the fused loss (see run_forward).
  double lm_head_loss(const Batch& b, const TokenIds& targets, const BackwardOptions* backward, double* loss_to);
  // store_unit (offloading, a forward before a backward): the parts of block l's unit go to the host as they
  // become final, the rest after the block (see Note [Activation offloading]).
  void layer_forward(std::int64_t l, const Batch& b, bool store_unit);
  void block_forward(std::int64_t l, const Batch& b, const BlockWeights& w, BlockPass pass, bool store_unit = false);
  // forward_backward (loss_to null) or forward_backward_to; `what` names the caller in errors.
  double run_forward_backward(const char* what, const TokenIds& inputs, const TokenIds& targets,
                              const BackwardOptions& options, double* loss_to);
  void run_backward(const Batch& b, const TokenIds& inputs, const BackwardOptions& options);
  void layer_backward(std::int64_t l, const Batch& b, const BackwardOptions& options);
  void notify(const BackwardOptions& options, std::size_t index) const;
  // bf16 mode: the bf16 copy of the residual stream's gradient (dres_c), for a norm's backward to write beside
  // dres when `wanted`; fp32 mode (dres is the GEMM operand itself) or not wanted: undefined.
  Tensor dres_cast(const Batch& b, bool wanted) const;
  // The attention of a block and its RoPE: whole rows, or the packed documents (transformer_attention.cpp).
  void check_documents(const Batch& b) const;
  RopeOptions rope_options() const;
  AttentionOptions attention_options() const;
  void attention_forward_pass(const AttentionTensors& t) const;
  void attention_backward_pass(const AttentionTensors& t, const AttentionGrads& g) const;

  Tensor act(std::size_t offset, DType dtype, Shape shape) const;
  Tensor work(std::size_t offset, DType dtype, Shape shape) const;
  Tensor residual(std::int64_t l, const Batch& b) const;  // x entering layer l (l = num_layers: final norm input)
  AttentionViews attention_views(std::int64_t l, const Batch& b) const;
  // (B, parts H, T, Dh): `parts` adjacent head groups of a (B,T,3,H,Dh) buffer from q (which 0), k (1) or v (2) on.
  Tensor qkv_view(const Tensor& qkv, int which, const Batch& b, int parts = 1) const;
  // Elements of one block's parameters, q_proj to ln2 (contiguous in the layout; the same for every block).
  std::int64_t block_numel() const;
  // The GEMM weights of block l: the fp32 masters, or in bf16 mode their casts, enqueued here on the model's
  // stream into weight slot l % 2.
  BlockWeights cast_block_weights(std::int64_t l);
  // The LM head's GEMM weight (V, d): the fp32 master, or in bf16 mode its cast into the head slot — made by
  // cast_lm_head (the forward), read again by lm_head_weight (the backward right after it).
  Tensor cast_lm_head();
  Tensor lm_head_weight() const;
  // With a parameter source: binds unit u's parameter (or gradient) views from it; nothing otherwise.
  void bind_parameters(std::int64_t unit);
  void bind_gradients(std::int64_t unit);
  Tensor fused_qkv(const ParameterBuffer& buffer, std::int64_t l) const;  // (3d, d): q_proj, k_proj, v_proj
  DType compute_dtype() const { return options_.precision == Precision::bf16 ? DType::bf16 : DType::f32; }
  bool fused_loss() const { return options_.loss_chunk > 0; }
  // A double the model's device wrote (after the stream's work so far), read back to the host.
  double read_back(const double* value) const;
  // The fused loss's slot in the workspace (one double; kept through the backward).
  double* fused_loss_slot() const;

  ModelConfig config_;
  ModelOptions options_;
  ParameterLayout layout_;
  ParameterBuffer params_;
  ParameterBuffer grads_;  // training only

  ArenaLayout activation_layout_;
  ArenaLayout workspace_layout_;
  std::vector<std::size_t> residual_slots_;  // x entering layer l, l = 0..num_layers (inference: all one slot)
  std::vector<LayerSlots> layer_slots_;      // per layer (inference: every layer the same slots)
  std::vector<std::size_t> offload_slots_;   // offloading: where each ring slot starts in the arena
  std::size_t offload_unit_bytes_ = 0;       // offloading: bytes of one block's unit (a ring slot)
  // Offloading: how many bytes at the start of a block's unit are final at points of its forward (see Note
  // [Activation offloading]): at its start (its input x_l), after its QKV GEMM and RoPE, after its attention.
  struct OffloadParts {
    std::size_t input = 0, qkv = 0, attention = 0;
  };
  OffloadParts offload_parts_;
  std::size_t lnf_y_ = 0, lnf_rstd_ = 0, logits_ = 0, dlogits_ = 0;
  WorkspaceSlots ws_{};
  std::int64_t loss_group_ = 1;  // fused loss, bf16 training: chunks the dlogits tile holds (a group)
  Buffer activations_;
  Buffer workspace_;
  ActivationOffload offload_;  // off unless options_.offload_activations in training
  Batch logits_batch_;  // the batch whose logits the arena holds (B = 0: none)
  const PackedDocuments* documents_ = nullptr;  // not owned; see set_documents
};

}  // namespace ft
