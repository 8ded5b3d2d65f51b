// throughput.cpp — PaLM's FLOPs per token over the model's parameter layout, and the peak FLOP/s table.
#include "train/throughput.h"

#include "model/parameters.h"

namespace ft {

double train_flops_per_token(const ModelConfig& config) {
  const ParameterLayout layout(config);
  const auto matmul_parameters =
      static_cast<double>(layout.numel() - layout[ParameterLayout::embedding_index()].numel);
  return 6.0 * matmul_parameters +
         12.0 * static_cast<double>(config.num_layers * config.d_model * config.context_length);
}

std::optional<double> peak_flops(const std::string& device_name, Precision precision, bool tf32) {
  // Dense (no 2:4 sparsity) peaks from NVIDIA's data sheets, TFLOP/s: bf16 tensor, tf32 tensor, fp32.
  struct Peak {
    const char* name;  // matched as a substring, first match wins (specific variants first)
    double bf16, tf32, fp32;
  };
  static constexpr Peak kPeaks[] = {
      {"H100 PCIe", 756.0, 378.0, 51.2},  {"H100 NVL", 835.0, 417.5, 60.0}, {"H100", 989.4, 494.7, 66.9},
      {"H200 NVL", 835.0, 417.5, 60.0},   {"H200", 989.4, 494.7, 66.9},  // GH200 too: the H100 SXM figures
      {"A100", 312.0, 156.0, 19.5},
  };
  for (const Peak& p : kPeaks) {
    if (device_name.find(p.name) == std::string::npos) continue;
    const double tflops = precision == Precision::bf16 ? p.bf16 : (tf32 ? p.tf32 : p.fp32);
    return tflops * 1e12;
  }
  return std::nullopt;
}

}  // namespace ft
