// cmd_bench_attention.cpp — `flashtrain bench attention`: options (documented, defaults shown in
// --help), the preset sweeps and the action that runs the cases, prints the table and writes --json.
//   flashtrain bench attention --sweep leaderboard --json bench/results/attention-leaderboard-h100.json
//   flashtrain bench attention --sweep leaderboard --deterministic true,false
//   flashtrain bench attention --sweep leaderboard --kernels sm80,sm90
//   flashtrain bench attention --sweep varlen --json bench/results/attention-varlen-h100.json
//   flashtrain bench attention --impl flash,naive --seqlen 1024,4096 --head-dim 64 --dtype bf16
//   flashtrain bench attention --batch 1 --heads 32 --kv-heads 32,8 --seqlen 32768 --head-dim 128
#include <algorithm>
#include <iostream>
#include <memory>

#include "bench/results_json.h"
#include "core/error.h"
#include "flashtrain/attention_bench.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/commands.h"
#include "flashtrain/output_paths.h"

namespace ft::cli {

namespace {

constexpr const char* kFooter = R"(
Sweeps (--sweep; the list options below then override the preset's lists):
  memory       naive vs flash, B=8, H=1, D in {16,32,64,128} x N in {256,1024,4096,8192,16384},
               fp32, non-causal: the memory/latency comparison of standard and flash attention
  scaling      flash and naive, B=1, H=1, causal, N = 128, 256, ..., 65536, D in {16,32,64,128},
               bf16 and fp32: latency and TFLOP/s against sequence length
  leaderboard  flash, q, k, v of shape (16, 16384, 64), bf16, causal, forward + backward of sum(O)
               (dO = 1; --grad normal draws it instead), deterministic and atomic-dQ backward
               (--deterministic true,false), on a GPU both the automatically chosen kernels and the
               portable sm80 ones (--kernels auto,sm80)
  varlen       packed documents: 131072 tokens in documents of lengths uniform in [256, 16384]
               (SplitMix64 seeded by --seed; the last one cut to the total) through varlen attention
               (one causal sequence per document), Hq=32, Hkv=8, D=128, bf16, then beside it the dense
               causal kernel at B=16, N=8192 on the same tokens; TFLOP/s counted on the FLOPs the
               documents need (the sum of 4*H*n^2*D/2); rows carry "varlen": true, the document count,
               total tokens and max_seqlen
  custom       the lists given by the options (the default)

Every row reports the median of timed repeats after warm-up: forward, backward (given O and L)
and forward+backward, in ms and TFLOP/s (forward FLOPs 4*B*H*N^2*D, halved when causal; backward
2.5x forward); on a GPU, times come from CUDA events. mem_before_bwd_gib is the device memory
flashtrain holds after the forward, before the backward; peak_gib the peak over forward+backward
(including the naive implementation's S and P). A case that runs out of memory is an OOM row.
--deterministic picks the flash backward's scheme on a GPU: true (the default) sums every gradient in a
fixed order (bit-identical runs); false accumulates dQ in fp32 inside the dK/dV kernel (atomics on
the sm80 kernels, TMA reductions on the Hopper ones; faster on both, dQ not bitwise reproducible).
--kernels picks the flash kernel family on a GPU: auto (the Hopper sm90 kernels on an H100/H200 for
bf16/fp16 at head dims 64, 80, 96, 128 and 256, else sm80), sm80 (the
portable mma.sync kernels) or sm90 (wgmma; an error where they cannot run).
--window-left, --window-right and --sink-tokens set the mask beside --causal; such rows count the FLOPs of
the visible (query, key) pairs.
Each row records the kernels and the mode that ran; a case that ran the same as an earlier one is
dropped.
Each measurement repeats --repeats times, or fewer (at least 5) when that would take longer than
--max-seconds.)";

std::int64_t parse_positive(std::string_view text) {
  std::int64_t value = parse_integer(text);
  FT_CHECK(value >= 1, "expected a positive integer, given ", value);
  return value;
}

bool parse_bool(std::string_view text) {
  if (text == "true") return true;
  if (text == "false") return false;
  FT_THROW(invalid_argument, "expected true or false, given '", text, "'");
}

struct BenchAttentionOptions {
  std::string sweep = "custom";
  std::string impls, batch, heads, kv_heads, seqlens, head_dims, dtypes, deterministic, kernels, grad, doc_lengths;
  std::optional<bool> causal;
  std::int64_t window_left = -1, window_right = -1, sink_tokens = 0;
  std::string device = "auto";
  int warmup = 3;
  int repeats = 100;
  double max_seconds = 2.0;
  bool flush_l2 = false;
  bool csv = false;
  std::string json_path;
  std::uint64_t seed = 0;
};

AttentionBenchConfig resolve(const BenchAttentionOptions& o) {
  const Device device = device_or_auto(for_option("--device", [&] { return parse_device_option(o.device); }));
  AttentionBenchConfig config;
  if (o.sweep != "custom") config = preset_sweep(o.sweep, device);
  config.device = device;
  if (!o.impls.empty()) config.impls = parse_list<AttentionImpl>("--impl", o.impls, parse_attention_impl);
  if (!o.batch.empty()) config.batch = parse_list<std::int64_t>("--batch", o.batch, parse_positive);
  if (!o.heads.empty()) config.heads = parse_list<std::int64_t>("--heads", o.heads, parse_positive);
  if (!o.kv_heads.empty()) config.kv_heads = parse_list<std::int64_t>("--kv-heads", o.kv_heads, parse_positive);
  if (!o.doc_lengths.empty()) {
    const auto range = parse_list<std::int64_t>("--doc-lengths", o.doc_lengths, parse_positive);
    FT_CHECK(range.size() == 2 && range[0] <= range[1], "--doc-lengths: expected MIN,MAX with MIN <= MAX, given '",
             o.doc_lengths, "'");
    config.document_lengths = {{range[0], range[1]}};
  }
  if (!o.seqlens.empty()) config.seqlens = parse_list<std::int64_t>("--seqlen", o.seqlens, parse_positive);
  if (!o.head_dims.empty()) config.head_dims = parse_list<std::int64_t>("--head-dim", o.head_dims, parse_positive);
  if (!o.dtypes.empty()) config.dtypes = parse_list<DType>("--dtype", o.dtypes, parse_dtype);
  if (o.causal) config.causal = *o.causal;
  config.window_left = o.window_left;
  config.window_right = o.window_right;
  config.sink_tokens = o.sink_tokens;
  if (!o.deterministic.empty())
    config.deterministic = parse_list<bool>("--deterministic", o.deterministic, parse_bool);
  if (!o.kernels.empty()) config.kernels = parse_list<FlashKernels>("--kernels", o.kernels, parse_flash_kernels);
  config.timing = {.warmup = o.warmup, .repeats = o.repeats, .flush_l2 = o.flush_l2};
  config.max_seconds = o.max_seconds;
  if (!o.grad.empty()) config.ones_grad = o.grad == "ones";
  config.seed = o.seed;
  return config;
}

int run_bench_attention(const BenchAttentionOptions& options) {
  const AttentionBenchConfig config = resolve(options);
  check_output_file(options.json_path, "--json");
  std::vector<AttentionBenchRow> rows;
  for (const AttentionBenchCase& c : expand_cases(config)) {
    AttentionBenchRow row = run_attention_bench_case(c, config);
    const bool repeated = std::any_of(rows.begin(), rows.end(), [&](const auto& r) { return same_case(r.c, row.c); });
    std::cerr << "  " << name_of(c.impl) << " " << name_of(row.c.kernels) << (row.c.deterministic ? "" : " (atomic dQ)")
              << " " << name_of(c.dtype) << (c.documents.empty() ? "" : str(" varlen ", c.documents.size(), " docs"))
              << " B=" << c.batch << " H=" << c.heads << " Hkv=" << kv_heads_of(c) << " N=" << c.seqlen
              << " D=" << c.head_dim << (row.oom ? ": OOM" : repeated ? ": same as an earlier row, dropped" : ": done")
              << "\n";
    if (!repeated) rows.push_back(std::move(row));
  }
  std::cout << "attention benchmark (" << config.sweep << ") on " << describe_device(config.device) << "\n\n"
            << format_attention_bench(rows, options.csv);
  if (!options.json_path.empty()) {
    write_json_reported(options.json_path, attention_bench_document(config, rows), std::cout);
  }
  return 0;
}

}  // namespace

void register_bench_attention(CLI::App& bench, Action& action) {
  CLI::App* command = bench.add_subcommand("attention", "Time attention forward/backward (naive vs flash sweeps)");
  command->footer(kFooter);
  command->option_defaults()->always_capture_default();
  auto options = std::make_shared<BenchAttentionOptions>();
  BenchAttentionOptions& o = *options;
  command->add_option("--sweep", o.sweep, "Preset sweep: memory, scaling, leaderboard, varlen or custom")
      ->check(CLI::IsMember({"memory", "scaling", "leaderboard", "varlen", "custom"}));
  command->add_option("--impl", o.impls, "Implementations, comma-separated: flash, naive (custom default: flash)");
  command->add_option("--batch", o.batch, "Batch sizes B, comma-separated (custom default: 1)");
  command->add_option("--heads", o.heads, "Heads H, comma-separated (custom default: 1)");
  command->add_option("--kv-heads", o.kv_heads,
                      "K/V heads (grouped-query attention; each divides every H), comma-separated "
                      "(default: as many as H)");
  command->add_option("--doc-lengths", o.doc_lengths,
                      "MIN,MAX: also time packed documents of lengths uniform in [MIN, MAX] (varlen attention) on "
                      "as many tokens as the first --batch x --seqlen (varlen sweep default: 256,16384)");
  command->add_option("--seqlen", o.seqlens, "Sequence lengths N, comma-separated (custom default: 1024)");
  command->add_option("--head-dim", o.head_dims, "Head dims D, comma-separated (custom default: 64)");
  command->add_option("--dtype", o.dtypes, "Dtypes, comma-separated: fp32, fp16, bf16 (custom default: bf16)");
  command->add_option("--causal", o.causal, "Causal masking: true or false (custom default: true)");
  command->add_option("--window-left", o.window_left, "Keys before the diagonal each query sees (-1: unbounded)")
      ->check(CLI::Range(std::int64_t{-1}, std::int64_t{1} << 40));
  command->add_option("--window-right", o.window_right,
                      "Keys after the diagonal each query sees (-1: unbounded; 0 or -1 with --causal true)")
      ->check(CLI::Range(std::int64_t{-1}, std::int64_t{1} << 40));
  command->add_option("--sink-tokens", o.sink_tokens, "Leading keys every query sees past the left window bound")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
  command->add_option("--deterministic", o.deterministic,
                      "Backward modes, comma-separated: true (fixed-order sums), false (atomic dQ) "
                      "(custom default: true)");
  command->add_option("--kernels", o.kernels,
                      "CUDA flash kernel families, comma-separated: auto, sm80, sm90 (custom default: auto)");
  command->add_option("--grad", o.grad,
                      "dO of the backward: ones (the gradient of sum(O); the leaderboard sweep's default) or "
                      "normal (seeded normal draws; the default otherwise)")
      ->check(CLI::IsMember({"ones", "normal"}));
  command->add_option("--device", o.device, "cpu, cuda, cuda:N, or auto (cuda:0 when a GPU is visible, else cpu)")
      ->check(device_validator());
  command->add_option("--warmup", o.warmup, "Untimed runs before each measurement")->check(CLI::Range(0, 1000));
  command->add_option("--repeats", o.repeats, "Timed runs per measurement (the median is reported)")
      ->check(CLI::Range(1, 100000));
  command->add_option("--max-seconds", o.max_seconds, "Time budget per measurement; slow cases repeat less (>= 5)")
      ->check(CLI::PositiveNumber);
  command->add_flag("--flush-l2", o.flush_l2, "Overwrite a buffer of twice the L2 size before each timed repeat");
  command->add_flag("--csv", o.csv, "Print CSV instead of a markdown table");
  command->add_option("--json", o.json_path, "Write the results document (bench/results format) to this path");
  command->add_option("--seed", o.seed, "Seed of the random inputs");
  command->callback([&action, options] { action = [options] { return run_bench_attention(*options); }; });
}

}  // namespace ft::cli
