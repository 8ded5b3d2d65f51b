// parameters.cpp — building the parameter layout in state-dict order and the views of a flat buffer.
#include "model/parameters.h"

#include "core/error.h"

namespace ft {

ParameterLayout::ParameterLayout(const ModelConfig& config) : num_layers_(config.num_layers) {
  config.validate();
  const std::int64_t d = config.d_model, f = config.d_ff, vocab = config.vocab_size;
  const auto add = [&](std::string name, Shape shape, ParameterKind kind, std::int64_t layer) {
    ParameterInfo info;
    info.index = tensors_.size();
    info.name = std::move(name);
    info.numel = shape_numel(shape);
    info.shape = std::move(shape);
    info.offset = numel_;
    info.kind = kind;
    info.layer = layer;
    numel_ += info.numel;
    tensors_.push_back(std::move(info));
  };
  add("token_embeddings.weight", {vocab, d}, ParameterKind::embedding, -1);
  for (std::int64_t l = 0; l < config.num_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "attn.q_proj.weight", {d, d}, ParameterKind::linear, l);
    add(p + "attn.k_proj.weight", {d, d}, ParameterKind::linear, l);
    add(p + "attn.v_proj.weight", {d, d}, ParameterKind::linear, l);
    add(p + "attn.output_proj.weight", {d, d}, ParameterKind::linear, l);
    add(p + "ln1.weight", {d}, ParameterKind::norm, l);
    add(p + "ffn.w1.weight", {f, d}, ParameterKind::linear, l);
    add(p + "ffn.w2.weight", {d, f}, ParameterKind::linear, l);
    add(p + "ffn.w3.weight", {f, d}, ParameterKind::linear, l);
    add(p + "ln2.weight", {d}, ParameterKind::norm, l);
  }
  add("ln_final.weight", {d}, ParameterKind::norm, -1);
  add("lm_head.weight", {vocab, d}, ParameterKind::linear, -1);
}

std::size_t ParameterLayout::index_of(std::string_view name) const {
  for (const ParameterInfo& t : tensors_)
    if (t.name == name) return t.index;
  FT_THROW(invalid_argument, "unknown parameter '", name, "': the model has ", tensors_.size(), " parameters, from ",
           tensors_.front().name, " to ", tensors_.back().name);
}

std::size_t ParameterLayout::layer_index(std::int64_t layer, LayerSlot slot) const {
  FT_CHECK(layer >= 0 && layer < num_layers_, "parameter layout: layer must be in [0, ", num_layers_, "), given ",
           layer);
  return 1 + static_cast<std::size_t>(layer) * kLayerSlots + static_cast<std::size_t>(slot);
}

ParameterBuffer::ParameterBuffer(const ParameterLayout& layout, DType dtype, Device device, std::string_view tag,
                                 const Stream& stream)
    : buffer_(static_cast<std::size_t>(layout.numel()) * size_of(dtype), device, tag, stream),
      flat_(buffer_.data(), dtype, device, {layout.numel()}) {
  char* base = static_cast<char*>(buffer_.data());
  views_.reserve(layout.size());
  for (const ParameterInfo& t : layout.tensors())
    views_.emplace_back(base + static_cast<std::size_t>(t.offset) * size_of(dtype), dtype, device, t.shape);
}

ParameterBuffer ParameterBuffer::unbound(const ParameterLayout& layout) {
  ParameterBuffer b;
  b.views_.resize(layout.size());
  return b;
}

void ParameterBuffer::bind(std::size_t index, const Tensor& view) {
  FT_CHECK(index < views_.size(), "ParameterBuffer::bind: parameter ", index, " does not exist (", views_.size(),
           " parameters)");
  FT_CHECK(!views_[index].defined() || views_[index].shape() == view.shape(), "ParameterBuffer::bind: parameter ",
           index, " has shape ", shape_string(views_[index].shape()), ", given ", view.describe());
  views_[index] = view;
}

}  // namespace ft
