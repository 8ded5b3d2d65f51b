// mpi_communicator.cpp — the MPI backend: nonblocking collectives on host buffers, polled with a deadline.
#include "dist/mpi/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "dist/backoff.h"
#include "dist/mpi/mpi_runtime.h"

namespace ft {

namespace {

// The most elements one MPI call moves (its count is an int).
constexpr std::int64_t kMaxCallElements = std::int64_t{1} << 30;

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  FT_THROW(runtime, call, " failed: ", std::string(text, static_cast<std::size_t>(length)));
}

// inout[i] <- bf16(float(in[i]) + float(inout[i])): the bf16 sum, commutative.
void bf16_sum(void* in, void* inout, int* length, MPI_Datatype*) {
  const bf16* a = static_cast<const bf16*>(in);  // (length)
  bf16* b = static_cast<bf16*>(inout);           // (length)
  for (int i = 0; i < *length; ++i) b[i] = to_bf16(to_float(a[i]) + to_float(b[i]));
}

MPI_Datatype mpi_type(DType dtype) { return dtype == DType::bf16 ? MPI_UINT16_T : MPI_FLOAT; }

std::string describe(const char* op, const Tensor& t, const char* detail = nullptr) {
  return str(op, " (", name_of(t.dtype()), ", ", t.numel(), " elements", detail ? ", " : "", detail ? detail : "",
             ")");
}

// data <- data / divisor, in the tensor's dtype.
void divide(const Tensor& data, int divisor) {
  const std::int64_t n = data.numel();
  const float d = static_cast<float>(divisor);
  if (data.dtype() == DType::bf16) {
    bf16* x = data.data_as<bf16>();  // (n)
    for (std::int64_t i = 0; i < n; ++i) x[i] = to_bf16(to_float(x[i]) / d);
  } else {
    float* x = data.data_as<float>();  // (n)
    for (std::int64_t i = 0; i < n; ++i) x[i] /= d;
  }
}

void check_host(const char* op, const Tensor& t) {
  FT_CHECK_KIND(unsupported, t.device().is_cpu(), op,
                ": the MPI communicator moves host buffers; given ", t.describe(),
                " (GPU buffers need the NCCL communicator)");
}

class MpiWork final : public Work {
 public:
  MpiWork(std::string what, int rank, int world_size, const CommunicatorOptions& options)
      : what_(std::move(what)), rank_(rank), world_size_(world_size), options_(options) {}

  std::vector<MPI_Request>& requests() { return requests_; }
  void on_completion(std::function<void()> finish) { finish_ = std::move(finish); }

  bool is_completed() override {
    if (done_) return true;
    int flag = 0;
    check_mpi(MPI_Testall(static_cast<int>(requests_.size()), requests_.data(), &flag, MPI_STATUSES_IGNORE),
              "MPI_Testall");
    if (!flag) return false;
    if (finish_) finish_();
    done_ = true;
    return true;
  }

  void wait() override {
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::duration<double>(options_.timeout_seconds);
    Backoff backoff;
    while (!is_completed()) {
      if (clock::now() > deadline) timed_out();
      backoff.pause();
    }
  }

 private:
  void timed_out() const {
    const std::string message = timeout_message(what_, rank_, world_size_, options_.timeout_seconds);
    if (options_.on_timeout == TimeoutAction::abort_job) {
      std::fprintf(stderr, "flashtrain: error: %s; ending every rank (MPI_Abort)\n", message.c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    FT_THROW(runtime, message);
  }

  std::string what_;
  int rank_, world_size_;
  CommunicatorOptions options_;
  std::vector<MPI_Request> requests_;
  std::function<void()> finish_;  // runs once, at completion
  bool done_ = false;
};

}  // namespace

struct MpiCommunicator::State {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Op bf16_sum = MPI_OP_NULL;
};

MpiCommunicator::MpiCommunicator(const CommunicatorOptions& options)
    : state_(std::make_unique<State>()), options_(options) {
  FT_CHECK(options.timeout_seconds > 0, "MpiCommunicator: timeout_seconds must be > 0, given ",
           options.timeout_seconds);
  FT_CHECK_KIND(runtime, mpi_is_initialized(),
                "MpiCommunicator: MPI is not initialised (create a DistributedContext first)");
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &state_->comm), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(state_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(state_->comm, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(state_->comm, &world_size_), "MPI_Comm_size");
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(state_->comm, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
  check_mpi(MPI_Comm_rank(node, &local_rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(node, &local_world_size_), "MPI_Comm_size");
  MPI_Comm_free(&node);
  check_mpi(MPI_Op_create(&bf16_sum, 1, &state_->bf16_sum), "MPI_Op_create");
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Op_free(&state_->bf16_sum);
  MPI_Comm_free(&state_->comm);
}

WorkHandle MpiCommunicator::all_reduce(const Tensor& data, ReduceOp op) {
  check_collective_buffer("all_reduce", "data", data, true);
  check_host("all_reduce", data);
  auto work = std::make_unique<MpiWork>(describe("all_reduce", data, name_of(op)), rank_, world_size_, options_);
  const MPI_Op mpi_op = data.dtype() == DType::bf16 ? state_->bf16_sum : MPI_SUM;
  char* base = static_cast<char*>(data.data());
  for (std::int64_t start = 0; start < data.numel(); start += kMaxCallElements) {
    const std::int64_t count = std::min(kMaxCallElements, data.numel() - start);
    work->requests().emplace_back();
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, base + start * static_cast<std::int64_t>(data.element_size()),
                             static_cast<int>(count), mpi_type(data.dtype()), mpi_op, state_->comm,
                             &work->requests().back()),
              "MPI_Iallreduce");
  }
  if (op == ReduceOp::average && world_size_ > 1) {
    const int world = world_size_;
    work->on_completion([data, world] { divide(data, world); });
  }
  return work;
}

WorkHandle MpiCommunicator::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_reduce_scatter(output, input, world_size_);
  check_host("reduce_scatter", input);
  FT_CHECK_KIND(unsupported, output.numel() <= INT_MAX, "reduce_scatter: the MPI backend moves at most ", INT_MAX,
                " elements per rank, given ", output.describe());
  auto work = std::make_unique<MpiWork>(describe("reduce_scatter", input, name_of(op)), rank_, world_size_, options_);
  work->requests().emplace_back();
  const MPI_Op mpi_op = input.dtype() == DType::bf16 ? state_->bf16_sum : MPI_SUM;
  check_mpi(MPI_Ireduce_scatter_block(input.data(), output.data(), static_cast<int>(output.numel()),
                                      mpi_type(input.dtype()), mpi_op, state_->comm, &work->requests().back()),
            "MPI_Ireduce_scatter_block");
  if (op == ReduceOp::average && world_size_ > 1) {
    const int world = world_size_;
    work->on_completion([output, world] { divide(output, world); });
  }
  return work;
}

WorkHandle MpiCommunicator::all_gather(const Tensor& output, const Tensor& input) {
  check_all_gather(output, input, world_size_);
  check_host("all_gather", input);
  FT_CHECK_KIND(unsupported, input.numel() <= INT_MAX, "all_gather: the MPI backend moves at most ", INT_MAX,
                " elements per rank, given ", input.describe());
  const std::size_t slice_bytes = static_cast<std::size_t>(input.numel()) * input.element_size();
  const char* own_slice = static_cast<const char*>(output.data()) + static_cast<std::size_t>(rank_) * slice_bytes;
  const bool in_place = input.data() == own_slice;
  const char* in = static_cast<const char*>(input.data());
  const char* out = static_cast<const char*>(output.data());
  FT_CHECK(in_place || in + slice_bytes <= out || out + output.span_bytes() <= in,
           "all_gather: the input must be this rank's slice of the output or not overlap it, given ",
           input.describe(), " and ", output.describe());
  auto work = std::make_unique<MpiWork>(describe("all_gather", output), rank_, world_size_, options_);
  work->requests().emplace_back();
  const MPI_Datatype type = mpi_type(input.dtype());
  check_mpi(MPI_Iallgather(in_place ? MPI_IN_PLACE : input.data(), static_cast<int>(input.numel()), type, output.data(),
                           static_cast<int>(input.numel()), type, state_->comm, &work->requests().back()),
            "MPI_Iallgather");
  return work;
}

WorkHandle MpiCommunicator::broadcast(const Tensor& data, int root) {
  check_collective_buffer("broadcast", "data", data, true);
  check_host("broadcast", data);
  check_root("broadcast", root, world_size_);
  const std::string detail = str("root ", root);
  auto work = std::make_unique<MpiWork>(describe("broadcast", data, detail.c_str()), rank_, world_size_, options_);
  char* base = static_cast<char*>(data.data());
  for (std::int64_t start = 0; start < data.numel(); start += kMaxCallElements) {
    const std::int64_t count = std::min(kMaxCallElements, data.numel() - start);
    work->requests().emplace_back();
    check_mpi(MPI_Ibcast(base + start * static_cast<std::int64_t>(data.element_size()), static_cast<int>(count),
                         mpi_type(data.dtype()), root, state_->comm, &work->requests().back()),
              "MPI_Ibcast");
  }
  return work;
}

WorkHandle MpiCommunicator::barrier() {
  auto work = std::make_unique<MpiWork>("barrier", rank_, world_size_, options_);
  work->requests().emplace_back();
  check_mpi(MPI_Ibarrier(state_->comm, &work->requests().back()), "MPI_Ibarrier");
  return work;
}

}  // namespace ft
