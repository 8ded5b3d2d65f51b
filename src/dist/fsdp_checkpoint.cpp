// fsdp_checkpoint.cpp — per-rank shard files and the index of a ZeRO-2/3 checkpoint, their checks on
// loading, and the gather into one parameter file.
#include "dist/fsdp_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor_io.h"
#include "model/safetensors.h"

namespace ft {

namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexFile = "index.json";
constexpr const char* kFormat = "flashtrain-zero-shards";
constexpr int kVersion = 1;

std::string rank_file(int rank, int world) { return str("rank_", rank, "_of_", world, ".safetensors"); }

nlohmann::json model_json(const ModelConfig& m) {
  return {{"vocab", m.vocab_size}, {"d_model", m.d_model}, {"d_ff", m.d_ff}, {"layers", m.num_layers},
          {"heads", m.num_heads}};
}

nlohmann::json units_json(const FsdpPlan& plan) {
  nlohmann::json units = nlohmann::json::array();
  for (const FsdpUnit& u : plan.units()) units.push_back({u.offset, u.numel, u.piece});
  return units;
}

nlohmann::json read_index(const std::string& folder) {
  const fs::path path = fs::path(folder) / kIndexFile;
  std::ifstream in(path);
  FT_CHECK_KIND(io, in.good(), "sharded checkpoint ", folder, ": no ", kIndexFile,
                " (not a ZeRO-2/3 checkpoint, or its save did not complete)");
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    FT_THROW(io, "sharded checkpoint ", path.string(), " is not JSON: ", e.what());
  }
  FT_CHECK_KIND(io, index.value("format", "") == kFormat && index.value("version", 0) == kVersion,
                "sharded checkpoint ", path.string(), ": expected format ", kFormat, " version ", kVersion);
  return index;
}

// The shard views of a rank's file, named as stored.
std::vector<NamedTensor> shard_parameters(const Tensor& master) { return {{"shard.master", master}}; }
std::vector<NamedTensor> shard_state(const Tensor& m, const Tensor& v) {
  return {{optimizer_state_name("m", "shard"), m}, {optimizer_state_name("v", "shard"), v}};
}

// index.json, written beside the rank files (atomically).
void write_index(const std::string& folder, const Fsdp& fsdp, const TrainingCounters& counters, int world) {
  nlohmann::json files = nlohmann::json::array();
  for (int r = 0; r < world; ++r) files.push_back(rank_file(r, world));
  const nlohmann::json index{{"format", kFormat},
                             {"version", kVersion},
                             {"world", world},
                             {"step", counters.step},
                             {"model", model_json(fsdp.config())},
                             {"parameters", fsdp.layout().numel()},
                             {"shard_numel", fsdp.plan().shard_numel()},
                             {"units", units_json(fsdp.plan())},
                             {"files", files}};
  write_file_atomic((fs::path(folder) / kIndexFile).string(), index.dump(2) + "\n");
}

}  // namespace

void save_fsdp_checkpoint(const std::string& folder, Fsdp& fsdp, const TrainingCounters& counters) {
  Communicator& comm = fsdp.communicator();
  const int rank = comm.rank(), world = comm.world_size();
  std::error_code error;
  fs::create_directories(folder, error);
  FT_CHECK_KIND(io, !error, "sharded checkpoint: cannot create ", folder, ": ", error.message());
  if (rank == 0) fs::remove(fs::path(folder) / kIndexFile, error);  // incomplete until the new index is written
  comm.barrier()->wait();
  save_checkpoint((fs::path(folder) / rank_file(rank, world)).string(), shard_parameters(fsdp.master()),
                  shard_state(fsdp.exp_avg(), fsdp.exp_avg_sq()), counters);
  comm.barrier()->wait();  // every rank's file is in place
  if (rank == 0) write_index(folder, fsdp, counters, world);
  comm.barrier()->wait();  // complete, for every rank, once this returns
}

TrainingCounters load_fsdp_checkpoint(const std::string& folder, Fsdp& fsdp) {
  Communicator& comm = fsdp.communicator();
  const nlohmann::json index = read_index(folder);
  const int world = index.at("world").get<int>();
  FT_CHECK_KIND(io, world == comm.world_size(), "sharded checkpoint ", folder, " holds the shards of ", world,
                " ranks, but this run has ", comm.world_size(), ": resume it with ", world,
                " ranks, or gather it (flashtrain checkpoint gather) and start from the whole parameters");
  FT_CHECK_KIND(io, index.at("model") == model_json(fsdp.config()) && index.at("units") == units_json(fsdp.plan()),
                "sharded checkpoint ", folder, " is of the model ", index.at("model").dump(), ", but this run's is ",
                model_json(fsdp.config()).dump());
  const TrainingCounters counters =
      load_checkpoint((fs::path(folder) / rank_file(comm.rank(), world)).string(), shard_parameters(fsdp.master()),
                      shard_state(fsdp.exp_avg(), fsdp.exp_avg_sq()));
  fsdp.restore_step(counters.optimizer_step);
  fsdp.refresh();
  return counters;
}

void gather_fsdp_checkpoint(const std::string& folder, const std::string& path) {
  const nlohmann::json index = read_index(folder);
  const nlohmann::json& m = index.at("model");
  ModelConfig config;
  config.name = "gathered";
  config.vocab_size = m.at("vocab").get<std::int64_t>();
  config.d_model = m.at("d_model").get<std::int64_t>();
  config.d_ff = m.at("d_ff").get<std::int64_t>();
  config.num_layers = m.at("layers").get<std::int64_t>();
  config.num_heads = m.at("heads").get<std::int64_t>();
  config.validate();
  const int world = index.at("world").get<int>();
  const ParameterLayout layout(config);
  const FsdpPlan plan(layout, world);
  FT_CHECK_KIND(io, index.at("units") == units_json(plan) && index.at("shard_numel") == plan.shard_numel(),
                "sharded checkpoint ", folder, ": its units do not match its model's shards at world ", world);
  const ParameterBuffer whole(layout, DType::f32, Device::cpu(), "gathered parameters");
  const OwnedTensor master({plan.shard_numel()}, DType::f32, Device::cpu(), "gathered shard");
  const OwnedTensor m_shard({plan.shard_numel()}, DType::f32, Device::cpu(), "gathered shard m");
  const OwnedTensor v_shard({plan.shard_numel()}, DType::f32, Device::cpu(), "gathered shard v");
  TrainingCounters counters;
  for (int r = 0; r < world; ++r) {
    counters = load_checkpoint((fs::path(folder) / rank_file(r, world)).string(), shard_parameters(master),
                               shard_state(m_shard, v_shard));
    for (std::size_t u = 0; u < plan.units().size(); ++u) {
      const ShardRange owned = plan.owned(u, r);
      if (owned.numel == 0) continue;
      ft::copy(whole.flat().narrow(0, owned.offset, owned.numel),
           master->narrow(0, plan.units()[u].shard_offset, owned.numel));
    }
  }
  std::vector<NamedTensor> named;
  for (const ParameterInfo& info : layout.tensors()) named.push_back({info.name, whole[info.index]});
  save_safetensors(path, named,
                   {{"format", "pt"}, {"step", std::to_string(counters.step)}, {"gathered_from", folder}});
}

}  // namespace ft
