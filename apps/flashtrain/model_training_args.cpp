// model_training_args.cpp — validation of the model training options' command-line values.
#include "flashtrain/model_training_args.h"

#include "core/error.h"
#include "ops/gemm_tuning.h"

namespace ft::cli {

ModelTrainingOptions resolve_model_training_options(const ModelTrainingArgs& args) {
  FT_CHECK(args.loss_chunk >= 0, "--loss-chunk must be >= 0 (0 = materialised logits), given ", args.loss_chunk);
  FT_CHECK(args.gemm_autotune == 0 || (args.gemm_autotune >= 2 && args.gemm_autotune <= kGemmAutotuneMost),
           "--gemm-autotune must be 0 (off) or 2 to ", kGemmAutotuneMost, " candidates, given ", args.gemm_autotune);
  return {.recompute = for_option("--recompute", [&] { return parse_recompute(args.recompute); }),
          .loss_chunk = args.loss_chunk,
          .offload_activations = args.offload_activations,
          .deterministic_attention = !args.nondeterministic_attention,
          .gemm_autotune = args.gemm_autotune};
}

}  // namespace ft::cli
