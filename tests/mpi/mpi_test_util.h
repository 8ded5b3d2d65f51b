// mpi_test_util.h — shared by the mpi tests (tests/mpi/test_*.cpp, each run as 2 ranks under mpirun): the
// job's DistributedContext (common/distributed_context.h) and its host communicator world(); a communicator
// wrapper that records every collective it forwards; and a helper that gathers one value vector from every
// rank; the small Transformer config the model-level tests share.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/distributed_context.h"
#include "core/tensor.h"
#include "model/config.h"

namespace ft::test {

inline Communicator& world() { return context().host_communicator(); }

inline ::testing::Environment* const mpi_environment =
    ::testing::AddGlobalTestEnvironment(new DistributedTestEnvironment);

// One collective as the wrapper saw it.
struct CollectiveRecord {
  std::string op;
  const void* data = nullptr;  // the buffer reduced or broadcast (all_reduce, broadcast)
  std::int64_t numel = 0;
  DType dtype = DType::f32;
};

// Forwards to another communicator and records each collective.
class CountingCommunicator final : public Communicator {
 public:
  explicit CountingCommunicator(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  int local_rank() const override { return inner_.local_rank(); }
  int local_world_size() const override { return inner_.local_world_size(); }
  const char* backend() const override { return inner_.backend(); }

  WorkHandle all_reduce(const Tensor& data, ReduceOp op) override {
    records.push_back({"all_reduce", data.data(), data.numel(), data.dtype()});
    return inner_.all_reduce(data, op);
  }
  WorkHandle reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    records.push_back({"reduce_scatter", input.data(), input.numel(), input.dtype()});
    return inner_.reduce_scatter(output, input, op);
  }
  WorkHandle all_gather(const Tensor& output, const Tensor& input) override {
    records.push_back({"all_gather", output.data(), output.numel(), output.dtype()});
    return inner_.all_gather(output, input);
  }
  WorkHandle broadcast(const Tensor& data, int root) override {
    records.push_back({"broadcast", data.data(), data.numel(), data.dtype()});
    return inner_.broadcast(data, root);
  }
  WorkHandle barrier() override {
    records.push_back({"barrier", nullptr, 0, DType::f32});
    return inner_.barrier();
  }
  std::int64_t count(const std::string& op) const {
    std::int64_t n = 0;
    for (const CollectiveRecord& r : records) n += r.op == op;
    return n;
  }

  std::vector<CollectiveRecord> records;

 private:
  Communicator& inner_;
};

// Every rank's copy of `values` (n each): result[r] is rank r's.
inline std::vector<std::vector<float>> gather_all(std::vector<float> values) {
  Communicator& comm = world();
  const auto n = static_cast<std::int64_t>(values.size());
  std::vector<float> all(static_cast<std::size_t>(n * comm.world_size()));  // (world, n)
  comm.all_gather(Tensor(all.data(), DType::f32, Device::cpu(), {n * comm.world_size()}),
                  Tensor(values.data(), DType::f32, Device::cpu(), {n}))
      ->wait();
  std::vector<std::vector<float>> out;
  for (int r = 0; r < comm.world_size(); ++r) out.emplace_back(all.begin() + r * n, all.begin() + (r + 1) * n);
  return out;
}

// A 64-bit checksum from every rank, each as 4 exact 16-bit pieces: result[r] is rank r's.
inline std::vector<std::vector<float>> gathered_checksums(std::uint64_t hash) {
  std::vector<float> pieces;  // (4)
  for (int i = 0; i < 4; ++i) pieces.push_back(static_cast<float>((hash >> (16 * i)) & 0xffff));
  return gather_all(pieces);
}

// The tiny config made smaller still (d_model 32, d_ff 64, 2 heads) with the given context length.
inline ModelConfig small_transformer_config(std::int64_t context) {
  ModelConfig c = model_config("tiny");
  c.d_model = 32;
  c.d_ff = 64;
  c.num_heads = 2;
  c.context_length = context;
  c.validate();
  return c;
}

}  // namespace ft::test
