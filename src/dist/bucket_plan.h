// bucket_plan.h — how data-parallel training groups gradients into collectives, as PyTorch's reducer does:
// buckets of at most `cap_bytes`, filled in reverse parameter (memory) order, each one a contiguous slice
// of the model's flat gradient buffer — so a bucket is all-reduced in place, without copying gradients in
// or out (zero-copy: the gradients live inside the bucket).
//
// Why reverse memory order and not the exact gradient-ready order: a bucket can only be a slice if its
// parameters are adjacent in memory, and backward does not finalise gradients in exactly reverse memory
// order. TransformerLM's layout per block is q,k,v,o,ln1,w1,w2,w3,ln2 while its ready order is
// w2,w3,w1,ln2,o,v,k,q,ln1 (ln2 after the FFN weights, ln1 after q): a bucket filled in ready order would
// hold non-adjacent slices (or need copies). Filling in reverse memory order keeps every bucket a slice;
// the price is that a bucket whose members straddle such a permutation launches when its LAST member is
// final (`ready_position`): for the Transformer, a bucket holding ffn.w1 and ln1 waits for the block's
// attention backward (ln1 is final last) — at most one block's backward later than a bucket of the exact
// ready order would launch. (A block layout ln1,q,k,v,o,ln2,w1,w3,w2 would make the ready order exactly
// the reverse memory order and this delay zero.) Buckets are launched in the order their last gradient
// becomes final (the plan's order), the same on every rank.
//   cap_bytes = 0          one bucket per parameter (the naive and overlapped strategies)
//   cap_bytes = INT64_MAX  one bucket per run of adjacent trainable parameters (the flat strategy: one
//                          bucket for the whole buffer when nothing is frozen)
// A parameter larger than the cap gets a bucket of its own (as in PyTorch). Frozen parameters are in no
// bucket and split the bucket around them, so they are never communicated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace ft {

// One parameter as data-parallel code sees it: a slice of the model's flat buffers.
struct DdpParameter {
  std::string name;
  std::int64_t offset = 0;  // elements from the start of the flat buffer
  std::int64_t numel = 0;
  bool requires_grad = true;  // false: frozen, never communicated
};

struct Bucket {
  std::int64_t offset = 0;  // the slice [offset, offset + numel) of the flat gradient buffer
  std::int64_t numel = 0;
  std::vector<std::size_t> parameters;  // indices into the parameter list, in fill (descending offset) order
  std::size_t ready_position = 0;       // position in the ready order of the member that is final last
};

struct BucketPlan {
  std::vector<Bucket> buckets;         // in launch order (ascending ready_position)
  std::vector<std::size_t> bucket_of;  // (parameters) the bucket holding each parameter; kNoBucket if frozen
  static constexpr std::size_t kNoBucket = std::numeric_limits<std::size_t>::max();
};

constexpr std::int64_t kUnlimitedBucketBytes = std::numeric_limits<std::int64_t>::max();

// parameters: non-overlapping slices (any order); ready_order: a permutation of their indices, the order
// backward finalises them; element_bytes: the gradient element size the cap counts (4 for fp32).
BucketPlan plan_buckets(const std::vector<DdpParameter>& parameters, const std::vector<std::size_t>& ready_order,
                        std::int64_t cap_bytes, std::size_t element_bytes);

}  // namespace ft
