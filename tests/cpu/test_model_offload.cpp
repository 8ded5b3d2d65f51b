// test_model_offload.cpp — activation offloading (see Note [Activation offloading], model/transformer.h) on
// the CPU, where the host copies are a separate buffer reached through the same calls: for every recompute
// policy, fp32 and bf16, the fused and the materialised loss, offloading gives the losses and every gradient
// of the same model without it bit for bit (six blocks through a ring of two, over two accumulated
// micro-batches of different lengths, then a forward-only call), and the device arena holds the ring instead
// of one unit per block while the host holds the other units; a unit stored in parts reaches the host as each
// part was when stored; a host allocation that fails names its bytes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/pinned_memory.h"
#include "core/tensor_io.h"
#include "model/activation_offload.h"
#include "test_model_util.h"
#include "test_ops_util.h"

namespace ft {
namespace {

ModelConfig six_layers() {
  ModelConfig c = model_config("tiny");
  c.num_layers = 6;  // units 0-4 to the host and back, block 5's and x_L staying in the ring
  return c;
}

// The two micro-batches, then a forward-only call on the first, which leaves the gradients as they were.
test::TrainRun train(Precision precision, std::int64_t loss_chunk, Recompute recompute, bool offload) {
  ModelOptions o = test::tiny_options(precision);
  o.loss_chunk = loss_chunk;
  o.recompute = recompute;
  o.offload_activations = offload;
  TransformerLM model(six_layers(), o);
  test::TrainRun r = test::train_two_micro_batches(model, 90);
  const test::TokenBatch first = test::random_batch(4, 16, 97, 90);
  r.losses.push_back(model.forward(first.input_ids(), first.target_ids()));
  r.grads = read_as_double(model.gradients().flat());
  return r;
}

TEST(Offload, LossesAndGradientsAreBitIdentical) {
  for (Precision precision : {Precision::fp32, Precision::bf16})
    for (std::int64_t loss_chunk : {0, 7})
      for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::selective_qkv, Recompute::full}) {
        SCOPED_TRACE(str(name_of(precision), " chunk ", loss_chunk, " ", name_of(recompute)));
        test::expect_bit_identical(train(precision, loss_chunk, recompute, true),
                                   train(precision, loss_chunk, recompute, false));
      }
}

TEST(Offload, ArenaHoldsTheRingAndTheHostTheRest) {
  const ModelConfig c = six_layers();
  const std::size_t rows = 4 * 16, d = 64, H = 4, L = 6, ring = kOffloadRing;
  for (Recompute recompute : {Recompute::none, Recompute::selective, Recompute::selective_qkv, Recompute::full}) {
    SCOPED_TRACE(name_of(recompute));
    ModelOptions o = test::tiny_options(Precision::bf16);
    o.recompute = recompute;
    const MemoryReport kept = TransformerLM(c, o).memory();
    o.offload_activations = true;
    const TransformerLM model(c, o);
    const MemoryReport offloaded = model.memory();
    EXPECT_EQ(kept.offloaded, 0u);
    // A unit: x_l (fp32) and at least what the policy keeps per block.
    std::size_t unit = rows * d * 4;
    if (recompute == Recompute::selective) unit += rows * d * 2 + rows * H * 4;
    if (recompute == Recompute::selective_qkv) unit += rows * 3 * d * 2 + rows * d * 2 + rows * H * 4;
    if (recompute == Recompute::none) unit += rows * (d * 2 + 4 + 3 * d * 2 + d * 2 + d * 4 + d * 2 + 4 + 2 * 172 * 2);
    // Units 0 .. L (the last: x_L alone), the first L + 1 - ring on the host.
    const std::size_t host_units = L + 1 - ring, slot = offloaded.offloaded / host_units;
    EXPECT_GE(slot, unit);
    EXPECT_LE(slot, unit + 16 * kArenaAlignment);
    // The same units, moved; x_L's slot has room for a block's kept tensors.
    EXPECT_EQ(kept.activations - offloaded.activations, offloaded.offloaded - (slot - rows * d * 4));
    EXPECT_EQ(TransformerLM::planned_memory(c, o).offloaded, offloaded.offloaded);
    EXPECT_EQ(TransformerLM::planned_memory(c, o).activations, offloaded.activations);
  }
  // Inference keeps nothing for backward: nothing to offload.
  ModelOptions o = test::tiny_options();
  o.training = false;
  const std::size_t inference = TransformerLM(c, o).memory().activations;
  o.offload_activations = true;
  EXPECT_EQ(TransformerLM(c, o).memory().activations, inference);
  EXPECT_EQ(TransformerLM(c, o).memory().offloaded, 0u);
}

TEST(Offload, FewerBlocksThanTheRingStayOnTheDevice) {
  ModelConfig c = six_layers();
  c.num_layers = 1;  // units: block 0's and x_L
  ModelOptions o = test::tiny_options();
  o.offload_activations = true;
  TransformerLM model(c, o);
  EXPECT_EQ(model.memory().offloaded, 0u);
  const test::TokenBatch b = test::random_batch(4, 16, 97, 92);
  o.offload_activations = false;
  TransformerLM reference(c, o);
  EXPECT_EQ(model.forward_backward(b.input_ids(), b.target_ids()),
            reference.forward_backward(b.input_ids(), b.target_ids()));
  EXPECT_EQ(read_as_double(model.gradients().flat()), read_as_double(reference.gradients().flat()));
}

// A unit stored in parts: each part copies the bytes after the previous part's end as they are when it is
// stored (later writes to a stored part do not reach the host), store() copies the rest, and the copy back
// returns the bytes as stored; a part beyond the unit is refused.
TEST(Offload, UnitIsStoredInParts) {
  std::string slot0(8, 'A'), slot1(8, 'x');
  ActivationOffload offload(4, {slot0.data(), slot1.data()}, 8, Device::cpu(), Stream());  // units 0, 1 to the host
  offload.store_part(0, 3);
  slot0.assign(8, 'B');
  offload.store_part(0, 2);  // within what is stored: nothing
  offload.store_part(0, 6);
  slot0.assign(8, 'C');
  offload.store(0);
  test::expect_error([&] { offload.store_part(1, 9); }, ErrorKind::invalid_argument, {"9 bytes", "8"});
  slot0.assign(8, 'D');  // unit 2, which stays in its slot
  offload.store_part(2, 4);
  offload.store(2);
  offload.release(2);  // unit 0 back into slot 0
  EXPECT_EQ(slot0, "AAABBBCC");
  offload.finish();
}

TEST(Offload, HostAllocationFailureNamesTheBytes) {
  const std::size_t huge = std::size_t{1} << 60;
  test::expect_error([&] { PinnedBuffer buffer(huge, Device::cpu(), "offloaded activations"); },
                     ErrorKind::out_of_memory, {std::to_string(huge), "offloaded activations"});
}

}  // namespace
}  // namespace ft
