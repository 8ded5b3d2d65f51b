// communicator.cpp — the argument checks shared by the Communicator backends, and the default
// all_reduce_widened (widening when the completion is observed), all_reduce_staged, and the kinds of
// communication buffer (Note [Communication buffers]).
#include "dist/communicator.h"

#include <utility>

#include "core/error.h"
#include "ops/cast.h"

namespace ft {

// Note [Communication buffers]
// A collective reads and writes its buffers where they are; how NCCL reaches them decides how many SMs and
// copies it spends. An ordinary allocation (plain) is moved through NCCL's own internal buffers: each
// channel's CTA copies the data in and out of them. A registered buffer (ncclCommRegister) lets NCCL map
// the peer's buffer and move the data directly, with fewer copies. A buffer in a symmetric window
// (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC; memory from ncclMemAlloc) sits at the same offset on
// every rank, and NCCL 2.27+ runs its symmetric kernels on it: one-shot or two-shot reductions over
// NVLink loads and stores from few CTAs. DDP's gradients are one flat buffer from the caching allocator,
// which NCCL cannot put in a window, so the nccl_mem and symmetric kinds are staging buffers of the
// backend's: a bucket is copied (or rounded to bf16) in, reduced, and copied (widened) back — with bf16
// communication DDP stages its buckets anyway, so there the copies cost nothing extra.

const char* name_of(CommBufferKind kind) {
  switch (kind) {
    case CommBufferKind::plain: return "plain";
    case CommBufferKind::registered: return "registered";
    case CommBufferKind::nccl_mem: return "nccl_mem";
    case CommBufferKind::symmetric: return "symmetric";
  }
  return "?";
}

CommBufferKind parse_comm_buffer_kind(std::string_view text) {
  for (CommBufferKind k :
       {CommBufferKind::plain, CommBufferKind::registered, CommBufferKind::nccl_mem, CommBufferKind::symmetric})
    if (text == name_of(k)) return k;
  FT_THROW(invalid_argument, "unknown communication buffer '", text,
           "': expected plain, registered, nccl_mem or symmetric");
}

bool is_staged(CommBufferKind kind) { return kind == CommBufferKind::nccl_mem || kind == CommBufferKind::symmetric; }

const char* name_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::average: return "average";
  }
  return "?";
}

void check_collective_buffer(const char* op, const char* role, const Tensor& t, bool allow_bf16) {
  FT_CHECK(t.defined(), op, ": the ", role, " tensor is undefined");
  FT_CHECK(t.is_contiguous(), op, ": the ", role, " tensor must be contiguous, given ", t.describe());
  FT_CHECK(t.dtype() == DType::f32 || (allow_bf16 && t.dtype() == DType::bf16), op, ": the ", role,
           " tensor must be fp32", allow_bf16 ? " or bf16" : "", ", given ", t.describe());
}

void check_reduce_scatter(const Tensor& output, const Tensor& input, int world_size) {
  check_collective_buffer("reduce_scatter", "output", output, true);
  check_collective_buffer("reduce_scatter", "input", input, true);
  FT_CHECK(input.dtype() == output.dtype(), "reduce_scatter: input and output must share a dtype, given ",
           input.describe(), " and ", output.describe());
  FT_CHECK(input.numel() == output.numel() * world_size, "reduce_scatter: the input must hold world_size (",
           world_size, ") x output elements (", output.numel(), "), given ", input.describe());
  FT_CHECK(input.device() == output.device(), "reduce_scatter: input and output must share a device, given ",
           input.describe(), " and ", output.describe());
  const char* in = static_cast<const char*>(input.data());
  const char* out = static_cast<const char*>(output.data());
  const bool disjoint = out + output.span_bytes() <= in || in + input.span_bytes() <= out;
  FT_CHECK(disjoint || output.numel() == 0, "reduce_scatter: input and output must not overlap, given ",
           input.describe(), " and ", output.describe());
}

void check_all_gather(const Tensor& output, const Tensor& input, int world_size) {
  check_collective_buffer("all_gather", "output", output, true);
  check_collective_buffer("all_gather", "input", input, true);
  FT_CHECK(output.numel() == input.numel() * world_size, "all_gather: the output must hold world_size (",
           world_size, ") x input elements (", input.numel(), "), given ", output.describe());
  FT_CHECK(input.dtype() == output.dtype() && input.device() == output.device(),
           "all_gather: input and output must share a dtype and device, given ", input.describe(), " and ",
           output.describe());
}

namespace {

// An all_reduce whose result is widened into fp32 once its completion is first observed.
class WidenedWork final : public Work {
 public:
  WidenedWork(WorkHandle reduce, Tensor data, Tensor widened, Stream stream)
      : reduce_(std::move(reduce)), data_(std::move(data)), widened_(std::move(widened)), stream_(std::move(stream)) {}
  bool is_completed() override {
    if (!widened_done_ && reduce_->is_completed()) widen();
    return widened_done_;
  }
  void wait() override {
    reduce_->wait();
    if (!widened_done_) widen();
  }
  std::optional<double> elapsed_ms() override { return reduce_->elapsed_ms(); }

 private:
  void widen() {
    cast(widened_, data_, stream_);
    widened_done_ = true;
  }
  WorkHandle reduce_;
  Tensor data_, widened_;
  Stream stream_;
  bool widened_done_ = false;
};

}  // namespace

WorkHandle Communicator::all_reduce_widened(const Tensor& data, ReduceOp op, const Tensor& widened,
                                            const Stream& stream) {
  check_collective_buffer("all_reduce", "data", data, true);
  check_widened(data, widened);
  WorkHandle reduce = all_reduce(data, op);
  return std::make_unique<WidenedWork>(std::move(reduce), data, widened, stream);
}

WorkHandle Communicator::all_reduce_staged(const Tensor& data, const Tensor& staging, ReduceOp op,
                                           const Stream& stream) {
  check_staged(data, staging);
  cast(staging, data, stream);
  return all_reduce_widened(staging, op, data, stream);
}

std::unique_ptr<CommBuffer> Communicator::allocate_buffer(std::int64_t, DType, CommBufferKind kind) {
  FT_THROW(unsupported, "the ", backend(), " communicator has no ", name_of(kind),
           " buffers: they are NCCL memory (a job on GPUs over NCCL); use plain buffers");
}

std::unique_ptr<CommRegistration> Communicator::register_buffer(const Tensor& data) {
  FT_THROW(unsupported, "the ", backend(), " communicator registers no buffers (given ", data.describe(),
           "): registration is NCCL's (a job on GPUs over NCCL); use plain buffers");
}

void check_staged(const Tensor& data, const Tensor& staging) {
  check_collective_buffer("all_reduce_staged", "data", data, false);
  check_collective_buffer("all_reduce_staged", "staging", staging, true);
  FT_CHECK(staging.numel() == data.numel() && staging.device() == data.device(),
           "all_reduce_staged: the staging buffer must hold the data's ", data.numel(), " elements on ",
           data.device().to_string(), ", given ", staging.describe());
  check_widened(staging, data);
}

void check_widened(const Tensor& data, const Tensor& widened) {
  check_collective_buffer("all_reduce", "widened", widened, false);
  FT_CHECK(widened.numel() == data.numel() && widened.device() == data.device(),
           "all_reduce: the widened tensor must hold data's ", data.numel(), " elements on ", data.device().to_string(),
           ", given ", widened.describe());
  const char* a = static_cast<const char*>(data.data());
  const char* w = static_cast<const char*>(widened.data());
  FT_CHECK(w + widened.span_bytes() <= a || a + data.span_bytes() <= w || data.numel() == 0,
           "all_reduce: the widened tensor must not overlap the data, given ", data.describe(), " and ",
           widened.describe());
}

void check_root(const char* op, int root, int world_size) {
  FT_CHECK(root >= 0 && root < world_size, op, ": the root must be a rank in [0, ", world_size, "), given ", root);
}

std::string timeout_message(const std::string& what, int rank, int world_size, double timeout_seconds) {
  return str(what, " on rank ", rank, " of ", world_size, " did not complete within the ", timeout_seconds,
             " s timeout: a peer is stuck, has failed or never joined this collective (the timeout is "
             "CommunicatorOptions::timeout_seconds)");
}

}  // namespace ft
