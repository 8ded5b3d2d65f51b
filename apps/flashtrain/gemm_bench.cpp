// gemm_bench.cpp — the GEMM problems of a training step and their candidates' timings for `flashtrain bench
// gemm`: the problem list, the sweep, the tables and the results document.
#include "flashtrain/gemm_bench.h"

#include <algorithm>

#include "bench/report_table.h"
#include "bench/results_json.h"
#include "core/error.h"

namespace ft::cli {

namespace {

// D (m, n) = op(A) op(B) + beta D in bf16 operands, as ops/linear.cpp states its GEMMs.
GemmProblem bf16_gemm(std::int64_t m, std::int64_t n, std::int64_t k, bool a_t, bool b_t, DType out,
                      float beta = 0.0f) {
  GemmProblem p;
  p.m = m, p.n = n, p.k = k;
  p.operands = DType::bf16;
  p.out = out;
  p.a_transpose = a_t, p.b_transpose = b_t;
  p.beta = beta;
  return p;
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

const GemmCandidateTime* planned_of(const GemmBenchResult& r) {
  for (const auto& c : r.candidates)
    if (c.planned) return &c;
  return nullptr;
}
const GemmCandidateTime* autotuned_of(const GemmBenchResult& r) {
  for (const auto& c : r.candidates)
    if (c.autotuned) return &c;
  return planned_of(r);
}
// The fastest candidate a plan may run.
const GemmCandidateTime* fastest_of(const GemmBenchResult& r) {
  const GemmCandidateTime* best = nullptr;
  for (const auto& c : r.candidates)
    if (c.allowed && (!best || c.median_ms < best->median_ms)) best = &c;
  return best;
}

std::string shape_of(const GemmProblem& p) {
  return str(p.m, "x", p.n, "x", p.k, " ", p.a_transpose ? "T" : "N", p.b_transpose ? "T" : "N", " ",
             name_of(p.out), p.beta != 0.0f ? " +C" : "");
}

}  // namespace

std::vector<GemmBenchProblem> training_gemm_problems(const GemmBenchConfig& config) {
  const std::int64_t T = config.tokens, d = config.model.d_model, f = config.model.d_ff;
  const std::int64_t V = config.model.vocab_size, L = config.model.num_layers;
  FT_CHECK(T >= 1 && config.loss_chunk >= 1 && config.loss_group >= 1,
           "bench gemm: tokens, loss chunk and loss group must be >= 1, given ", T, ", ", config.loss_chunk, " and ",
           config.loss_group);
  const std::int64_t chunk = std::min(config.loss_chunk, T), group = std::min(chunk * config.loss_group, T);
  const std::int64_t groups = ceil_div(T, group);
  // Blocks whose forward GEMMs run again before their backward: all but the last (see Note [Recomputation]).
  const std::int64_t again = config.recompute == Recompute::none ? 0 : L - 1;
  const std::int64_t qkv_again = config.recompute == Recompute::selective_qkv ? 0 : again;
  const DType bf16 = DType::bf16, f32 = DType::f32;
  // Row-major as ops/linear.cpp states them: forward y = x w^T (A = x, B = w transposed); backward
  // dx = dy w (both plain); dw = dy^T x (A = dy transposed).
  return {
      {"qkv.fwd", bf16_gemm(T, 3 * d, d, false, true, bf16), L + qkv_again},
      {"out_proj.fwd+res", bf16_gemm(T, d, d, false, true, f32, 1.0f), L + again},
      {"w1|w3.fwd", bf16_gemm(T, f, d, false, true, bf16), 2 * (L + again)},
      {"w1+w3.fused.fwd", bf16_gemm(T, 2 * f, d, false, true, bf16), 0},  // not in the model: would fusing pay?
      {"w2.fwd+res", bf16_gemm(T, d, f, false, true, f32, 1.0f), L},
      {"w2.dx", bf16_gemm(T, f, d, false, false, bf16), L},
      {"w2.dw", bf16_gemm(d, f, T, true, false, f32), L},
      {"w3.dx", bf16_gemm(T, d, f, false, false, f32), L},
      {"w1.dx+acc", bf16_gemm(T, d, f, false, false, f32, 1.0f), L},
      {"w1|w3.dw", bf16_gemm(f, d, T, true, false, f32), 2 * L},
      {"out_proj.dx", bf16_gemm(T, d, d, false, false, bf16), L},
      {"out_proj.dw", bf16_gemm(d, d, T, true, false, f32), L},
      {"qkv.dx", bf16_gemm(T, d, 3 * d, false, false, f32), L},
      {"qkv.dw", bf16_gemm(3 * d, d, T, true, false, f32), L},
      {"lm_head.logits", bf16_gemm(chunk, V, d, false, true, f32), ceil_div(T, chunk)},
      {"lm_head.dx", bf16_gemm(group, d, V, false, false, f32), groups},
      {"lm_head.dw", bf16_gemm(V, d, group, true, false, f32), 1},
      {"lm_head.dw+acc", bf16_gemm(V, d, group, true, false, f32, 1.0f), groups - 1},
  };
}

double gemm_tflops(const GemmProblem& p, double ms) {
  return ms > 0 ? 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k) / (ms * 1e9)
                : 0.0;
}

std::vector<GemmBenchProblem> selected_gemm_problems(const GemmBenchConfig& config) {
  const std::vector<GemmBenchProblem> all = training_gemm_problems(config);
  const auto named = [&](const std::string& name) {
    return std::find_if(all.begin(), all.end(), [&](const GemmBenchProblem& p) { return p.name == name; });
  };
  std::string names;
  for (const auto& p : all) names += (names.empty() ? "" : ", ") + p.name;
  for (const auto& name : config.only)
    FT_CHECK(named(name) != all.end(), "bench gemm: unknown problem '", name, "'; the problems are ", names);
  if (config.only.empty()) return all;
  std::vector<GemmBenchProblem> selected;
  for (const auto& p : all)
    if (std::find(config.only.begin(), config.only.end(), p.name) != config.only.end()) selected.push_back(p);
  return selected;
}

std::vector<GemmBenchResult> run_gemm_bench(const GemmBenchConfig& config, std::ostream* progress) {
  std::vector<GemmBenchResult> results;
  for (const auto& p : selected_gemm_problems(config)) {
    GemmBenchResult r{p, time_gemm_candidates(p.problem, config.device, config.sweep)};
    if (progress) {
      const GemmCandidateTime* planned = planned_of(r);
      const GemmCandidateTime* best = fastest_of(r);
      *progress << p.name << " (" << shape_of(p.problem) << "): " << r.candidates.size() << " candidates, planned #"
                << (planned ? planned->index : -1) << " " << fixed(planned ? planned->median_ms : 0.0, 3)
                << " ms, fastest #" << (best ? best->index : -1) << " " << fixed(best ? best->median_ms : 0.0, 3)
                << " ms" << std::endl;
    }
    results.push_back(std::move(r));
  }
  return results;
}

std::string format_gemm_summary(const std::vector<GemmBenchResult>& results, bool csv) {
  ReportTable table({"problem", "shape", "calls", "planned", "planned_ms", "planned_tflops", "fastest", "fastest_ms",
                     "fastest_tflops", "autotuned", "autotuned_ms", "gain_pct"});
  double planned_total = 0, fastest_total = 0, autotuned_total = 0;
  for (const auto& r : results) {
    const GemmCandidateTime* p = planned_of(r);
    const GemmCandidateTime* b = fastest_of(r);
    const GemmCandidateTime* a = autotuned_of(r);
    if (!p || !b || !a) continue;
    const auto calls = static_cast<double>(r.problem.calls);
    planned_total += calls * p->median_ms, fastest_total += calls * b->median_ms;
    autotuned_total += calls * a->median_ms;
    const auto tflops = [&](const auto* c) { return fixed(gemm_tflops(r.problem.problem, c->median_ms), 1); };
    table.add_row({r.problem.name, shape_of(r.problem.problem), std::to_string(r.problem.calls),
                   std::to_string(p->index), fixed(p->median_ms, 3), tflops(p),
                   std::to_string(b->index), fixed(b->median_ms, 3), tflops(b),
                   std::to_string(a->index), fixed(a->median_ms, 3),
                   fixed(100.0 * (p->median_ms - b->median_ms) / p->median_ms, 1)});
  }
  table.add_row({"step total (calls x ms)", "-", "-", "-", fixed(planned_total, 1), "-", "-", fixed(fastest_total, 1),
                 "-", "-", fixed(autotuned_total, 1),
                 fixed(planned_total > 0 ? 100.0 * (planned_total - fastest_total) / planned_total : 0.0, 1)});
  return csv ? table.csv() : table.markdown();
}

std::string format_gemm_candidates(const std::vector<GemmBenchResult>& results, bool csv) {
  ReportTable table({"problem", "candidate", "algo", "tile", "stages", "cluster", "split_k", "reduction", "swizzle",
                     "custom", "workspace_mib", "allowed", "planned", "autotuned", "median_ms", "min_ms", "tflops"});
  for (const auto& r : results) {
    for (const auto& c : r.candidates) {
      const GemmAlgoInfo& a = c.algo;
      table.add_row({r.problem.name, std::to_string(c.index), std::to_string(a.algo_id), std::to_string(a.tile_id),
                     std::to_string(a.stages_id), std::to_string(a.cluster_shape_id), std::to_string(a.split_k),
                     std::to_string(a.reduction_scheme), std::to_string(a.swizzle), std::to_string(a.custom_option),
                     fixed(static_cast<double>(a.workspace_bytes) / (1 << 20), 1), c.allowed ? "yes" : "no",
                     c.planned ? "yes" : "", c.autotuned ? "yes" : "", fixed(c.median_ms, 3), fixed(c.min_ms, 3),
                     fixed(gemm_tflops(r.problem.problem, c.median_ms), 1)});
    }
  }
  return csv ? table.csv() : table.markdown();
}

nlohmann::json gemm_bench_document(const GemmBenchConfig& config, const std::vector<GemmBenchResult>& results) {
  nlohmann::json cfg = {{"model", config.model.name},
                        {"d_model", config.model.d_model},
                        {"d_ff", config.model.d_ff},
                        {"layers", config.model.num_layers},
                        {"vocab", config.model.vocab_size},
                        {"tokens", config.tokens},
                        {"loss_chunk", config.loss_chunk},
                        {"loss_group", config.loss_group},
                        {"recompute", name_of(config.recompute)},
                        {"candidates", config.sweep.candidates},
                        {"autotune_candidates", config.sweep.autotune_candidates},
                        {"warmup", config.sweep.warmup},
                        {"repeats", config.sweep.repeats}};
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : results) {
    const GemmProblem& p = r.problem.problem;
    for (const auto& c : r.candidates) {
      const GemmAlgoInfo& a = c.algo;
      rows.push_back({{"problem", r.problem.name},
                      {"m", p.m},
                      {"n", p.n},
                      {"k", p.k},
                      {"a_transpose", p.a_transpose},
                      {"b_transpose", p.b_transpose},
                      {"operands", name_of(p.operands)},
                      {"out", name_of(p.out)},
                      {"beta", p.beta},
                      {"calls_per_step", r.problem.calls},
                      {"candidate", c.index},
                      {"algo_id", a.algo_id},
                      {"tile_id", a.tile_id},
                      {"stages_id", a.stages_id},
                      {"cluster_shape_id", a.cluster_shape_id},
                      {"inner_shape_id", a.inner_shape_id},
                      {"split_k", a.split_k},
                      {"reduction_scheme", a.reduction_scheme},
                      {"swizzle", a.swizzle},
                      {"custom_option", a.custom_option},
                      {"workspace_bytes", a.workspace_bytes},
                      {"waves", a.waves},
                      {"allowed", c.allowed},
                      {"planned", c.planned},
                      {"autotuned", c.autotuned},
                      {"median_ms", c.median_ms},
                      {"min_ms", c.min_ms},
                      {"tflops", gemm_tflops(p, c.median_ms)}});
    }
  }
  return results_document("gemm", config.device, std::move(cfg), std::move(rows));
}

}  // namespace ft::cli
