// cmd_bench_model.cpp — `flashtrain bench model`: the options (each documented, defaults shown in --help)
// and the action that runs the sweep (or the memory or kernel profile), prints the tables and writes the JSON.
//   flashtrain bench model --size small,medium --context 128,256,512,1024 --mode fwd,train --precision fp32,bf16
//   flashtrain bench model --size small --warmup 0 --steps 5          (the first step's cost shows in std_ms)
//   flashtrain bench model --size 2.7b --context 512 --mode train --precision bf16 --profile memory
//       --memory-json bench/results/memory-2.7b-train.json
//   flashtrain bench model --size small --context 512 --mode train --precision bf16 --profile kernels
//       --kernels-json bench/results/kernels-small-train.json
#include <iostream>
#include <memory>

#include "bench/kernel_summary.h"
#include "bench/memory_timeline.h"
#include "bench/report_table.h"
#include "bench/results_json.h"
#include "bench/statistics.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/commands.h"
#include "flashtrain/output_paths.h"
#include "flashtrain/model_bench.h"

namespace ft::cli {

namespace {

constexpr const char* kFooter = R"(
Each case (size x context x precision x mode) builds the model (and, for train, the AdamW state), draws
one random batch of --batch sequences (uniform ids, seed --seed) and runs --warmup warm-up steps, then
--steps timed steps, synchronising the device after each. Modes: fwd = forward and loss; fwd_bwd =
forward and backward; train = forward, backward, clipping the gradient norm to 1.0, AdamW. The loss is the
fused LM head + cross-entropy in chunks of --loss-chunk rows (no (B, T, V) logits; 0 materialises them);
the training modes recompute activations as --recompute says (bit-identical gradients). Columns:
first_step_ms = the first step run (with --warmup 0 a timed one: compare --warmup 0, 1, 2 to see the
warm-up effect, also in std_ms); step_ms = the median of the timed steps; mean, std, min likewise;
peak_gib = peak memory flashtrain holds on the device over the timed steps; tokens_per_s = batch x
context / step_ms. A case that runs out of memory is an OOM row; the sweep goes on.

--cuda-graph (--mode train, CUDA): the whole step (forward, backward, clipping, AdamW at its learning
rate) is captured in a CUDA graph and replayed, one launch per step (model/graphed_step.h): the first step
runs eagerly as its warm-up, the second captures and launches the graph (keep --warmup >= 2 to time only
replays). Results are the eager step's bit for bit. The ops' temporaries become graph memory, which
peak_gib does not count.

NVTX ranges (Nsight Systems / Compute can filter by them): "warmup step N" and "step N" around each step;
inside, the model's "model forward", "layer forward", "fused lm_head loss", "model backward", "layer
recompute", "layer backward", "optimizer step", and one range per op (e.g. "attention.forward.flash").

--profile memory records the allocator's timeline (every allocation and free: bytes, tag, phase, time)
for one case: phases init (model, optimizer state, token ids), warmup (the --warmup steps, if any),
then one step: forward, backward, optimizer (as --mode has them). It prints the peak of each phase split
into parameters (the fp32 masters), gradients, optimizer_state, activations (the model's saved
tensors; --recompute shrinks them), workspace (per-layer and op temporaries, bf16 casts of two blocks'
weights, the fused loss's (--loss-chunk, V) logits tiles) and other (token ids, memory held before), and
writes the timeline to --memory-json (draw it with tools/plot_memory.py).

--profile kernels (CUDA builds with CUPTI, one case) runs the --warmup steps unprofiled, then records
every kernel, memcpy and memset of the --steps timed steps with CUPTI's activity API, each attributed to
the NVTX ranges open when it was launched. It prints, per range ("step *" = all timed steps, "model
forward" with the loss, and as --mode has them "model backward", "optimizer step"): occurrences (steps),
kernel and span time per step, busy_% (kernel time / span) and the shares of the classes matmul
(cuBLAS/cuBLASLt GEMMs), attention (FlashAttention kernels), communication (NCCL), other kernels and
memory (memcpy/memset); then each range's top kernels by total time with count, mean and share.
--kernels-json writes the summaries and, up to 200000 records, every record (stream, start, end, name,
class, ranges): tools/plot_timeline.py draws one step of it.)";

constexpr std::size_t kTopKernels = 15;           // kernels listed per range; the rest share one row
constexpr std::size_t kMaxJsonRecords = 200000;   // more and --kernels-json keeps the summaries only

int run_kernel_profile(const ModelBenchConfig& config, const ModelBenchCase& c, bool csv) {
  const ModelKernelProfile run = profile_model_kernels(c, config);
  const KernelProfile& profile = run.profile;
  std::vector<RangeKernelSummary> summaries;
  for (const std::string& range : kernel_profile_ranges(c.mode))
    summaries.push_back(summarize_kernels(profile.records, range));
  const Summary wall = summarize(run.step_ms);
  std::cout << "kernel profile of " << c.model.name << ", ctx " << c.model.context_length << ", "
            << name_of(c.precision) << ", " << name_of(c.mode) << ", batch " << config.batch << " on "
            << describe_device(config.device) << ": " << config.warmup << " warm-up steps (not profiled), "
            << config.steps << " profiled steps of median " << fixed(wall.median, 2)
            << " ms (wall clock, profiler included), " << profile.records.size()
            << " records\n\nper range (figures per occurrence; class shares of the range's kernel time):\n\n"
            << format_range_overview(summaries, csv);
  for (const RangeKernelSummary& s : summaries) {
    std::cout << "\n" << s.range << ": top kernels by total time (" << s.kernels.size() << " distinct)\n\n"
              << format_kernel_table(s, csv, kTopKernels);
  }
  if (profile.dropped > 0)
    std::cerr << "warning: " << profile.dropped
              << " records lost (dropped by CUPTI or never completed); the figures above miss them\n";
  if (!config.kernels_json.empty()) {
    nlohmann::json doc = kernel_profile_document(profile, summaries, config.device, kernel_profile_config(c, config),
                                                 kMaxJsonRecords);
    doc["step_ms"] = run.step_ms;
    write_json_atomic(config.kernels_json, doc);
    std::cout << "wrote " << config.kernels_json
              << (profile.records.size() > kMaxJsonRecords ? " (summaries only: too many records to list)" : "")
              << "\n";
  }
  return 0;
}

int run_bench_model(const BenchModelOptions& options) {
  const ModelBenchConfig config = resolve_bench_model_options(options);
  check_output_file(options.json_path, "--json");
  const std::vector<ModelBenchCase> cases = expand_model_cases(config);
  if (config.profile_kernels) return run_kernel_profile(config, cases.front(), options.csv);
  if (config.profile_memory) {
    const ModelBenchCase& c = cases.front();
    const MemoryTimeline timeline = profile_model_memory(c, config);
    std::cout << "memory profile of " << c.model.name << ", ctx " << c.model.context_length << ", "
              << name_of(c.precision) << ", " << name_of(c.mode) << ", batch " << config.batch << " on "
              << describe_device(config.device) << "\n\n"
              << format_memory_summary(summarize_memory_timeline(timeline), options.csv);
    if (!config.memory_json.empty()) {
      write_json_reported(config.memory_json,
                          memory_timeline_document(timeline, config.device, memory_profile_config(c, config)),
                          std::cout);
    }
    return 0;
  }
  std::vector<ModelBenchRow> rows;
  for (const ModelBenchCase& c : cases) {
    rows.push_back(run_model_bench_case(c, config));
    std::cerr << "  " << c.model.name << " ctx " << c.model.context_length << " " << name_of(c.precision) << " "
              << name_of(c.mode) << (rows.back().oom ? ": OOM" : ": done") << "\n";
  }
  std::cout << "model benchmark on " << describe_device(config.device) << ": batch " << config.batch << ", vocab "
            << config.models.front().vocab_size << ", " << name_of(config.attention) << " attention, "
            << describe_model_training(config.model_training) << ", "
            << (config.model_training.loss_chunk > 0
                    ? str("fused loss in chunks of ", config.model_training.loss_chunk, " rows")
                    : std::string("materialised logits"))
            << ", " << config.warmup << " warm-up + " << config.steps << " timed steps"
            << (config.cuda_graph ? ", train step in a CUDA graph" : "") << "\n\n"
            << format_model_bench(rows, options.csv);
  if (!options.json_path.empty()) {
    write_json_reported(options.json_path, model_bench_document(config, rows), std::cout);
  }
  return 0;
}

}  // namespace

void add_model_definition_options(CLI::App& command, BenchModelOptions& o) {
  command.add_option("--size", o.sizes,
                     "Model sizes, comma-separated: tiny, small, medium, large, xl, 2.7b, 8b (default: small); "
                     "the options below replace their fields");
  command.add_option("--d-model", o.d_model, "d_model (without --size: with --d-ff, --layers, --heads, an explicit "
                     "model)")->check(at_least(1));
  command.add_option("--d-ff", o.d_ff, "FFN inner size")->check(at_least(1));
  command.add_option("--layers", o.layers, "Number of blocks")->check(at_least(1));
  command.add_option("--heads", o.heads, "Attention heads (d_model / heads: even, at most 256)")->check(at_least(1));
  command.add_option("--vocab", o.vocab, "Vocabulary size (default: the size's; 10000 for an explicit model)")
      ->check(at_least(1));
  command.add_option("--rope-theta", o.rope_theta, "RoPE base theta (default: 10000)");
  add_model_training_options(command, o.model_training);
}

void add_bench_model_options(CLI::App& command, BenchModelOptions& o) {
  command.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_model_definition_options(command, o);
  command.add_option("--context", o.contexts, "Context lengths, comma-separated (the sweep: 128,256,512,1024)");
  command.add_option("--batch", o.batch, "Sequences per step")->check(at_least(1));
  command.add_option("--warmup", o.warmup, "Warm-up steps before the timed ones (timed apart)")->check(at_least(0));
  command.add_option("--steps", o.steps, "Timed steps")->check(at_least(1));
  command.add_option("--mode", o.modes, "Modes, comma-separated: fwd, fwd_bwd, train");
  command.add_option("--precision", o.precisions, "Precisions, comma-separated: fp32, bf16 (mixed precision)");
  command.add_option("--attention", o.attention, "Attention implementation: flash or naive");
  command.add_flag("--tf32", o.tf32, "fp32 on CUDA: let GEMMs use TF32 tensor cores");
  command.add_flag("--cuda-graph", o.cuda_graph,
                   "--mode train on CUDA: capture the whole step in a CUDA graph and replay it (see below)");
  command.add_option("--device", o.device, "cpu, cuda, cuda:N, or auto (cuda:0 when a GPU is visible, else cpu)")
      ->check(device_validator());
  command.add_option("--seed", o.seed, "Seed of the parameters and of the random batch");
  command.add_flag("--csv", o.csv, "Print CSV instead of a markdown table");
  command.add_option("--json", o.json_path, "Write the results document (benchmark model) to this path");
  command.add_option("--profile", o.profile,
                     "memory: record the allocator timeline of one step; kernels: record the timed steps' kernels "
                     "(CUPTI) and summarise them per NVTX range")
      ->check(CLI::IsMember({"memory", "kernels"}));
  command.add_option("--memory-json", o.memory_json, "--profile memory: write the timeline document to this path");
  command.add_option("--kernels-json", o.kernels_json,
                     "--profile kernels: write the summaries and records (benchmark kernel-profile) to this path");
}

void register_bench_model(CLI::App& bench, Action& action) {
  CLI::App* command =
      bench.add_subcommand("model", "Time Transformer LM steps (sizes x contexts), memory and kernel profiles");
  command->footer(kFooter);
  auto options = std::make_shared<BenchModelOptions>();
  add_bench_model_options(*command, *options);
  command->callback([&action, options] { action = [options] { return run_bench_model(*options); }; });
}

}  // namespace ft::cli
