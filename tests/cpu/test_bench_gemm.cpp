// test_bench_gemm.cpp — `flashtrain bench gemm`'s problem list (apps/flashtrain/gemm_bench.h): the 8B step's
// GEMMs add up to the model's training FLOPs (6 x block parameters x tokens, plus 2 x the recomputed
// projections' parameters x tokens, plus the LM head's 6 x V x d x tokens), the LM head's chunking, and the
// errors of a bad selection; the command on a CPU build says it needs CUDA. (The timing itself:
// gpu_test_gemm_autotune_cuda.)
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"
#include "flashtrain/gemm_bench.h"

namespace ft::cli {
namespace {

double flops(const GemmBenchProblem& p) {
  return 2.0 * static_cast<double>(p.problem.m) * static_cast<double>(p.problem.n) * static_cast<double>(p.problem.k) *
         static_cast<double>(p.calls);
}

GemmBenchConfig eight_b() {
  GemmBenchConfig c;
  c.model = model_config("8b");
  return c;
}

TEST(BenchGemmProblems, AddUpToTheStepsFlops) {
  for (const Recompute recompute : {Recompute::none, Recompute::selective_qkv, Recompute::selective}) {
    SCOPED_TRACE(name_of(recompute));
    GemmBenchConfig c = eight_b();
    c.recompute = recompute;
    const double T = 32768, d = 4096, f = 11008, V = 151936, L = 34;
    double block = 0, head = 0;
    for (const auto& p : training_gemm_problems(c)) (p.name.rfind("lm_head", 0) == 0 ? head : block) += flops(p);
    const double block_params = 4 * d * d + 3 * d * f;
    const double again = recompute == Recompute::none           ? 0
                         : recompute == Recompute::selective_qkv ? 2 * T * (d * d + 2 * d * f)
                                                                 : 2 * T * (4 * d * d + 2 * d * f);
    EXPECT_DOUBLE_EQ(block, L * 6 * T * block_params + (L - 1) * again);
    EXPECT_DOUBLE_EQ(head, 6 * T * V * d);
  }
}

TEST(BenchGemmProblems, LmHeadChunksAndGroups) {
  GemmBenchConfig c = eight_b();
  c.loss_chunk = 1024, c.loss_group = 2;
  std::map<std::string, GemmBenchProblem> by_name;
  for (const auto& p : training_gemm_problems(c)) by_name[p.name] = p;
  EXPECT_EQ(by_name["lm_head.logits"].problem.m, 1024);
  EXPECT_EQ(by_name["lm_head.logits"].calls, 32);
  EXPECT_EQ(by_name["lm_head.dx"].problem.m, 2048);
  EXPECT_EQ(by_name["lm_head.dx"].calls, 16);
  EXPECT_EQ(by_name["lm_head.dw"].problem.k, 2048);
  EXPECT_EQ(by_name["lm_head.dw"].calls + by_name["lm_head.dw+acc"].calls, 16);
  EXPECT_EQ(by_name["lm_head.dw+acc"].problem.beta, 1.0f);
  EXPECT_TRUE(by_name["w2.dw"].problem.a_transpose);
  EXPECT_EQ(by_name["w1+w3.fused.fwd"].calls, 0);
}

TEST(BenchGemmProblems, RejectsUnknownNamesAndCpuRuns) {
  GemmBenchConfig c = eight_b();
  c.only = {"w9.fwd"};
  try {
    selected_gemm_problems(c);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("unknown problem 'w9.fwd'"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("lm_head.dw+acc"), std::string::npos) << e.message();
  }
  c.only = {"lm_head.dx", "w2.dw"};
  const auto selected = selected_gemm_problems(c);
  ASSERT_EQ(selected.size(), 2u);
  EXPECT_EQ(selected[0].name, "w2.dw");  // the step's order
  c.device = Device::cpu();
  EXPECT_THROW(run_gemm_bench(c, nullptr), Error);
  c.tokens = 0;
  EXPECT_THROW(training_gemm_problems(c), Error);
}

}  // namespace
}  // namespace ft::cli
