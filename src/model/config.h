// config.h — ModelConfig: the sizes of the Transformer LM (docs/design.md's model contract and table:
// small, medium, large, xl, 2.7b, 8b, plus `tiny` for tests), looked up by name, any shape made from a named
// one by replacing fields, and the precision policy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ft {

struct ModelConfig {
  std::string name;
  std::int64_t vocab_size = 10000;
  std::int64_t context_length = 512;  // the longest sequence the model accepts
  std::int64_t d_model = 0;
  std::int64_t d_ff = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  double rope_theta = 10000.0;
  float norm_eps = 1e-5f;

  std::int64_t head_dim() const { return d_model / num_heads; }
  // Throws ft::Error naming the field unless every size is positive, num_heads divides d_model, the head dim
  // is even (RoPE rotates pairs) and at most kMaxModelHeadDim (the attention's limit), the vocabulary fits
  // int32 ids and rope_theta, norm_eps are positive.
  void validate() const;
};

// The largest head dim the attention implementations take (the CUDA flash kernels take 16, 32, 64, 80, 96,
// 128 and 256 and say so when given another).
inline constexpr std::int64_t kMaxModelHeadDim = 256;

// The named sizes, in table order: "tiny", "small", "medium", "large", "xl", "2.7b", "8b".
std::vector<std::string> model_config_names();
// The config of a named size with its default vocabulary (10000; tiny: 97; 8b: 151936) and context length
// (512; tiny: 32; 8b: 32768), which callers may overwrite (then call validate()). Unknown names throw
// ft::Error listing the known ones.
ModelConfig model_config(std::string_view name);

// Fields replacing those of a named size (the command lines' --d-model, --d-ff, --layers, --heads, --vocab,
// --context, --rope-theta and the Python model's keywords); unset ones keep the size's.
struct ModelShapeOverrides {
  std::optional<std::int64_t> d_model, d_ff, num_layers, num_heads, vocab_size, context_length;
  std::optional<double> rope_theta;
  // Whether a field of the block shape (d_model, d_ff, num_layers, num_heads) is set.
  bool changes_blocks() const { return d_model || d_ff || num_layers || num_heads; }
};
// base with every set field replaced, validated (ft::Error naming the field). When the block shape changes,
// the name becomes "<base name>-custom" ("custom" for an unnamed base), so reports do not claim a named size.
ModelConfig with_overrides(ModelConfig base, const ModelShapeOverrides& overrides);

// fp32: fp32 everywhere (exact fp32 GEMMs on the CPU). bf16: mixed precision as autocast does it — fp32
// master weights and gradients, bf16 casts of the weights (a block at a time) and bf16 activations as GEMM
// and attention operands (fp32 accumulation), norms, softmax, loss and optimizer in fp32.
enum class Precision { fp32, bf16 };
const char* name_of(Precision precision);
Precision parse_precision(std::string_view text);  // "fp32" | "bf16"

// Activation recomputation in training (model/transformer.h says what each keeps): none keeps every block's
// activations; selective keeps each block's input, attention output and log-sum-exp and recomputes the norms,
// projections and SwiGLU inputs right before the block's backward; selective_qkv keeps the attention's inputs
// q, k, v too and recomputes the norms, the output projection and the SwiGLU inputs; full keeps each block's
// input only and recomputes the whole block's forward there. All give bit-identical gradients.
enum class Recompute { none, selective, full, selective_qkv };
const char* name_of(Recompute recompute);
// "none" | "selective" | "selective-qkv" | "full"
Recompute parse_recompute(std::string_view text);

}  // namespace ft
