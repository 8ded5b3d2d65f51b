// throughput.h — the training throughput model: model FLOPs per trained token and the dense peak FLOP/s
// of known GPUs; MFU = FLOPs per token * tokens/s / (peak * devices), as the training log reports it.
#pragma once

#include <optional>
#include <string>

#include "model/config.h"

namespace ft {

// Model FLOPs per trained token (forward + backward), PaLM's formula:
//   6 * N + 12 * num_layers * d_model * context
// N = the parameters taking part in matrix products (all but the token embedding, a lookup); the second
// term is attention's score and value products, counted in full (not halved for the causal mask).
double train_flops_per_token(const ModelConfig& config);

// Dense peak FLOP/s of a GPU named `device_name` (cudaDeviceProp::name or describe_device) for the
// precision's GEMMs: bf16 -> bf16 tensor cores; fp32 with tf32 -> TF32 tensor cores; fp32 -> FP32 cores.
// Known: H100 SXM/PCIe/NVL, H200 (and GH200), H200 NVL, A100. nullopt for any other name (and the CPU).
std::optional<double> peak_flops(const std::string& device_name, Precision precision, bool tf32);

}  // namespace ft
