// training_options.h — ModelTrainingOptions: the options of how the Transformer LM trains that every command
// running it shares (`train`, `bench model`, `bench ddp`, `bench zero`, `bench fsdp`): activation recomputation,
// the fused loss's chunking, activation offloading, the attention backward's determinism (each a field of
// ModelOptions, model/transformer.h) and the GEMMs' autotuning (a setting of the process, ops/gemm_tuning.h);
// apply_to sets them all; results documents report them alike.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "model/config.h"

namespace ft {

struct ModelOptions;

struct ModelTrainingOptions {
  Recompute recompute = Recompute::none;  // ModelOptions::recompute
  std::int64_t loss_chunk = 1024;         // ModelOptions::loss_chunk
  bool offload_activations = false;       // ModelOptions::offload_activations
  bool deterministic_attention = true;    // ModelOptions::deterministic_attention
  int gemm_autotune = 0;                  // set_gemm_autotune: candidates timed per GEMM problem, 0 = off

  // Sets the four ModelOptions fields these name, and the process's GEMM autotuning.
  void apply_to(ModelOptions& options) const;
};

// The results-document fields: {"recompute": name, "loss_chunk", "offload_activations", "deterministic_attention",
// "gemm_autotune"}.
nlohmann::json training_fields(const ModelTrainingOptions& options);

}  // namespace ft
