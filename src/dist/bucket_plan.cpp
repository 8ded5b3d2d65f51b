// bucket_plan.cpp — assigning parameters to contiguous gradient buckets in reverse memory order.
#include "dist/bucket_plan.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace ft {

BucketPlan plan_buckets(const std::vector<DdpParameter>& parameters, const std::vector<std::size_t>& ready_order,
                        std::int64_t cap_bytes, std::size_t element_bytes) {
  const std::size_t n = parameters.size();
  FT_CHECK(cap_bytes >= 0, "plan_buckets: the bucket cap must be >= 0 bytes, given ", cap_bytes);
  FT_CHECK(element_bytes > 0, "plan_buckets: the element size must be > 0");
  FT_CHECK(ready_order.size() == n, "plan_buckets: the ready order must list every one of the ", n,
           " parameters once, given ", ready_order.size(), " entries");
  std::vector<std::size_t> position(n, n);  // (parameters) position of each in the ready order
  for (std::size_t p = 0; p < n; ++p) {
    const std::size_t index = ready_order[p];
    FT_CHECK(index < n && position[index] == n, "plan_buckets: the ready order must be a permutation of 0..", n - 1,
             "; entry ", p, " is ", index, index < n ? " (listed twice)" : " (out of range)");
    position[index] = p;
  }

  std::vector<std::size_t> by_offset(n);  // parameter indices, descending offset
  std::iota(by_offset.begin(), by_offset.end(), std::size_t{0});
  std::sort(by_offset.begin(), by_offset.end(),
            [&](std::size_t a, std::size_t b) { return parameters[a].offset > parameters[b].offset; });
  for (std::size_t i = 0; i < n; ++i) {
    const DdpParameter& p = parameters[by_offset[i]];
    FT_CHECK(p.offset >= 0 && p.numel >= 0, "plan_buckets: parameter ", p.name,
             " needs offset >= 0 and numel >= 0, given offset ", p.offset, ", numel ", p.numel);
    if (i > 0) {
      const DdpParameter& above = parameters[by_offset[i - 1]];
      FT_CHECK(p.offset + p.numel <= above.offset, "plan_buckets: parameters ", p.name, " [", p.offset, ", ",
               p.offset + p.numel, ") and ", above.name, " [", above.offset, ", ", above.offset + above.numel,
               ") overlap");
    }
  }

  BucketPlan plan;
  plan.bucket_of.assign(n, BucketPlan::kNoBucket);
  const auto bytes = [&](std::int64_t numel) { return numel * static_cast<std::int64_t>(element_bytes); };
  Bucket current;
  const auto close = [&] {
    if (!current.parameters.empty()) plan.buckets.push_back(std::move(current));
    current = Bucket{};
  };
  for (std::size_t index : by_offset) {
    const DdpParameter& p = parameters[index];
    if (!p.requires_grad) {
      close();
      continue;
    }
    const bool adjacent = current.parameters.empty() || p.offset + p.numel == current.offset;
    const bool fits = current.parameters.empty() || bytes(current.numel) <= cap_bytes - bytes(p.numel);
    if (!adjacent || !fits) close();
    current.offset = p.offset;
    current.numel += p.numel;
    current.parameters.push_back(index);
    current.ready_position = std::max(current.ready_position, position[index]);
  }
  close();

  std::sort(plan.buckets.begin(), plan.buckets.end(),
            [](const Bucket& a, const Bucket& b) { return a.ready_position < b.ready_position; });
  for (std::size_t b = 0; b < plan.buckets.size(); ++b)
    for (std::size_t index : plan.buckets[b].parameters) plan.bucket_of[index] = b;
  return plan;
}

}  // namespace ft
