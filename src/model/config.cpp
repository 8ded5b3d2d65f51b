// config.cpp — the size table of docs/design.md and name lookups for configs and precisions.
#include "model/config.h"

#include <array>
#include <utility>

#include "core/error.h"

namespace ft {

namespace {

struct Size {
  const char* name;
  std::int64_t d_model, d_ff, num_layers, num_heads, vocab_size, context_length;
};

constexpr std::array<Size, 7> kSizes = {{
    {"tiny", 64, 172, 2, 4, 97, 32},
    {"small", 768, 3072, 12, 12, 10000, 512},
    {"medium", 1024, 4096, 24, 16, 10000, 512},
    {"large", 1280, 5120, 36, 20, 10000, 512},
    {"xl", 1600, 6400, 48, 25, 10000, 512},
    {"2.7b", 2560, 10240, 32, 32, 10000, 512},
    {"8b", 4096, 11008, 34, 32, 151936, 32768},
}};

std::string joined_names() {
  std::string out;
  for (const Size& s : kSizes) out += std::string(out.empty() ? "" : ", ") + s.name;
  return out;
}

}  // namespace

void ModelConfig::validate() const {
  const std::pair<const char*, std::int64_t> sizes[] = {{"vocab_size", vocab_size}, {"context_length", context_length},
                                                        {"d_model", d_model},       {"d_ff", d_ff},
                                                        {"num_layers", num_layers}, {"num_heads", num_heads}};
  for (auto [field, value] : sizes)
    FT_CHECK(value >= 1, "model config '", name, "': ", field, " must be >= 1, given ", value);
  FT_CHECK(d_model % num_heads == 0, "model config '", name,
           "': num_heads must divide d_model, given d_model = ", d_model, ", num_heads = ", num_heads);
  FT_CHECK(head_dim() % 2 == 0, "model config '", name,
           "': the head dim d_model / num_heads must be even for RoPE, given ", head_dim(), " (d_model = ", d_model,
           ", num_heads = ", num_heads, ")");
  FT_CHECK(head_dim() <= kMaxModelHeadDim, "model config '", name, "': the head dim d_model / num_heads must be at most ",
           kMaxModelHeadDim, " (the attention's limit), given ", head_dim(), " (d_model = ", d_model,
           ", num_heads = ", num_heads, ")");
  FT_CHECK(vocab_size <= (std::int64_t{1} << 31) - 1, "model config '", name,
           "': vocab_size must fit int32 token ids, given ", vocab_size);
  FT_CHECK(rope_theta > 0 && norm_eps > 0, "model config '", name, "': rope_theta and norm_eps must be > 0, given ",
           rope_theta, " and ", norm_eps);
}

std::vector<std::string> model_config_names() {
  std::vector<std::string> names;
  for (const Size& s : kSizes) names.emplace_back(s.name);
  return names;
}

ModelConfig model_config(std::string_view name) {
  for (const Size& s : kSizes) {
    if (name != s.name) continue;
    ModelConfig c;
    c.name = s.name;
    c.d_model = s.d_model;
    c.d_ff = s.d_ff;
    c.num_layers = s.num_layers;
    c.num_heads = s.num_heads;
    c.vocab_size = s.vocab_size;
    c.context_length = s.context_length;
    return c;
  }
  FT_THROW(invalid_argument, "unknown model size '", name, "': expected one of ", joined_names());
}

ModelConfig with_overrides(ModelConfig base, const ModelShapeOverrides& overrides) {
  if (overrides.changes_blocks())
    base.name = base.name.empty() || base.name == "custom" ? std::string("custom") : base.name + "-custom";
  const std::pair<std::int64_t*, const std::optional<std::int64_t>*> fields[] = {
      {&base.d_model, &overrides.d_model},       {&base.d_ff, &overrides.d_ff},
      {&base.num_layers, &overrides.num_layers}, {&base.num_heads, &overrides.num_heads},
      {&base.vocab_size, &overrides.vocab_size}, {&base.context_length, &overrides.context_length}};
  for (auto [field, value] : fields)
    if (*value) *field = **value;
  if (overrides.rope_theta) base.rope_theta = *overrides.rope_theta;
  base.validate();
  return base;
}

const char* name_of(Precision precision) { return precision == Precision::bf16 ? "bf16" : "fp32"; }

Precision parse_precision(std::string_view text) {
  if (text == "fp32") return Precision::fp32;
  if (text == "bf16") return Precision::bf16;
  FT_THROW(invalid_argument, "unknown precision '", text, "': expected fp32 or bf16");
}

const char* name_of(Recompute recompute) {
  switch (recompute) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
    case Recompute::selective_qkv: return "selective-qkv";
  }
  return "none";
}

Recompute parse_recompute(std::string_view text) {
  if (text == "none") return Recompute::none;
  if (text == "selective") return Recompute::selective;
  if (text == "full") return Recompute::full;
  if (text == "selective-qkv") return Recompute::selective_qkv;
  FT_THROW(invalid_argument, "unknown recompute policy '", text, "': expected none, selective, selective-qkv or full");
}

}  // namespace ft
