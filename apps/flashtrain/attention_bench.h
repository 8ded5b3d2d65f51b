// attention_bench.h — `flashtrain bench attention`: times attention forward, backward and
// forward+backward for one case or a sweep of cases (the CS336 sweeps: naive vs flash memory and
// latency, the causal scaling sweep, the leaderboard case; packed documents beside the dense kernel), with
// TFLOP/s, memory and OOM cells.
// No CLI11 here: cmd_bench_attention.cpp parses options into these structs.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/timer.h"
#include "core/device.h"
#include "core/dtype.h"
#include "ops/attention.h"

namespace ft::cli {

struct AttentionBenchCase {
  AttentionImpl impl = AttentionImpl::flash;
  std::int64_t batch = 1, heads = 1, seqlen = 1024, head_dim = 64;
  DType dtype = DType::bf16;
  bool causal = true;
  bool deterministic = true;  // AttentionOptions::deterministic (the CUDA flash backward's dQ scheme)
  FlashKernels kernels = FlashKernels::auto_select;  // AttentionOptions::kernels (CUDA flash only)
  std::int64_t kv_heads = 0;  // K and V heads (grouped-query attention when fewer than heads); 0: heads
  // AttentionOptions::window_left, window_right (-1: unbounded) and sink_tokens.
  std::int64_t window_left = -1, window_right = -1, sink_tokens = 0;
  // Varlen (packed documents, varlen_bench.h): the documents' lengths, packed into one sequence of seqlen =
  // their sum (batch 1); empty = a dense case.
  std::vector<std::int32_t> documents;
};

struct AttentionBenchRow {
  AttentionBenchCase c;  // as run: kernels resolved to sm80 / sm90 for CUDA flash, deterministic as effective
  bool oom = false;
  std::string oom_message;
  double fwd_ms = 0, bwd_ms = 0, fwd_bwd_ms = 0;       // medians
  double fwd_tflops = 0, bwd_tflops = 0, fwd_bwd_tflops = 0;
  double mem_before_bwd_gib = 0;  // flashtrain-held device memory after forward, before backward
  double peak_gib = 0;            // peak flashtrain-held device memory over forward + backward
};

struct AttentionBenchConfig {
  std::string sweep = "custom";  // memory | scaling | leaderboard | varlen | custom
  std::vector<AttentionImpl> impls{AttentionImpl::flash};
  std::vector<std::int64_t> batch{1}, heads{1}, seqlens{1024}, head_dims{64};
  std::vector<DType> dtypes{DType::bf16};
  bool causal = true;
  std::vector<bool> deterministic{true};  // backward modes: true = fixed-order sums, false = atomic dQ
  std::vector<FlashKernels> kernels{FlashKernels::auto_select};  // CUDA flash kernel families
  std::vector<std::int64_t> kv_heads{0};  // K/V heads; 0: as many as the query heads
  std::int64_t window_left = -1, window_right = -1, sink_tokens = 0;  // the mask beside `causal`
  // Varlen sweep: packed documents of lengths uniform in [min, max] (seeded by seed), as many tokens as the
  // first batch x seqlen, run before the dense cases; none = no varlen case.
  std::optional<std::pair<std::int64_t, std::int64_t>> document_lengths;
  Device device = Device::cpu();
  TimingOptions timing{.warmup = 3, .repeats = 100, .flush_l2 = false};
  double max_seconds = 2.0;  // per measurement: fewer repeats (>= 5) when a case is slow
  bool ones_grad = false;    // dO = 1, the gradient of sum(O) (leaderboard); else random normal
  std::uint64_t seed = 0;
};

// The preset sweeps: "memory" (naive vs flash, batch 8, one head, d 16..128 x N 256..16384, fp32,
// non-causal), "scaling" (batch 1, causal, N 128..65536, d 16..128, bf16 and fp32, flash and naive),
// "leaderboard" ((16, 16384, 64), bf16, causal, fwd+bwd of sum(O), flash, both backward modes), "varlen"
// (131072 tokens of documents 256..16384 long, Hq 32, Hkv 8, D 128, bf16, causal, beside the dense kernel at
// (16, 8192)). Throws for other names.
AttentionBenchConfig preset_sweep(const std::string& name, Device device);

// Forward FLOPs 4*B*H*N^2*D (halved when causal), or with a window or sink tokens 4*B*H*D times the visible
// (query, key) pairs; varlen: the sum over the documents, the FLOPs the documents need. H counts the query
// heads. Backward = 2.5x forward.
double attention_forward_flops(const AttentionBenchCase& c);

// The case's K/V heads (its heads when kv_heads is 0).
std::int64_t kv_heads_of(const AttentionBenchCase& c);

// Times one case; an out-of-memory failure gives a row with oom = true instead of throwing. The row's case
// says what ran: for CUDA flash the kernel family auto resolved to.
AttentionBenchRow run_attention_bench_case(const AttentionBenchCase& c, const AttentionBenchConfig& config);

// Every combination of the config's lists, in order impl, kernels, deterministic, dtype, head_dim, seqlen,
// batch, heads, kv_heads; kernels and deterministic vary only for CUDA flash. With document_lengths, each (impl, ..., head_dim) first gets its varlen cases (heads,
// kv_heads).
std::vector<AttentionBenchCase> expand_cases(const AttentionBenchConfig& config);

// q, k, v <- seeded normal draws; d_o <- ones (config.ones_grad) or seeded normal draws.
void fill_bench_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& d_o,
                       const AttentionBenchConfig& config);

// The attention options of a case (its mask, implementation, backward mode and kernels).
AttentionOptions bench_options(const AttentionBenchCase& c);

// Times one case's forward, backward and forward+backward into row (medians, TFLOP/s from the row's case,
// memory before the backward and peak); forward runs once before backward is first timed. row.c holds the
// kernels that run.
void time_attention_passes(AttentionBenchRow& row, const std::function<void()>& forward,
                           const std::function<void()>& backward, const AttentionBenchConfig& config);

// Whether two rows ran the same thing (so a sweep keeps only the first).
bool same_case(const AttentionBenchCase& a, const AttentionBenchCase& b);

// Markdown table (or CSV) of rows; OOM cells read "OOM".
std::string format_attention_bench(const std::vector<AttentionBenchRow>& rows, bool csv);

// Results document: benchmark "attention-leaderboard" for the leaderboard sweep, else "attention".
nlohmann::json attention_bench_document(const AttentionBenchConfig& config, const std::vector<AttentionBenchRow>& rows);

}  // namespace ft::cli
