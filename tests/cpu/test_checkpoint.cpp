// test_checkpoint.cpp — training checkpoints: bit-exact save/load of parameters, AdamW state and counters;
// missing, unexpected and mismatched tensors reported together before anything is overwritten; parameter
// loading from a checkpoint or a reference export; malformed counters and bad names.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/temp_folder.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "model/checkpoint.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

using testing_util::TempFolder;

// A miniature model's state as the engine holds it: one flat buffer per kind (parameters, m, v) viewed
// per parameter under state-dict names, the way ParameterBuffer lays them out.
struct FlatState {
  static constexpr std::int64_t kVocab = 10, kModel = 4;
  OwnedTensor params{{kVocab * kModel + kModel * kModel + kModel}, DType::f32, Device::cpu(), "test"};  // (60)
  OwnedTensor m{{params->numel()}, DType::f32, Device::cpu(), "test"};                                   // (60)
  OwnedTensor v{{params->numel()}, DType::f32, Device::cpu(), "test"};                                   // (60)

  static std::vector<NamedTensor> views(const Tensor& flat, const std::string& prefix) {
    return {{prefix + "token_embeddings.weight", flat.narrow(0, 0, kVocab * kModel).reshape({kVocab, kModel})},
            {prefix + "layers.0.attn.q_proj.weight",
             flat.narrow(0, kVocab * kModel, kModel * kModel).reshape({kModel, kModel})},
            {prefix + "ln_final.weight", flat.narrow(0, kVocab * kModel + kModel * kModel, kModel)}};
  }
  std::vector<NamedTensor> named_params() const { return views(params, ""); }
  std::vector<NamedTensor> named_opt_state() const {
    std::vector<NamedTensor> state;
    for (const auto& [name, t] : views(m, "")) state.push_back({optimizer_state_name("m", name), t});
    for (const auto& [name, t] : views(v, "")) state.push_back({optimizer_state_name("v", name), t});
    return state;
  }
  void randomize(std::uint64_t seed) {
    fill_normal(params, seed);
    fill_normal(m, seed + 1);
    fill_normal(v, seed + 2, 1.0, 0.1);  // second moments are >= 0 (10 std from 0)
  }
  void zero() {
    fill_constant(params, 0.0);
    fill_constant(m, 0.0);
    fill_constant(v, 0.0);
  }
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), a.numel() * a.element_size()) == 0;
}

TEST(Checkpoint, OptimizerStateNames) {
  EXPECT_EQ(optimizer_state_name("m", "lm_head.weight"), "optimizer.m.lm_head.weight");
  EXPECT_EQ(optimizer_state_name("v", "layers.3.ffn.w2.weight"), "optimizer.v.layers.3.ffn.w2.weight");
}

TEST(Checkpoint, SaveLoadRoundTripIsBitExact) {
  TempFolder folder;
  FlatState saved;
  saved.randomize(7);
  const TrainingCounters counters{1234, 1230, {0xfedcba9876543210ull, 987654321ull}};
  const std::string path = folder.file("step_1234.safetensors");
  save_checkpoint(path, saved.named_params(), saved.named_opt_state(), counters);
  EXPECT_EQ(folder.entries(), 1u);  // no temporary file left

  FlatState loaded;
  loaded.zero();
  const TrainingCounters back = load_checkpoint(path, loaded.named_params(), loaded.named_opt_state());
  EXPECT_EQ(back.step, counters.step);
  EXPECT_EQ(back.optimizer_step, counters.optimizer_step);
  EXPECT_EQ(back.data_rng, counters.data_rng);
  EXPECT_TRUE(same_bytes(loaded.params, saved.params));
  EXPECT_TRUE(same_bytes(loaded.m, saved.m));
  EXPECT_TRUE(same_bytes(loaded.v, saved.v));

  // The file is plain safetensors with the state-dict names, loadable by the Python library.
  const SafetensorsFile file(path);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.entries().size(), 9u);
  EXPECT_EQ(file.entry("layers.0.attn.q_proj.weight").describe(), "F32[4, 4]");
  EXPECT_NE(file.find("optimizer.v.ln_final.weight"), nullptr);
}

TEST(Checkpoint, MismatchesAreListedTogetherAndNothingIsOverwritten) {
  TempFolder folder;
  FlatState saved;
  saved.randomize(3);
  const std::string path = folder.file("ckpt.safetensors");
  save_checkpoint(path, saved.named_params(), saved.named_opt_state(), {});

  FlatState target;
  target.zero();
  std::vector<NamedTensor> params = target.named_params();
  params[0].name = "tok_embeddings.weight";                   // missing (and the file's name unexpected)
  params[1].tensor = params[1].tensor.reshape({2, 8});        // mismatched shape
  OwnedTensor half_norm({4}, DType::bf16, Device::cpu(), "test");
  params[2].tensor = half_norm;                               // mismatched dtype
  std::vector<NamedTensor> opt_state = target.named_opt_state();
  opt_state.pop_back();                                       // optimizer.v.ln_final.weight unexpected
  try {
    load_checkpoint(path, params, opt_state);
    FAIL() << "mismatched checkpoint loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    const std::string& m = e.message();
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("1 missing: tok_embeddings.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("2 mismatched: layers.0.attn.q_proj.weight (expected F32[2, 8], file has F32[4, 4]), "
                     "ln_final.weight (expected BF16[4], file has F32[4])"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("2 unexpected: token_embeddings.weight, optimizer.v.ln_final.weight"), std::string::npos) << m;
  }
  // Nothing was copied: the matching tensors are still zero.
  for (double x : read_as_double(target.m)) EXPECT_EQ(x, 0.0);
  for (double x : read_as_double(target.params)) EXPECT_EQ(x, 0.0);
}

TEST(Checkpoint, LoadParametersFromACheckpointOrAReferenceExport) {
  TempFolder folder;
  FlatState saved;
  saved.randomize(11);
  const std::string checkpoint = folder.file("ckpt.safetensors");
  save_checkpoint(checkpoint, saved.named_params(), saved.named_opt_state(), {5, 5, {1, 2}});
  FlatState from_checkpoint;
  from_checkpoint.zero();
  load_parameters(checkpoint, from_checkpoint.named_params());  // optimizer.* entries ignored
  EXPECT_TRUE(same_bytes(from_checkpoint.params, saved.params));

  // A reference export: the state dict alone, no flashtrain metadata.
  const std::string exported = folder.file("reference.safetensors");
  save_safetensors(exported, saved.named_params(), {{"format", "pt"}});
  FlatState from_export;
  from_export.zero();
  load_parameters(exported, from_export.named_params());
  EXPECT_TRUE(same_bytes(from_export.params, saved.params));
  // It is not a training checkpoint.
  try {
    load_checkpoint(exported, from_export.named_params(), from_export.named_opt_state());
    FAIL() << "an export without counters loaded as a checkpoint";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(e.message().find("not a flashtrain checkpoint"), std::string::npos) << e.message();
  }
  // An export with a stray tensor is reported.
  std::vector<NamedTensor> extra = saved.named_params();
  extra.push_back({"layers.1.ln1.weight", saved.named_params()[2].tensor});
  save_safetensors(exported, extra, {});
  try {
    load_parameters(exported, from_export.named_params());
    FAIL() << "stray tensor accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(e.message().find("1 unexpected: layers.1.ln1.weight"), std::string::npos) << e.message();
  }
}

TEST(Checkpoint, MalformedCountersAreIoErrors) {
  TempFolder folder;
  FlatState state;
  state.randomize(1);
  std::vector<NamedTensor> all = state.named_params();
  for (const auto& s : state.named_opt_state()) all.push_back(s);
  const std::string path = folder.file("bad.safetensors");
  SafetensorsMetadata metadata = {{"flashtrain.checkpoint", "1"},        {"flashtrain.step", "12x"},
                                  {"flashtrain.optimizer_step", "12"},   {"flashtrain.data_rng.seed", "1"},
                                  {"flashtrain.data_rng.counter", "2"}};
  save_safetensors(path, all, metadata);
  try {
    load_checkpoint(path, state.named_params(), state.named_opt_state());
    FAIL() << "malformed step accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(e.message().find("\"flashtrain.step\" is \"12x\", expected an integer"), std::string::npos)
        << e.message();
  }
  metadata["flashtrain.step"] = "12";
  metadata.erase("flashtrain.data_rng.counter");
  save_safetensors(path, all, metadata);
  try {
    load_checkpoint(path, state.named_params(), state.named_opt_state());
    FAIL() << "missing counter accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("no \"flashtrain.data_rng.counter\""), std::string::npos) << e.message();
  }
  metadata["flashtrain.data_rng.counter"] = "2";
  metadata["flashtrain.checkpoint"] = "9";
  save_safetensors(path, all, metadata);
  try {
    load_checkpoint(path, state.named_params(), state.named_opt_state());
    FAIL() << "unknown format version accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("format version 9, expected 1"), std::string::npos) << e.message();
  }
}

TEST(Checkpoint, NamesMustSeparateParametersFromOptimizerState) {
  TempFolder folder;
  FlatState state;
  const std::string path = folder.file("x.safetensors");
  std::vector<NamedTensor> params = state.named_params();
  std::vector<NamedTensor> bad_state = {{"m.token_embeddings.weight", state.named_params()[0].tensor}};
  EXPECT_THROW(save_checkpoint(path, params, bad_state, {}), Error);
  std::vector<NamedTensor> bad_params = {{"optimizer.m.x", state.named_params()[0].tensor}};
  EXPECT_THROW(save_checkpoint(path, bad_params, {}, {}), Error);
  params.push_back(params[0]);
  EXPECT_THROW(save_checkpoint(path, params, {}, {}), Error);
  EXPECT_EQ(folder.entries(), 0u);
}

}  // namespace
}  // namespace ft
