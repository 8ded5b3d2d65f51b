// training_options.h — ModelTrainingOptions: the options of how the Transformer LM trains that every command
// running it shares (`train`, `bench model`, `bench ddp`, `bench zero`, `bench fsdp`): activation recomputation,
// the fused loss's chunking, activation offloading and the attention backward's determinism. Each is a field of
// ModelOptions (model/transformer.h), which apply_to sets; results documents report them alike.
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

  // Sets the four ModelOptions fields these name.
  void apply_to(ModelOptions& options) const;
};

// The results-document fields: {"recompute": name, "loss_chunk", "offload_activations", "deterministic_attention"}.
nlohmann::json training_fields(const ModelTrainingOptions& options);

}  // namespace ft
