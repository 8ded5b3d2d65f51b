// cli_parse.h — option parsing shared by the subcommands: sliding windows ("LEFT,RIGHT"), devices
// ("auto" or cpu/cuda/cuda:N) and bounded integers, as plain functions (throwing ft::Error) and as
// CLI11 validators (whose messages CLI11 prefixes with the option name).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include <CLI/CLI.hpp>

#include "core/device.h"

namespace ft::cli {

struct Window {
  std::int64_t left = -1;   // -1 = unbounded
  std::int64_t right = -1;  // -1 = unbounded
};

// "LEFT,RIGHT", each an integer >= -1 ("128,0", "-1,-1"); spaces around the numbers are allowed.
Window parse_window(std::string_view text);

// "auto" -> nullopt (the subcommand picks), otherwise parse_device ("cpu", "cuda", "cuda:N").
std::optional<Device> parse_device_option(std::string_view text);

// A whole decimal integer ("12", "-1"), no trailing characters.
std::int64_t parse_integer(std::string_view text);

// CLI11 validators over the same parsers.
CLI::Validator window_validator();
CLI::Validator device_validator();
CLI::Validator at_least(std::int64_t min);  // integers >= min

}  // namespace ft::cli
