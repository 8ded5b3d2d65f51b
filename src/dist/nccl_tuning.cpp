// nccl_tuning.cpp — names, description and checks of a communicator's CTA limits and policy.
#include "dist/nccl_tuning.h"

#include "core/error.h"

namespace ft {

const char* name_of(CtaPolicy policy) {
  switch (policy) {
    case CtaPolicy::nccl_default: return "default";
    case CtaPolicy::efficiency: return "efficiency";
    case CtaPolicy::zero: return "zero";
  }
  return "?";
}

CtaPolicy parse_cta_policy(std::string_view text) {
  for (CtaPolicy p : {CtaPolicy::nccl_default, CtaPolicy::efficiency, CtaPolicy::zero})
    if (text == name_of(p)) return p;
  FT_THROW(invalid_argument, "unknown NCCL CTA policy '", text, "': expected default, efficiency or zero");
}

std::string NcclTuning::describe() const {
  if (is_default()) return "default";
  std::string text;
  const auto add = [&](const std::string& part) { text += (text.empty() ? "" : ", ") + part; };
  if (min_ctas > 0) add(str("min_ctas ", min_ctas));
  if (max_ctas > 0) add(str("max_ctas ", max_ctas));
  if (cta_policy != CtaPolicy::nccl_default) add(str("policy ", name_of(cta_policy)));
  if (low_priority) add("low priority");
  return text;
}

void NcclTuning::check() const {
  FT_CHECK(min_ctas >= 0 && min_ctas <= kMaxCtas, "NCCL tuning: min_ctas must be 0 (NCCL's default) or 1..",
           kMaxCtas, ", given ", min_ctas);
  FT_CHECK(max_ctas >= 0 && max_ctas <= kMaxCtas, "NCCL tuning: max_ctas must be 0 (NCCL's default) or 1..",
           kMaxCtas, ", given ", max_ctas);
  FT_CHECK(max_ctas == 0 || min_ctas <= max_ctas, "NCCL tuning: min_ctas (", min_ctas,
           ") must not exceed max_ctas (", max_ctas, ")");
}

}  // namespace ft
