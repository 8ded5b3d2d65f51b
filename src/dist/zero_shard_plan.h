// zero_shard_plan.h — which rank owns which optimizer state under ZeRO-1: contiguous, equal ranges of the
// model's flat buffer (elements, not whole parameters), and each parameter group's runs inside them.
//   block = floor(numel / world)   rank r owns [r * block, (r + 1) * block); the last rank also owns the tail
//                                  [world * block, numel) (fewer than `world` elements)
// so the prefix [0, world * block) is exactly what one reduce_scatter / all_gather of the flat buffers moves
// (zero-copy: rank r's block is a slice of both buffers), and the tail is one tiny all_reduce / broadcast.
// Parameters are split wherever a range boundary falls (the update is elementwise). Ranges never change:
// a parameter group added later (add_group) finds its elements already owned, so no state moves and
// every rank keeps what it holds. Each rank's state covers only grouped elements of its range; with every
// parameter in some group, state per rank is numel / world (+ the tail on the last rank). A group that
// covers only part of the buffer puts its state on the ranks owning that part (docs/distributed.md says why this
// beats greedy per-parameter balancing here).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist/bucket_plan.h"

namespace ft {

struct ShardRange {
  std::int64_t offset = 0;  // [offset, offset + numel) of the flat buffers
  std::int64_t numel = 0;
};

// A maximal run of one group's elements inside one rank's range.
struct ShardRun {
  std::int64_t offset = 0;        // elements from the start of the flat buffer
  std::int64_t numel = 0;
  std::int64_t state_offset = 0;  // where the run's state starts in the rank's state buffer of its group
};

class ShardPlan {
 public:
  // parameters: non-overlapping slices of a flat buffer of `numel` elements; world_size >= 1.
  ShardPlan(std::vector<DdpParameter> parameters, std::int64_t numel, int world_size);

  // Adds a group of parameter indices (each in no earlier group, requires_grad true); returns its index.
  std::size_t add_group(std::vector<std::size_t> parameters);

  int world_size() const { return world_size_; }
  std::int64_t numel() const { return numel_; }
  std::int64_t block_numel() const { return block_; }  // elements per rank in the prefix
  ShardRange prefix() const { return {0, block_ * world_size_}; }
  ShardRange tail() const { return {block_ * world_size_, numel_ - block_ * world_size_}; }
  ShardRange range(int rank) const;  // what rank owns (the last rank's includes the tail)
  int owner(std::int64_t element) const;

  std::size_t num_groups() const { return groups_.size(); }
  const std::vector<std::size_t>& group(std::size_t g) const { return groups_.at(g); }
  const std::vector<DdpParameter>& parameters() const { return parameters_; }
  // Group g's runs inside rank's range, ascending offset.
  const std::vector<ShardRun>& runs(int rank, std::size_t g) const;
  std::int64_t state_numel(int rank, std::size_t g) const;  // elements of group g owned by rank
  std::int64_t state_numel(int rank) const;                 // over every group

 private:
  void check_rank(int rank) const;

  std::vector<DdpParameter> parameters_;
  std::int64_t numel_ = 0;
  int world_size_ = 1;
  std::int64_t block_ = 0;
  std::vector<std::vector<std::size_t>> groups_;         // (groups) parameter indices, ascending offset
  std::vector<std::vector<std::vector<ShardRun>>> runs_;  // (groups, world) runs
  std::vector<int> group_of_;                            // (parameters) its group, -1 when in none
};

}  // namespace ft
