// parameters.h — the parameter layout of the Transformer LM and flat buffers viewed through it (llm.c's
// pointer tables): every parameter, gradient or optimizer-state tensor is a named view
// into ONE allocation per kind, in the reference state-dict order and names
//   token_embeddings.weight                       (vocab, d_model)
//   layers.N.attn.{q_proj,k_proj,v_proj,output_proj}.weight   (d_model, d_model) each
//   layers.N.ln1.weight                           (d_model)
//   layers.N.ffn.w1.weight                        (d_ff, d_model)
//   layers.N.ffn.w2.weight                        (d_model, d_ff)
//   layers.N.ffn.w3.weight                        (d_ff, d_model)
//   layers.N.ln2.weight                           (d_model)
//   ln_final.weight                               (d_model)
//   lm_head.weight                                (vocab, d_model)
// packed back to back without padding, so q_proj, k_proj and v_proj of a layer form one (3 d_model,
// d_model) matrix (the fused QKV GEMM) and a data-parallel or ZeRO shard is a plain slice. The layout is
// computed without allocating (parameter counts of the big configs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/buffer.h"
#include "core/tensor.h"
#include "model/config.h"

namespace ft {

enum class ParameterKind { embedding, linear, norm };

struct ParameterInfo {
  std::size_t index = 0;  // position in the layout
  std::string name;       // state-dict name
  Shape shape;
  std::int64_t offset = 0;  // elements from the start of the flat buffer
  std::int64_t numel = 0;
  ParameterKind kind = ParameterKind::linear;
  std::int64_t layer = -1;  // block index; -1 for token_embeddings, ln_final and lm_head
};

// The parameters of one block, in layout order.
enum class LayerSlot { q_proj, k_proj, v_proj, output_proj, ln1, w1, w2, w3, ln2 };
constexpr std::size_t kLayerSlots = 9;

class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelConfig& config);  // validates the config

  const std::vector<ParameterInfo>& tensors() const { return tensors_; }
  std::size_t size() const { return tensors_.size(); }
  const ParameterInfo& operator[](std::size_t index) const { return tensors_.at(index); }
  std::int64_t numel() const { return numel_; }  // total parameter count

  // Index of a state-dict name; unknown names throw ft::Error.
  std::size_t index_of(std::string_view name) const;
  static constexpr std::size_t embedding_index() { return 0; }
  std::size_t layer_index(std::int64_t layer, LayerSlot slot) const;
  std::size_t ln_final_index() const { return tensors_.size() - 2; }
  std::size_t lm_head_index() const { return tensors_.size() - 1; }

 private:
  std::int64_t num_layers_ = 0;
  std::vector<ParameterInfo> tensors_;
  std::int64_t numel_ = 0;
};

// One allocation of layout.numel() elements of a dtype, with a view per parameter; or, unbound(), no
// allocation and a view per parameter that its owner binds to memory held elsewhere (a ZeRO-3 model's
// gathered units: model/parameter_source.h), flat() then undefined.
class ParameterBuffer {
 public:
  ParameterBuffer() = default;
  ParameterBuffer(const ParameterLayout& layout, DType dtype, Device device, std::string_view tag,
                  const Stream& stream = {});
  static ParameterBuffer unbound(const ParameterLayout& layout);
  // Points parameter index's view at `view` (its shape must be the parameter's).
  void bind(std::size_t index, const Tensor& view);

  const Tensor& flat() const { return flat_; }                                    // (numel)
  const Tensor& operator[](std::size_t index) const { return views_.at(index); }  // (info.shape)
  const std::vector<Tensor>& views() const { return views_; }
  std::size_t bytes() const { return buffer_.bytes(); }

 private:
  Buffer buffer_;
  Tensor flat_;
  std::vector<Tensor> views_;
};

}  // namespace ft
