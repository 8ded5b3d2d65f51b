// commands.h — the subcommands of the flashtrain CLI. main.cpp calls each register function
// explicitly; a subcommand chosen on the command line stores in `action` what main() runs once
// parsing is done (its result is the exit status). New subcommands (bench attention, bench model,
// train, bench comm) follow the same pattern, one cmd_*.cpp file each.
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "flashtrain/attention_check.h"
#include "flashtrain/model_bench.h"
#include "flashtrain/train_options.h"

namespace ft::cli {

using Action = std::function<int()>;

// `flashtrain --version`: version, git commit, CUDA compiled in or not, visible devices (cmd_version.cpp).
std::string version_text();
void register_version(CLI::App& app);

// `flashtrain attention check` (cmd_attention_check.cpp). add_attention_check_options declares the
// options on any CLI11 app, filling config as they are parsed (the tests parse with it directly).
void add_attention_check_options(CLI::App& command, AttentionCheckConfig& config);
void register_attention_check(CLI::App& attention, Action& action);

// `flashtrain bench attention` (cmd_bench_attention.cpp): attention timing sweeps.
void register_bench_attention(CLI::App& bench, Action& action);

// `flashtrain bench model` (cmd_bench_model.cpp): Transformer LM step timing sweeps and memory profiles.
// add_bench_model_options declares the options on any CLI11 app (the tests parse with it directly);
// add_model_definition_options the model's part every benchmark shares: --size or --d-model/--d-ff/
// --layers/--heads, and --vocab.
void add_bench_model_options(CLI::App& command, BenchModelOptions& options);
void add_model_definition_options(CLI::App& command, BenchModelOptions& options);
void register_bench_model(CLI::App& bench, Action& action);

// `flashtrain bench gemm` (cmd_bench_gemm.cpp): cuBLASLt's candidate algorithms for a training step's GEMMs.
void register_bench_gemm(CLI::App& bench, Action& action);

// `flashtrain bench comm` (cmd_bench_comm.cpp): all-reduce timing over the ranks of an mpirun/srun job.
void register_bench_comm(CLI::App& bench, Action& action);

// `flashtrain bench ddp` (cmd_bench_ddp.cpp) and `flashtrain bench zero` (cmd_bench_zero.cpp): data-parallel
// training steps per DDP strategy, and ZeRO-1's memory and step time. add_data_parallel_model_options
// declares the model options both share.
void add_data_parallel_model_options(CLI::App& command, BenchModelOptions& options);
void register_bench_ddp(CLI::App& bench, Action& action);
void register_bench_zero(CLI::App& bench, Action& action);
// `flashtrain bench fsdp` (cmd_bench_fsdp.cpp): the training step under ZeRO stages 0-3, with MFU.
void register_bench_fsdp(CLI::App& bench, Action& action);

// `flashtrain memory` (cmd_memory.cpp): predicted memory per rank of a training step, beside the measured.
void register_memory(CLI::App& app, Action& action);

// `flashtrain checkpoint gather` (cmd_checkpoint.cpp): a sharded checkpoint into one parameter file.
void register_checkpoint(CLI::App& app, Action& action);

// `flashtrain train` (cmd_train.cpp): the training loop of train/train_run.h. add_train_options declares the
// options on any CLI11 app, filling options as they are parsed (the tests parse with it directly).
void add_train_options(CLI::App& command, TrainOptions& options);
void register_train(CLI::App& app, Action& action);

// `flashtrain data prepare` (cmd_data_prepare.cpp): text files -> token files with a BPE tokenizer.
void register_data_prepare(CLI::App& data, Action& action);

// `flashtrain generate` (cmd_generate.cpp): text from a checkpoint with the KV-cache generator; and
// `flashtrain bench generate` (cmd_bench_generate.cpp): its prefill and per-token decode times.
void register_generate(CLI::App& app, Action& action);
void register_bench_generate(CLI::App& bench, Action& action);

}  // namespace ft::cli
