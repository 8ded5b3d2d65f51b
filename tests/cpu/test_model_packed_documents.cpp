// test_model_packed_documents.cpp — training on packed documents (model/packed_documents.h, see Note [Packed
// documents]): the layout of a batch (document starts, positions, the fixed-capacity padding), its staging,
// and the model: a packed step's loss is the token-weighted sum of the documents' own losses and its
// gradients the weighted sum of theirs (each document run alone as a (1, length) batch), for both CPU
// attention implementations, fp32 and bf16, and with recomputation (bit for bit the packed step without it);
// a batch that does not match the documents is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "model/config.h"
#include "model/packed_documents.h"
#include "model/transformer.h"
#include "test_model_util.h"

namespace ft {
namespace {

using testing_util::error_of;

const ModelConfig kTiny = model_config("tiny");
constexpr std::int32_t kEos = 3;

TEST(DocumentLayout, SplitsRowsAfterEachEndOfDocumentToken) {
  // Row 0: a tail "5 3 |", a document "7 8 3 |" and an unfinished one; row 1: "3 |" "3 |" then one to the end.
  const std::vector<std::int32_t> inputs = {5, 3, 7, 8, 3, 9, 9,  // (2, 7)
                                            3, 3, 6, 6, 6, 6, 3};
  DocumentLayout layout;
  layout_documents(inputs.data(), 2, 7, kEos, layout);
  EXPECT_EQ(layout.documents, 6);
  const std::vector<std::int32_t> cu = {0, 2, 5, 7, 8, 9, 14, 14, 14, 14, 14, 14, 14, 14, 14};  // (B*T + 1)
  EXPECT_EQ(layout.cu_seqlens, cu);
  const std::vector<std::int32_t> positions = {0, 1, 0, 1, 2, 0, 1,  // (2, 7)
                                               0, 0, 0, 1, 2, 3, 4};
  EXPECT_EQ(layout.positions, positions);

  // No end-of-document token: one document per row.
  const std::vector<std::int32_t> plain = {1, 2, 4, 5, 6, 7};
  layout_documents(plain.data(), 2, 3, kEos, layout);
  EXPECT_EQ(layout.documents, 2);
  EXPECT_EQ(layout.cu_seqlens, (std::vector<std::int32_t>{0, 3, 6, 6, 6, 6, 6}));
  EXPECT_EQ(layout.positions, (std::vector<std::int32_t>{0, 1, 2, 0, 1, 2}));
}

TEST(DocumentStaging, KeepsItsAddressesAndRefusesOtherShapes) {
  for (bool fixed : {true, false}) {
    SCOPED_TRACE(fixed ? "fixed capacity" : "the documents' entries");
    DocumentStaging staging(Device::cpu(), 2, 4, fixed ? 8 : 0);
    TokenBatch batch{2, 4, {3, 1, 3, 1, 1, 1, 1, 3}, std::vector<std::int32_t>(8, 0)};
    const PackedDocuments& first = staging.place(batch, kEos);
    const std::int32_t* cu = first.cu_seqlens.data;
    EXPECT_EQ(first.cu_seqlens.count, fixed ? 9 : 5);  // four documents
    EXPECT_EQ(first.cu_seqlens.host, first.cu_seqlens.data);  // on the CPU the mirror is the data itself
    EXPECT_EQ(first.max_seqlen, 4);
    EXPECT_EQ(first.positions.shape, (Shape{2, 4}));
    EXPECT_EQ(std::vector<std::int32_t>(cu, cu + 9), (std::vector<std::int32_t>{0, 1, 3, 4, 8, 8, 8, 8, 8}));
    batch.inputs = {1, 1, 1, 1, 1, 1, 1, 1};
    const PackedDocuments& second = staging.place(batch, kEos);
    EXPECT_EQ(second.cu_seqlens.data, cu);
    EXPECT_EQ(second.cu_seqlens.count, fixed ? 9 : 3);  // two documents
    EXPECT_EQ(std::vector<std::int32_t>(cu, cu + 9), (std::vector<std::int32_t>{0, 4, 8, 8, 8, 8, 8, 8, 8}));
    const TokenBatch wide{2, 5, std::vector<std::int32_t>(10, 1), std::vector<std::int32_t>(10, 0)};
    const Error e = error_of([&] { staging.place(wide, kEos); });
    EXPECT_NE(std::string(e.what()).find("staging holds (2, 4) batches, given (2, 5)"), std::string::npos) << e.what();
  }
}

// A fixed capacity below B*T: a batch of more documents is refused (a graph would drop them), and the
// capacity is checked against (B, T).
TEST(DocumentStaging, RefusesMoreDocumentsThanItsCapacity) {
  DocumentStaging staging(Device::cpu(), 2, 4, 3);
  TokenBatch batch{2, 4, {1, 1, 3, 1, 1, 1, 1, 1}, std::vector<std::int32_t>(8, 0)};
  EXPECT_EQ(staging.place(batch, kEos).cu_seqlens.count, 4);  // three documents
  batch.inputs = {3, 1, 3, 1, 1, 1, 1, 1};  // four
  Error e = error_of([&] { staging.place(batch, kEos); });
  EXPECT_NE(std::string(e.what()).find("a batch holds 4 documents, more than the fixed capacity of 3"),
            std::string::npos)
      << e.what();
  e = error_of([&] { DocumentStaging(Device::cpu(), 2, 4, 1); });
  EXPECT_NE(std::string(e.what()).find("must be 2 (every row starts a document) to 8 (B*T) documents, given 1"),
            std::string::npos)
      << e.what();
}

// A batch whose rows hold several documents: random ids (none of them kEos) with end-of-document tokens
// placed by hand.
test::TokenBatch packed_batch() {
  test::TokenBatch b = test::random_batch(3, 16, kTiny.vocab_size, 21);
  for (std::int32_t& id : b.inputs)
    if (id == kEos) id = kEos + 1;
  for (std::int64_t i : {4, 5, 11, 16 + 15, 32 + 0, 32 + 7, 32 + 8, 32 + 9}) b.inputs[i] = kEos;
  return b;
}

struct StepResult {
  double loss = 0;
  std::vector<double> grads;
};

// One packed step: the documents of the batch set on the model.
StepResult packed_step(TransformerLM& model, const test::TokenBatch& batch) {
  DocumentLayout layout;
  layout_documents(batch.inputs.data(), batch.B, batch.T, kEos, layout);
  const PackedDocuments docs{{layout.cu_seqlens.data(), layout.cu_seqlens.data(),
                              static_cast<std::int64_t>(layout.cu_seqlens.size()), Device::cpu()},
                             batch.T,
                             {layout.positions.data(), {batch.B, batch.T}, Device::cpu()}};
  model.set_documents(&docs);
  StepResult r;
  r.loss = model.forward_backward(batch.input_ids(), batch.target_ids());
  model.set_documents(nullptr);
  r.grads = read_as_double(model.gradients().flat());
  return r;
}

// Every document of the batch alone, as a (1, length) batch: loss and gradients weighted by the document's
// share of the tokens, the gradients accumulated.
StepResult per_document_steps(TransformerLM& model, const test::TokenBatch& batch) {
  DocumentLayout layout;
  layout_documents(batch.inputs.data(), batch.B, batch.T, kEos, layout);
  const double total = static_cast<double>(batch.B * batch.T);
  StepResult r;
  for (std::int64_t d = 0; d < layout.documents; ++d) {
    const std::int32_t start = layout.cu_seqlens[d], length = layout.cu_seqlens[d + 1] - start;
    const TokenIds inputs{batch.inputs.data() + start, {1, length}, Device::cpu()};
    const TokenIds targets{batch.targets.data() + start, {1, length}, Device::cpu()};
    BackwardOptions options;
    options.loss_scale = length / total;
    options.accumulate = d > 0;
    r.loss += model.forward_backward(inputs, targets, options) * length / total;
  }
  r.grads = read_as_double(model.gradients().flat());
  return r;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

struct PackedCase {
  Precision precision;
  AttentionImpl impl;
  double tol;  // relative to the largest gradient
};

class PackedStep : public ::testing::TestWithParam<PackedCase> {};

TEST_P(PackedStep, EqualsTheDocumentsStepsWeightedByTheirTokens) {
  const PackedCase& c = GetParam();
  TransformerLM model(kTiny, test::tiny_options(c.precision, c.impl, 3, 16));
  const test::TokenBatch batch = packed_batch();
  const StepResult packed = packed_step(model, batch);
  const StepResult documents = per_document_steps(model, batch);
  EXPECT_NEAR(packed.loss, documents.loss, c.tol * documents.loss);
  ASSERT_EQ(packed.grads.size(), documents.grads.size());
  EXPECT_LE(max_abs_diff(packed.grads, documents.grads), c.tol * max_abs(documents.grads));

  // Without the documents the rows attend across document boundaries: a different step.
  const double whole_rows = model.forward_backward(batch.input_ids(), batch.target_ids());
  EXPECT_GT(std::fabs(whole_rows - packed.loss), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Precisions, PackedStep,
                         ::testing::Values(PackedCase{Precision::fp32, AttentionImpl::flash, 2e-5},
                                           PackedCase{Precision::fp32, AttentionImpl::naive, 2e-5},
                                           PackedCase{Precision::bf16, AttentionImpl::flash, 3e-2}),
                         [](const ::testing::TestParamInfo<PackedCase>& info) {
                           return str(info.param.precision == Precision::bf16 ? "bf16" : "fp32", "_",
                                      name_of(info.param.impl));
                         });

// Recomputation runs the same packed attention and RoPE again: bit for bit the step without it.
TEST(PackedStep, RecomputationGivesTheSameStepBitForBit) {
  const test::TokenBatch batch = packed_batch();
  TransformerLM plain(kTiny, test::tiny_options(Precision::fp32, AttentionImpl::flash, 3, 16));
  const StepResult want = packed_step(plain, batch);
  for (Recompute recompute : {Recompute::full, Recompute::selective}) {
    ModelOptions options = test::tiny_options(Precision::fp32, AttentionImpl::flash, 3, 16);
    options.recompute = recompute;
    TransformerLM model(kTiny, options);
    const StepResult got = packed_step(model, batch);
    EXPECT_EQ(got.loss, want.loss);
    EXPECT_EQ(got.grads, want.grads);
  }
}

// Only the documents' entries (an eager step's staging) or the whole capacity (a graph's): the same step.
TEST(PackedStep, TheDocumentsEntriesGiveTheCapacitysStepBitForBit) {
  const test::TokenBatch batch = packed_batch();
  TransformerLM model(kTiny, test::tiny_options(Precision::fp32, AttentionImpl::flash, 3, 16));
  const StepResult capacity = packed_step(model, batch);
  DocumentStaging staging(Device::cpu(), batch.B, batch.T, /*capacity=*/0);
  const TokenBatch host{batch.B, batch.T, batch.inputs, batch.targets};
  model.set_documents(&staging.place(host, kEos));
  ASSERT_LT(staging.documents().cu_seqlens.count, batch.B * batch.T + 1);
  EXPECT_EQ(model.forward_backward(batch.input_ids(), batch.target_ids()), capacity.loss);
  model.set_documents(nullptr);
  EXPECT_EQ(read_as_double(model.gradients().flat()), capacity.grads);
}

TEST(PackedStep, ABatchOtherThanTheDocumentsIsRefused) {
  TransformerLM model(kTiny, test::tiny_options(Precision::fp32, AttentionImpl::flash, 3, 16));
  const test::TokenBatch batch = packed_batch();
  DocumentLayout layout;
  layout_documents(batch.inputs.data(), batch.B, batch.T, kEos, layout);
  const PackedDocuments docs{{layout.cu_seqlens.data(), nullptr, static_cast<std::int64_t>(layout.cu_seqlens.size()),
                              Device::cpu()},
                             batch.T,
                             {layout.positions.data(), {batch.B, batch.T}, Device::cpu()}};
  model.set_documents(&docs);
  const test::TokenBatch shorter = test::random_batch(3, 8, kTiny.vocab_size, 5);
  const Error e = error_of([&] { model.forward(shorter.input_ids(), shorter.target_ids()); });
  EXPECT_NE(std::string(e.what()).find("the packed documents describe a [3, 16] batch, given a [3, 8] one"),
            std::string::npos)
      << e.what();
}

}  // namespace
}  // namespace ft
