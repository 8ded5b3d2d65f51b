// test_ops_cuda_gate.cpp — device checks every op family makes before dispatching: a call mixing host and
// CUDA tensors (or ids) is rejected with invalid_argument naming the op, the argument and both devices,
// before any data is touched; in a build without CUDA, all-CUDA calls raise unsupported saying so.
// The CUDA views here are never dereferenced.
#include <gtest/gtest.h>

#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "test_ops_util.h"

namespace ft {
namespace {

using test::cuda_view;

void expect_mixed(const std::function<void()>& fn, const std::string& op, const std::string& name,
                  const std::string& expected, const std::string& given) {
  test::expect_error(fn, ErrorKind::invalid_argument,
                     {op, name, "wrong device", "expected " + expected, "given " + given});
}

TEST(DeviceChecks, MixedDeviceCallsAreRejectedBeforeDispatch) {
  const auto x = test::zeros({2, 3, 8}), w = test::zeros({4, 8}), y = test::zeros({2, 3, 4});
  const auto rows = test::zeros({2, 3}), vec = test::zeros({8}), table = test::zeros({10, 8});
  const auto logits = test::zeros({6, 10});
  const std::int32_t host_ids[6] = {};
  const TokenIds ids{host_ids, {2, 3}, Device::cpu()};
  const TokenIds cuda_ids{host_ids, {2, 3}, Device::cuda(0)};
  const std::string cpu = "cpu", cuda = "cuda:0";

  expect_mixed([&] { linear_forward(y, x, cuda_view({4, 8})); }, "linear_forward", "w", cpu, cuda);
  expect_mixed([&] { linear_backward({x, cuda_view({4, 8})}, y, x, w); }, "linear_backward", "dw", cpu, cuda);
  expect_mixed([&] { embedding_forward(x, cuda_ids, table); }, "embedding_forward", "ids", cpu, cuda);
  expect_mixed([&] { embedding_backward(table, ids, cuda_view({2, 3, 8}), false); }, "embedding_backward", "dout",
               cpu, cuda);
  expect_mixed([&] { rmsnorm_forward(cuda_view({2, 3, 8}), rows, x, vec); }, "rmsnorm_forward", "y", cpu, cuda);
  expect_mixed([&] { rmsnorm_backward({x, cuda_view({8})}, x, x, vec, rows); }, "rmsnorm_backward", "dw", cpu, cuda);
  expect_mixed([&] { swiglu_forward(x, x, cuda_view({2, 3, 8})); }, "swiglu_forward", "b", cpu, cuda);
  expect_mixed([&] { swiglu_backward(x, cuda_view({2, 3, 8}), x, x, x); }, "swiglu_backward", "db", cpu, cuda);
  expect_mixed([&] { swiglu_recompute_backward(cuda_view({2, 3, 8}), x, x, x, x, x); }, "swiglu_recompute_backward",
               "h", cpu, cuda);
  expect_mixed([&] { cross_entropy(logits, ids, cuda_view({6, 10})); }, "cross_entropy", "dlogits", cpu, cuda);
  expect_mixed([&] { cross_entropy(cuda_view({6, 10}), ids, Tensor()); }, "cross_entropy", "targets", cuda, cpu);
  expect_mixed([&] { adamw_step(vec, vec, cuda_view({8}), vec, {}, 1); }, "adamw_step", "exp_avg", cpu, cuda);
  expect_mixed([&] { sgd_step(vec, cuda_view({8}), 0.1); }, "sgd_step", "grads", cpu, cuda);
  expect_mixed([&] { grad_sum_squares({vec, cuda_view({8})}); }, "grad_sum_squares", "tensor 1", cpu, cuda);
  expect_mixed([&] { clip_grad_norm({cuda_view({8}), vec}, 1.0); }, "grad_sum_squares", "tensor 1", cuda, cpu);
  expect_mixed([&] { scale_tensors({vec, cuda_view({8})}, 0.5); }, "scale_tensors", "tensor 1", cpu, cuda);
  expect_mixed([&] { residual_add(x, cuda_view({2, 3, 8})); }, "residual_add", "y", cpu, cuda);
  expect_mixed([&] { cast(cuda_view({2, 3, 8}, DType::bf16), x); }, "cast", "dst", cpu, cuda);
}

#if !FT_HAS_CUDA
void expect_no_cuda(const std::function<void()>& fn, const std::string& op) {
  test::expect_error(fn, ErrorKind::unsupported, {op, "cuda:0", "has no CUDA"});
}

TEST(DeviceChecks, CudaTensorsNeedACudaBuild) {
  const Tensor x = cuda_view({2, 3, 8}), w = cuda_view({4, 8}), y = cuda_view({2, 3, 4}), rows = cuda_view({2, 3});
  const Tensor vec = cuda_view({8}), table = cuda_view({10, 8}), logits = cuda_view({6, 10});
  const std::int32_t ids[6] = {};
  const TokenIds cuda_ids{ids, {2, 3}, Device::cuda(0)};
  expect_no_cuda([&] { linear_forward(y, x, w); }, "linear_forward");
  expect_no_cuda([&] { linear_backward({x, w}, y, x, w); }, "linear_backward");
  expect_no_cuda([&] { embedding_forward(x, cuda_ids, table); }, "embedding_forward");
  expect_no_cuda([&] { embedding_backward(table, cuda_ids, x, false); }, "embedding_backward");
  expect_no_cuda([&] { rmsnorm_forward(x, rows, x, vec); }, "rmsnorm_forward");
  expect_no_cuda([&] { rmsnorm_backward({x, vec}, x, x, vec, rows); }, "rmsnorm_backward");
  expect_no_cuda([&] { rope_forward(cuda_view({2, 3, 4, 8})); }, "rope_forward");
  expect_no_cuda([&] { rope_backward(cuda_view({2, 3, 4, 8})); }, "rope_backward");
  expect_no_cuda([&] { swiglu_forward(x, x, x); }, "swiglu_forward");
  expect_no_cuda([&] { swiglu_backward(x, x, x, x, x); }, "swiglu_backward");
  expect_no_cuda([&] { swiglu_recompute_backward(x, x, x, x, x, x); }, "swiglu_recompute_backward");
  expect_no_cuda([&] { cross_entropy(logits, cuda_ids, logits); }, "cross_entropy");
  expect_no_cuda([&] { adamw_step(vec, vec, vec, vec, {}, 1); }, "adamw_step");
  expect_no_cuda([&] { sgd_step(vec, vec, 0.1); }, "sgd_step");
  expect_no_cuda([&] { grad_sum_squares({vec}); }, "grad_sum_squares");
  expect_no_cuda([&] { scale_tensors({vec}, 0.5); }, "scale_tensors");
  expect_no_cuda([&] { residual_add(x, x); }, "residual_add");
  expect_no_cuda([&] { cast(cuda_view({2, 3, 8}, DType::bf16), x); }, "cast");
  expect_no_cuda([&] { fill(x, 0.0); }, "fill");
}
#endif

}  // namespace
}  // namespace ft
