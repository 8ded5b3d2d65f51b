// test_ops_embedding.cpp — embedding gather, its scatter-add backward against finite differences
// (repeated ids included), accumulation, and errors for out-of-range ids and malformed calls.
#include <gtest/gtest.h>

#include "ops/embedding.h"
#include "test_ops_util.h"

namespace ft {
namespace {

using test::expect_close;
using test::normals;
using test::tensor_of;

constexpr std::int64_t B = 2, T = 5, vocab = 11, d = 70;  // d spans two backward column chunks

// out (n, d) = weight[ids] in double.
std::vector<double> reference(const std::vector<double>& weight, const std::vector<std::int32_t>& ids) {
  std::vector<double> out;
  for (std::int32_t id : ids) out.insert(out.end(), weight.begin() + id * d, weight.begin() + (id + 1) * d);
  return out;
}

const std::vector<std::int32_t> kIds = {3, 0, 10, 3, 7, 7, 7, 1, 3, 9};  // (B, T), repeats on purpose

TEST(Embedding, ForwardGathersRows) {
  const auto w = normals(vocab * d, 1);
  auto wt = tensor_of({vocab, d}, DType::f32, w);
  OwnedTensor out({B, T, d}, DType::f32, Device::cpu(), "test");
  embedding_forward(out, {kIds.data(), {B, T}}, wt);
  EXPECT_EQ(read_as_double(out), reference(w, kIds));
}

TEST(Embedding, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const auto w = normals(vocab * d, 2), g = normals(B * T * d, 3);
  auto dout = tensor_of({B, T, d}, DType::f32, g);
  auto dw = tensor_of({vocab, d}, DType::f32, normals(vocab * d, 4));  // stale values must be overwritten
  embedding_backward(dw, {kIds.data(), {B, T}}, dout, false);
  const auto numeric = test::numeric_gradient([&](const std::vector<double>& ws) { return test::dot(reference(ws, kIds), g); }, w);
  expect_close(read_as_double(dw), numeric, 1e-7, "dweight");

  const auto prior = normals(vocab * d, 5);
  auto summed = tensor_of({vocab, d}, DType::f32, prior);
  embedding_backward(summed, {kIds.data(), {B, T}}, dout, true);
  auto expected = numeric;
  for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += prior[i];
  expect_close(read_as_double(summed), expected, 1e-6, "dweight accumulated");
}

TEST(Embedding, OutOfRangeIdNamesIdPositionAndVocab) {
  auto w = test::zeros({vocab, d});
  OwnedTensor out({B, T, d}, DType::f32, Device::cpu(), "test");
  for (std::int32_t bad : {static_cast<std::int32_t>(vocab), -1}) {
    std::vector<std::int32_t> ids = kIds;
    ids[7] = bad;  // position [1, 2]
    test::expect_error([&] { embedding_forward(out, {ids.data(), {B, T}}, w); }, ErrorKind::invalid_argument,
                       {"id " + std::to_string(bad), "position [1, 2]", "vocab size 11"});
    test::expect_error([&] { embedding_backward(w, {ids.data(), {B, T}}, out, false); }, ErrorKind::invalid_argument,
                       {"id " + std::to_string(bad), "position [1, 2]", "vocab size 11"});
  }
}

TEST(Embedding, MalformedCallsNameExpectedAndGiven) {
  auto w = test::zeros({vocab, d});
  auto out_wrong = test::zeros({B, T, d + 1});
  auto w_bf16 = test::zeros({vocab, d}, DType::bf16);
  auto out = test::zeros({B, T, d});
  test::expect_error([&] { embedding_forward(out_wrong, {kIds.data(), {B, T}}, w); }, ErrorKind::invalid_argument,
                     {"out", "expected [2, 5, 70]", "given [2, 5, 71]"});
  test::expect_error([&] { embedding_forward(out, {kIds.data(), {B, T + 1}}, w); }, ErrorKind::invalid_argument,
                     {"expected [2, 6, 70]", "given [2, 5, 70]"});
  test::expect_error([&] { embedding_forward(out, {kIds.data(), {B, T}}, w_bf16); }, ErrorKind::invalid_argument,
                     {"weight", "expected fp32", "given bf16"});
  test::expect_error([&] { embedding_forward(out, {kIds.data(), {B, T}, Device::cuda(0)}, w); },
                     ErrorKind::invalid_argument, {"ids", "expected cpu", "given cuda:0"});
}

}  // namespace
}  // namespace ft
