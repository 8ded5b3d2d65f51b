// test_dist_buckets.cpp — bucket assignment (dist/bucket_plan.h): contiguous slices filled in reverse memory
// order under the cap, launch order by the last-ready member, frozen parameters left out and splitting
// buckets, one bucket per parameter at cap 0 and per run of adjacent parameters when unlimited; on the
// TransformerLM layout, whose ready order is not the reverse memory order; invalid inputs rejected.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "core/error.h"
#include "dist/bucket_plan.h"
#include "model/parameters.h"
#include "mpi/toy_model.h"

namespace ft::test {
namespace {

std::vector<std::size_t> toy_ready() { return ToyModel::ready_order(); }

TEST(DistBuckets, ToyLayoutAtEveryCap) {
  const auto params = ToyModel::parameters();  // mid 36, in 36, out 6, bias 1 elements (memory order)
  // cap 0: one bucket each, launched in ready order bias, out, mid, in.
  BucketPlan plan = plan_buckets(params, toy_ready(), 0, 4);
  ASSERT_EQ(plan.buckets.size(), 4u);
  const std::vector<std::size_t> launch = {ToyModel::bias, ToyModel::out, ToyModel::mid, ToyModel::in};
  for (std::size_t b = 0; b < 4; ++b) {
    EXPECT_EQ(plan.buckets[b].parameters, std::vector<std::size_t>{launch[b]});
    EXPECT_EQ(plan.buckets[b].ready_position, b);
    EXPECT_EQ(plan.bucket_of[launch[b]], b);
  }
  // 28 bytes: bias + out (7 elements) together, then in, then mid.
  plan = plan_buckets(params, toy_ready(), 28, 4);
  ASSERT_EQ(plan.buckets.size(), 3u);
  EXPECT_EQ(plan.buckets[0].parameters, (std::vector<std::size_t>{ToyModel::bias, ToyModel::out}));
  EXPECT_EQ(plan.buckets[0].offset, 72);
  EXPECT_EQ(plan.buckets[0].numel, 7);
  EXPECT_EQ(plan.buckets[0].ready_position, 1u);
  // mid (ready third) launches before in (ready fourth), though in is filled first.
  EXPECT_EQ(plan.buckets[1].parameters, std::vector<std::size_t>{ToyModel::mid});
  EXPECT_EQ(plan.buckets[2].parameters, std::vector<std::size_t>{ToyModel::in});
  // 200 bytes: bias + out + in (43 elements = 172 bytes), mid alone; the first waits for in (ready last).
  plan = plan_buckets(params, toy_ready(), 200, 4);
  ASSERT_EQ(plan.buckets.size(), 2u);
  EXPECT_EQ(plan.buckets[0].parameters, std::vector<std::size_t>{ToyModel::mid});
  EXPECT_EQ(plan.buckets[1].parameters, (std::vector<std::size_t>{ToyModel::bias, ToyModel::out, ToyModel::in}));
  EXPECT_EQ(plan.buckets[1].offset, 36);
  EXPECT_EQ(plan.buckets[1].numel, 43);
  EXPECT_EQ(plan.buckets[1].ready_position, 3u);
  // Unlimited: the whole buffer.
  plan = plan_buckets(params, toy_ready(), kUnlimitedBucketBytes, 4);
  ASSERT_EQ(plan.buckets.size(), 1u);
  EXPECT_EQ(plan.buckets[0].offset, 0);
  EXPECT_EQ(plan.buckets[0].numel, ToyModel::kNumel);
}

TEST(DistBuckets, FrozenParametersSplitBucketsAndAreLeftOut) {
  auto params = ToyModel::parameters();
  params[ToyModel::out].requires_grad = false;
  const BucketPlan plan = plan_buckets(params, toy_ready(), kUnlimitedBucketBytes, 4);
  ASSERT_EQ(plan.buckets.size(), 2u);  // bias alone | (out frozen) | mid + in
  EXPECT_EQ(plan.buckets[0].parameters, std::vector<std::size_t>{ToyModel::bias});
  EXPECT_EQ(plan.buckets[1].offset, 0);
  EXPECT_EQ(plan.buckets[1].numel, 72);
  EXPECT_EQ(plan.bucket_of[ToyModel::out], BucketPlan::kNoBucket);
}

TEST(DistBuckets, GapsInTheBufferSplitBuckets) {
  std::vector<DdpParameter> params = {{"a", 0, 4, true}, {"b", 8, 4, true}};  // [4, 8) belongs to nobody
  const BucketPlan plan = plan_buckets(params, {1, 0}, kUnlimitedBucketBytes, 4);
  ASSERT_EQ(plan.buckets.size(), 2u);
  EXPECT_EQ(plan.buckets[0].offset, 8);
  EXPECT_EQ(plan.buckets[1].offset, 0);
}

TEST(DistBuckets, TransformerLayoutBucketsAreSlicesUnderTheCap) {
  const ModelConfig config = model_config("tiny");
  const ParameterLayout layout(config);
  std::vector<DdpParameter> params;
  for (const ParameterInfo& info : layout.tensors()) params.push_back({info.name, info.offset, info.numel, true});
  // The model's ready order (TransformerLM::gradient_ready_order), built here from the layout's names.
  std::vector<std::size_t> ready = {layout.lm_head_index(), layout.ln_final_index()};
  for (std::int64_t l = config.num_layers - 1; l >= 0; --l)
    for (LayerSlot s : {LayerSlot::w2, LayerSlot::w3, LayerSlot::w1, LayerSlot::ln2, LayerSlot::output_proj,
                        LayerSlot::v_proj, LayerSlot::k_proj, LayerSlot::q_proj, LayerSlot::ln1})
      ready.push_back(layout.layer_index(l, s));
  ready.push_back(ParameterLayout::embedding_index());
  std::vector<std::size_t> reverse_memory(layout.size());
  for (std::size_t i = 0; i < layout.size(); ++i) reverse_memory[i] = layout.size() - 1 - i;
  EXPECT_NE(ready, reverse_memory);  // the case bucket_plan.h explains

  const std::int64_t largest = layout[layout.lm_head_index()].numel * 4;
  for (std::int64_t cap : {std::int64_t{0}, std::int64_t{4096}, std::int64_t{65536}, largest, kUnlimitedBucketBytes}) {
    SCOPED_TRACE(cap);
    const BucketPlan plan = plan_buckets(params, ready, cap, 4);
    std::vector<int> covered(layout.size(), 0);
    std::size_t previous = 0;
    for (std::size_t b = 0; b < plan.buckets.size(); ++b) {
      const Bucket& bucket = plan.buckets[b];
      std::int64_t numel = 0, lo = bucket.offset + bucket.numel, hi = bucket.offset;
      std::size_t last_ready = 0;
      for (std::size_t index : bucket.parameters) {
        ++covered[index];
        numel += params[index].numel;
        lo = std::min(lo, params[index].offset);
        hi = std::max(hi, params[index].offset + params[index].numel);
        last_ready = std::max(last_ready, static_cast<std::size_t>(std::find(ready.begin(), ready.end(), index) - ready.begin()));
      }
      EXPECT_EQ(numel, bucket.numel);  // members fill the slice exactly: contiguous
      EXPECT_EQ(lo, bucket.offset);
      EXPECT_EQ(hi, bucket.offset + bucket.numel);
      EXPECT_TRUE(bucket.numel * 4 <= cap || bucket.parameters.size() == 1);
      EXPECT_EQ(bucket.ready_position, last_ready);
      if (b > 0) EXPECT_GT(bucket.ready_position, previous);
      previous = bucket.ready_position;
    }
    EXPECT_EQ(covered, std::vector<int>(layout.size(), 1));
    if (cap == 0) EXPECT_EQ(plan.buckets.size(), layout.size());
    if (cap == kUnlimitedBucketBytes) EXPECT_EQ(plan.buckets.size(), 1u);
  }
}

TEST(DistBuckets, InvalidInputsAreRejected) {
  const auto params = ToyModel::parameters();
  EXPECT_THROW(plan_buckets(params, {0, 1, 2}, 0, 4), Error);     // not every parameter
  EXPECT_THROW(plan_buckets(params, {0, 1, 2, 2}, 0, 4), Error);  // listed twice
  EXPECT_THROW(plan_buckets(params, {0, 1, 2, 9}, 0, 4), Error);  // out of range
  EXPECT_THROW(plan_buckets(params, toy_ready(), -1, 4), Error);
  std::vector<DdpParameter> overlapping = {{"a", 0, 4, true}, {"b", 2, 4, true}};
  EXPECT_THROW(plan_buckets(overlapping, {0, 1}, 0, 4), Error);
}

}  // namespace
}  // namespace ft::test
