// cmd_generate.cpp — `flashtrain generate`: loads a checkpoint into the Transformer LM, encodes a prompt with
// a byte-level BPE tokenizer and prints the samples the KV-cache generator (model/generator.h) writes.
//   flashtrain generate --checkpoint ckpt/latest --tokenizer tokenizer.json --prompt "def main(" --size tiny
//   flashtrain generate --checkpoint ckpt/step_000500.safetensors --tokenizer tok.json --size small
//     (continued) --context 256 --prompt "import os" --max-new-tokens 100 --temperature 0.8 --top-k 50 --batch 4
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "core/error.h"
#include "flashtrain/cli_parse.h"
#include "flashtrain/commands.h"
#include "model/checkpoint.h"
#include "model/generator.h"
#include "text/tokenizer.h"

namespace ft::cli {

namespace {

constexpr const char* kFooter = R"(
The model: give the --size, --context and --vocab it was trained with (--vocab defaults to the
tokenizer's vocabulary size); a checkpoint of other shapes is an error naming them. --checkpoint is a
safetensors file written by train --checkpoint-dir (optimizer state ignored), or its folder's "latest".

The prompt is encoded after the end-of-text id (each training document follows one), so an empty
--prompt samples a document from its start. Generation: a prefill of the prompt fills a KV cache per
layer, then one decode step per new token attends to the cache. --temperature 0 is greedy; otherwise
the logits / temperature are sampled, restricted to the --top-k most likely ids (0 = all) and then to
the smallest set reaching probability --top-p. --batch rows sample the same prompt independently;
--seed makes sampling reproducible. Ids past the tokenizer's vocabulary (a model vocabulary padded beyond
it) are never chosen. Each sample is printed up to the first end-of-text it generates.)";

struct GenerateOptions {
  std::string checkpoint, tokenizer, prompt;
  std::string size = "tiny";
  std::optional<std::int64_t> vocab, context;
  std::int64_t max_new_tokens = 0;  // 0 = to the end of the context
  double temperature = 1.0;
  std::int64_t top_k = 0;
  double top_p = 1.0;
  std::uint64_t seed = 0;
  std::int64_t batch = 1;
  std::string precision = "fp32";
  std::string attention = "flash";
  std::string device = "auto";
};

// "DIR/latest" names the newest checkpoint in DIR (train writes the file name into it).
std::string resolve_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) return resolve_checkpoint((fs::path(path) / "latest").string());
  if (fs::path(path).filename() != "latest") return path;
  std::ifstream in(path);
  FT_CHECK_KIND(io, in.good(), "checkpoint ", path, " does not exist");
  std::string name;
  std::getline(in, name);
  return (fs::path(path).parent_path() / name).string();
}

int run_generate(const GenerateOptions& o) {
  const text::Tokenizer tokenizer = for_option("--tokenizer", [&] { return text::Tokenizer::from_file(o.tokenizer); });
  ModelConfig config = for_option("--size", [&] { return model_config(o.size); });
  config.vocab_size = o.vocab.value_or(tokenizer.vocab_size());
  if (o.context) config.context_length = *o.context;
  config.validate();
  FT_CHECK(tokenizer.vocab_size() <= config.vocab_size, "--tokenizer ", o.tokenizer, " has ", tokenizer.vocab_size(),
           " ids, more than the model's vocabulary of ", config.vocab_size, " (--vocab)");
  ModelOptions options;
  options.precision = parse_precision(o.precision);
  options.attention = parse_attention_impl(o.attention);
  options.device = device_or_auto(parse_device_option(o.device));
  options.training = false;
  options.max_batch = 1;
  options.max_seq_len = 1;  // the model's own forward is not used: the generator keeps the activations
  if (options.device.is_cuda()) options.stream = Stream::create(options.device);
  TransformerLM model(config, options);
  const std::string path = resolve_checkpoint(o.checkpoint);
  std::vector<NamedTensor> named;
  for (const ParameterInfo& info : model.layout().tensors())
    named.push_back({info.name, model.parameters()[info.index]});
  try {
    load_parameters(path, named);
  } catch (const Error& e) {
    throw Error(
        e.kind(),
        str("--checkpoint: ", e.message(), " (the model is --size ", config.name, " with vocabulary ",
            config.vocab_size, " and context ", config.context_length, ": give the options it was trained with)"),
        e.file(), e.line());
  }

  const std::int32_t eot = tokenizer.end_of_text_id();
  std::vector<std::int32_t> prompt{eot};
  const std::vector<std::int32_t> encoded = tokenizer.encode(o.prompt);
  prompt.insert(prompt.end(), encoded.begin(), encoded.end());
  const auto T0 = static_cast<std::int64_t>(prompt.size());
  FT_CHECK(T0 < config.context_length, "--prompt is ", T0, " tokens (with the end-of-text id before it), too long for ",
           "the model's context of ", config.context_length, " tokens (--context)");
  GenerationOptions g;
  g.max_new_tokens = o.max_new_tokens > 0 ? o.max_new_tokens : config.context_length - T0;
  FT_CHECK(T0 + g.max_new_tokens <= config.context_length, "--max-new-tokens ", g.max_new_tokens, " after a prompt of ",
           T0, " tokens exceeds the model's context of ", config.context_length, " tokens (at most ",
           config.context_length - T0, ")");
  g.sampling = {o.temperature, o.top_k, o.top_p, tokenizer.vocab_size()};  // ids past the tokenizer's: never
  g.seed = o.seed;
  Generator generator(model, o.batch, T0 + g.max_new_tokens);
  const auto rows =
      generator.generate(std::vector<std::vector<std::int32_t>>(static_cast<std::size_t>(o.batch), prompt), g);
  for (std::size_t b = 0; b < rows.size(); ++b) {
    std::vector<std::int32_t> ids = rows[b];
    const auto end = std::find(ids.begin(), ids.end(), eot);
    ids.erase(end, ids.end());
    if (rows.size() > 1) std::cout << "=== sample " << b << " ===\n";
    std::cout << o.prompt << tokenizer.decode(ids) << "\n";
  }
  const GenerationStats& s = generator.stats();
  std::cerr << "generate: " << config.name << " " << o.precision << " on " << options.device.to_string() << ", batch "
            << o.batch << ", prompt " << T0 << " tokens, " << g.max_new_tokens << " new: prefill " << s.prefill_ms
            << " ms, decode " << (s.decode_steps > 0 ? s.decode_ms / static_cast<double>(s.decode_steps) : 0.0)
            << " ms/token" << std::endl;
  return 0;
}

}  // namespace

void register_generate(CLI::App& app, Action& action) {
  CLI::App* command = app.add_subcommand("generate", "Generate text from a trained checkpoint with a KV cache");
  command->footer(kFooter);
  auto o = std::make_shared<GenerateOptions>();
  command->option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  command->add_option("--checkpoint", o->checkpoint, "A checkpoint (safetensors) or a checkpoint folder (its latest)")
      ->required();
  command->add_option("--tokenizer", o->tokenizer, "The byte-level BPE tokenizer.json the data was prepared with")
      ->required();
  command->add_option("--prompt", o->prompt, "Text the samples continue (may be empty)");
  command->add_option("--size", o->size, "Model size: tiny, small, medium, large, xl or 2.7b");
  command->add_option("--vocab", o->vocab, "Model vocabulary size (default: the tokenizer's)");
  command->add_option("--context", o->context, "Model context length (default: the size's, 512; tiny 32)");
  command->add_option("--max-new-tokens", o->max_new_tokens, "Tokens to generate; 0 = to the end of the context")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--temperature", o->temperature, "Sampling temperature; 0 = greedy");
  command->add_option("--top-k", o->top_k, "Sample among the k most likely ids; 0 = all");
  command->add_option("--top-p", o->top_p,
                      "Nucleus sampling: the smallest set of ids reaching this probability, (0, 1]");
  command->add_option("--seed", o->seed, "Seed of the sampling");
  command->add_option("--batch", o->batch, "Samples generated together")->check(at_least(1));
  command->add_option("--precision", o->precision, "fp32, or bf16 (bf16 weights, activations and KV cache)");
  command->add_option("--attention", o->attention, "Attention implementation: flash or naive");
  command->add_option("--device", o->device, "cpu, cuda, cuda:N, or auto (cuda:0 when a GPU is visible, else cpu)");
  command->callback([&action, o] {
    validate_sampling({o->temperature, o->top_k, o->top_p});  // option errors before any file is read
    action = [o] { return run_generate(*o); };
  });
}

}  // namespace ft::cli
