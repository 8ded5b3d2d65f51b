// run_settings.cpp — a TrainPlan as the list of settings the ranks compare.
#include "train/run_settings.h"

#include <cstdio>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/version.h"

namespace ft {

std::string file_identity(const std::string& path) {
  if (path.empty()) return "none";
  try {
    check_regular_file(path, "file");
  } catch (const Error& e) {
    return "unreadable: " + e.message();
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<char> head(std::size_t{1} << 20);
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  const auto got = static_cast<std::size_t>(in.gcount());
  in.clear();
  in.seekg(0, std::ios::end);
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a64(head.data(), got)));
  return str(static_cast<long long>(in.tellg()), " bytes, first MiB fnv1a ", hash);
}

std::vector<RunSetting> run_settings(const TrainPlan& plan) {
  const ModelConfig& m = plan.model;
  const auto number = [](double x) { return str(x); };
  std::vector<RunSetting> s = {
      {"flashtrain version", str(version(), " (", git_commit(), ")")},  // first: see check_ranks_agree
      {"--size", m.name},
      {"--vocab", str(m.vocab_size)},
      {"--context", str(m.context_length)},
      {"d_model", str(m.d_model)},
      {"d_ff", str(m.d_ff)},
      {"layers", str(m.num_layers)},
      {"heads", str(m.num_heads)},
      {"--rope-theta", number(m.rope_theta)},
      {"--precision", name_of(plan.precision)},
      {"--tf32", plan.tf32 ? "on" : "off"},
      {"--cuda-graph", plan.cuda_graph ? "on" : "off"},
      {"--attention", name_of(plan.attention)},
      {"--recompute", name_of(plan.model_training.recompute)},
      {"--loss-chunk", str(plan.model_training.loss_chunk)},
      {"--pack-documents --eos-id", plan.eos_id ? str(*plan.eos_id) : "off"},
      {"--max-documents", str(plan.max_documents)},
      {"--offload-activations", plan.model_training.offload_activations ? "on" : "off"},
      {"--nondeterministic-attention", plan.model_training.deterministic_attention ? "off" : "on"},
      {"--gemm-autotune", str(plan.model_training.gemm_autotune)},
      {"--device", plan.device.is_cpu() ? "cpu" : "cuda"},
      {"--batch", str(plan.batch)},
      {"--steps", str(plan.steps)},
      {"--accumulate", str(plan.accumulate)},
      {"--lr", number(plan.schedule.max_lr)},
      {"--min-lr", number(plan.schedule.min_lr)},
      {"--warmup", str(plan.schedule.warmup_iters)},
      {"--weight-decay", number(plan.adamw.weight_decay)},
      {"--beta1", number(plan.adamw.beta1)},
      {"--beta2", number(plan.adamw.beta2)},
      {"--eps", number(plan.adamw.eps)},
      {"--clip", number(plan.clip)},
      {"--seed", str(plan.seed)},
      {"--data", file_identity(plan.data)},
      {"--val-data", file_identity(plan.val_data)},
      {"--eval-interval", str(plan.eval_interval)},
      {"--eval-batches", str(plan.eval_batches)},
      {"--log-interval", str(plan.log_interval)},
      {"--checkpoint-interval", str(plan.checkpoint_interval)},
      {"--resume", file_identity(plan.resume_path)},
      {"--init-from", file_identity(plan.init_from)},
      {"--ddp-strategy", name_of(plan.ddp.strategy)},
      {"--bucket-mb", number(plan.ddp.bucket_size_mb)},
      {"--grad-comm-dtype", plan.ddp.bf16_communication ? "bf16" : "fp32"},
      {"--zero", plan.sharded_stage != 0 ? str(plan.sharded_stage) : plan.zero ? name_of(*plan.zero) : "off"},
  };
  return s;
}

}  // namespace ft
