// init.cpp — counter-based truncated-normal draws (splitmix64 + Box-Muller) filling each parameter.
#include "model/init.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"

namespace ft {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform double in (0, 1] from 53 random bits.
double unit_interval(std::uint64_t bits) { return (static_cast<double>(bits >> 11) + 1.0) * 0x1.0p-53; }

// Draw `attempt` of element `i` of the stream: a standard normal (Box-Muller).
double normal_draw(std::uint64_t stream, std::uint64_t i, std::uint64_t attempt) {
  const std::uint64_t counter = splitmix64(stream ^ splitmix64(i * 64 + attempt));
  const double u1 = unit_interval(splitmix64(counter)), u2 = unit_interval(splitmix64(~counter));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// out (n) <- std * truncated-normal draws first, first + 1, ... of the stream, cut at +-3.
void fill_truncated_normal(float* out, std::int64_t n, std::uint64_t stream, double std, std::int64_t first = 0) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
  for (std::int64_t i = 0; i < n; ++i) {
    const auto element = static_cast<std::uint64_t>(first + i);
    double z = normal_draw(stream, element, 0);
    for (std::uint64_t attempt = 1; std::fabs(z) > 3.0; ++attempt) z = normal_draw(stream, element, attempt);
    out[i] = static_cast<float>(std * z);
  }
}

}  // namespace

double init_std(const ParameterInfo& info) {
  switch (info.kind) {
    case ParameterKind::embedding:
      return 1.0;
    case ParameterKind::linear:
      return std::sqrt(2.0 / static_cast<double>(info.shape[0] + info.shape[1]));
    case ParameterKind::norm:
      return 0.0;
  }
  return 0.0;
}

void init_parameters(const ParameterLayout& layout, const ParameterBuffer& params, std::uint64_t seed) {
  FT_CHECK(params.flat().dtype() == DType::f32 && params.flat().numel() == layout.numel(),
           "init_parameters: expected an fp32 buffer of ", layout.numel(), " elements, given ",
           params.flat().describe());
  const bool on_host = params.flat().device().is_cpu();
  for (const ParameterInfo& info : layout.tensors()) {
    const Tensor& view = params[info.index];
    if (info.kind == ParameterKind::norm) {
      fill_constant(view, 1.0);
      continue;
    }
    OwnedTensor staging;  // (info.shape) host copy when the parameters live on a device
    if (!on_host) staging = OwnedTensor(info.shape, DType::f32, Device::cpu(), "init staging");
    float* out = on_host ? view.data_as<float>() : staging->data_as<float>();
    fill_truncated_normal(out, info.numel, splitmix64(seed ^ splitmix64(info.index)), init_std(info));
    if (!on_host) copy(view, staging);
  }
}

void init_parameter_range(const ParameterLayout& layout, std::int64_t offset, const Tensor& out, std::uint64_t seed) {
  FT_CHECK(out.dtype() == DType::f32 && out.is_contiguous() && out.shape().size() == 1,
           "init_parameter_range: expected a contiguous fp32 vector, given ", out.describe());
  const std::int64_t end = offset + out.numel();
  FT_CHECK(offset >= 0 && end <= layout.numel(), "init_parameter_range: [", offset, ", ", end,
           ") must lie inside the ", layout.numel(), " parameters");
  for (const ParameterInfo& info : layout.tensors()) {
    const std::int64_t lo = std::max(offset, info.offset), hi = std::min(end, info.offset + info.numel);
    if (lo >= hi) continue;
    const Tensor piece = out.narrow(0, lo - offset, hi - lo);  // (hi - lo) of this parameter
    if (info.kind == ParameterKind::norm) {
      fill_constant(piece, 1.0);
      continue;
    }
    OwnedTensor staging;  // (hi - lo) host copy when out lives on a device
    if (!out.device().is_cpu()) staging = OwnedTensor({hi - lo}, DType::f32, Device::cpu(), "init staging");
    float* values = out.device().is_cpu() ? piece.data_as<float>() : staging->data_as<float>();
    fill_truncated_normal(values, hi - lo, splitmix64(seed ^ splitmix64(info.index)), init_std(info), lo - info.offset);
    if (!out.device().is_cpu()) copy(piece, staging);
  }
}

}  // namespace ft
