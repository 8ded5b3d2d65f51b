// toy_model.h — a three-layer toy regression model for the data-parallel tests, with its parameters in one
// flat buffer and a gradient-ready callback, as DDP expects of any model. One weight is tied (used twice):
//   h1 = tanh(W_in x)   h2 = tanh(W_mid h1)   h3 = tanh(W_in h2)   y = w_out . h3 + b
//   loss = mean over rows of (y - t)^2 / 2
// Flat layout (memory order): mid.weight (6, 6), in.weight (6, 6), out.weight (1, 6), out.bias (1).
// Backward finalises gradients in the order out.bias, out.weight, mid.weight, in.weight (in.weight only
// after its second use): not the reverse memory order, so bucket plans meet the general case.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "dist/ddp.h"

namespace ft::test {

constexpr std::int64_t kToyDim = 6;

struct ToyData {
  std::vector<float> x;  // (rows, kToyDim)
  std::vector<float> t;  // (rows)
  std::int64_t rows() const { return static_cast<std::int64_t>(t.size()); }
  ToyData slice(std::int64_t begin, std::int64_t count) const {
    return {std::vector<float>(x.begin() + begin * kToyDim, x.begin() + (begin + count) * kToyDim),
            std::vector<float>(t.begin() + begin, t.begin() + begin + count)};
  }
};

inline ToyData toy_data(std::int64_t rows, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  ToyData d{std::vector<float>(rows * kToyDim), std::vector<float>(rows)};
  for (float& v : d.x) v = normal(gen);
  for (float& v : d.t) v = normal(gen);
  return d;
}

class ToyModel {
 public:
  enum Index : std::size_t { mid = 0, in = 1, out = 2, bias = 3 };
  static constexpr std::int64_t kNumel = 2 * kToyDim * kToyDim + kToyDim + 1;

  explicit ToyModel(std::uint64_t seed) : params_(kNumel), grads_(kNumel, 0.0f) {
    std::mt19937_64 gen(seed);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (float& v : params_) v = normal(gen);
  }

  static std::vector<DdpParameter> parameters() {
    const std::int64_t dd = kToyDim * kToyDim;
    return {{"mid.weight", 0, dd, true}, {"in.weight", dd, dd, true}, {"out.weight", 2 * dd, kToyDim, true},
            {"out.bias", 2 * dd + kToyDim, 1, true}};
  }
  static std::vector<std::size_t> ready_order() { return {bias, out, mid, in}; }

  DdpModel ddp_model() {
    DdpModel m;
    m.parameters = Tensor(params_.data(), DType::f32, Device::cpu(), {kNumel});
    m.gradients = Tensor(grads_.data(), DType::f32, Device::cpu(), {kNumel});
    m.tensors = parameters();
    m.ready_order = ready_order();
    return m;
  }

  // Gradients of loss_scale * loss over the rows of d, written (or added), `ready(index)` told as each is
  // final.
  void forward_backward(const ToyData& d, double loss_scale, bool accumulate,
                        const std::function<void(std::size_t)>& ready) {
    const std::int64_t R = d.rows(), D = kToyDim;
    if (!accumulate) std::fill(grads_.begin(), grads_.end(), 0.0f);
    const float* w_mid = param(mid);
    const float* w_in = param(in);
    const float* w_out = param(out);
    std::vector<float> h1(R * D), h2(R * D), h3(R * D), dy(R);  // (R, D) each, (R)
    const auto layer = [&](const float* w, const float* x, float* h) {
      for (std::int64_t i = 0; i < D; ++i) {
        float a = 0;
        for (std::int64_t j = 0; j < D; ++j) a += w[i * D + j] * x[j];
        h[i] = std::tanh(a);
      }
    };
    for (std::int64_t r = 0; r < R; ++r) {
      layer(w_in, &d.x[r * D], &h1[r * D]);
      layer(w_mid, &h1[r * D], &h2[r * D]);
      layer(w_in, &h2[r * D], &h3[r * D]);
      float y = params_[offset(bias)];
      for (std::int64_t i = 0; i < D; ++i) y += w_out[i] * h3[r * D + i];
      dy[r] = static_cast<float>(loss_scale) * (y - d.t[r]) / static_cast<float>(R);
    }
    // da (D) = dh * (1 - h^2); dW += da x^T; dx = W^T da.
    const auto layer_back = [&](const float* w, float* dw, const float* x, const float* h, const float* dh, float* dx) {
      float da[kToyDim];
      for (std::int64_t i = 0; i < D; ++i) da[i] = dh[i] * (1 - h[i] * h[i]);
      for (std::int64_t i = 0; i < D; ++i)
        for (std::int64_t j = 0; j < D; ++j) dw[i * D + j] += da[i] * x[j];
      if (dx)
        for (std::int64_t j = 0; j < D; ++j) {
          float s = 0;
          for (std::int64_t i = 0; i < D; ++i) s += w[i * D + j] * da[i];
          dx[j] = s;
        }
    };
    std::vector<float> dh3(R * D), dh2(R * D), dh1(R * D);  // (R, D) each
    for (std::int64_t r = 0; r < R; ++r) {
      grad(bias)[0] += dy[r];
      for (std::int64_t i = 0; i < D; ++i) {
        grad(out)[i] += dy[r] * h3[r * D + i];
        dh3[r * D + i] = dy[r] * w_out[i];
      }
    }
    ready(bias);
    ready(out);
    for (std::int64_t r = 0; r < R; ++r) layer_back(w_in, grad(in), &h2[r * D], &h3[r * D], &dh3[r * D], &dh2[r * D]);
    for (std::int64_t r = 0; r < R; ++r) layer_back(w_mid, grad(mid), &h1[r * D], &h2[r * D], &dh2[r * D], &dh1[r * D]);
    ready(mid);
    for (std::int64_t r = 0; r < R; ++r) layer_back(w_in, grad(in), &d.x[r * D], &h1[r * D], &dh1[r * D], nullptr);
    ready(in);  // final only now: both uses of the tied weight have added their part
  }

  // p <- p - lr * g for the parameters whose mask entry is true.
  void sgd(double lr, const std::vector<bool>& trainable) {
    const auto ps = parameters();
    for (std::size_t k = 0; k < ps.size(); ++k)
      if (trainable[k])
        for (std::int64_t i = ps[k].offset; i < ps[k].offset + ps[k].numel; ++i)
          params_[i] -= static_cast<float>(lr) * grads_[i];
  }

  std::vector<float>& params() { return params_; }
  std::vector<float>& grads() { return grads_; }
  static std::int64_t offset(std::size_t index) { return parameters()[index].offset; }

 private:
  float* param(std::size_t index) { return params_.data() + offset(index); }
  float* grad(std::size_t index) { return grads_.data() + offset(index); }

  std::vector<float> params_;  // (kNumel)
  std::vector<float> grads_;   // (kNumel)
};

}  // namespace ft::test
