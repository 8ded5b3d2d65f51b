// cmd_bench_generate.cpp — `flashtrain bench generate`: KV-cache decode latency (model/generator.h) of a
// randomly initialised model per size and batch: a prefill of --prompt-len tokens, then --new-tokens greedy
// decode steps, timed after a short warm-up generation (which captures the decode step's CUDA graph). Rows
// (benchmark "generate"): size, batch, precision, prompt_len, new_tokens, cuda_graph, overlap_launches,
// fused_gemms, prefill_ms, ms_per_token (one decode step for the whole batch), tokens_per_s. One model and
// generator per size and batch serve every variant (--cuda-graph, --overlap-launches, --fused-gemms).
//   flashtrain bench generate --size xl --precision bf16 --batch 1,64 --json bench/results/generate-xl-h100.json
//   flashtrain bench generate --size xl --precision bf16 --batch 1 --cuda-graph on,off --overlap-launches on,off
//   flashtrain bench generate --size xl --precision bf16 --batch 1 --kernels-json /tmp/decode-kernels.json
//   flashtrain bench generate --size tiny --device cpu --batch 1,4
#include <cstdio>
#include <iostream>
#include <memory>

#include "bench/kernel_profiler.h"
#include "bench/kernel_summary.h"
#include "bench/results_json.h"
#include "core/error.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/commands.h"
#include "model/generator.h"

namespace ft::cli {

namespace {

struct BenchGenerateOptions {
  std::string sizes = "small";
  std::string batches = "1";
  std::int64_t vocab = 10000;
  std::int64_t prompt_len = 64;
  std::int64_t new_tokens = 128;
  std::string precision = "bf16";
  std::string attention = "flash";
  std::string device = "auto";
  std::string cuda_graph = "on";
  std::string overlap = "on";
  std::string fused = "on";
  std::uint64_t seed = 0;
  std::string json_path;
  std::string kernels_json;
};

// One way of running the decode step (GenerationOptions' switches).
struct Variant {
  bool graph, overlap, fused;
};

// The kernel profile of one more timed generation: an overview of its decode steps (kernel time against the
// step's span: the gaps between kernels are the rest) and its top kernels, printed and written to path.
void profile_decode(Generator& generator, const std::vector<std::vector<std::int32_t>>& prompts,
                    const GenerationOptions& g, const nlohmann::json& row, Device device, const std::string& path) {
  KernelProfiler profiler;
  profiler.start();
  generator.generate(prompts, g);
  const KernelProfile profile = profiler.stop();
  std::vector<RangeKernelSummary> summaries{summarize_kernels(profile.records, "decode step *"),
                                            summarize_kernels(profile.records, "prefill")};
  std::cout << "\nkernel profile (per occurrence: one decode step, one prefill)\n"
            << format_range_overview(summaries, false) << "\ndecode step kernels\n"
            << format_kernel_table(summaries[0], false, 15);
  nlohmann::json config = row;
  config["profiler"] = "CUPTI activity records of one more generation after the timed one; 'decode step *' = "
                       "each decode step (its graph launch or enqueue), 'prefill' = the prompt. With overlapping "
                       "launches a kernel's time includes its wait for the previous one: profile with "
                       "--overlap-launches off for each kernel's own time";
  write_json_reported(path, kernel_profile_document(profile, summaries, device, config, 200000), std::cout);
}

std::vector<nlohmann::json> bench_one(const std::string& size, std::int64_t batch, const std::vector<Variant>& variants,
                                      const BenchGenerateOptions& o, Device device, const Stream& stream) {
  ModelConfig config = model_config(size);
  config.vocab_size = o.vocab;
  config.context_length = std::max(config.context_length, o.prompt_len + o.new_tokens);
  ModelOptions options;
  options.precision = parse_precision(o.precision);
  options.attention = parse_attention_impl(o.attention);
  options.device = device;
  options.stream = stream;
  options.training = false;
  options.max_batch = 1;
  options.max_seq_len = 1;  // the generator keeps its own activations
  options.seed = o.seed;
  std::vector<nlohmann::json> rows;
  for (const Variant& v : variants)
    rows.push_back({{"size", size},
                    {"batch", batch},
                    {"precision", o.precision},
                    {"prompt_len", o.prompt_len},
                    {"new_tokens", o.new_tokens},
                    {"cuda_graph", v.graph},
                    {"overlap_launches", v.overlap},
                    {"fused_gemms", v.fused},
                    {"impl", "kv_cache"}});
  try {
    TransformerLM model(config, options);
    Generator generator(model, batch, o.prompt_len + o.new_tokens);
    std::vector<std::vector<std::int32_t>> prompts(static_cast<std::size_t>(batch));
    Rng rng(o.seed + 1);
    for (auto& p : prompts)
      for (std::int64_t t = 0; t < o.prompt_len; ++t) p.push_back(static_cast<std::int32_t>(rng.below(o.vocab)));
    for (std::size_t i = 0; i < variants.size(); ++i) {
      GenerationOptions g;
      g.sampling.temperature = 0;
      g.cuda_graph = variants[i].graph;
      g.overlap_launches = variants[i].overlap;
      g.fused_gemms = variants[i].fused;
      g.max_new_tokens = std::min<std::int64_t>(8, o.new_tokens);
      generator.generate(prompts, g);  // warm-up: kernels, algorithm choices, caches, the graph's capture
      g.max_new_tokens = o.new_tokens;
      generator.generate(prompts, g);
      const GenerationStats& s = generator.stats();
      const double ms = s.decode_steps > 0 ? s.decode_ms / static_cast<double>(s.decode_steps) : 0.0;
      nlohmann::json& row = rows[i];
      row["prefill_ms"] = s.prefill_ms;
      row["ms_per_token"] = ms;
      row["tokens_per_s"] = ms > 0 ? static_cast<double>(batch) * 1000.0 / ms : 0.0;
      if (!o.kernels_json.empty()) profile_decode(generator, prompts, g, row, device, o.kernels_json);
    }
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::out_of_memory) throw;
    for (nlohmann::json& row : rows)
      if (!row.contains("ms_per_token")) row["oom"] = true;
  }
  return rows;
}

int run_bench_generate(const BenchGenerateOptions& o) {
  const std::vector<std::string> sizes =
      parse_list<std::string>("--size", o.sizes, [](const std::string& s) { return model_config(s).name; });
  const std::vector<std::int64_t> batches = parse_list<std::int64_t>("--batch", o.batches, [](const std::string& s) {
    const std::int64_t b = parse_integer(s);
    FT_CHECK(b >= 1, "expected a batch >= 1, given ", b);
    return b;
  });
  const auto on_off = [](const std::string& s) {
    FT_CHECK(s == "on" || s == "off", "expected on or off, given '", s, "'");
    return s == "on";
  };
  std::vector<bool> graphs = parse_list<bool>("--cuda-graph", o.cuda_graph, on_off);
  std::vector<bool> overlaps = parse_list<bool>("--overlap-launches", o.overlap, on_off);
  std::vector<bool> fused = parse_list<bool>("--fused-gemms", o.fused, on_off);
  const Device device = device_or_auto(parse_device_option(o.device));
  if (!device.is_cuda()) graphs = overlaps = {false};  // CUDA only: the CPU has neither
  std::vector<Variant> variants;
  for (bool graph : graphs)
    for (bool overlap : overlaps)
      for (bool f : fused) variants.push_back({graph, overlap, f});
  if (!o.kernels_json.empty()) {
    FT_CHECK_KIND(unsupported, kernel_profiler_available(), "--kernels-json: ", kernel_profiler_missing());
    FT_CHECK_KIND(unsupported, device.is_cuda(), "--kernels-json records CUDA kernels and needs a CUDA device, given ",
                  device.to_string());
    FT_CHECK(sizes.size() * batches.size() * variants.size() == 1, "--kernels-json profiles one case: give one --size, ",
             "--batch and one value of --cuda-graph, --overlap-launches and --fused-gemms");
  }
  const Stream stream = device.is_cuda() ? Stream::create(device) : Stream();
  nlohmann::json rows = nlohmann::json::array();
  std::printf("| size | batch | precision | graph | overlap | fused | prompt | new | prefill ms | ms/token | tokens/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
  const auto on = [](const nlohmann::json& row, const char* key) { return row[key].get<bool>() ? "on" : "off"; };
  for (const std::string& size : sizes)
    for (std::int64_t batch : batches)
      for (const nlohmann::json& row : bench_one(size, batch, variants, o, device, stream)) {
        std::printf("| %s | %lld | %s | %s | %s | %s | %lld | %lld |", size.c_str(), static_cast<long long>(batch),
                    o.precision.c_str(), on(row, "cuda_graph"), on(row, "overlap_launches"), on(row, "fused_gemms"),
                    static_cast<long long>(o.prompt_len), static_cast<long long>(o.new_tokens));
        if (row.contains("oom"))
          std::printf(" OOM | OOM | OOM |\n");
        else
          std::printf(" %.2f | %.3f | %.0f |\n", row["prefill_ms"].get<double>(), row["ms_per_token"].get<double>(),
                      row["tokens_per_s"].get<double>());
        std::fflush(stdout);
        rows.push_back(row);
      }
  if (!o.json_path.empty()) {
    const nlohmann::json config{{"vocab", o.vocab},
                                {"attention", o.attention},
                                {"device", device.to_string()},
                                {"sampling", "greedy"},
                                {"seed", o.seed}};
    write_json_reported(o.json_path, results_document("generate", device, config, rows), std::cout);
  }
  return 0;
}

}  // namespace

void register_bench_generate(CLI::App& bench, Action& action) {
  CLI::App* command = bench.add_subcommand("generate", "Time KV-cache generation: prefill and decode ms per token");
  auto o = std::make_shared<BenchGenerateOptions>();
  command->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command->add_option("--size", o->sizes, "Model sizes, comma-separated: tiny, small, medium, large, xl, 2.7b");
  command->add_option("--batch", o->batches, "Batch sizes (rows decoded together), comma-separated");
  command->add_option("--vocab", o->vocab, "Vocabulary size")->check(at_least(1));
  command->add_option("--prompt-len", o->prompt_len, "Prompt tokens per row (one prefill)")->check(at_least(1));
  command->add_option("--new-tokens", o->new_tokens, "Tokens generated per row (timed decode steps: one fewer)")
      ->check(at_least(2));
  command->add_option("--precision", o->precision, "fp32 or bf16 (bf16 weights, activations and KV cache)");
  command->add_option("--attention", o->attention, "Attention implementation: flash or naive");
  command->add_option("--device", o->device, "cpu, cuda, cuda:N, or auto (cuda:0 when a GPU is visible, else cpu)");
  command->add_option("--cuda-graph", o->cuda_graph,
                      "on, off or on,off: replay the decode step as a captured CUDA graph, or enqueue it every step");
  command->add_option("--overlap-launches", o->overlap,
                      "on, off or on,off: let each fused decode kernel start while its predecessor finishes "
                      "(programmatic dependent launch, Hopper)");
  command->add_option("--fused-gemms", o->fused,
                      "on, off or on,off: the fused few-row bf16 GEMMs (batch <= 8) or the unfused ops (cuBLASLt)");
  command->add_option("--seed", o->seed, "Seed of the parameters and prompts");
  command->add_option("--json", o->json_path, "Write the results document (benchmark generate)");
  command->add_option("--kernels-json", o->kernels_json,
                      "Profile the kernels of one case's decode steps (CUPTI) after timing it; print the "
                      "summary and write the kernel-profile document here");
  command->callback([&action, o] { action = [o] { return run_bench_generate(*o); }; });
}

}  // namespace ft::cli
