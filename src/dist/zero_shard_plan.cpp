// zero_shard_plan.cpp — equal contiguous ranges per rank and each group's runs inside them.
#include "dist/zero_shard_plan.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace ft {

ShardPlan::ShardPlan(std::vector<DdpParameter> parameters, std::int64_t numel, int world_size)
    : parameters_(std::move(parameters)), numel_(numel), world_size_(world_size) {
  FT_CHECK(world_size_ >= 1, "ShardPlan: world_size must be >= 1, given ", world_size_);
  FT_CHECK(numel_ >= 0, "ShardPlan: numel must be >= 0, given ", numel_);
  block_ = numel_ / world_size_;
  group_of_.assign(parameters_.size(), -1);
  std::vector<std::size_t> by_offset(parameters_.size());
  for (std::size_t i = 0; i < by_offset.size(); ++i) by_offset[i] = i;
  std::sort(by_offset.begin(), by_offset.end(),
            [&](std::size_t a, std::size_t b) { return parameters_[a].offset < parameters_[b].offset; });
  std::int64_t end = 0;  // of the previous parameter in offset order
  for (std::size_t index : by_offset) {
    const DdpParameter& p = parameters_[index];
    FT_CHECK(p.offset >= 0 && p.numel >= 0 && p.offset + p.numel <= numel_, "ShardPlan: parameter ", p.name, " [",
             p.offset, ", ", p.offset + p.numel, ") must lie inside the flat buffer of ", numel_, " elements");
    FT_CHECK(p.offset >= end, "ShardPlan: parameter ", p.name, " starting at ", p.offset,
             " overlaps the one before it, which ends at ", end);
    end = p.offset + p.numel;
  }
}

void ShardPlan::check_rank(int rank) const {
  FT_CHECK(rank >= 0 && rank < world_size_, "ShardPlan: rank must be in [0, ", world_size_, "), given ", rank);
}

ShardRange ShardPlan::range(int rank) const {
  check_rank(rank);
  const std::int64_t offset = block_ * rank;
  return {offset, rank == world_size_ - 1 ? numel_ - offset : block_};
}

int ShardPlan::owner(std::int64_t element) const {
  FT_CHECK(element >= 0 && element < numel_, "ShardPlan: element ", element, " lies outside [0, ", numel_, ")");
  if (block_ == 0) return world_size_ - 1;
  return static_cast<int>(std::min<std::int64_t>(element / block_, world_size_ - 1));
}

std::size_t ShardPlan::add_group(std::vector<std::size_t> parameters) {
  const std::size_t g = groups_.size();
  FT_CHECK(!parameters.empty(), "ShardPlan: parameter group ", g, " is empty; give it at least one parameter");
  std::vector<bool> listed(parameters_.size(), false);  // (parameters) named by this group
  for (std::size_t index : parameters) {
    FT_CHECK(index < parameters_.size(), "ShardPlan: parameter group ", g, " names parameter ", index,
             ", but the model has ", parameters_.size());
    const DdpParameter& p = parameters_[index];
    FT_CHECK(p.requires_grad, "ShardPlan: parameter ", p.name,
             " is frozen (requires_grad false; its gradient is never averaged) and cannot join a group");
    FT_CHECK(group_of_[index] == -1, "ShardPlan: parameter ", p.name, " is already in group ", group_of_[index],
             "; a parameter belongs to one group at most");
    FT_CHECK(!listed[index], "ShardPlan: parameter ", p.name, " is listed twice in group ", g);
    listed[index] = true;
  }
  for (std::size_t index : parameters) group_of_[index] = static_cast<int>(g);
  std::sort(parameters.begin(), parameters.end(),
            [&](std::size_t a, std::size_t b) { return parameters_[a].offset < parameters_[b].offset; });

  std::vector<std::vector<ShardRun>> runs(world_size_);  // (world) runs of this group
  for (int r = 0; r < world_size_; ++r) {
    const ShardRange owned = range(r);
    std::int64_t state = 0;
    for (std::size_t index : parameters) {
      const DdpParameter& p = parameters_[index];
      const std::int64_t lo = std::max(p.offset, owned.offset);
      const std::int64_t hi = std::min(p.offset + p.numel, owned.offset + owned.numel);
      if (lo >= hi) continue;
      if (!runs[r].empty() && runs[r].back().offset + runs[r].back().numel == lo)
        runs[r].back().numel += hi - lo;
      else
        runs[r].push_back({lo, hi - lo, state});
      state += hi - lo;
    }
  }
  groups_.push_back(std::move(parameters));
  runs_.push_back(std::move(runs));
  return g;
}

const std::vector<ShardRun>& ShardPlan::runs(int rank, std::size_t g) const {
  check_rank(rank);
  FT_CHECK(g < groups_.size(), "ShardPlan: group ", g, " does not exist (", groups_.size(), " groups)");
  return runs_[g][rank];
}

std::int64_t ShardPlan::state_numel(int rank, std::size_t g) const {
  std::int64_t n = 0;
  for (const ShardRun& run : runs(rank, g)) n += run.numel;
  return n;
}

std::int64_t ShardPlan::state_numel(int rank) const {
  std::int64_t n = 0;
  for (std::size_t g = 0; g < groups_.size(); ++g) n += state_numel(rank, g);
  return n;
}

}  // namespace ft
