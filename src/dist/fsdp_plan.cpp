// fsdp_plan.cpp — the units of a TransformerLM and each rank's padded piece of them. See Note [ZeRO-3 shards].
#include "dist/fsdp_plan.h"

#include <algorithm>

#include "core/error.h"

namespace ft {

FsdpPlan::FsdpPlan(const ParameterLayout& layout, int world) : world_(world) {
  FT_CHECK(world >= 1, "ZeRO-3: the world size must be >= 1, given ", world);
  const std::size_t L = (layout.size() - 3) / kLayerSlots;
  std::vector<std::pair<std::size_t, std::size_t>> spans = {{0, 1}};  // (first parameter, count) per unit
  for (std::size_t l = 0; l < L; ++l) spans.emplace_back(1 + l * kLayerSlots, kLayerSlots);
  spans.emplace_back(layout.ln_final_index(), 2);
  unit_of_.assign(layout.size(), 0);
  for (const auto& [first, count] : spans) {
    FsdpUnit u;
    u.first_parameter = first;
    u.parameters = count;
    u.offset = layout[first].offset;
    u.numel = layout[first + count - 1].offset + layout[first + count - 1].numel - u.offset;
    FT_CHECK(u.numel >= world, "ZeRO-3: the world size ", world, " exceeds the ", u.numel, " elements of ",
             layout[first].name, count > 1 ? str(" .. ", layout[first + count - 1].name) : std::string(),
             " (a model unit): every rank must hold a piece of every unit; use fewer ranks or a larger model");
    u.world = world;
    u.piece = (u.numel + world - 1) / world;
    u.shard_offset = shard_numel_;
    shard_numel_ += u.piece;
    for (std::size_t i = first; i < first + count; ++i) unit_of_[i] = units_.size();
    units_.push_back(u);
  }
}

ShardRange FsdpPlan::owned(std::size_t unit, int rank) const {
  FT_CHECK(rank >= 0 && rank < world_, "ZeRO-3: rank must be in [0, ", world_, "), given ", rank);
  const FsdpUnit& u = units_.at(unit);
  const std::int64_t lo = std::min(u.numel, rank * u.piece), hi = std::min(u.numel, (rank + 1) * u.piece);
  return {u.offset + lo, hi - lo};
}

std::int64_t FsdpPlan::max_padded() const {
  std::int64_t m = 0;
  for (const FsdpUnit& u : units_) m = std::max(m, u.padded());
  return m;
}

}  // namespace ft
