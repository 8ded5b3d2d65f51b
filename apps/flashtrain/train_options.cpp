// train_options.cpp — `flashtrain train`'s option validation: every value checked (ft::Error naming the
// option and the value given), the defaults filled in, names parsed, `--resume latest` resolved.
#include "flashtrain/train_options.h"

#include <filesystem>

#include "core/error.h"
#include "flashtrain/cli_parse.h"

namespace ft::cli {

namespace fs = std::filesystem;

TrainPlan resolve_train_options(const TrainOptions& o) {
  TrainPlan plan;
  plan.model = for_option("--size", [&] { return model_config(o.size); });
  const ModelShapeOverrides shape{.d_model = o.d_model, .d_ff = o.d_ff, .num_layers = o.layers, .num_heads = o.heads,
                                  .vocab_size = o.vocab, .context_length = o.context, .rope_theta = o.rope_theta};
  plan.model = for_option("--d-model/--d-ff/--layers/--heads/--vocab/--context/--rope-theta",
                          [&] { return with_overrides(plan.model, shape); });
  plan.precision = for_option("--precision", [&] { return parse_precision(o.precision); });
  plan.tf32 = o.tf32;
  plan.cuda_graph = o.cuda_graph;
  plan.attention = for_option("--attention", [&] { return parse_attention_impl(o.attention); });
  plan.model_training = resolve_model_training_options(o.model_training);
  plan.device = device_or_auto(for_option("--device", [&] { return parse_device_option(o.device); }));

  FT_CHECK(!o.eos_id || o.pack_documents, "--eos-id ", o.eos_id.value_or(0),
           " names the end-of-document token of --pack-documents: give --pack-documents too");
  if (o.pack_documents) {
    FT_CHECK(o.eos_id.has_value(), "--pack-documents splits rows at the end-of-document token: give --eos-id N");
    FT_CHECK(*o.eos_id >= 0 && *o.eos_id < plan.model.vocab_size, "--eos-id must be a token id in [0, --vocab = ",
             plan.model.vocab_size, "), given ", *o.eos_id);
    plan.eos_id = static_cast<std::int32_t>(*o.eos_id);
  }
  if (o.max_documents) {
    FT_CHECK(o.pack_documents && o.cuda_graph, "--max-documents sizes the CUDA graph's packed documents: give "
             "--pack-documents and --cuda-graph (eager steps take any number)");
    const std::int64_t total = o.batch * plan.model.context_length;
    FT_CHECK(*o.max_documents >= o.batch && *o.max_documents <= total, "--max-documents must be in [--batch = ",
             o.batch, ", --batch x --context = ", total, "], given ", *o.max_documents);
    plan.max_documents = *o.max_documents;
  }
  FT_CHECK(o.batch >= 1, "--batch must be >= 1, given ", o.batch);
  FT_CHECK(o.steps >= 1, "--steps must be >= 1, given ", o.steps);
  FT_CHECK(o.accumulate >= 1, "--accumulate must be >= 1 micro-batch per step, given ", o.accumulate);
  plan.batch = o.batch;
  plan.steps = o.steps;
  plan.accumulate = o.accumulate;
  if (plan.cuda_graph) {
    FT_CHECK_KIND(unsupported, plan.device.is_cuda(), "--cuda-graph captures the step in a CUDA graph and needs a "
                  "CUDA device, given --device ", o.device, o.device == "auto" ? " (no GPU is visible)" : "");
    FT_CHECK(plan.accumulate == 1, "--cuda-graph graphs a step of one micro-batch: give --accumulate 1 (and a "
             "larger --batch), given --accumulate ", plan.accumulate);
  }

  FT_CHECK(o.lr > 0, "--lr must be > 0, given ", o.lr);
  const double min_lr = o.min_lr.value_or(o.lr / 10);
  FT_CHECK(min_lr >= 0 && min_lr <= o.lr, "--min-lr must be in [0, --lr = ", o.lr, "], given ", min_lr);
  const std::int64_t warmup = o.warmup.value_or(o.steps / 10);
  FT_CHECK(warmup >= 0 && warmup <= o.steps, "--warmup must be in [0, --steps = ", o.steps, "], given ", warmup);
  plan.schedule = CosineSchedule{.max_lr = o.lr, .min_lr = min_lr, .warmup_iters = warmup, .cycle_iters = o.steps};
  FT_CHECK(o.weight_decay >= 0, "--weight-decay must be >= 0, given ", o.weight_decay);
  FT_CHECK(o.beta1 >= 0 && o.beta1 < 1, "--beta1 must be in [0, 1), given ", o.beta1);
  FT_CHECK(o.beta2 >= 0 && o.beta2 < 1, "--beta2 must be in [0, 1), given ", o.beta2);
  FT_CHECK(o.eps > 0, "--eps must be > 0, given ", o.eps);
  FT_CHECK(o.clip >= 0, "--clip must be >= 0 (0 = no clipping), given ", o.clip);
  plan.adamw = AdamWConfig{.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay};
  plan.clip = o.clip;

  plan.data = o.data;
  plan.val_data = o.val_data;
  FT_CHECK(o.eval_interval >= 1, "--eval-interval must be >= 1, given ", o.eval_interval);
  FT_CHECK(o.eval_batches >= 1, "--eval-batches must be >= 1, given ", o.eval_batches);
  plan.eval_interval = o.eval_interval;
  plan.eval_batches = o.eval_batches;
  plan.seed = o.seed;
  FT_CHECK(o.log_interval >= 1, "--log-interval must be >= 1, given ", o.log_interval);
  plan.log_interval = o.log_interval;

  FT_CHECK(o.checkpoint_interval >= 0, "--checkpoint-interval must be >= 0 (0 = after the last step only), given ",
           o.checkpoint_interval);
  FT_CHECK(o.checkpoint_interval == 0 || !o.checkpoint_dir.empty(), "--checkpoint-interval ", o.checkpoint_interval,
           " needs --checkpoint-dir (where to write the checkpoints)");
  plan.checkpoint_dir = o.checkpoint_dir;
  plan.checkpoint_interval = o.checkpoint_interval;
  FT_CHECK(o.resume.empty() || o.init_from.empty(),
           "--resume and --init-from exclude each other: a checkpoint already holds the parameters");
  if (o.resume == "latest") {
    FT_CHECK(!o.checkpoint_dir.empty(), "--resume latest needs --checkpoint-dir (the folder to resume from)");
    plan.resume_path = latest_checkpoint(o.checkpoint_dir);
  } else {
    plan.resume_path = o.resume;
  }
  const bool sharded = o.zero == "2" || o.zero == "3";  // checkpoints are folders of shards
  if (!plan.resume_path.empty())
    FT_CHECK_KIND(io, sharded ? fs::is_directory(plan.resume_path) : fs::is_regular_file(plan.resume_path),
                  "--resume: checkpoint ", plan.resume_path, " does not exist",
                  sharded ? " (--zero 2 and 3 resume from a folder of shards)" : "");
  plan.init_from = o.init_from;
  plan.json_path = o.json_path;

  plan.ddp.strategy = for_option("--ddp-strategy", [&] { return parse_ddp_strategy(o.ddp_strategy); });
  FT_CHECK(o.bucket_mb > 0, "--bucket-mb must be > 0 (MiB of gradients per bucket), given ", o.bucket_mb);
  plan.ddp.bucket_size_mb = o.bucket_mb;
  FT_CHECK(o.grad_comm_dtype == "fp32" || o.grad_comm_dtype == "bf16",
           "--grad-comm-dtype must be fp32 or bf16, given '", o.grad_comm_dtype, "'");
  plan.ddp.bf16_communication = o.grad_comm_dtype == "bf16";
  if (sharded) {
    plan.sharded_stage = o.zero[0] - '0';
    FT_CHECK(o.init_from.empty(), "--zero ", o.zero, " cannot be combined with --init-from: no rank holds the "
             "whole parameters; leave --zero off to start from a parameter file");
  } else if (o.zero != "off") {
    FT_CHECK(o.zero == "owner_broadcast" || o.zero == "reduce_scatter",
             "--zero must be off, owner_broadcast, reduce_scatter, 2 or 3, given '", o.zero, "'");
    plan.zero = parse_zero_mode(o.zero);
    FT_CHECK(o.checkpoint_dir.empty() && o.resume.empty(), "--zero ", o.zero,
             " cannot be combined with --checkpoint-dir or --resume: checkpoints hold the whole AdamW state, "
             "which ZeRO shards over the ranks (not saved or restored yet); leave --zero off to checkpoint");
  }
  return plan;
}

}  // namespace ft::cli
