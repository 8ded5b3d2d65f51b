// config.h — ModelConfig: the sizes of the Transformer LM (docs/design.md's model contract and table:
// small, medium, large, xl, 2.7b, plus `tiny` for tests), looked up by name, and the precision policy.
#pragma once

#include <cstdint>
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
  // Throws ft::Error naming the field unless every size is positive, num_heads divides d_model and the
  // head dim is even (RoPE rotates pairs).
  void validate() const;
};

// The named sizes, in table order: "tiny", "small", "medium", "large", "xl", "2.7b".
std::vector<std::string> model_config_names();
// The config of a named size with its default vocabulary (10000; tiny: 97) and context length (512;
// tiny: 32), which callers may overwrite (then call validate()). Unknown names throw ft::Error listing
// the known ones.
ModelConfig model_config(std::string_view name);

// fp32: fp32 everywhere (exact fp32 GEMMs on the CPU). bf16: mixed precision as autocast does it — fp32
// master weights and gradients, bf16 casts of the weights (a block at a time) and bf16 activations as GEMM
// and attention operands (fp32 accumulation), norms, softmax, loss and optimizer in fp32.
enum class Precision { fp32, bf16 };
const char* name_of(Precision precision);
Precision parse_precision(std::string_view text);  // "fp32" | "bf16"

}  // namespace ft
