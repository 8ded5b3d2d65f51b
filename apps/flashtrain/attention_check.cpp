// attention_check.cpp — the attention self-check: seeded inputs in the chosen layout and device, the
// chosen implementation forward and backward, and a tensor-by-tensor comparison with the CPU naive
// reference run on fp32 copies of the same values.
#include "flashtrain/attention_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "bench/results_json.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "core/version.h"
#include "flashtrain/cli_parse.h"

namespace ft::cli {

const char* name_of(Layout layout) { return layout == Layout::bhnd ? "bhnd" : "bnhd"; }

Layout parse_layout(const std::string& text) {
  if (text == "bhnd") return Layout::bhnd;
  if (text == "bnhd") return Layout::bnhd;
  FT_THROW(invalid_argument, "unknown layout '", text, "': expected bhnd or bnhd");
}

void check_attention_config(const AttentionCheckConfig& c) {
  FT_CHECK(c.batch >= 1, "--batch must be >= 1, given ", c.batch);
  FT_CHECK(c.heads >= 1, "--heads must be >= 1, given ", c.heads);
  FT_CHECK(c.seqlen_q >= 1, "--seqlen-q must be >= 1, given ", c.seqlen_q);
  FT_CHECK(c.head_dim >= 1, "--head-dim must be >= 1, given ", c.head_dim);
  if (c.kv_heads) {
    FT_CHECK(*c.kv_heads >= 1, "--kv-heads must be >= 1, given ", *c.kv_heads);
    FT_CHECK(c.heads % *c.kv_heads == 0, "--kv-heads must divide --heads: given --heads ", c.heads,
             " and --kv-heads ", *c.kv_heads);
  }
  if (c.seqlen_k) FT_CHECK(*c.seqlen_k >= 1, "--seqlen-k must be >= 1, given ", *c.seqlen_k);
  FT_CHECK(c.window_left >= -1 && c.window_right >= -1,
           "--window LEFT,RIGHT must have both bounds >= -1 (-1 = unbounded), given ", c.window_left, ",",
           c.window_right);
  FT_CHECK(!c.causal || c.window_right <= 0, "--causal means a right window of 0, but --window ", c.window_left,
           ",", c.window_right, " was given too");
  FT_CHECK(c.sink_tokens >= 0, "--sink-tokens must be >= 0, given ", c.sink_tokens);
  if (c.scale) FT_CHECK(std::isfinite(*c.scale), "--scale must be finite, given ", *c.scale);
  FT_CHECK(c.block_q >= 16 && c.block_k >= 16, "--block-q and --block-k must be >= 16, given ", c.block_q, " and ",
           c.block_k);
  if (c.tolerance) {
    FT_CHECK(*c.tolerance > 0 && std::isfinite(*c.tolerance), "--tolerance must be a positive number, given ",
             *c.tolerance);
  }
}

Device resolve_device(const AttentionCheckConfig& config) {
  return device_or_auto(config.device);
}

double attention_check_tolerance(DType dtype, Device device) {
  switch (dtype) {
    case DType::f32: return device.is_cpu() ? 1e-4 : 1e-2;
    case DType::f16: return 1e-2;
    case DType::bf16: return 5e-2;
  }
  return 0;
}

ErrorStats measure_error(const std::vector<double>& x, const std::vector<double>& ref) {
  FT_CHECK(x.size() == ref.size(), "measure_error: expected ", ref.size(), " values, given ", x.size());
  constexpr double inf = std::numeric_limits<double>::infinity();
  ErrorStats stats;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double r = ref[i], v = x[i];
    if (std::isfinite(r)) stats.ref_max_abs = std::max(stats.ref_max_abs, std::abs(r));
    double diff = 0;
    if (v == r) {
      diff = 0;  // also equal infinities
    } else if (!std::isfinite(v) || !std::isfinite(r)) {
      diff = inf;  // NaN anywhere, or an infinity the other side does not have
    } else {
      diff = std::abs(v - r);
    }
    stats.max_abs_err = std::max(stats.max_abs_err, diff);
  }
  if (stats.max_abs_err == 0) {
    stats.max_rel_err = 0;
  } else if (stats.ref_max_abs == 0) {
    stats.max_rel_err = inf;
  } else {
    stats.max_rel_err = stats.max_abs_err / stats.ref_max_abs;
  }
  return stats;
}

namespace {

struct Sizes {
  std::int64_t batch, heads_q, heads_kv, len_q, len_k, head_dim;
};

// Every tensor of one attention call, owned, with the views the API takes.
struct AttentionSet {
  std::vector<OwnedTensor> storage;
  AttentionTensors t;
  AttentionGrads g;

  // A logical (B, H, N, D) tensor stored as (B, H, N, D) or (B, N, H, D).
  Tensor add_bhnd(std::int64_t b, std::int64_t h, std::int64_t n, std::int64_t d, DType dtype, Device device,
                  Layout layout, const char* tag) {
    if (layout == Layout::bhnd) {
      storage.emplace_back(Shape{b, h, n, d}, dtype, device, tag);
      return storage.back().tensor();
    }
    storage.emplace_back(Shape{b, n, h, d}, dtype, device, tag);  // (B, N, H, D) memory
    return storage.back()->permute({0, 2, 1, 3});
  }
  Tensor add(Shape shape, Device device, const char* tag) {
    storage.emplace_back(std::move(shape), DType::f32, device, tag);
    return storage.back().tensor();
  }
};

AttentionSet make_set(const Sizes& z, DType dtype, Device device, Layout layout, bool sinks) {
  AttentionSet s;
  const auto q_like = [&](const char* tag) {
    return s.add_bhnd(z.batch, z.heads_q, z.len_q, z.head_dim, dtype, device, layout, tag);
  };
  const auto kv_like = [&](const char* tag) {
    return s.add_bhnd(z.batch, z.heads_kv, z.len_k, z.head_dim, dtype, device, layout, tag);
  };
  s.t.q = q_like("check.q");                                              // (B, Hq, Nq, D)
  s.t.k = kv_like("check.k");                                             // (B, Hkv, Nk, D)
  s.t.v = kv_like("check.v");                                             // (B, Hkv, Nk, D)
  s.t.o = q_like("check.o");                                              // (B, Hq, Nq, D)
  s.t.lse = s.add({z.batch, z.heads_q, z.len_q}, device, "check.lse");    // (B, Hq, Nq) fp32
  s.g.d_o = q_like("check.d_o");                                          // (B, Hq, Nq, D)
  s.g.dq = q_like("check.dq");                                            // (B, Hq, Nq, D)
  s.g.dk = kv_like("check.dk");                                           // (B, Hkv, Nk, D)
  s.g.dv = kv_like("check.dv");                                           // (B, Hkv, Nk, D)
  if (sinks) {
    s.t.sinks = s.add({z.heads_q}, device, "check.sinks");                // (Hq) fp32
    s.g.dsinks = s.add({z.heads_q}, device, "check.dsinks");              // (Hq) fp32
  }
  return s;
}

// The outputs of a set, by the names the report uses.
std::vector<std::pair<const char*, Tensor>> outputs(const AttentionSet& s) {
  std::vector<std::pair<const char*, Tensor>> out = {
      {"O", s.t.o}, {"L", s.t.lse}, {"dQ", s.g.dq}, {"dK", s.g.dk}, {"dV", s.g.dv}};
  if (s.t.sinks.defined()) out.emplace_back("dsinks", s.g.dsinks);
  return out;
}

std::string format_sci(double value, int digits) {
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (std::isnan(value)) return "nan";
  char text[32];
  std::snprintf(text, sizeof(text), "%.*e", digits, value);
  return text;
}

}  // namespace

AttentionCheckResult run_attention_check(const AttentionCheckConfig& config) {
  check_attention_config(config);
  AttentionCheckResult result;
  result.config = config;
  AttentionCheckConfig& c = result.config;
  const Device device = resolve_device(config);
  if (device.is_cuda()) {
    FT_CHECK_KIND(unsupported, built_with_cuda(), "--device ", device.to_string(),
                  ": this flashtrain build has no CUDA (build with nvcc present, preset 'cuda')");
    const int count = cuda_device_count();
    FT_CHECK_KIND(unsupported, device.index < count, "--device ", device.to_string(), ": ", count,
                  " CUDA device(s) visible");
  }
  c.device = device;
  c.kv_heads = c.kv_heads.value_or(c.heads);
  c.seqlen_k = c.seqlen_k.value_or(c.seqlen_q);
  c.tolerance = c.tolerance.value_or(attention_check_tolerance(c.dtype, device));
  result.device_name = describe_device(device);

  const Sizes z{c.batch, c.heads, *c.kv_heads, c.seqlen_q, *c.seqlen_k, c.head_dim};
  AttentionOptions options;
  options.causal = c.causal;
  options.window_left = c.window_left;
  options.window_right = c.window_right;
  options.sink_tokens = c.sink_tokens;
  options.scale = c.scale;
  options.impl = c.impl;
  options.block_q = c.block_q;
  options.block_k = c.block_k;

  // The checked run: inputs drawn in c.dtype, outputs pre-filled with NaN so that an element an
  // implementation forgets to write shows up as an infinite error.
  AttentionSet run = make_set(z, c.dtype, device, c.layout, c.sink_logits);
  fill_normal(run.t.q, c.seed);
  fill_normal(run.t.k, c.seed + 1);
  fill_normal(run.t.v, c.seed + 2);
  fill_normal(run.g.d_o, c.seed + 3);
  if (c.sink_logits) fill_normal(run.t.sinks, c.seed + 4);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const auto& output : outputs(run)) fill_constant(output.second, nan);

  // The reference: fp32 (B, H, N, D) host copies of the same (already rounded) values, naive.
  AttentionSet ref = make_set(z, DType::f32, Device::cpu(), Layout::bhnd, c.sink_logits);
  write_from_double(ref.t.q, read_as_double(run.t.q));
  write_from_double(ref.t.k, read_as_double(run.t.k));
  write_from_double(ref.t.v, read_as_double(run.t.v));
  write_from_double(ref.g.d_o, read_as_double(run.g.d_o));
  if (c.sink_logits) copy(ref.t.sinks, run.t.sinks);
  AttentionOptions ref_options = options;
  ref_options.impl = AttentionImpl::naive;

  attention_forward(run.t, options);
  attention_backward(run.t, run.g, options);
  attention_forward(ref.t, ref_options);
  attention_backward(ref.t, ref.g, ref_options);

  const auto checked = outputs(run);
  const auto expected = outputs(ref);
  result.pass = true;
  for (std::size_t i = 0; i < checked.size(); ++i) {
    TensorCheck check;
    check.name = checked[i].first;
    check.shape = checked[i].second.shape();
    check.error = measure_error(read_as_double(checked[i].second), read_as_double(expected[i].second));
    check.tolerance = *c.tolerance;
    check.pass = check.error.max_rel_err <= check.tolerance;
    result.pass = result.pass && check.pass;
    result.tensors.push_back(std::move(check));
  }
  return result;
}

std::string format_attention_check(const AttentionCheckResult& result) {
  const AttentionCheckConfig& c = result.config;
  std::ostringstream out;
  out << "attention check: " << name_of(c.impl) << " on " << c.device->to_string() << " (" << result.device_name
      << ")\n";
  out << "  " << name_of(c.dtype) << ", layout " << name_of(c.layout) << ", B=" << c.batch << " Hq=" << c.heads
      << " Hkv=" << *c.kv_heads << " Nq=" << c.seqlen_q << " Nk=" << *c.seqlen_k << " D=" << c.head_dim
      << ", scale " << (c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  if (c.causal) out << ", causal";
  if (c.window_left >= 0 || c.window_right >= 0) out << ", window " << c.window_left << "," << c.window_right;
  if (c.sink_tokens > 0) out << ", " << c.sink_tokens << " sink tokens";
  if (c.sink_logits) out << ", sink logits";
  if (c.impl == AttentionImpl::flash && c.device->is_cpu()) out << ", tiles " << c.block_q << "x" << c.block_k;
  out << ", seed " << c.seed << "\n";
  out << "  reference: naive on cpu, double accumulation, fp32 copies of the same inputs\n";
  out << "  relative error = max|x - ref| / max|ref|\n\n";

  char line[160];
  std::snprintf(line, sizeof(line), "  %-7s %-20s %12s %12s %12s %10s  %s\n", "tensor", "shape", "max|ref|",
                "max abs err", "max rel err", "tolerance", "verdict");
  out << line;
  std::vector<std::string> failed;
  for (const TensorCheck& t : result.tensors) {
    std::snprintf(line, sizeof(line), "  %-7s %-20s %12s %12s %12s %10s  %s\n", t.name.c_str(),
                  shape_string(t.shape).c_str(), format_sci(t.error.ref_max_abs, 3).c_str(),
                  format_sci(t.error.max_abs_err, 3).c_str(), format_sci(t.error.max_rel_err, 3).c_str(),
                  format_sci(t.tolerance, 1).c_str(), t.pass ? "PASS" : "FAIL");
    out << line;
    if (!t.pass) failed.push_back(t.name);
  }
  out << "\n";
  if (result.pass) {
    out << "PASS: all " << result.tensors.size() << " tensors within tolerance\n";
  } else {
    out << "FAIL:";
    for (std::size_t i = 0; i < failed.size(); ++i) out << (i ? ", " : " ") << failed[i];
    out << " exceed" << (failed.size() == 1 ? "s" : "") << " the tolerance\n";
  }
  return out.str();
}

nlohmann::json attention_check_document(const AttentionCheckResult& result) {
  const AttentionCheckConfig& c = result.config;
  nlohmann::json config = {
      {"impl", name_of(c.impl)},
      {"dtype", name_of(c.dtype)},
      {"layout", name_of(c.layout)},
      {"B", c.batch},
      {"Hq", c.heads},
      {"Hkv", *c.kv_heads},
      {"Nq", c.seqlen_q},
      {"Nk", *c.seqlen_k},
      {"D", c.head_dim},
      {"scale", c.scale ? *c.scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim))},
      {"causal", c.causal},
      {"window_left", c.window_left},
      {"window_right", c.window_right},
      {"sink_tokens", c.sink_tokens},
      {"sink_logits", c.sink_logits},
      {"block_q", c.block_q},
      {"block_k", c.block_k},
      {"seed", c.seed},
      {"tolerance", *c.tolerance},
      {"pass", result.pass},
  };
  nlohmann::json rows = nlohmann::json::array();
  for (const TensorCheck& t : result.tensors) {
    // JSON has no infinity: an infinite error (NaN or a stray infinity in the output) is written as null.
    rows.push_back({{"impl", name_of(c.impl)},
                    {"tensor", t.name},
                    {"shape", t.shape},
                    {"ref_max_abs", t.error.ref_max_abs},
                    {"max_abs_err", t.error.max_abs_err},
                    {"max_rel_err", t.error.max_rel_err},
                    {"tolerance", t.tolerance},
                    {"pass", t.pass}});
  }
  return results_document("attention-check", *c.device, std::move(config), std::move(rows));
}

}  // namespace ft::cli
