// init.cpp — filling any element range of the flat parameter buffer: each parameter it overlaps gets the
// truncated-normal draws of its own sequence (keyed by seed and parameter index) at its element indices, or 1.
#include "model/init.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "ops/cast.h"
#include "ops/random_fill.h"

namespace ft {

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

void init_parameters_range(const ParameterLayout& layout, const Tensor& slice, std::int64_t begin,
                           std::uint64_t seed, const Stream& stream) {
  FT_CHECK(slice.defined() && slice.dtype() == DType::f32 && slice.dim() == 1 && slice.is_contiguous(),
           "init_parameters_range: expected a contiguous 1-D fp32 slice, given ", slice.describe());
  const std::int64_t end = begin + slice.numel();
  FT_CHECK(begin >= 0 && end <= layout.numel(), "init_parameters_range: elements [", begin, ", ", end,
           ") must lie in the ", layout.numel(), " parameters of the layout");
  // The layout's parameters are sorted by offset: start at the last one beginning at or before `begin`.
  const auto& tensors = layout.tensors();
  auto it = std::upper_bound(tensors.begin(), tensors.end(), begin,
                             [](std::int64_t at, const ParameterInfo& info) { return at < info.offset; });
  for (it = it == tensors.begin() ? it : it - 1; it != tensors.end() && it->offset < end; ++it) {
    const ParameterInfo& info = *it;
    const std::int64_t from = std::max(begin, info.offset), to = std::min(end, info.offset + info.numel);
    if (from >= to) continue;
    const Tensor part = slice.narrow(0, from - begin, to - from);
    if (info.kind == ParameterKind::norm) {
      fill(part, 1.0, stream);
      continue;
    }
    TruncatedNormalFill draw;
    draw.key = derive_key(seed, info.index);
    draw.first = from - info.offset;
    draw.stddev = init_std(info);
    draw.cut = 3.0;
    draw.stream = stream;
    fill_truncated_normal(part, draw);
  }
}

void init_parameters(const ParameterLayout& layout, const ParameterBuffer& params, std::uint64_t seed,
                     const Stream& stream) {
  FT_CHECK(params.flat().dtype() == DType::f32 && params.flat().numel() == layout.numel(),
           "init_parameters: expected an fp32 buffer of ", layout.numel(), " elements, given ",
           params.flat().describe());
  init_parameters_range(layout, params.flat(), 0, seed, stream);
}

}  // namespace ft
