// attention_check.h — `flashtrain attention check`: runs one attention implementation forward and
// backward on seeded random inputs and compares O, L, dQ, dK, dV (and dsinks) with the CPU naive
// reference (double accumulation) on the same values, tensor by tensor, against a dtype tolerance.
// No CLI11 here: the subcommand (cmd_attention_check.cpp) and the tests call these directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "ops/attention.h"

namespace ft::cli {

// Memory layout of q, k, v, o and their gradients (the logical shape is always (B, H, N, D)).
enum class Layout { bhnd, bnhd };
const char* name_of(Layout layout);
Layout parse_layout(const std::string& text);  // "bhnd" | "bnhd"

struct AttentionCheckConfig {
  std::int64_t batch = 2;
  std::int64_t heads = 8;                    // query heads Hq
  std::optional<std::int64_t> kv_heads;      // Hkv, default Hq; Hq % Hkv == 0
  std::int64_t seqlen_q = 256;               // Nq
  std::optional<std::int64_t> seqlen_k;      // Nk, default Nq
  std::int64_t head_dim = 64;                // D
  DType dtype = DType::bf16;
  bool causal = false;
  std::int64_t window_left = -1;             // -1 = unbounded
  std::int64_t window_right = -1;            // -1 = unbounded
  std::int64_t sink_tokens = 0;
  bool sink_logits = false;                  // random fp32 sink logit per query head
  std::optional<double> scale;               // default 1/sqrt(D)
  Layout layout = Layout::bhnd;
  AttentionImpl impl = AttentionImpl::flash;
  std::optional<Device> device;              // default: cuda:0 when a GPU is visible, else cpu
  int block_q = 64;                          // CPU tiled implementation tiles
  int block_k = 64;
  std::uint64_t seed = 0;
  std::optional<double> tolerance;           // default: attention_check_tolerance(dtype, device)
  std::string json_path;                     // write the results document here when not empty
};

// Cross-option checks that need no tensors (sizes, head grouping, window, sinks, tiles); throws
// ft::Error naming the option, what was expected and what was given.
void check_attention_config(const AttentionCheckConfig& config);

// The device a config runs on: config.device, or cuda:0 when one is visible, else cpu.
Device resolve_device(const AttentionCheckConfig& config);

// Largest allowed relative error (max|x - ref| / max|ref|) for outputs of this dtype on this device:
// fp32 1e-4 on cpu and 1e-2 on cuda (TF32 tensor cores), fp16 1e-2, bf16 5e-2.
double attention_check_tolerance(DType dtype, Device device);

// How far x is from ref (same length, logical order). Non-finite mismatches count as infinite error;
// equal infinities (L = -inf for a row that sees no key) as none.
struct ErrorStats {
  double max_abs_err = 0;  // max_i |x_i - ref_i|
  double max_rel_err = 0;  // max_abs_err / max_i |ref_i| (0 when both are 0, inf when only ref is 0)
  double ref_max_abs = 0;  // max_i |ref_i| over finite ref_i
};
ErrorStats measure_error(const std::vector<double>& x, const std::vector<double>& ref);

struct TensorCheck {
  std::string name;  // "O", "L", "dQ", "dK", "dV", "dsinks"
  Shape shape;
  ErrorStats error;
  double tolerance = 0;
  bool pass = false;
};

struct AttentionCheckResult {
  AttentionCheckConfig config;  // with every default resolved (kv_heads, seqlen_k, device, tolerance)
  std::string device_name;      // describe_device(device)
  std::vector<TensorCheck> tensors;
  bool pass = false;            // every tensor passed
};

// Runs the check; throws ft::Error for invalid configurations or unavailable devices.
AttentionCheckResult run_attention_check(const AttentionCheckConfig& config);

// The human-readable report: configuration, one row per tensor, the verdict.
std::string format_attention_check(const AttentionCheckResult& result);

// The results document (bench/results_json.h) with benchmark "attention-check": config holds the
// resolved options, one row per tensor with max_abs_err, max_rel_err, ref_max_abs, tolerance, pass.
nlohmann::json attention_check_document(const AttentionCheckResult& result);

}  // namespace ft::cli
