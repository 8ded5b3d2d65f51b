// training_options.cpp — ModelTrainingOptions into ModelOptions and into results documents.
#include "model/training_options.h"

#include "model/transformer.h"
#include "ops/gemm_tuning.h"

namespace ft {

void ModelTrainingOptions::apply_to(ModelOptions& options) const {
  options.recompute = recompute;
  options.loss_chunk = loss_chunk;
  options.offload_activations = offload_activations;
  options.deterministic_attention = deterministic_attention;
  set_gemm_autotune(gemm_autotune);
}

nlohmann::json training_fields(const ModelTrainingOptions& options) {
  return {{"recompute", name_of(options.recompute)},
          {"loss_chunk", options.loss_chunk},
          {"offload_activations", options.offload_activations},
          {"deterministic_attention", options.deterministic_attention},
          {"gemm_autotune", options.gemm_autotune}};
}

}  // namespace ft
