// model_training_args.h — the command line's values of the model training options that `train` and the
// benchmarks (bench model, ddp, zero, fsdp) share, and their validation into ModelTrainingOptions
// (model/training_options.h). No CLI11 here: cli_parse.h's add_model_training_options declares the options.
#pragma once

#include <cstdint>
#include <string>

#include "model/training_options.h"

namespace ft::cli {

// Before validation.
struct ModelTrainingArgs {
  std::string recompute = "none";  // none, selective, selective-qkv or full
  std::int64_t loss_chunk = 1024;  // rows per chunk of the fused LM head loss; 0 = materialised logits
  bool offload_activations = false;
  bool nondeterministic_attention = false;  // !ModelTrainingOptions::deterministic_attention
  int gemm_autotune = 0;  // 0 = off, else 2..32 candidates
};

// The values validated (ft::Error invalid_argument naming the option and the value given).
ModelTrainingOptions resolve_model_training_options(const ModelTrainingArgs& args);

}  // namespace ft::cli
