// cmd_bench_gemm.cpp — `flashtrain bench gemm`: options (documented, defaults shown in --help) and the action
// that times cuBLASLt's candidate algorithms for every GEMM problem of a model's bf16 training step
// (gemm_bench.h), prints the summary (and with --all every candidate) and writes --json.
//   flashtrain bench gemm --size 8b --json bench/results/gemm-8b-h200.json
//   flashtrain bench gemm --size 8b --problems w2.dw,lm_head.dw+acc --candidates 32 --all
#include <iostream>
#include <memory>

#include "bench/results_json.h"
#include "core/error.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/commands.h"
#include "flashtrain/gemm_bench.h"
#include "flashtrain/output_paths.h"

namespace ft::cli {

namespace {

constexpr const char* kFooter = R"(
The problems are the GEMMs of one rank's bf16 training step as ops/linear.cpp states them, row-major
D (m, n) = op(A) (m, k) @ op(B) (k, n) [+ D], bf16 operands, fp32 accumulation: per block the forward
(qkv, out_proj with the residual, w1, w3, w2 with the residual), the backward's input gradients (dx; w1's
added to w3's) and weight gradients (dw, fp32), and the fused LM head's logits tile (--loss-chunk rows)
and backward GEMMs over a group of --loss-group chunks (dW accumulates after the first group).
w1+w3.fused.fwd is not in the model (calls 0): the w1 and w3 forward as one GEMM, for comparison.
calls = the problem's calls per step (--recompute: the forward GEMMs the backward runs again).

Per problem cuBLASLt's heuristic is asked for --candidates algorithms (best first, within the 32 MiB
workspace); each is timed on buffers of the problem's size (operands standard normal): --warmup untimed
runs, then --repeats runs timed with CUDA events, median and min reported. planned = the algorithm the
plan runs without autotuning (the heuristic's first that does not split K on a large fp32 output: Note
[Split K on large outputs]); fastest = the least median among those a plan may run; autotuned = what
--gemm-autotune would keep among the first --autotune-candidates by these times (Note [GEMM autotuning]).
The step total is the sum of calls x median ms. The ids (tile, stages, cluster) index cuBLASLt's enums
(cublasLtMatmulTile_t, cublasLtMatmulStages_t, cublasLtClusterShape_t in cublasLt.h).
Memory: the largest problem's operands and output (the LM head's dW: V x d fp32, plus its operands).)";

struct BenchGemmOptions {
  std::string size = "8b";
  std::int64_t tokens = 32768;
  std::int64_t loss_chunk = 1024;
  std::int64_t loss_group = 2;
  std::string recompute = "selective-qkv";
  std::vector<std::string> problems;
  int candidates = 16;
  int autotune_candidates = 8;
  int warmup = 3;
  int repeats = 10;
  std::string device = "cuda";
  bool all = false;
  bool csv = false;
  std::string json_path;
};

int run_bench_gemm(const BenchGemmOptions& o) {
  check_output_file(o.json_path, "--json");
  GemmBenchConfig config;
  config.model = model_config(o.size);
  config.tokens = o.tokens;
  config.loss_chunk = o.loss_chunk;
  config.loss_group = o.loss_group;
  config.recompute = parse_recompute(o.recompute);
  config.only = o.problems;
  config.sweep.candidates = o.candidates;
  config.sweep.autotune_candidates = o.autotune_candidates;
  config.sweep.warmup = o.warmup;
  config.sweep.repeats = o.repeats;
  selected_gemm_problems(config);  // unknown names fail before the device is looked at
  config.device = device_or_auto(parse_device_option(o.device));
  FT_CHECK(config.device.is_cuda(), "bench gemm times cuBLASLt: --device must be cuda or cuda:N, given ", o.device);
  const std::string where = describe_device(config.device);  // throws in a build without CUDA
  std::cout << "GEMM candidates of the " << config.model.name << " training step (" << config.tokens
            << " tokens) on " << where << "\n";
  const std::vector<GemmBenchResult> results = run_gemm_bench(config, &std::cout);
  std::cout << "\n" << format_gemm_summary(results, o.csv);
  if (o.all) std::cout << "\n" << format_gemm_candidates(results, o.csv);
  if (!o.json_path.empty()) write_json_reported(o.json_path, gemm_bench_document(config, results), std::cout);
  return 0;
}

}  // namespace

void register_bench_gemm(CLI::App& bench, Action& action) {
  CLI::App* command = bench.add_subcommand(
      "gemm", "Time cuBLASLt's candidate algorithms for every GEMM of a model's bf16 training step");
  command->footer(kFooter);
  command->option_defaults()->always_capture_default();
  auto options = std::make_shared<BenchGemmOptions>();
  BenchGemmOptions& o = *options;
  command->add_option("--size", o.size, "Model size: d_model, d_ff, layers, vocab (tiny ... 2.7b, 8b)")
      ->check(CLI::IsMember(model_config_names()));
  command->add_option("--tokens", o.tokens, "Rows of the block's GEMMs: batch x context on one rank")
      ->check(at_least(1));
  command->add_option("--loss-chunk", o.loss_chunk, "Rows of the fused LM head's logits GEMM")->check(at_least(1));
  command->add_option("--loss-group", o.loss_group,
                      "Chunks per LM-head backward GEMM (the model's dlogits tile: 2 for 8b at 32768 tokens)")
      ->check(at_least(1));
  command->add_option("--recompute", o.recompute, "Recomputation: the forward GEMMs counted again (calls)")
      ->check(CLI::IsMember({"none", "selective", "selective-qkv", "full"}));
  command->add_option("--problems", o.problems, "Only these problems, comma-separated (default: all)")->delimiter(',');
  command->add_option("--candidates", o.candidates, "Algorithms asked of cuBLASLt's heuristic per problem")
      ->check(CLI::Range(1, 32));
  command->add_option("--autotune-candidates", o.autotune_candidates,
                      "How many of the first candidates autotuning compares (the autotuned column)")
      ->check(CLI::Range(1, 32));
  command->add_option("--warmup", o.warmup, "Untimed runs per candidate")->check(CLI::Range(0, 1000));
  command->add_option("--repeats", o.repeats, "Timed runs per candidate (median and min reported)")
      ->check(CLI::Range(1, 1000));
  command->add_option("--device", o.device, "cuda or cuda:N")->check(device_validator());
  command->add_flag("--all", o.all, "Also print every candidate of every problem");
  command->add_flag("--csv", o.csv, "Print CSV instead of markdown tables");
  command->add_option("--json", o.json_path, "Write the results document (benchmark gemm, every candidate) here");
  command->callback([&action, options] { action = [options] { return run_bench_gemm(*options); }; });
}

}  // namespace ft::cli
