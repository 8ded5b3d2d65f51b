// test_ops_cross_entropy.cpp — mean cross-entropy against a double reference, the fused dlogits against
// central finite differences (separate buffer, in place, bf16, grad_scale), chunks of a batch adding up to
// its mean (mean_rows, accumulate_loss), stability with huge logits, out-of-range targets and malformed calls.
#include <gtest/gtest.h>

#include "ops/cross_entropy.h"
#include "test_ops_util.h"

namespace ft {
namespace {

using test::expect_close;
using test::normals;
using test::tensor_of;

constexpr std::int64_t B = 2, T = 3, rows = B * T, vocab = 9;
const std::vector<std::int32_t> kTargets = {0, 8, 4, 4, 1, 7};  // (B, T)

double reference(const std::vector<double>& logits) {
  double total = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    double max = logits[r * vocab];
    for (std::int64_t j = 1; j < vocab; ++j) max = std::max(max, logits[r * vocab + j]);
    double sum = 0;
    for (std::int64_t j = 0; j < vocab; ++j) sum += std::exp(logits[r * vocab + j] - max);
    total += max + std::log(sum) - logits[r * vocab + kTargets[r]];
  }
  return total / rows;
}

TEST(CrossEntropy, LossAndGradientMatchReference) {
  const auto x = normals(rows * vocab, 1, 3.0);
  const auto numeric = test::numeric_gradient(reference, x);
  auto logits = tensor_of({B, T, vocab}, DType::f32, x);
  OwnedTensor dlogits({B, T, vocab}, DType::f32, Device::cpu(), "test");
  const double loss = cross_entropy(logits, {kTargets.data(), {B, T}}, dlogits);
  EXPECT_NEAR(loss, reference(x), 1e-6);
  expect_close(read_as_double(dlogits), numeric, 1e-6, "dlogits");

  // Forward only leaves nothing written; in place overwrites the logits with the same gradient.
  EXPECT_EQ(cross_entropy(logits, {kTargets.data(), {B, T}}, Tensor()), loss);
  EXPECT_EQ(cross_entropy(logits, {kTargets.data(), {B, T}}, logits), loss);
  EXPECT_EQ(read_as_double(logits), read_as_double(dlogits));

  // grad_scale multiplies, a bf16 dlogits is the same gradient rounded once.
  auto again = tensor_of({rows, vocab}, DType::f32, x);
  OwnedTensor scaled({rows, vocab}, DType::f32, Device::cpu(), "test");
  CrossEntropyOptions quarter;
  quarter.grad_scale = 0.25;
  cross_entropy(again, {kTargets.data(), {rows}}, scaled, quarter);
  auto expected = numeric;
  for (auto& v : expected) v *= 0.25;
  expect_close(read_as_double(scaled), expected, 1e-6, "scaled dlogits");
  OwnedTensor d16({rows, vocab}, DType::bf16, Device::cpu(), "test");
  cross_entropy(again, {kTargets.data(), {rows}}, d16);
  expect_close(read_as_double(d16), numeric, 1e-2, "bf16 dlogits");
}

TEST(CrossEntropy, ChunksWithMeanRowsAddUpToTheWholeMean) {
  const auto x = normals(rows * vocab, 4, 2.0);
  const auto whole = tensor_of({rows, vocab}, DType::f32, x);
  OwnedTensor dwhole({rows, vocab}, DType::f32, Device::cpu(), "test");
  const double want = cross_entropy(whole, {kTargets.data(), {rows}}, dwhole);
  // Rows 0..3, then 4..5, each divided by all 6 rows; the second call adds its share.
  double got = -1;
  OwnedTensor dchunks({rows, vocab}, DType::f32, Device::cpu(), "test");
  for (auto [first, count] : {std::pair<std::int64_t, std::int64_t>{0, 4}, {4, 2}}) {
    const auto part = tensor_of({count, vocab}, DType::f32,
                                std::vector<double>(x.begin() + first * vocab, x.begin() + (first + count) * vocab));
    CrossEntropyOptions o;
    o.mean_rows = rows;
    o.accumulate_loss = first > 0;
    cross_entropy_to(&got, part, {kTargets.data() + first, {count}}, dchunks->narrow(0, first, count), o);
  }
  EXPECT_NEAR(got, want, 1e-12 * want);
  EXPECT_EQ(read_as_double(dchunks), read_as_double(dwhole));  // the same scale: grad_scale / 6
  test::expect_error(
      [&] {
        CrossEntropyOptions o;
        o.mean_rows = rows - 1;
        cross_entropy(whole, {kTargets.data(), {rows}}, Tensor(), o);
      },
      ErrorKind::invalid_argument, {"mean_rows", "6 rows", "5"});
  test::expect_error(
      [&] {
        CrossEntropyOptions o;
        o.accumulate_loss = true;
        cross_entropy(whole, {kTargets.data(), {rows}}, Tensor(), o);
      },
      ErrorKind::invalid_argument, {"accumulate_loss", "cross_entropy_to"});
}

TEST(CrossEntropy, StableForHugeLogits) {
  auto x = normals(rows * vocab, 2);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < vocab; ++j) x[r * vocab + j] += (r % 2 ? -1.0 : 1.0) * 1e4;  // exp overflows naively
  auto logits = tensor_of({rows, vocab}, DType::f32, x);
  OwnedTensor dlogits({rows, vocab}, DType::f32, Device::cpu(), "test");
  const double loss = cross_entropy(logits, {kTargets.data(), {rows}}, dlogits);
  ASSERT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(loss, reference(x), 1e-3);  // fp32 logits near 1e4 carry ~1e-3 absolute rounding
  for (std::int64_t r = 0; r < rows; ++r) {
    double row_sum = 0;
    for (std::int64_t j = 0; j < vocab; ++j) row_sum += read_as_double(dlogits)[r * vocab + j];
    EXPECT_NEAR(row_sum, 0.0, 1e-6) << "softmax - onehot sums to 0 in row " << r;
  }
}

TEST(CrossEntropy, OutOfRangeTargetsAndMalformedCalls) {
  auto logits = test::zeros({rows, vocab});
  std::vector<std::int32_t> bad = kTargets;
  bad[4] = vocab;
  test::expect_error([&] { cross_entropy(logits, {bad.data(), {B, T}}, Tensor()); }, ErrorKind::invalid_argument,
                     {"cross_entropy", "id 9", "position [1, 1]", "vocab size 9"});
  test::expect_error([&] { cross_entropy(logits, {kTargets.data(), {rows - 1}}, Tensor()); }, ErrorKind::invalid_argument,
                     {"targets", "expected 6", "given shape [5]"});
  auto wrong = test::zeros({rows, vocab + 1});
  test::expect_error([&] { cross_entropy(logits, {kTargets.data(), {rows}}, wrong); }, ErrorKind::invalid_argument,
                     {"dlogits", "expected [6, 9]", "given [6, 10]"});
  auto l16 = test::zeros({rows, vocab}, DType::bf16);
  test::expect_error([&] { cross_entropy(l16, {kTargets.data(), {rows}}, Tensor()); }, ErrorKind::invalid_argument,
                     {"logits", "expected fp32", "given bf16"});
}

}  // namespace
}  // namespace ft
