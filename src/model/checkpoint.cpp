// checkpoint.cpp — training-state save/load over safetensors: name checks, the all-or-nothing match of
// file against expected tensors, counters stored as metadata strings.
#include "model/checkpoint.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/half.h"

namespace ft {

namespace {

constexpr std::string_view kOptimizerPrefix = "optimizer.";
constexpr const char* kFormatKey = "flashtrain.checkpoint";
constexpr const char* kFormatVersion = "1";
constexpr const char* kStepKey = "flashtrain.step";
constexpr const char* kOptimizerStepKey = "flashtrain.optimizer_step";
constexpr const char* kRngSeedKey = "flashtrain.data_rng.seed";
constexpr const char* kRngCounterKey = "flashtrain.data_rng.counter";

bool is_optimizer_name(std::string_view name) { return name.starts_with(kOptimizerPrefix); }

std::string expected_describe(const Tensor& t) {
  return std::string(name_of(safetensors_dtype(t.dtype()))) + shape_string(t.shape());
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

// Checks expected against the file: returns nothing, throws one io error listing every missing,
// mismatched and unexpected tensor. is_ignored(name) excludes file entries from "unexpected".
template <class Ignored>
void match_or_throw(const SafetensorsFile& file, const std::vector<const NamedTensor*>& expected,
                    const char* what, Ignored&& is_ignored) {
  std::vector<std::string> missing, mismatched, unexpected;
  std::set<std::string_view> wanted;
  for (const NamedTensor* named : expected) {
    wanted.insert(named->name);
    const SafetensorsEntry* entry = file.find(named->name);
    if (!entry) {
      missing.push_back(named->name);
      continue;
    }
    const auto dtype = ft_dtype(entry->dtype);
    if (!dtype || *dtype != named->tensor.dtype() || entry->shape != named->tensor.shape())
      mismatched.push_back(named->name + " (expected " + expected_describe(named->tensor) + ", file has " +
                           entry->describe() + ")");
  }
  for (const auto& entry : file.entries())
    if (!wanted.count(entry.name) && !is_ignored(entry.name)) unexpected.push_back(entry.name);
  if (missing.empty() && mismatched.empty() && unexpected.empty()) return;

  std::string problems;
  const auto add = [&](const char* label, const std::vector<std::string>& names) {
    if (names.empty()) return;
    problems += str(problems.empty() ? "" : "; ", names.size(), " ", label, ": ", join(names));
  };
  add("missing", missing);
  add("mismatched", mismatched);
  add("unexpected", unexpected);
  FT_THROW(io, what, " ", file.path(), " does not match the ", expected.size(), " expected tensors: ", problems);
}

void check_names(const std::vector<NamedTensor>& params, const std::vector<NamedTensor>& opt_state,
                 const char* caller) {
  std::set<std::string_view> names;
  for (const auto& p : params) {
    FT_CHECK(!is_optimizer_name(p.name), caller, ": parameter '", p.name, "' starts with \"", kOptimizerPrefix,
             "\", which names optimiser state");
    FT_CHECK(names.insert(p.name).second, caller, ": tensor name '", p.name, "' is given twice");
  }
  for (const auto& s : opt_state) {
    FT_CHECK(is_optimizer_name(s.name), caller, ": optimiser state '", s.name, "' must start with \"",
             kOptimizerPrefix, "\" (see optimizer_state_name)");
    FT_CHECK(names.insert(s.name).second, caller, ": tensor name '", s.name, "' is given twice");
  }
}

template <class Int>
Int metadata_integer(const SafetensorsFile& file, const char* key) {
  const auto it = file.metadata().find(key);
  FT_CHECK_KIND(io, it != file.metadata().end(), "checkpoint ", file.path(), " has no \"", key,
                "\" in its metadata (not a flashtrain checkpoint?)");
  const std::string& text = it->second;
  Int value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  FT_CHECK_KIND(io, error == std::errc() && end == text.data() + text.size() && !text.empty(), "checkpoint ",
                file.path(), ": metadata \"", key, "\" is \"", text, "\", expected an integer");
  return value;
}

// Element i of a tensor's mapped bytes (possibly unaligned) as a float.
float element(const std::uint8_t* bytes, SafetensorsDType dtype, std::uint64_t i) {
  if (dtype == SafetensorsDType::f32) {
    float x;
    std::memcpy(&x, bytes + 4 * i, 4);
    return x;
  }
  std::uint16_t bits;
  std::memcpy(&bits, bytes + 2 * i, 2);
  return dtype == SafetensorsDType::bf16 ? to_float(bf16{bits}) : to_float(f16{bits});
}

// io error unless every value of the optimiser state is finite and every second moment ("optimizer.v.*",
// AdamW's running mean of squared gradients) is >= 0: a corrupt state would resume "successfully" and
// turn the parameters to NaN at the first step.
void check_optimizer_state(const SafetensorsFile& file, const std::vector<NamedTensor>& opt_state) {
  for (const auto& named : opt_state) {
    const SafetensorsEntry& e = file.entry(named.name);
    const bool second_moment = named.name.starts_with(optimizer_state_name("v", ""));
    const std::uint8_t* bytes = file.bytes(e);
    const std::uint64_t n = e.bytes() / size_of(e.dtype);
    std::uint64_t first_bad = n;
#pragma omp parallel for reduction(min : first_bad) schedule(static) if (n >= (1u << 20))
    for (std::uint64_t i = 0; i < n; ++i) {
      const float x = element(bytes, e.dtype, i);
      if ((!std::isfinite(x) || (second_moment && x < 0)) && i < first_bad) first_bad = i;
    }
    FT_CHECK_KIND(io, first_bad == n, "checkpoint ", file.path(), ": optimiser state '", named.name, "' holds ",
                  element(bytes, e.dtype, first_bad < n ? first_bad : 0), " at element ", first_bad,
                  second_moment ? " (second moments must be finite and >= 0)" : " (the state must be finite)");
  }
}

void copy_all(const SafetensorsFile& file, const std::vector<NamedTensor>& tensors) {
  for (const auto& named : tensors) file.read_into(named.name, named.tensor);
}

}  // namespace

std::string optimizer_state_name(std::string_view slot, std::string_view parameter) {
  return str(kOptimizerPrefix, slot, ".", parameter);
}

void save_checkpoint(const std::string& path, const std::vector<NamedTensor>& params,
                     const std::vector<NamedTensor>& opt_state, const TrainingCounters& counters) {
  check_names(params, opt_state, "save_checkpoint");
  std::vector<NamedTensor> all = params;
  all.insert(all.end(), opt_state.begin(), opt_state.end());
  const SafetensorsMetadata metadata = {
      {"format", "pt"},
      {kFormatKey, kFormatVersion},
      {kStepKey, std::to_string(counters.step)},
      {kOptimizerStepKey, std::to_string(counters.optimizer_step)},
      {kRngSeedKey, std::to_string(counters.data_rng.seed)},
      {kRngCounterKey, std::to_string(counters.data_rng.counter)},
  };
  save_safetensors(path, all, metadata);
}

TrainingCounters load_checkpoint(const std::string& path, const std::vector<NamedTensor>& params,
                                 const std::vector<NamedTensor>& opt_state) {
  check_names(params, opt_state, "load_checkpoint");
  const SafetensorsFile file(path);
  const auto version = file.metadata().find(kFormatKey);
  FT_CHECK_KIND(io, version != file.metadata().end(), "checkpoint ", path, " has no \"", kFormatKey,
                "\" in its metadata: not a flashtrain checkpoint (load_parameters reads model weights alone)");
  FT_CHECK_KIND(io, version->second == kFormatVersion, "checkpoint ", path, " has format version ", version->second,
                ", expected ", kFormatVersion);
  TrainingCounters counters;
  counters.step = metadata_integer<std::int64_t>(file, kStepKey);
  counters.optimizer_step = metadata_integer<std::int64_t>(file, kOptimizerStepKey);
  counters.data_rng.seed = metadata_integer<std::uint64_t>(file, kRngSeedKey);
  counters.data_rng.counter = metadata_integer<std::uint64_t>(file, kRngCounterKey);

  std::vector<const NamedTensor*> expected;
  for (const auto& p : params) expected.push_back(&p);
  for (const auto& s : opt_state) expected.push_back(&s);
  match_or_throw(file, expected, "checkpoint", [](std::string_view) { return false; });
  check_optimizer_state(file, opt_state);
  copy_all(file, params);
  copy_all(file, opt_state);
  return counters;
}

void load_parameters(const std::string& path, const std::vector<NamedTensor>& params) {
  check_names(params, {}, "load_parameters");
  const SafetensorsFile file(path);
  std::vector<const NamedTensor*> expected;
  for (const auto& p : params) expected.push_back(&p);
  match_or_throw(file, expected, "model weights", is_optimizer_name);
  copy_all(file, params);
}

}  // namespace ft
