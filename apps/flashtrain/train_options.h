// train_options.h — the options of `flashtrain train` as given on the command line (TrainOptions) and
// their validation into the training library's TrainPlan (train/train_run.h). cmd_train.cpp declares the
// options to CLI11.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "flashtrain/model_training_args.h"
#include "train/train_run.h"

namespace ft::cli {

// The command line's values, before validation. Unset optionals take the defaults resolve_train_options
// documents.
struct TrainOptions {
  std::string size = "small";
  std::optional<std::int64_t> vocab;    // default: the size's (10000; tiny 97; 8b 151936)
  std::optional<std::int64_t> context;  // default: the size's (512; tiny 32; 8b 32768)
  std::optional<std::int64_t> d_model, d_ff, layers, heads;  // default: the size's
  std::optional<double> rope_theta;                         // default: 10000
  std::int64_t batch = 4;               // sequences per micro-batch
  std::string precision = "bf16";
  bool tf32 = false;
  bool cuda_graph = false;  // capture the step in a CUDA graph and replay it (model/graphed_step.h)
  std::string attention = "flash";
  ModelTrainingArgs model_training;  // --recompute, --loss-chunk, --offload-activations, --nondeterministic-attention
  bool pack_documents = false;     // split rows into documents at --eos-id (Note [Packed documents])
  std::optional<std::int64_t> eos_id;
  std::optional<std::int64_t> max_documents;  // with --cuda-graph: a graphed batch's documents (default B*T)
  std::string device = "auto";
  std::int64_t steps = 1000;
  std::int64_t accumulate = 1;  // micro-batches per optimizer step
  double lr = 1e-3;
  std::optional<double> min_lr;         // default: lr / 10
  std::optional<std::int64_t> warmup;   // default: steps / 10
  double weight_decay = 0.01;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clip = 1.0;  // max global gradient norm; 0 = no clipping
  std::string data;      // uint16 token file; empty = random tokens
  std::string val_data;  // optional validation token file
  std::int64_t eval_interval = 100;
  std::int64_t eval_batches = 10;
  std::uint64_t seed = 0;
  std::int64_t log_interval = 10;
  std::string checkpoint_dir;
  std::int64_t checkpoint_interval = 0;  // 0 = only after the last step
  std::string resume;     // checkpoint path, or "latest" (the newest in checkpoint_dir)
  std::string init_from;  // safetensors of model parameters only
  std::string json_path;
  std::string ddp_strategy = "bucketed";  // data-parallel runs only: naive, flat, overlapped, bucketed
  double bucket_mb = 25;                  // bucketed: MiB of fp32 gradients per bucket
  std::string grad_comm_dtype = "fp32";   // fp32, or bf16 (gradients rounded for the all-reduce)
  std::string zero = "off";               // off, owner_broadcast, reduce_scatter (data parallel only), 2, 3
};

// Validates options (ft::Error invalid_argument naming the option and the value given; io when --resume
// latest finds no checkpoint) and fills in the defaults. auto devices become cuda:0 when a GPU is visible.
TrainPlan resolve_train_options(const TrainOptions& options);


}  // namespace ft::cli
