// attention_bench.cpp — timing attention cases and sweeps for `flashtrain bench attention`.
#include "flashtrain/attention_bench.h"

#include <algorithm>
#include <cmath>

#include "bench/report_table.h"
#include "bench/results_json.h"
#include "bench/statistics.h"
#include "core/allocator.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "flashtrain/out_of_memory.h"
#include "flashtrain/varlen_bench.h"
#include "ops/attention/visibility.h"

namespace ft::cli {

namespace {

std::vector<std::int64_t> powers_of_two(std::int64_t from, std::int64_t to) {
  std::vector<std::int64_t> out;
  for (std::int64_t n = from; n <= to; n *= 2) out.push_back(n);
  return out;
}

// Median of repeats, with the repeat count cut so one measurement stays near max_seconds.
double median_ms(Device device, const std::function<void()>& work, const AttentionBenchConfig& config) {
  TimingOptions probe{.warmup = config.timing.warmup, .repeats = 1, .flush_l2 = config.timing.flush_l2};
  const double one_ms = time_repeats(device, Stream(), work, probe).front();
  const int affordable = static_cast<int>(config.max_seconds * 1000.0 / std::max(one_ms, 1e-3));
  TimingOptions timed = config.timing;
  timed.warmup = 0;
  timed.repeats = std::clamp(affordable, std::min(5, config.timing.repeats), config.timing.repeats);
  return summarize(time_repeats(device, Stream(), work, timed)).median;
}

// "sm80" / "sm90" for CUDA flash rows (as run), "-" otherwise.
std::string kernels_cell(const AttentionBenchCase& c) {
  return c.impl == AttentionImpl::flash && c.kernels != FlashKernels::auto_select ? name_of(c.kernels) : "-";
}

bool has_window_or_sinks(const AttentionBenchCase& c) {
  return c.window_left >= 0 || c.window_right >= 0 || c.sink_tokens > 0;
}

// "left,right" of the window ("-" for unbounded sides), or "-" without one; sink tokens after a "+".
std::string mask_cell(const AttentionBenchCase& c) {
  if (!has_window_or_sinks(c)) return "-";
  auto side = [](std::int64_t w) { return w < 0 ? std::string("-") : std::to_string(w); };
  const std::string sinks = c.sink_tokens > 0 ? "+" + std::to_string(c.sink_tokens) : "";
  return side(c.window_left) + "," + side(c.causal ? 0 : c.window_right) + sinks;
}

}  // namespace

AttentionBenchConfig preset_sweep(const std::string& name, Device device) {
  AttentionBenchConfig config;
  config.sweep = name;
  config.device = device;
  if (name == "memory") {
    config.impls = {AttentionImpl::naive, AttentionImpl::flash};
    config.batch = {8};
    config.heads = {1};
    config.head_dims = {16, 32, 64, 128};
    config.seqlens = {256, 1024, 4096, 8192, 16384};
    config.dtypes = {DType::f32};
    config.causal = false;
  } else if (name == "scaling") {
    config.impls = {AttentionImpl::flash, AttentionImpl::naive};
    config.batch = {1};
    config.heads = {1};
    config.head_dims = {16, 32, 64, 128};
    config.seqlens = powers_of_two(128, 65536);
    config.dtypes = {DType::bf16, DType::f32};
    config.causal = true;
  } else if (name == "leaderboard") {
    config.impls = {AttentionImpl::flash};
    config.batch = {16};
    config.heads = {1};
    config.head_dims = {64};
    config.seqlens = {16384};
    config.dtypes = {DType::bf16};
    config.causal = true;
    config.deterministic = {true, false};
    if (device.is_cuda()) config.kernels = {FlashKernels::auto_select, FlashKernels::sm80};
    config.ones_grad = true;
  } else if (name == "varlen") {
    // Packed documents beside the dense causal kernel on the same 131072 tokens (16 x 8192).
    config.impls = {AttentionImpl::flash};
    config.batch = {16};
    config.heads = {32};
    config.kv_heads = {8};
    config.head_dims = {128};
    config.seqlens = {8192};
    config.dtypes = {DType::bf16};
    config.causal = true;
    config.document_lengths = {{256, 16384}};
  } else {
    FT_THROW(invalid_argument, "unknown sweep '", name, "': expected memory, scaling, leaderboard or varlen");
  }
  return config;
}

namespace {

// The (query, key) pairs one sequence of n tokens sees under the case's mask.
double visible_pairs(const AttentionBenchCase& c, std::int64_t n) {
  if (!has_window_or_sinks(c)) {
    const double all = static_cast<double>(n) * n;
    return c.causal ? all / 2 : all;
  }
  const std::int64_t right = c.causal ? 0 : c.window_right;
  double pairs = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const KeyRange r = visible_keys(i, n, n, c.window_left, right, c.sink_tokens);
    pairs += static_cast<double>(r.sink_end + (r.end - r.begin));
  }
  return pairs;
}

}  // namespace

double attention_forward_flops(const AttentionBenchCase& c) {
  const double per_pair = 4.0 * c.heads * c.head_dim;
  if (c.documents.empty()) return per_pair * c.batch * visible_pairs(c, c.seqlen);
  double pairs = 0;
  for (std::int32_t n : c.documents) pairs += visible_pairs(c, n);
  return per_pair * pairs;
}

std::int64_t kv_heads_of(const AttentionBenchCase& c) { return c.kv_heads > 0 ? c.kv_heads : c.heads; }

std::vector<AttentionBenchCase> expand_cases(const AttentionBenchConfig& config) {
  const bool cuda_flash_options = config.device.is_cuda();
  const std::vector<FlashKernels> one_kernels{FlashKernels::auto_select};
  const std::vector<bool> one_mode{true};
  std::vector<std::int32_t> documents;
  if (config.document_lengths)
    documents = document_lengths(config.batch.front() * config.seqlens.front(), config.document_lengths->first,
                                 config.document_lengths->second, config.seed);
  std::vector<AttentionBenchCase> cases;
  for (auto impl : config.impls) {
    const bool varies = cuda_flash_options && impl == AttentionImpl::flash;
    for (auto kernels : varies ? config.kernels : one_kernels)
      for (bool deterministic : varies ? config.deterministic : one_mode)
        for (auto dtype : config.dtypes)
          for (auto d : config.head_dims) {
            const AttentionBenchCase base{impl, 1, 1, 1, d, dtype, config.causal, deterministic, kernels, 0,
                                          config.window_left, config.window_right, config.sink_tokens, {}};
            for (auto h : documents.empty() ? std::vector<std::int64_t>{} : config.heads)
              for (auto hkv : config.kv_heads) {  // the documents as one packed sequence (batch 1)
                AttentionBenchCase c = base;
                c.heads = h, c.kv_heads = hkv, c.documents = documents;
                c.seqlen = config.batch.front() * config.seqlens.front();
                cases.push_back(std::move(c));
              }
            for (auto n : config.seqlens)
              for (auto b : config.batch)
                for (auto h : config.heads)
                  for (auto hkv : config.kv_heads) {
                    AttentionBenchCase c = base;
                    c.batch = b, c.heads = h, c.seqlen = n, c.kv_heads = hkv;
                    cases.push_back(std::move(c));
                  }
          }
  }
  return cases;
}

bool same_case(const AttentionBenchCase& a, const AttentionBenchCase& b) {
  return a.impl == b.impl && a.batch == b.batch && a.heads == b.heads && a.seqlen == b.seqlen &&
         a.head_dim == b.head_dim && a.dtype == b.dtype && a.causal == b.causal &&
         a.deterministic == b.deterministic && a.kernels == b.kernels && kv_heads_of(a) == kv_heads_of(b) &&
         a.window_left == b.window_left && a.window_right == b.window_right && a.sink_tokens == b.sink_tokens &&
         a.documents == b.documents;
}

void fill_bench_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_o,
                       const AttentionBenchConfig& config) {
  fill_normal(q, config.seed + 1);
  fill_normal(k, config.seed + 2);
  fill_normal(v, config.seed + 3);
  if (config.ones_grad)
    fill_constant(d_o, 1.0);
  else
    fill_normal(d_o, config.seed + 4);
}

AttentionOptions bench_options(const AttentionBenchCase& c) {
  AttentionOptions options;
  options.causal = c.causal;
  options.window_left = c.window_left;
  options.window_right = c.window_right;
  options.sink_tokens = c.sink_tokens;
  options.impl = c.impl;
  options.deterministic = c.deterministic;
  options.kernels = c.kernels;
  return options;
}

void time_attention_passes(AttentionBenchRow& row, const std::function<void()>& forward,
                           const std::function<void()>& backward, const AttentionBenchConfig& config) {
  const Device device = config.device;
  Allocator& allocator = Allocator::instance();
  allocator.reset_peak(device);
  forward();
  row.mem_before_bwd_gib = static_cast<double>(allocator.stats(device).current_bytes) / kBytesPerGiB;
  backward();

  row.fwd_ms = median_ms(device, forward, config);
  row.bwd_ms = median_ms(device, backward, config);
  row.fwd_bwd_ms = median_ms(device, [&] {
    forward();
    backward();
  }, config);
  row.peak_gib = static_cast<double>(allocator.stats(device).peak_bytes) / kBytesPerGiB;

  const double fwd = attention_forward_flops(row.c);
  row.fwd_tflops = fwd / (row.fwd_ms * 1e9);
  row.bwd_tflops = 2.5 * fwd / (row.bwd_ms * 1e9);
  row.fwd_bwd_tflops = 3.5 * fwd / (row.fwd_bwd_ms * 1e9);
}

namespace {

// A dense case: (B, H, N, D) q, (B, Hkv, N, D) k and v.
void time_dense_case(AttentionBenchRow& row, const AttentionBenchConfig& config) {
  const AttentionBenchCase& c = row.c;
  const Device device = config.device;
  const Shape shape{c.batch, c.heads, c.seqlen, c.head_dim};
  const Shape kv_shape{c.batch, kv_heads_of(c), c.seqlen, c.head_dim};
  OwnedTensor q(shape, c.dtype, device, "bench.q"), k(kv_shape, c.dtype, device, "bench.k"),
      v(kv_shape, c.dtype, device, "bench.v"), o(shape, c.dtype, device, "bench.o"),
      d_o(shape, c.dtype, device, "bench.d_o"), dq(shape, c.dtype, device, "bench.dq"),
      dk(kv_shape, c.dtype, device, "bench.dk"), dv(kv_shape, c.dtype, device, "bench.dv");
  OwnedTensor lse({c.batch, c.heads, c.seqlen}, DType::f32, device, "bench.lse");
  fill_bench_inputs(q, k, v, d_o, config);

  const AttentionTensors t{.q = q, .k = k, .v = v, .sinks = {}, .o = o, .lse = lse};
  const AttentionGrads g{.d_o = d_o, .dq = dq, .dk = dk, .dv = dv, .dsinks = {}};
  const AttentionOptions options = bench_options(c);
  if (device.is_cuda() && c.impl == AttentionImpl::flash) row.c.kernels = flash_kernels_for(t, options);
  time_attention_passes(row, [&] { attention_forward(t, options); }, [&] { attention_backward(t, g, options); },
                        config);
}

}  // namespace

AttentionBenchRow run_attention_bench_case(const AttentionBenchCase& c, const AttentionBenchConfig& config) {
  AttentionBenchRow row;
  row.c = c;
  try {
    if (c.documents.empty())
      time_dense_case(row, config);
    else
      time_varlen_case(row, config);
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
    const AttentionBenchCase ran = row.c;
    row = AttentionBenchRow();
    row.c = ran;
    row.oom = true;
    row.oom_message = out_of_memory_message(e);
  }
  return row;
}

std::string format_attention_bench(const std::vector<AttentionBenchRow>& rows, bool csv) {
  ReportTable table({"impl", "kernels", "deterministic", "dtype", "causal", "window", "varlen", "B", "H",
                     "Hkv", "N", "D", "fwd_ms", "bwd_ms", "fwd_bwd_ms", "fwd_tflops", "bwd_tflops", "fwd_bwd_tflops",
                     "mem_before_bwd_gib", "peak_gib"});
  for (const auto& r : rows) {
    const std::string varlen = r.c.documents.empty() ? "no" : str(r.c.documents.size(), " docs");
    std::vector<std::string> cells{name_of(r.c.impl),          kernels_cell(r.c),
                                   r.c.deterministic ? "yes" : "no",
                                   name_of(r.c.dtype),         r.c.causal ? "yes" : "no",
                                   mask_cell(r.c),             varlen,
                                   std::to_string(r.c.batch),  std::to_string(r.c.heads),
                                   std::to_string(kv_heads_of(r.c)),
                                   std::to_string(r.c.seqlen), std::to_string(r.c.head_dim)};
    if (r.oom) {
      cells.resize(20, "OOM");
    } else {
      for (double x : {r.fwd_ms, r.bwd_ms, r.fwd_bwd_ms}) cells.push_back(fixed(x, 3));
      for (double x : {r.fwd_tflops, r.bwd_tflops, r.fwd_bwd_tflops}) cells.push_back(fixed(x, 1));
      for (double x : {r.mem_before_bwd_gib, r.peak_gib}) cells.push_back(fixed(x, 3));
    }
    table.add_row(std::move(cells));
  }
  return csv ? table.csv() : table.markdown();
}

nlohmann::json attention_bench_document(const AttentionBenchConfig& config, const std::vector<AttentionBenchRow>& rows) {
  nlohmann::json out_rows = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json row{{"impl", name_of(r.c.impl)}, {"B", r.c.batch},       {"H", r.c.heads},
                       {"N", r.c.seqlen},           {"D", r.c.head_dim},    {"dtype", name_of(r.c.dtype)},
                       {"causal", r.c.causal},      {"deterministic", r.c.deterministic},
                       {"kernels", kernels_cell(r.c)}};
    if (kv_heads_of(r.c) != r.c.heads) row["Hkv"] = kv_heads_of(r.c);
    if (has_window_or_sinks(r.c))
      row.update({{"window_left", r.c.window_left},
                  {"window_right", r.c.window_right},
                  {"sink_tokens", r.c.sink_tokens}});
    if (!r.c.documents.empty()) row.update(varlen_row_fields(r.c.documents));
    if (r.oom) {
      row["oom"] = true;
      row["error"] = r.oom_message;
    } else {
      row.update({{"fwd_ms", r.fwd_ms},
                  {"bwd_ms", r.bwd_ms},
                  {"fwd_bwd_ms", r.fwd_bwd_ms},
                  {"fwd_tflops", r.fwd_tflops},
                  {"bwd_tflops", r.bwd_tflops},
                  {"fwd_bwd_tflops", r.fwd_bwd_tflops},
                  {"mem_before_bwd_gib", r.mem_before_bwd_gib},
                  {"peak_gib", r.peak_gib}});
    }
    out_rows.push_back(std::move(row));
  }
  nlohmann::json cfg{{"sweep", config.sweep},
                     {"warmup", config.timing.warmup},
                     {"repeats", config.timing.repeats},
                     {"max_seconds", config.max_seconds},
                     {"flush_l2", config.timing.flush_l2},
                     {"grad", config.ones_grad ? "ones (d sum(O))" : "random normal"},
                     {"timing", "median of CUDA-event timed repeats after warm-up"},
                     {"flops",
                      "forward 4*B*H*N^2*D, halved when causal (with a window or sink tokens 4*B*H*D times the "
                      "visible pairs; varlen: the sum over the documents); backward 2.5x forward"}};
  if (config.document_lengths)
    cfg["document_lengths"] = {{"min", config.document_lengths->first}, {"max", config.document_lengths->second},
                               {"distribution", "uniform"}, {"seed", config.seed}};
  const char* benchmark = config.sweep == "leaderboard" ? "attention-leaderboard" : "attention";
  return results_document(benchmark, config.device, std::move(cfg), std::move(out_rows));
}

}  // namespace ft::cli
