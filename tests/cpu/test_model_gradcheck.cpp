// test_model_gradcheck.cpp — whole-model gradients of the tiny fp32 model against central finite
// differences of the loss: for each parameter tensor of the first block and the non-block tensors, along
// the gradient itself and along a random direction (with flash and naive attention), plus the largest
// single entries; and the gradient-ready hook (once per parameter, in backward order, with final values).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/tensor_io.h"
#include "model/transformer.h"
#include "test_model_util.h"
#include "test_ops_util.h"

namespace ft {
namespace {

// Moves parameter `index` by +-step * direction, returns (L+ - L-) and the actual change (p+ - p-).
struct Difference {
  double loss_change = 0;
  std::vector<double> param_change;
};

Difference central_difference(TransformerLM& model, const test::TokenBatch& batch, std::size_t index,
                              const std::vector<double>& direction, double step) {
  const Tensor& p = model.parameters()[index];
  const auto base = read_as_double(p);
  std::vector<double> plus(base.size()), minus(base.size());
  for (std::size_t i = 0; i < base.size(); ++i)
    plus[i] = base[i] + step * direction[i], minus[i] = base[i] - step * direction[i];
  write_from_double(p, plus);
  const auto plus_stored = read_as_double(p);
  const double up = model.forward(batch.input_ids(), batch.target_ids());
  write_from_double(p, minus);
  const auto minus_stored = read_as_double(p);
  const double down = model.forward(batch.input_ids(), batch.target_ids());
  write_from_double(p, base);
  Difference d{up - down, std::vector<double>(base.size())};
  for (std::size_t i = 0; i < base.size(); ++i) d.param_change[i] = plus_stored[i] - minus_stored[i];
  return d;
}

std::vector<double> unit(std::vector<double> v) {
  const double norm = std::sqrt(test::dot(v, v));
  for (double& x : v) x /= norm;
  return v;
}

class ModelGradcheck : public ::testing::TestWithParam<AttentionImpl> {};

TEST_P(ModelGradcheck, DirectionalDerivativesMatchFiniteDifferences) {
  const ModelConfig c = model_config("tiny");
  TransformerLM model(c, test::tiny_options(Precision::fp32, GetParam(), 2, 8));
  const auto batch = test::random_batch(2, 8, c.vocab_size, 11);
  model.forward_backward(batch.input_ids(), batch.target_ids());
  const ParameterLayout& layout = model.layout();

  std::vector<std::size_t> checked = {ParameterLayout::embedding_index(), layout.ln_final_index(),
                                      layout.lm_head_index()};
  for (std::size_t slot = 0; slot < kLayerSlots; ++slot)
    checked.push_back(layout.layer_index(0, static_cast<LayerSlot>(slot)));
  checked.push_back(layout.layer_index(1, LayerSlot::q_proj));
  for (std::size_t index : checked) {
    const auto g = read_as_double(model.gradients()[index]);
    const double g_norm = std::sqrt(test::dot(g, g));
    ASSERT_GT(g_norm, 0) << layout[index].name;
    const std::vector<std::vector<double>> directions = {unit(g), unit(test::normals(g.size(), 100 + index))};
    for (std::size_t k = 0; k < directions.size(); ++k) {
      const double step = 1e-2;
      const Difference d = central_difference(model, batch, index, directions[k], step);
      const double predicted = test::dot(g, d.param_change);
      // Error budget: 0.05% of the largest directional derivative (second-order terms) and fp32 loss round-off.
      EXPECT_NEAR(d.loss_change, predicted, 5e-4 * 2 * step * g_norm + 1e-6)
          << layout[index].name << (k == 0 ? " along the gradient" : " along a random direction");
    }
  }
}

TEST_P(ModelGradcheck, LargestEntriesMatchFiniteDifferences) {
  const ModelConfig c = model_config("tiny");
  TransformerLM model(c, test::tiny_options(Precision::fp32, GetParam(), 2, 8));
  const auto batch = test::random_batch(2, 8, c.vocab_size, 12);
  model.forward_backward(batch.input_ids(), batch.target_ids());
  for (const char* name : {"token_embeddings.weight", "layers.0.attn.k_proj.weight", "layers.1.ffn.w1.weight"}) {
    const std::size_t index = model.layout().index_of(name);
    const auto g = read_as_double(model.gradients()[index]);
    std::vector<std::size_t> order(g.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 3, order.end(),
                      [&](std::size_t a, std::size_t b) { return std::fabs(g[a]) > std::fabs(g[b]); });
    for (int k = 0; k < 3; ++k) {
      std::vector<double> e(g.size(), 0.0);
      e[order[k]] = 1.0;
      const Difference d = central_difference(model, batch, index, e, 1e-2);
      const double predicted = g[order[k]] * d.param_change[order[k]];
      EXPECT_NEAR(d.loss_change, predicted, 5e-3 * std::fabs(predicted) + 2e-6) << name << "[" << order[k] << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Attention, ModelGradcheck, ::testing::Values(AttentionImpl::flash, AttentionImpl::naive),
                         [](const auto& info) { return std::string(name_of(info.param)); });

TEST(GradientReadyHook, FiresOncePerParameterInBackwardOrderWithFinalValues) {
  const ModelConfig c = model_config("tiny");
  TransformerLM model(c, test::tiny_options());
  const auto batch = test::random_batch(3, 16, c.vocab_size, 13);
  std::vector<std::size_t> fired;
  std::vector<std::vector<double>> snapshots;
  BackwardOptions options;
  options.on_gradient_ready = [&](const ParameterInfo& info, const Tensor& grad) {
    EXPECT_EQ(grad.data(), model.gradients()[info.index].data()) << info.name;
    fired.push_back(info.index);
    snapshots.push_back(read_as_double(grad));
  };
  model.forward_backward(batch.input_ids(), batch.target_ids(), options);

  EXPECT_EQ(fired, model.gradient_ready_order());
  std::vector<std::size_t> sorted = fired;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::size_t> all(model.layout().size());
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);  // every parameter exactly once
  // Reverse layer order: lm_head and ln_final first, then blocks from the last, token_embeddings last.
  const auto rank = [&](std::size_t index) {
    const std::int64_t layer = model.layout()[index].layer;
    return layer >= 0 ? layer : index == ParameterLayout::embedding_index() ? -1 : c.num_layers;
  };
  for (std::size_t i = 1; i < fired.size(); ++i) EXPECT_LE(rank(fired[i]), rank(fired[i - 1])) << i;
  for (std::size_t i = 0; i < fired.size(); ++i)
    EXPECT_EQ(snapshots[i], read_as_double(model.gradients()[fired[i]])) << model.layout()[fired[i]].name;
}

}  // namespace
}  // namespace ft
