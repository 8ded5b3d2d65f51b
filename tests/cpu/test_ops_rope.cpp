// test_ops_rope.cpp — RoPE on interleaved pairs against a double reference in both memory layouts and
// with a position offset, the backward against central finite differences, forward-then-backward as
// the identity, bf16 storage, per-token positions (packed documents), q's and k's head groups of a fused
// (B, T, 3, H, Dh) buffer rotated in one call as in two, rope_table as the angles rope_forward applies, and
// malformed calls.
#include <gtest/gtest.h>

#include "ops/rope.h"
#include "test_ops_util.h"

namespace ft {
namespace {

using test::expect_close;
using test::normals;

constexpr std::int64_t B = 2, H = 3, T = 5, Dh = 8;

// x (B, H, T, Dh) logical order -> rotated, in double.
std::vector<double> reference(const std::vector<double>& x, double theta, std::int64_t offset) {
  std::vector<double> y(x.size());
  for (std::int64_t row = 0; row < B * H * T; ++row) {
    const std::int64_t t = row % T;
    for (std::int64_t i = 0; i < Dh / 2; ++i) {
      const double angle = static_cast<double>(offset + t) * std::pow(theta, -2.0 * i / Dh);
      const double x0 = x[row * Dh + 2 * i], x1 = x[row * Dh + 2 * i + 1];
      y[row * Dh + 2 * i] = x0 * std::cos(angle) - x1 * std::sin(angle);
      y[row * Dh + 2 * i + 1] = x0 * std::sin(angle) + x1 * std::cos(angle);
    }
  }
  return y;
}

// A (B, H, T, Dh) view holding x: stored as (B, H, T, Dh), or as (B, T, H, Dh) and permuted.
struct Layout {
  OwnedTensor storage;
  Tensor view;
  Layout(bool tokens_major, const std::vector<double>& x, DType dtype = DType::f32)
      : storage(tokens_major ? Shape{B, T, H, Dh} : Shape{B, H, T, Dh}, dtype, Device::cpu(), "test"),
        view(tokens_major ? storage->permute({0, 2, 1, 3}) : storage.tensor()) {
    write_from_double(view, x);
  }
};

TEST(Rope, ForwardMatchesReferenceInBothLayouts) {
  const auto x = normals(B * H * T * Dh, 1);
  for (bool tokens_major : {false, true}) {
    for (std::int64_t offset : {0, 37}) {
      Layout l(tokens_major, x);
      RopeOptions options;
      options.position_offset = offset;
      rope_forward(l.view, options);
      expect_close(read_as_double(l.view), reference(x, 10000.0, offset), 1e-6,
                   std::string(tokens_major ? "(B,T,H,Dh)" : "(B,H,T,Dh)") + " offset " + std::to_string(offset));
    }
  }
}

TEST(Rope, BackwardMatchesFiniteDifferencesAndInvertsForward) {
  const auto x = normals(B * H * T * Dh, 2), g = normals(B * H * T * Dh, 3);
  RopeOptions options;
  options.theta = 500.0;
  options.position_offset = 3;
  Layout dx(true, g);
  rope_backward(dx.view, options);
  const auto numeric = test::numeric_gradient(
      [&](const std::vector<double>& xs) { return test::dot(reference(xs, 500.0, 3), g); }, x);
  expect_close(read_as_double(dx.view), numeric, 1e-6, "dx");

  Layout round_trip(false, x);
  rope_forward(round_trip.view, options);
  rope_backward(round_trip.view, options);
  expect_close(read_as_double(round_trip.view), x, 1e-6, "backward(forward(x))");
}

TEST(Rope, Bf16IsRotatedInFp32AndRoundedOnce) {
  const auto x = test::rounded(normals(B * H * T * Dh, 4), DType::bf16);
  Layout l(false, x, DType::bf16);
  rope_forward(l.view);
  const auto expected = reference(x, 10000.0, 0);
  const auto got = read_as_double(l.view);
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], expected[i], std::fabs(expected[i]) * 4e-3 + 1e-6) << i;
}

// Per-token positions rotate each (b, t) row as the plain call rotates row t = positions[b, t]: a document
// packed at any offset is rotated exactly as the document alone.
TEST(Rope, PerTokenPositionsRotateEachRowByItsPosition) {
  const auto x = normals(B * H * T * Dh, 5);
  const std::vector<std::int32_t> positions = {0, 1, 0, 1, 2, 3, 4, 0, 0, 1};  // (B, T)
  for (bool inverse : {false, true}) {
    Layout packed(true, x);
    RopeOptions options;
    options.positions = {positions.data(), {B, T}, Device::cpu()};
    inverse ? rope_backward(packed.view, options) : rope_forward(packed.view, options);
    const std::vector<double> got = read_as_double(packed.view);  // (B, H, T, Dh)
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t t = 0; t < T; ++t) {
        // The same row placed at t' = its position, rotated by the plain call.
        std::vector<double> alone(static_cast<std::size_t>(B * H * T * Dh), 0.0);
        const std::int64_t p = positions[b * T + t];
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t d = 0; d < Dh; ++d)
            alone[((b * H + h) * T + p) * Dh + d] = x[((b * H + h) * T + t) * Dh + d];
        Layout plain(false, alone);
        inverse ? rope_backward(plain.view) : rope_forward(plain.view);
        const std::vector<double> want = read_as_double(plain.view);
        for (std::int64_t h = 0; h < H; ++h)
          for (std::int64_t d = 0; d < Dh; ++d)
            ASSERT_EQ(got[((b * H + h) * T + t) * Dh + d], want[((b * H + h) * T + p) * Dh + d])
                << "b " << b << " t " << t << " h " << h << " d " << d;
      }
    }
  }
}

// The model rotates q and k, adjacent head groups of its (B, T, 3, H, Dh) QKV buffer, as one (B, 2H, T, Dh)
// view: bit for bit the two calls on q and k, v untouched, with and without per-token positions.
TEST(Rope, AdjacentHeadGroupsInOneCallAsInTwo) {
  const std::vector<std::int32_t> positions = {0, 1, 2, 0, 1, 0, 1, 2, 3, 4};  // (B, T)
  const auto x = test::rounded(normals(B * T * 3 * H * Dh, 6), DType::bf16);
  // (B, parts H, T, Dh) view of `parts` head groups from `which` (q 0, k 1, v 2) of a (B, T, 3, H, Dh) buffer.
  const auto heads = [](const Tensor& qkv, std::int64_t which, std::int64_t parts) {
    return Tensor(static_cast<char*>(qkv.data()) + which * H * Dh * qkv.element_size(), qkv.dtype(), qkv.device(),
                  {B, parts * H, T, Dh}, {T * 3 * H * Dh, Dh, 3 * H * Dh, 1});
  };
  for (const bool with_positions : {false, true})
    for (const bool inverse : {false, true}) {
      SCOPED_TRACE(std::string(with_positions ? "positions" : "t") + (inverse ? ", backward" : ", forward"));
      RopeOptions options;
      if (with_positions) options.positions = {positions.data(), {B, T}, Device::cpu()};
      const auto rotate = [&](const Tensor& t) { inverse ? rope_backward(t, options) : rope_forward(t, options); };
      auto once = test::tensor_of({B, T, 3, H, Dh}, DType::bf16, x);
      auto twice = test::tensor_of({B, T, 3, H, Dh}, DType::bf16, x);
      const auto v_before = read_as_double(heads(once, 2, 1));
      rotate(heads(once, 0, 2));
      rotate(heads(twice, 0, 1));
      rotate(heads(twice, 1, 1));
      ASSERT_EQ(read_as_double(once), read_as_double(twice));
      ASSERT_EQ(read_as_double(heads(once, 2, 1)), v_before) << "v is not rotated";
    }
}

TEST(Rope, PositionsOutOfRangeOrMisshapedAreRefused) {
  auto x = test::zeros({B, H, T, Dh});
  std::vector<std::int32_t> positions(B * T, 0);
  RopeOptions options;
  options.positions = {positions.data(), {B, T}, Device::cpu()};
  positions[7] = static_cast<std::int32_t>(T);
  test::expect_error([&] { rope_forward(x, options); }, ErrorKind::invalid_argument,
                     {"positions must lie in [0, T = 5)", "given 5 at (1, 2)"});
  positions[7] = -1;
  test::expect_error([&] { rope_backward(x, options); }, ErrorKind::invalid_argument, {"given -1 at (1, 2)"});
  positions[7] = 0;
  options.positions.shape = {B, T - 1};
  test::expect_error([&] { rope_forward(x, options); }, ErrorKind::invalid_argument,
                     {"positions must be (B, T) = [2, 5]", "given [2, 4]"});
}

TEST(Rope, TableHoldsTheAnglesForwardApplies) {
  // Rotating the pair (1, 0) at position t gives (cos, sin) of its angle exactly.
  const double theta = 500000.0;
  std::vector<double> unit(static_cast<std::size_t>(T * Dh), 0.0);
  for (std::size_t e = 0; e < unit.size(); e += 2) unit[e] = 1.0;
  auto x = test::tensor_of({1, 1, T, Dh}, DType::f32, unit);
  rope_forward(x, {theta});
  auto table = test::zeros({T, Dh / 2, 2});
  rope_table(table, {theta});
  EXPECT_EQ(read_as_double(table), read_as_double(x));
  const std::vector<double> got = read_as_double(table);
  EXPECT_EQ(got[0], 1.0);  // position 0: no rotation
  EXPECT_EQ(got[1], 0.0);
  EXPECT_EQ(got[2 * (Dh / 2)], static_cast<double>(static_cast<float>(std::cos(1.0))));  // position 1, pair 0
}

TEST(Rope, MalformedTablesAreRefused) {
  auto three = test::zeros({T, Dh / 2, 3}), bf16 = test::zeros({T, Dh / 2, 2}, DType::bf16);
  test::expect_error([&] { rope_table(three); }, ErrorKind::invalid_argument, {"rope_table", "(T, Dh/2, 2)", "given"});
  test::expect_error([&] { rope_table(bf16); }, ErrorKind::invalid_argument, {"rope_table", "bf16"});
  auto fine = test::zeros({T, Dh / 2, 2});
  test::expect_error([&] { rope_table(fine, {0.0}); }, ErrorKind::invalid_argument, {"theta", "given 0"});
}

TEST(Rope, MalformedCallsNameExpectedAndGiven) {
  auto odd = test::zeros({B, H, T, 7}), three = test::zeros({B, T, Dh});
  OwnedTensor wide({B, H, T, 2 * Dh}, DType::f32, Device::cpu(), "test");
  test::expect_error([&] { rope_forward(odd); }, ErrorKind::invalid_argument, {"rope_forward", "even", "given Dh = 7"});
  test::expect_error([&] { rope_backward(three); }, ErrorKind::invalid_argument,
                     {"rope_backward", "expected 4 dims", "given 3"});
  const Tensor strided_last(wide->data(), DType::f32, Device::cpu(), {B, H, T, Dh}, {H * T * 2 * Dh, T * 2 * Dh, 2 * Dh, 2});
  test::expect_error([&] { rope_forward(strided_last); }, ErrorKind::invalid_argument, {"expected stride 1", "given 2"});
  RopeOptions negative;
  negative.position_offset = -1;
  auto fine = test::zeros({B, H, T, Dh});
  test::expect_error([&] { rope_forward(fine, negative); }, ErrorKind::invalid_argument, {"position_offset", "given -1"});
}

}  // namespace
}  // namespace ft
