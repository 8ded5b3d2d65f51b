// test_train_ddp.cpp — `flashtrain train` data-parallel, without the binary, 2 ranks under mpirun on the tiny
// model: the ranks end with identical parameters for every strategy; a 2-rank run with batch B per rank
// takes the steps of one process with batch 2B (losses, validation losses and checkpointed parameters, with
// random tokens and with a token file, with accumulation); only rank 0 logs and writes; a checkpoint of a
// 2-rank run resumes bit-exactly under 2 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_folder.h"
#include "flashtrain/train_options.h"
#include "model/safetensors.h"
#include "mpi/mpi_test_util.h"

namespace ft::test {
namespace {

using cli::TrainOptions;

// A folder every rank sees: rank 0 creates it and broadcasts its path; removed after all ranks are done.
class SharedFolder {
 public:
  SharedFolder() {
    constexpr std::int64_t kMaxPath = 1024;
    std::vector<float> codes(kMaxPath, 0.0f);  // (kMaxPath) the path's characters, 0-terminated
    if (world().rank() == 0) {
      owned_ = std::make_unique<testing_util::TempFolder>();
      const std::string path = owned_->path().string();
      EXPECT_LT(path.size(), static_cast<std::size_t>(kMaxPath));
      for (std::size_t i = 0; i < path.size(); ++i) codes[i] = static_cast<unsigned char>(path[i]);
    }
    world().broadcast(Tensor(codes.data(), DType::f32, Device::cpu(), {kMaxPath}), 0)->wait();
    for (float c : codes) {
      if (c == 0) break;
      path_.push_back(static_cast<char>(c));
    }
  }
  ~SharedFolder() { world().barrier()->wait(); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::unique_ptr<testing_util::TempFolder> owned_;
  std::string path_;
};

TrainOptions tiny(std::int64_t steps, std::int64_t batch) {
  TrainOptions o;
  o.size = "tiny";
  o.context = 16;
  o.batch = batch;
  o.precision = "fp32";
  o.device = "cpu";
  o.steps = steps;
  o.lr = 3e-3;
  o.log_interval = 1;
  return o;
}

TrainResult train(const TrainOptions& options, Communicator& comm, std::string* log = nullptr) {
  std::ostringstream out;
  TrainResult result = run_training(cli::resolve_train_options(options), out, comm);
  if (log) *log = out.str();
  return result;
}

TrainResult train_alone(const TrainOptions& options) {
  std::ostringstream out;
  return run_training(cli::resolve_train_options(options), out);
}

// Every tensor of a checkpoint, as floats by name.
std::map<std::string, std::vector<float>> tensors_of(const std::string& path) {
  const SafetensorsFile file(path);
  std::map<std::string, std::vector<float>> out;
  for (const SafetensorsEntry& e : file.entries()) {
    std::vector<float> values(e.bytes() / sizeof(float));
    std::memcpy(values.data(), file.bytes(e), e.bytes());
    out[e.name] = std::move(values);
  }
  return out;
}

TEST(TrainDdp, RanksEndWithIdenticalParametersForEveryStrategy) {
  for (const char* strategy : {"naive", "flat", "overlapped", "bucketed"}) {
    for (const char* dtype : {"fp32", "bf16"}) {
      TrainOptions o = tiny(3, 2);
      o.ddp_strategy = strategy;
      o.bucket_mb = 0.01;  // several buckets for the tiny model
      o.grad_comm_dtype = dtype;
      std::string log;
      const TrainResult r = train(o, world(), &log);
      SCOPED_TRACE(std::string(strategy) + " " + dtype);
      EXPECT_EQ(r.world, 2);
      ASSERT_EQ(r.losses.size(), 3u);
      ASSERT_TRUE(r.parameter_checksum.has_value());
      const auto all = gathered_checksums(*r.parameter_checksum);
      EXPECT_EQ(all[0], all[1]);
      if (world().rank() == 0) {
        EXPECT_NE(log.find(std::string("data parallel: 2 ranks (mpi), DDP ") + strategy), std::string::npos) << log;
        EXPECT_EQ(r.rows.size(), 3u);
      } else {
        EXPECT_EQ(log, "");
      }
    }
  }
}

// The 2-rank run against one process with twice the batch: same losses (fp32 round-off of the all-reduced
// loss), same validation losses, same parameters at the end (summation-order round-off through AdamW).
void expect_matches_one_process(TrainOptions o) {
  SharedFolder folder;
  const std::int64_t batch = o.batch;
  o.checkpoint_dir = folder.file("dp");
  const std::string document = folder.file("dp.json");
  o.json_path = document;
  const TrainResult dp = train(o, world());
  world().barrier()->wait();  // rank 0's checkpoint and document are written
  if (world().rank() != 0) {
    EXPECT_TRUE(dp.checkpoints.empty());
    return;
  }
  o.batch = 2 * batch;
  o.checkpoint_dir = folder.file("one");
  o.json_path.clear();
  const TrainResult one = train_alone(o);

  ASSERT_EQ(dp.losses.size(), one.losses.size());
  for (std::size_t i = 0; i < dp.losses.size(); ++i)
    EXPECT_NEAR(dp.losses[i], one.losses[i], 2e-6 * one.losses[i]) << "step " << i + 1;
  ASSERT_EQ(dp.rows.size(), one.rows.size());
  for (std::size_t i = 0; i < dp.rows.size(); ++i) {
    EXPECT_NEAR(dp.rows[i].grad_norm, one.rows[i].grad_norm, 1e-5 * one.rows[i].grad_norm);
    ASSERT_EQ(dp.rows[i].val_loss.has_value(), one.rows[i].val_loss.has_value());
    if (one.rows[i].val_loss) EXPECT_NEAR(*dp.rows[i].val_loss, *one.rows[i].val_loss, 2e-6 * *one.rows[i].val_loss);
  }
  ASSERT_EQ(dp.checkpoints.size(), 1u);
  ASSERT_EQ(one.checkpoints.size(), 1u);
  const auto dp_tensors = tensors_of(dp.checkpoints[0]), one_tensors = tensors_of(one.checkpoints[0]);
  ASSERT_EQ(dp_tensors.size(), one_tensors.size());
  for (const auto& [name, values] : one_tensors) {
    const std::vector<float>& other = dp_tensors.at(name);
    ASSERT_EQ(other.size(), values.size()) << name;
    double worst = 0;
    for (std::size_t i = 0; i < values.size(); ++i) worst = std::max(worst, double(std::fabs(other[i] - values[i])));
    EXPECT_LT(worst, 2e-5) << name;
  }
  std::ifstream in(document);
  const nlohmann::json doc = nlohmann::json::parse(in);
  EXPECT_EQ(doc["config"]["world"], 2);
  EXPECT_EQ(doc["config"]["global_tokens_per_step"], 2 * batch * 16 * o.accumulate);
  EXPECT_EQ(doc["config"]["strategy"], o.ddp_strategy);
}

TEST(TrainDdp, TwoRanksMatchOneProcessWithTwiceTheBatchOnRandomTokens) {
  TrainOptions o = tiny(5, 2);
  o.warmup = 2;
  expect_matches_one_process(o);
}

TEST(TrainDdp, TwoRanksMatchOneProcessWithTwiceTheBatchOnAFileWithAccumulation) {
  SharedFolder data;
  if (world().rank() == 0) {
    std::vector<std::uint16_t> tokens(4096);  // (4096) a learnable pattern of ids below the vocabulary
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>((i * 7 + i / 13) % 97);
    std::ofstream(data.file("tokens.bin"), std::ios::binary)
        .write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 2));
  }
  world().barrier()->wait();
  TrainOptions o = tiny(4, 1);
  o.accumulate = 2;
  o.data = data.file("tokens.bin");
  o.val_data = data.file("tokens.bin");
  o.eval_interval = 2;
  o.eval_batches = 3;
  o.ddp_strategy = "overlapped";
  expect_matches_one_process(o);
}

TEST(TrainDdp, CheckpointOfTwoRanksResumesBitExactlyUnderTwoRanks) {
  SharedFolder folder;
  TrainOptions o = tiny(6, 2);
  o.warmup = 2;
  const TrainResult uninterrupted = train(o, world());
  o.checkpoint_dir = folder.file("ckpt");
  o.checkpoint_interval = 3;
  const TrainResult checkpointed = train(o, world());
  world().barrier()->wait();
  EXPECT_EQ(checkpointed.losses, uninterrupted.losses);
  EXPECT_EQ(checkpointed.checkpoints.size(), world().rank() == 0 ? 2u : 0u);

  o.resume = folder.file("ckpt/step_000003.safetensors");
  const TrainResult resumed = train(o, world());
  EXPECT_EQ(resumed.first_step, 4);
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed.losses[i], uninterrupted.losses[i + 3]) << "step " << i + 4;
  EXPECT_EQ(resumed.parameter_checksum, uninterrupted.parameter_checksum);
}

}  // namespace
}  // namespace ft::test
