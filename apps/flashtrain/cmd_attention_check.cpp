// cmd_attention_check.cpp — `flashtrain attention check`: the options (each documented, defaults
// shown in --help), and the action that runs the check, prints the report, writes --json and turns
// the verdict into the exit status (0 PASS, 1 FAIL).
//   flashtrain attention check --dtype bf16 --causal --seqlen-q 1024 --heads 16 --kv-heads 4
#include <iostream>
#include <memory>

#include "bench/results_json.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/commands.h"

namespace ft::cli {

namespace {

constexpr const char* kFooter = R"(Inputs q, k, v, dO (and the sink logits) are seeded normal(0, 1) draws: q from SEED, k SEED+1,
v SEED+2, dO SEED+3, sinks SEED+4. The reference is the CPU naive implementation (double
accumulation) run on fp32 copies of the same values; it costs O(B*Hq*Nq*Nk*D) time and
O(B*Hq*Nq*Nk) host memory, so keep shapes modest.

Each of O, L, dQ, dK, dV (and dsinks) PASSes when its relative error, max|x - ref| / max|ref|,
is at most the tolerance: fp32 1e-4 on cpu and 1e-2 on cuda (TF32 tensor cores), fp16 1e-2,
bf16 5e-2 (--tolerance overrides). Elements left unwritten (NaN) count as infinite error.

Exit status: 0 every tensor PASSes, 1 a tensor FAILs, 2 bad options or an error.)";

int run_attention_check_command(const AttentionCheckConfig& config) {
  const AttentionCheckResult result = run_attention_check(config);
  std::cout << format_attention_check(result);
  if (!config.json_path.empty()) {
    write_json_reported(config.json_path, attention_check_document(result), std::cout);
  }
  return result.pass ? 0 : 1;
}

}  // namespace

void add_attention_check_options(CLI::App& command, AttentionCheckConfig& config) {
  command.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  AttentionCheckConfig* c = &config;

  command
      .add_option_function<std::string>(
          "--impl", [c](const std::string& v) { c->impl = parse_attention_impl(v); },
          "Implementation to check: flash (tiled FlashAttention-2 on cpu, the FlashAttention-2 kernels on "
          "cuda) or naive (materialises S and P)")
      ->check(CLI::IsMember({"naive", "flash"}))
      ->default_str(name_of(config.impl));
  command
      .add_option_function<std::string>(
          "--device", [c](const std::string& v) { c->device = parse_device_option(v); },
          "Where the checked implementation runs: cpu, cuda, cuda:N, or auto (cuda:0 when a GPU is visible, "
          "else cpu)")
      ->check(device_validator())
      ->default_str("auto");
  command.add_option("--batch", config.batch, "Batch size B")->check(at_least(1));
  command.add_option("--heads", config.heads, "Query heads Hq")->check(at_least(1));
  command
      .add_option("--kv-heads", config.kv_heads,
                  "Key/value heads Hkv, a divisor of Hq: Hkv < Hq is GQA, 1 is MQA (default: --heads)")
      ->check(at_least(1));
  command.add_option("--seqlen-q", config.seqlen_q, "Query length Nq")->check(at_least(1));
  command
      .add_option("--seqlen-k", config.seqlen_k,
                  "Key length Nk; masks align bottom-right (offset Nk - Nq), as in a KV-cache step "
                  "(default: --seqlen-q)")
      ->check(at_least(1));
  command.add_option("--head-dim", config.head_dim, "Head dimension D (at most 256)")->check(at_least(1));
  command
      .add_option_function<std::string>(
          "--dtype", [c](const std::string& v) { c->dtype = parse_dtype(v); },
          "Element type of q, k, v, o and the gradients (L and the sink logits are always fp32)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}))
      ->default_str(name_of(config.dtype));
  command.add_flag("--causal", config.causal,
                   "Causal mask: key j is visible to query i when j <= i + Nk - Nq (same as a right window of 0)");
  command
      .add_option_function<std::string>(
          "--window",
          [c](const std::string& v) {
            const Window w = parse_window(v);
            c->window_left = w.left;
            c->window_right = w.right;
          },
          "Sliding window: key j is visible to query i when i + off - LEFT <= j <= i + off + RIGHT, "
          "off = Nk - Nq; -1 = unbounded on that side")
      ->check(window_validator())
      ->type_name("LEFT,RIGHT")
      ->default_str(std::to_string(config.window_left) + "," + std::to_string(config.window_right));
  command
      .add_option("--sink-tokens", config.sink_tokens,
                  "The first N keys stay visible past the left window bound, but not past causality "
                  "(StreamingLLM attention sinks)")
      ->check(at_least(0));
  command.add_flag("--sink-logits", config.sink_logits,
                   "Add a random fp32 sink logit per query head (gpt-oss): an extra softmax column that carries no "
                   "value; checks dsinks too");
  command.add_option("--scale", config.scale, "Softmax scale applied to q.k (default: 1/sqrt(D))");
  command
      .add_option_function<std::string>(
          "--layout", [c](const std::string& v) { c->layout = parse_layout(v); },
          "Memory layout of q, k, v, o and the gradients, expressed through strides (no copies): bhnd = "
          "(B, H, N, D), bnhd = (B, N, H, D)")
      ->check(CLI::IsMember({"bhnd", "bnhd"}))
      ->default_str(name_of(config.layout));
  command.add_option("--block-q", config.block_q, "Query tile of the CPU tiled implementation (>= 16)")
      ->check(at_least(16));
  command.add_option("--block-k", config.block_k, "Key tile of the CPU tiled implementation (>= 16)")
      ->check(at_least(16));
  command.add_option("--seed", config.seed, "Seed of the random inputs");
  command.add_option("--tolerance", config.tolerance,
                     "Largest relative error that PASSes (default: by dtype and device, see below)");
  command.add_option("--json", config.json_path,
                     "Also write the result to PATH as a results document (benchmark \"attention-check\")")
      ->type_name("PATH");
}

void register_attention_check(CLI::App& attention, Action& action) {
  CLI::App* command = attention.add_subcommand(
      "check", "Check an attention implementation forward and backward against the CPU naive reference");
  auto config = std::make_shared<AttentionCheckConfig>();
  add_attention_check_options(*command, *config);
  command->footer(kFooter);
  command->callback([config, &action] { action = [config] { return run_attention_check_command(*config); }; });
}

}  // namespace ft::cli
