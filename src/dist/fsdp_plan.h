// fsdp_plan.h — how ZeRO-3 (dist/fsdp.h) cuts a TransformerLM's flat parameter buffer over the ranks.
//
// Note [ZeRO-3 shards]
// The model is cut into units (model/parameter_source.h: the embedding, each block, the head), each a
// contiguous range [offset, offset + numel) of the parameter layout. Each unit is padded to a multiple of the
// world size, padded = piece * world, piece = ceil(numel / world), and rank r holds elements
// [offset + r * piece, offset + (r + 1) * piece) of it: the last ranks' pieces run into the padding (at most
// world - 1 elements per unit), whose master values, gradients and AdamW state stay zero. A rank's shard is
// its pieces of every unit back to back (unit u's at shard_offset), so
//   - one all_gather of equal pieces (Communicator's form) rebuilds a unit, in its gather dtype, in a slot;
//   - one reduce_scatter of the unit's padded gradient (the padding zeroed) leaves each rank the average of
//     its piece, written straight into its gradient shard;
//   - AdamW and the sum of squares run over the whole shard at once (the padding contributes nothing).
// Shards are equal on every rank; the slices of real parameters are not (uneven sizes are the padding).
// A world larger than a unit's elements would leave a rank holding padding only: refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist/zero_shard_plan.h"
#include "model/parameters.h"

namespace ft {

struct FsdpUnit {
  std::int64_t offset = 0;        // first element in the flat layout
  std::int64_t numel = 0;         // elements of the layout it covers
  std::int64_t piece = 0;         // elements per rank: ceil(numel / world)
  std::int64_t shard_offset = 0;  // where this unit's piece starts in a rank's shard
  std::size_t first_parameter = 0;
  std::size_t parameters = 0;     // layout indices [first_parameter, first_parameter + parameters)
  std::int64_t padded() const { return piece * world; }
  int world = 1;
};

class FsdpPlan {
 public:
  // ft::Error (invalid_argument) when world < 1 or a unit has fewer elements than world.
  FsdpPlan(const ParameterLayout& layout, int world);

  int world() const { return world_; }
  const std::vector<FsdpUnit>& units() const { return units_; }
  std::size_t unit_of(std::size_t parameter) const { return unit_of_.at(parameter); }
  std::int64_t shard_numel() const { return shard_numel_; }  // every rank's
  // The real parameters of unit u that rank r holds: [offset, offset + numel) of the flat layout (numel may
  // be 0 when r's piece is padding only), starting at shard element unit.shard_offset.
  ShardRange owned(std::size_t unit, int rank) const;
  std::int64_t max_padded() const;  // the largest unit, padded

 private:
  int world_ = 1;
  std::vector<FsdpUnit> units_;
  std::vector<std::size_t> unit_of_;  // (parameters) its unit
  std::int64_t shard_numel_ = 0;
};

}  // namespace ft
