// test_train.cpp — `flashtrain train` on the tiny model, without the binary: option parsing and validation,
// the loss falling on a learnable token file, bit-exact resume from a mid-run checkpoint and from `latest`,
// a truncated checkpoint as a clean io error, the results document's rows, the MFU model and peak table.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_folder.h"
#include "core/error.h"
#include "flashtrain/commands.h"
#include "flashtrain/train_options.h"

namespace ft::cli {
namespace {

namespace fs = std::filesystem;

using testing_util::TempFolder;

// A learnable token file: the ids 1, 6, 11, ..., 56 repeated (each id determines the next).
std::string write_pattern_tokens(const TempFolder& folder, const std::string& name) {
  std::vector<std::uint16_t> tokens(4096);  // (4096)
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>((i % 12) * 5 + 1);
  const std::string path = folder.file(name);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  return path;
}

// Parses a command line (without the program name) into options.
TrainOptions parse_train(const std::string& command_line) {
  CLI::App app{"test"};
  TrainOptions options;
  add_train_options(app, options);
  app.parse(command_line, false);
  return options;
}

// The tiny model on the CPU, small batches: a few milliseconds per step.
TrainOptions tiny(std::int64_t steps) {
  TrainOptions o;
  o.size = "tiny";
  o.context = 16;
  o.batch = 4;
  o.precision = "fp32";
  o.device = "cpu";
  o.steps = steps;
  o.lr = 3e-3;
  o.log_interval = 1000;
  return o;
}

TrainResult train(const TrainOptions& options, std::string* log = nullptr) {
  std::ostringstream out;
  TrainResult result = run_training(resolve_train_options(options), out);
  if (log) *log = out.str();
  return result;
}

// Expects fn to throw ft::Error of `kind` whose message holds every fragment.
template <class Fn>
void expect_error(Fn&& fn, ErrorKind kind, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning " << fragments.front();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.message();
    for (const auto& fragment : fragments) EXPECT_NE(e.message().find(fragment), std::string::npos) << e.message();
  }
}

TEST(TrainOptions, DefaultsResolve) {
  const TrainPlan plan = resolve_train_options(parse_train("--device cpu --steps 200 --lr 2e-3"));
  EXPECT_EQ(plan.model.name, "small");
  EXPECT_EQ(plan.model.vocab_size, 10000);
  EXPECT_EQ(plan.model.context_length, 512);
  EXPECT_EQ(plan.batch, 4);
  EXPECT_EQ(plan.precision, Precision::bf16);
  EXPECT_EQ(plan.attention, AttentionImpl::flash);
  EXPECT_EQ(plan.device, Device::cpu());
  EXPECT_EQ(plan.schedule.max_lr, 2e-3);
  EXPECT_DOUBLE_EQ(plan.schedule.min_lr, 2e-4);
  EXPECT_EQ(plan.schedule.warmup_iters, 20);
  EXPECT_EQ(plan.schedule.cycle_iters, 200);
  EXPECT_EQ(plan.clip, 1.0);
  EXPECT_EQ(plan.tokens_per_step(), 4 * 512);
  EXPECT_TRUE(plan.resume_path.empty());
}

TEST(TrainOptions, ParsesEveryField) {
  const TrainPlan plan = resolve_train_options(
      parse_train("--size tiny --vocab 300 --context 24 --batch 3 --precision fp32 --tf32 --attention naive "
                  "--device cpu --steps 50 --accumulate 2 --lr 1e-2 --min-lr 0 --warmup 0 --weight-decay 0.1 "
                  "--beta1 0.8 --beta2 0.95 --eps 1e-6 --clip 0 --seed 9 --log-interval 5 --eval-interval 7 "
                  "--eval-batches 2 --checkpoint-dir /tmp/x --checkpoint-interval 10"));
  EXPECT_EQ(plan.model.vocab_size, 300);
  EXPECT_EQ(plan.model.context_length, 24);
  EXPECT_EQ(plan.tokens_per_step(), 3 * 24 * 2);
  EXPECT_TRUE(plan.tf32);
  EXPECT_EQ(plan.attention, AttentionImpl::naive);
  EXPECT_EQ(plan.schedule.min_lr, 0);
  EXPECT_EQ(plan.schedule.warmup_iters, 0);
  EXPECT_EQ(plan.adamw.weight_decay, 0.1);
  EXPECT_EQ(plan.adamw.beta1, 0.8);
  EXPECT_EQ(plan.adamw.beta2, 0.95);
  EXPECT_EQ(plan.adamw.eps, 1e-6);
  EXPECT_EQ(plan.clip, 0);
  EXPECT_EQ(plan.seed, 9u);
  EXPECT_EQ(plan.eval_batches, 2);
  EXPECT_EQ(plan.checkpoint_interval, 10);
}

TEST(TrainOptions, ShapeOptionsReplaceTheSizesFields) {
  const TrainPlan plan = resolve_train_options(
      parse_train("--size 8b --layers 2 --d-model 256 --heads 2 --d-ff 512 --context 4096 --rope-theta 1e6"));
  EXPECT_EQ(plan.model.name, "8b-custom");
  EXPECT_EQ(plan.model.num_layers, 2);
  EXPECT_EQ(plan.model.d_model, 256);
  EXPECT_EQ(plan.model.num_heads, 2);
  EXPECT_EQ(plan.model.d_ff, 512);
  EXPECT_EQ(plan.model.vocab_size, 151936);
  EXPECT_EQ(plan.model.context_length, 4096);
  EXPECT_EQ(plan.model.rope_theta, 1e6);
  EXPECT_EQ(plan.model_training.recompute, Recompute::none);
  EXPECT_EQ(plan.model_training.loss_chunk, 1024);
  const TrainPlan memory = resolve_train_options(parse_train("--size tiny --recompute selective --loss-chunk 0"));
  EXPECT_EQ(memory.model_training.recompute, Recompute::selective);
  EXPECT_EQ(memory.model_training.loss_chunk, 0);
}

TEST(TrainOptions, AttentionBackwardIsDeterministicUnlessAsked) {
  EXPECT_TRUE(resolve_train_options(parse_train("--size tiny")).model_training.deterministic_attention);
  EXPECT_FALSE(resolve_train_options(parse_train("--size tiny --nondeterministic-attention"))
                   .model_training.deterministic_attention);
}

TEST(TrainOptions, GemmAutotuningIsOffUnlessAsked) {
  EXPECT_EQ(resolve_train_options(parse_train("--size tiny")).model_training.gemm_autotune, 0);
  EXPECT_EQ(resolve_train_options(parse_train("--size tiny --gemm-autotune 0")).model_training.gemm_autotune, 0);
  EXPECT_EQ(resolve_train_options(parse_train("--size tiny --gemm-autotune 16")).model_training.gemm_autotune, 16);
  for (const char* line : {"--size tiny --gemm-autotune 1", "--size tiny --gemm-autotune 33"})
    expect_error([&] { resolve_train_options(parse_train(line)); }, ErrorKind::invalid_argument,
                 {"--gemm-autotune must be 0 (off) or 2 to 32 candidates"});
}

TEST(TrainOptions, RejectsBadValuesNamingTheOption) {
  const auto bad = [](const std::string& line, const std::vector<std::string>& fragments,
                      ErrorKind kind = ErrorKind::invalid_argument) {
    SCOPED_TRACE(line);
    expect_error([&] { resolve_train_options(parse_train(line)); }, kind, fragments);
  };
  bad("--size huge", {"--size", "'huge'", "tiny, small"});
  bad("--batch 0", {"--batch", "given 0"});
  bad("--accumulate 0", {"--accumulate", "given 0"});
  bad("--steps 0", {"--steps"});
  bad("--size tiny --context 0", {"--context"});
  bad("--size tiny --vocab 0", {"--vocab"});
  bad("--size tiny --heads 3", {"--heads", "num_heads must divide d_model", "64", "3"});
  bad("--size tiny --heads 64", {"--heads", "even for RoPE"});
  bad("--size tiny --d-model 1024 --heads 2", {"--d-model", "at most 256", "512"});
  bad("--size tiny --rope-theta 0", {"--rope-theta", "rope_theta"});
  bad("--recompute some", {"--recompute", "'some'", "none, selective, selective-qkv or full"});
  bad("--precision fp8", {"--precision", "fp8"});
  bad("--attention sdpa", {"--attention", "sdpa"});
  bad("--device tpu", {"--device", "tpu"});
  bad("--steps 10 --warmup 11", {"--warmup", "11"});
  bad("--lr 1e-3 --min-lr 1e-2", {"--min-lr"});
  bad("--beta2 1", {"--beta2"});
  bad("--clip -1", {"--clip"});
  bad("--checkpoint-interval 5", {"--checkpoint-interval", "--checkpoint-dir"});
  bad("--resume latest", {"--resume latest", "--checkpoint-dir"});
  bad("--resume a.safetensors --init-from b.safetensors", {"--resume", "--init-from"});
  bad("--pack-documents", {"--pack-documents", "give --eos-id N"});
  bad("--eos-id 3", {"--eos-id 3", "give --pack-documents too"});
  bad("--size tiny --pack-documents --eos-id 97", {"--eos-id", "[0, --vocab = 97)", "given 97"});
  bad("--pack-documents --eos-id 1 --max-documents 8", {"--max-documents", "give --pack-documents and --cuda-graph"});
  bad("--size tiny --batch 2 --pack-documents --eos-id 1 --cuda-graph --max-documents 1",
      {"--max-documents must be in [--batch = 2, --batch x --context = 64]", "given 1"});
  bad("--resume /nonexistent/step_000001.safetensors", {"does not exist"}, ErrorKind::io);
  const TempFolder empty;
  bad("--resume latest --checkpoint-dir " + empty.file(""), {"no checkpoint in"}, ErrorKind::io);
}

TEST(Train, LossFallsOnALearnableFile) {
  const TempFolder folder;
  TrainOptions o = tiny(30);
  o.data = write_pattern_tokens(folder, "pattern.bin");
  o.warmup = 3;
  std::string log;
  const TrainResult r = train(o, &log);
  ASSERT_EQ(r.losses.size(), 30u);
  for (double loss : r.losses) ASSERT_TRUE(std::isfinite(loss));
  EXPECT_NEAR(r.losses.front(), std::log(97.0), 0.5);  // near uniform over the vocabulary at initialisation
  EXPECT_LT(r.losses.back(), 0.5 * r.losses.front()) << "first " << r.losses.front() << ", last " << r.losses.back();
  EXPECT_NE(log.find(o.data), std::string::npos) << log;
  EXPECT_EQ(log.find("random tokens"), std::string::npos) << log;
}

// --pack-documents on the pattern file, whose id 1 ends a "document" every 12 tokens: the run trains (the loss
// falls), says so in its log and JSON config, and is not the whole-row run (attention and positions differ).
TEST(Train, PackedDocumentsTrainOnTheirOwnAttention) {
  const TempFolder folder;
  TrainOptions o = tiny(12);
  o.data = write_pattern_tokens(folder, "pattern.bin");
  o.warmup = 2;
  const TrainResult whole_rows = train(o);
  o.pack_documents = true;
  o.eos_id = 1;
  std::string log;
  const TrainResult packed = train(o, &log);
  ASSERT_EQ(packed.losses.size(), 12u);
  for (double loss : packed.losses) ASSERT_TRUE(std::isfinite(loss));
  EXPECT_LT(packed.losses.back(), packed.losses.front());
  EXPECT_NE(packed.losses.front(), whole_rows.losses.front());
  EXPECT_NE(log.find("packed documents: rows split after each end-of-document token 1"), std::string::npos) << log;
  EXPECT_EQ(train_document(resolve_train_options(o), packed)["config"]["pack_documents"], true);
}

TEST(Train, RandomTokensAreSaidInTheLog) {
  std::string log;
  const TrainResult r = train(tiny(2), &log);
  EXPECT_EQ(r.losses.size(), 2u);
  EXPECT_NE(log.find("random tokens"), std::string::npos) << log;
  EXPECT_NE(log.find("MFU n/a"), std::string::npos) << log;  // no peak for the CPU
}

// The losses of steps first_step.. of `run` against those of the uninterrupted run, bit for bit.
void expect_same_losses(const TrainResult& run, const TrainResult& uninterrupted) {
  ASSERT_EQ(uninterrupted.first_step, 1);
  const auto offset = static_cast<std::size_t>(run.first_step - 1);
  ASSERT_EQ(run.losses.size() + offset, uninterrupted.losses.size());
  for (std::size_t i = 0; i < run.losses.size(); ++i)
    EXPECT_EQ(run.losses[i], uninterrupted.losses[i + offset]) << "step " << run.first_step + std::int64_t(i);
}

TEST(Train, ResumeFromAMidRunCheckpointReproducesTheLossesBitExactly) {
  const TempFolder folder;
  TrainOptions o = tiny(10);
  o.data = write_pattern_tokens(folder, "pattern.bin");
  o.precision = "bf16";
  o.accumulate = 2;
  o.clip = 0.5;
  o.warmup = 3;  // cosine schedule: the step's learning rate must resume too
  const TrainResult uninterrupted = train(o);

  o.checkpoint_dir = folder.file("ckpt");  // created on first use
  o.checkpoint_interval = 4;
  const TrainResult checkpointed = train(o);
  expect_same_losses(checkpointed, uninterrupted);  // writing checkpoints changes nothing
  ASSERT_EQ(checkpointed.checkpoints.size(), 3u);   // steps 4, 8 and the last, 10
  EXPECT_EQ(fs::path(checkpointed.checkpoints[0]).filename(), "step_000004.safetensors");
  EXPECT_EQ(fs::path(checkpointed.checkpoints[2]).filename(), "step_000010.safetensors");

  o.resume = checkpointed.checkpoints[0];
  o.checkpoint_interval = 0;
  const TrainResult resumed = train(o);
  EXPECT_EQ(resumed.first_step, 5);
  expect_same_losses(resumed, uninterrupted);
}

TEST(Train, ResumeLatestContinuesAnInterruptedRun) {
  const TempFolder folder;
  TrainOptions o = tiny(8);  // random tokens: the generator's state resumes
  o.warmup = 0;
  o.min_lr = o.lr;  // a constant rate, so that a run stopped early at --steps 5 is the same run
  o.clip = 0;
  const TrainResult uninterrupted = train(o);

  o.checkpoint_dir = folder.file("nested/ckpt");
  o.steps = 5;
  train(o);
  std::ifstream latest(folder.file("nested/ckpt/latest"));
  std::string name;
  std::getline(latest, name);
  EXPECT_EQ(name, "step_000005.safetensors");

  o.steps = 8;
  o.resume = "latest";
  const TrainResult resumed = train(o);
  EXPECT_EQ(resumed.first_step, 6);
  expect_same_losses(resumed, uninterrupted);
}

TEST(Train, TruncatedCheckpointIsACleanIoError) {
  const TempFolder folder;
  TrainOptions o = tiny(2);
  o.checkpoint_dir = folder.file("ckpt");
  const TrainResult r = train(o);
  ASSERT_EQ(r.checkpoints.size(), 1u);
  fs::resize_file(r.checkpoints[0], fs::file_size(r.checkpoints[0]) / 2);

  o.steps = 4;
  o.resume = "latest";
  expect_error([&] { train(o); }, ErrorKind::io, {r.checkpoints[0]});
}

TEST(Train, ResumingAShapeMismatchedCheckpointIsAnIoError) {
  const TempFolder folder;
  TrainOptions o = tiny(1);
  o.checkpoint_dir = folder.file("ckpt");
  train(o);
  o.vocab = 50;  // a different model
  o.steps = 2;
  o.resume = "latest";
  expect_error([&] { train(o); }, ErrorKind::io, {"mismatched", "token_embeddings.weight"});
}

TEST(Train, JsonDocumentHasARowPerLoggedStep) {
  const TempFolder folder;
  TrainOptions o = tiny(7);
  o.log_interval = 3;
  o.val_data = write_pattern_tokens(folder, "val.bin");
  o.eval_interval = 5;
  o.eval_batches = 2;
  o.json_path = folder.file("results/train.json");
  const TrainResult r = train(o);

  std::ifstream in(o.json_path);
  ASSERT_TRUE(in.good());
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["benchmark"], "train");
  EXPECT_EQ(doc["config"]["size"], "tiny");
  EXPECT_EQ(doc["config"]["ctx"], 16);
  EXPECT_EQ(doc["config"]["data"], "random");
  EXPECT_TRUE(doc["config"]["peak_tflops"].is_null());
  const std::vector<std::int64_t> steps = {1, 3, 5, 6, 7};  // first, every 3rd, evaluations (5, last)
  ASSERT_EQ(doc["rows"].size(), steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const nlohmann::json& row = doc["rows"][i];
    EXPECT_EQ(row["step"], steps[i]);
    EXPECT_EQ(row["loss"].get<double>(), r.losses[static_cast<std::size_t>(steps[i] - 1)]);
    for (const char* key : {"lr", "grad_norm", "tokens_per_s", "step_ms"})
      EXPECT_TRUE(row[key].is_number() && row[key].get<double>() > 0) << key << " in " << row.dump();
    EXPECT_TRUE(row["mfu"].is_null());
    const bool evaluated = steps[i] == 5 || steps[i] == 7;
    EXPECT_EQ(row.contains("val_loss"), evaluated) << row.dump();
  }
  // The same validation batches each time: the loss moved only because the model did.
  EXPECT_NE(doc["rows"][2]["val_loss"], doc["rows"][4]["val_loss"]);
}

TEST(TrainThroughput, FlopsPerTokenFollowsPalm) {
  // tiny: per layer 4*64*64 + 3*64*172 + 2*64 = 49536; 2 layers + ln_final 64 + lm_head 97*64 = 105344
  // matmul parameters (the embedding excluded); 6 * 105344 + 12 * 2 layers * 64 * 32 context.
  EXPECT_EQ(train_flops_per_token(model_config("tiny")), 6.0 * 105344 + 12.0 * 2 * 64 * 32);
}

TEST(TrainThroughput, PeakTable) {
  EXPECT_EQ(peak_flops("NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)", Precision::bf16, false), 989.4e12);
  EXPECT_EQ(peak_flops("NVIDIA H100 PCIe", Precision::bf16, false), 756e12);
  EXPECT_EQ(peak_flops("NVIDIA H200", Precision::fp32, true), 494.7e12);
  EXPECT_EQ(peak_flops("NVIDIA H200 NVL", Precision::bf16, false), 835e12);
  EXPECT_EQ(peak_flops("NVIDIA A100-SXM4-80GB", Precision::fp32, false), 19.5e12);
  EXPECT_FALSE(peak_flops("Tesla V100-SXM2-16GB", Precision::bf16, false).has_value());
}

TEST(Train, CudaWithoutAGpuIsAnError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible";
  TrainOptions o = tiny(1);
  o.device = "cuda";
  try {
    train(o);
    ADD_FAILURE() << "trained on cuda without a GPU";
  } catch (const Error& e) {
    EXPECT_NE(e.kind(), ErrorKind::runtime) << e.message();
    EXPECT_EQ(e.message().find('\n'), std::string::npos) << e.message();
  }
}

TEST(Train, CheckpointFileNames) {
  EXPECT_EQ(checkpoint_file_name(100), "step_000100.safetensors");
  EXPECT_EQ(checkpoint_file_name(1234567), "step_1234567.safetensors");
}

}  // namespace
}  // namespace ft::cli
