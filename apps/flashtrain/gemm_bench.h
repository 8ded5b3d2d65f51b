// gemm_bench.h — `flashtrain bench gemm`: every GEMM problem of a model's bf16 training step (the block's
// forward, recomputed and backward GEMMs as ops/linear.cpp states them, and the fused LM head's chunked
// GEMMs), each with cuBLASLt's candidate algorithms timed (ops/gemm_candidates.h), against the one the plan
// runs today; per problem the calls a step makes, so the step's GEMM time follows for each choice.
// No CLI11 here: cmd_bench_gemm.cpp parses options into GemmBenchConfig.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/config.h"
#include "ops/gemm_candidates.h"

namespace ft::cli {

struct GemmBenchConfig {
  ModelConfig model;                        // d_model, d_ff, num_layers, vocab_size
  std::int64_t tokens = 32768;              // rows of the block's GEMMs (batch x context on one rank)
  std::int64_t loss_chunk = 1024;           // rows of the LM head's logits GEMM
  std::int64_t loss_group = 2;              // chunks per LM-head backward GEMM (the dlogits tile's)
  Recompute recompute = Recompute::selective_qkv;  // which forward GEMMs run again in the backward
  std::vector<std::string> only;            // problem names to run (empty: all)
  GemmSweepOptions sweep;
  Device device = Device::cuda(0);
};

struct GemmBenchProblem {
  std::string name;       // "w2.dw", "lm_head.logits", ...
  GemmProblem problem;
  std::int64_t calls = 0;  // per training step (one rank)
};

struct GemmBenchResult {
  GemmBenchProblem problem;
  std::vector<GemmCandidateTime> candidates;  // the heuristic's order
};

// The step's GEMM problems for config (its model shape, tokens, loss chunking and recomputation).
std::vector<GemmBenchProblem> training_gemm_problems(const GemmBenchConfig& config);

// The problems of training_gemm_problems that config.only names (all when empty); ft::Error listing the known
// names for an unknown one.
std::vector<GemmBenchProblem> selected_gemm_problems(const GemmBenchConfig& config);

// Times each problem of selected_gemm_problems on config.device; progress (or nullptr) gets one line per
// problem.
std::vector<GemmBenchResult> run_gemm_bench(const GemmBenchConfig& config, std::ostream* progress);

// TFLOP/s of one run of problem in ms.
double gemm_tflops(const GemmProblem& problem, double ms);

// Markdown (or CSV) table: per problem the planned, fastest and autotuned candidates, and the step's totals.
std::string format_gemm_summary(const std::vector<GemmBenchResult>& results, bool csv);
// Markdown (or CSV) table of every candidate of every problem.
std::string format_gemm_candidates(const std::vector<GemmBenchResult>& results, bool csv);

// The results document (benchmark "gemm"): one row per problem and candidate.
nlohmann::json gemm_bench_document(const GemmBenchConfig& config, const std::vector<GemmBenchResult>& results);

}  // namespace ft::cli
