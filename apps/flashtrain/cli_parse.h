// cli_parse.h — option parsing shared by the subcommands: sliding windows ("LEFT,RIGHT"), devices
// ("auto" or cpu/cuda/cuda:N), bounded integers and comma-separated lists, as plain functions (throwing
// ft::Error) and as CLI11 validators (whose messages CLI11 prefixes with the option name); and the one
// declaration of the model training options every training command takes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/device.h"
#include "core/error.h"
#include "flashtrain/model_training_args.h"

namespace ft::cli {

struct Window {
  std::int64_t left = -1;   // -1 = unbounded
  std::int64_t right = -1;  // -1 = unbounded
};

// "LEFT,RIGHT", each an integer >= -1 ("128,0", "-1,-1"); spaces around the numbers are allowed.
Window parse_window(std::string_view text);

// "auto" -> nullopt (the subcommand picks), otherwise parse_device ("cpu", "cuda", "cuda:N").
std::optional<Device> parse_device_option(std::string_view text);

// The device an "auto" (nullopt) choice means: cuda:0 when a GPU is visible, else cpu.
Device device_or_auto(const std::optional<Device>& device);

// A whole decimal integer ("12", "-1"), no trailing characters.
std::int64_t parse_integer(std::string_view text);

// CLI11 validators over the same parsers.
CLI::Validator window_validator();
CLI::Validator device_validator();
CLI::Validator at_least(std::int64_t min);  // integers >= min

// Checks every numeric option of app and its subcommands, by the type CLI11 converts it to, before the
// conversion (which saturates out-of-range integers and accepts inf and nan): INT options take a whole
// decimal number within int64, UINT options one within uint64 and not negative, FLOAT options a finite
// number. So `--steps 99999999999999999999`, `--seed -1`, `--lr inf` and `--max-seconds nan` are errors
// naming the option, at parse time.
void add_number_checks(CLI::App& app);

// Declares the model training options `train` and every model benchmark share, --recompute, --loss-chunk,
// --offload-activations and --nondeterministic-attention, into args (resolve_model_training_options validates).
void add_model_training_options(CLI::App& command, ModelTrainingArgs& args);

// "a,b,c" -> each item parsed by parse_one; an empty item, or an item parse_one rejects, is an
// ft::Error naming the option.
template <class T, class Parse>
std::vector<T> parse_list(const char* option, const std::string& text, Parse parse_one) {
  std::vector<T> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    FT_CHECK(!item.empty(), option, ": expected a comma-separated list without empty items, given '", text, "'");
    out.push_back(for_option(option, [&] { return parse_one(item); }));
    start = comma + 1;
  }
  return out;
}

}  // namespace ft::cli
