// test_ops_cuda_gate.cpp — every op family given CUDA tensors raises ErrorKind::unsupported naming the
// op and saying its CUDA implementation is not built yet (the one shared device gate).
#include <gtest/gtest.h>

#include "ops/adamw.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "optim/grad_clip.h"
#include "ops/linear.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "test_ops_util.h"

namespace ft {
namespace {

void expect_gate(const std::function<void()>& fn, const std::string& op) {
  test::expect_error(fn, ErrorKind::unsupported, {op, "cuda:0", "CUDA implementation of " + op + " is not built yet"});
}

TEST(CudaGate, EveryOpRejectsCudaTensorsUntilItsKernelExists) {
  using test::cuda_view;
  const Tensor x = cuda_view({2, 3, 8}), w = cuda_view({4, 8}), y = cuda_view({2, 3, 4}), rows = cuda_view({2, 3});
  const Tensor vec = cuda_view({8}), table = cuda_view({10, 8}), logits = cuda_view({6, 10});
  const std::int32_t ids[6] = {};
  const TokenIds cuda_ids{ids, {2, 3}, Device::cuda(0)};
  expect_gate([&] { linear_forward(y, x, w); }, "linear_forward");
  expect_gate([&] { linear_backward({x, w}, y, x, w); }, "linear_backward");
  expect_gate([&] { embedding_forward(x, cuda_ids, table); }, "embedding_forward");
  expect_gate([&] { embedding_backward(table, cuda_ids, x, false); }, "embedding_backward");
  expect_gate([&] { rmsnorm_forward(x, rows, x, vec); }, "rmsnorm_forward");
  expect_gate([&] { rmsnorm_backward({x, vec}, x, x, vec, rows); }, "rmsnorm_backward");
  expect_gate([&] { rope_forward(cuda_view({2, 3, 4, 8})); }, "rope_forward");
  expect_gate([&] { rope_backward(cuda_view({2, 3, 4, 8})); }, "rope_backward");
  expect_gate([&] { swiglu_forward(x, x, x); }, "swiglu_forward");
  expect_gate([&] { swiglu_backward(x, x, x, x, x); }, "swiglu_backward");
  expect_gate([&] { cross_entropy(logits, cuda_ids, logits); }, "cross_entropy");
  expect_gate([&] { adamw_step(vec, vec, vec, vec, {}, 1); }, "adamw_step");
  expect_gate([&] { sgd_step(vec, vec, 0.1); }, "sgd_step");
  expect_gate([&] { grad_sum_squares({vec}); }, "grad_sum_squares");
  expect_gate([&] { clip_grad_norm({vec}, 1.0); }, "grad_sum_squares");
  expect_gate([&] { scale_tensors({vec}, 0.5); }, "scale_tensors");
  expect_gate([&] { residual_add(x, x); }, "residual_add");
}

}  // namespace
}  // namespace ft
