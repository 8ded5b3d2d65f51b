// cli_parse.cpp — parsers and CLI11 validators for windows, devices and bounded integers.
#include "flashtrain/cli_parse.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

#include "core/error.h"

namespace ft::cli {

namespace {

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

// A validator whose check is a parser that throws ft::Error: the error's message becomes the
// validation message.
template <class Parse>
CLI::Validator from_parser(Parse parse, std::string description) {
  return CLI::Validator(
      [parse](std::string& value) -> std::string {
        try {
          parse(value);
          return {};
        } catch (const Error& e) {
          return e.message();
        }
      },
      std::move(description));
}

}  // namespace

std::int64_t parse_integer(std::string_view text) {
  const std::string_view digits = trim(text);
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  FT_CHECK(!digits.empty() && ec == std::errc() && end == digits.data() + digits.size(),
           "expected an integer, given '", text, "'");
  return value;
}

Window parse_window(std::string_view text) {
  const auto comma = text.find(',');
  FT_CHECK(comma != std::string_view::npos && text.find(',', comma + 1) == std::string_view::npos,
           "expected LEFT,RIGHT (two integers >= -1, -1 = unbounded, e.g. 128,0), given '", text, "'");
  Window window;
  try {
    window.left = parse_integer(text.substr(0, comma));
    window.right = parse_integer(text.substr(comma + 1));
  } catch (const Error&) {
    FT_THROW(invalid_argument, "expected LEFT,RIGHT (two integers >= -1, -1 = unbounded, e.g. 128,0), given '",
             text, "'");
  }
  FT_CHECK(window.left >= -1 && window.right >= -1,
           "expected LEFT,RIGHT with both bounds >= -1 (-1 = unbounded), given '", text, "'");
  return window;
}

std::optional<Device> parse_device_option(std::string_view text) {
  const std::string_view name = trim(text);
  if (name == "auto") return std::nullopt;
  try {
    return parse_device(name);
  } catch (const Error&) {
    FT_THROW(invalid_argument, "expected auto, cpu, cuda or cuda:N, given '", text, "'");
  }
}

Device device_or_auto(const std::optional<Device>& device) {
  if (device) return *device;
  return cuda_available() ? Device::cuda(0) : Device::cpu();
}

CLI::Validator window_validator() {
  return from_parser([](const std::string& value) { parse_window(value); }, "");
}

CLI::Validator device_validator() {
  return from_parser([](const std::string& value) { parse_device_option(value); }, "");
}

CLI::Validator at_least(std::int64_t min) {
  return from_parser(
      [min](const std::string& value) {
        bool ok = false;
        try {
          ok = parse_integer(value) >= min;
        } catch (const Error&) {
          ok = false;
        }
        FT_CHECK(ok, "expected an integer >= ", min, ", given '", value, "'");
      },
      "");
}

void add_number_checks(CLI::App& app) {
  const auto integer = from_parser([](const std::string& value) { parse_integer(value); }, "");
  const auto unsigned_integer = from_parser(
      [](const std::string& value) {
        const std::string_view digits = trim(value);
        std::uint64_t parsed = 0;
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), parsed);
        FT_CHECK(!digits.empty() && ec == std::errc() && end == digits.data() + digits.size(),
                 "expected a whole number in [0, 2^64), given '", value, "'");
      },
      "");
  const auto finite = from_parser(
      [](const std::string& value) {
        const std::string_view text = trim(value);
        double parsed = 0;
        const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
        FT_CHECK(!text.empty() && ec == std::errc() && end == text.data() + text.size() && std::isfinite(parsed),
                 "expected a finite number, given '", value, "'");
      },
      "");
  for (CLI::Option* option : app.get_options()) {
    const std::string full = option->get_type_name();  // "FLOAT", or "FLOAT:POSITIVE" with a validator
    const std::string type = full.substr(0, full.find(':'));
    if (type == "INT") option->check(integer);
    else if (type == "UINT") option->check(unsigned_integer);
    else if (type == "FLOAT") option->check(finite);
  }
  for (CLI::App* sub : app.get_subcommands({})) add_number_checks(*sub);
}

void add_model_training_options(CLI::App& command, ModelTrainingArgs& args) {
  command.add_option("--recompute", args.recompute,
                     "Training: activation recomputation, none, selective (keep attention outputs, recompute norms, "
                     "projections, SwiGLU inputs), selective-qkv (keep q, k, v too: recompute norms, the output "
                     "projection, SwiGLU inputs) or full (keep block inputs only); gradients are bit-identical");
  command.add_option("--loss-chunk", args.loss_chunk,
                     "Rows per chunk of the fused LM head + cross-entropy, which never holds (B, T, V) logits; 0 = "
                     "materialise the logits")
      ->check(at_least(0));
  command.add_flag("--offload-activations", args.offload_activations,
                   "Training: keep the blocks' saved activations in pinned host memory between forward and "
                   "backward (copies overlap compute; a ring of two blocks' stays on the device); bit-identical");
  command.add_flag("--nondeterministic-attention", args.nondeterministic_attention,
                   "Training: the attention backward adds dQ with atomics instead of in a fixed order (faster on "
                   "Hopper at long context; gradients then differ in the last bits from run to run, and "
                   "--recompute is no longer bit-identical to none)");
  command.add_option("--gemm-autotune", args.gemm_autotune,
                     "CUDA: each GEMM problem's first call times the first N (2-32, e.g. 8) of cuBLASLt's candidate "
                     "algorithms and keeps the fastest for the run: a little faster, but two runs (or ranks) may "
                     "choose differently and differ in the last bits; 0 = off, cuBLASLt's heuristic choice, runs "
                     "repeat bit for bit");
}

}  // namespace ft::cli
