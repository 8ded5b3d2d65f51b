// ddp.h — DistributedDataParallel: averages gradients over the ranks of a Communicator, for any model whose
// gradients are one flat buffer with parameters packed as slices of it (TransformerLM; a toy model in a
// test) — the model gives DDP a DdpModel and calls gradient_ready() as each gradient becomes final.
// Strategies (DdpOptions::strategy, by name through parse_ddp_strategy):
//   naive       after backward (synchronize()): one blocking all-reduce per parameter, one after another
//   flat        after backward: one all-reduce of the whole flat gradient buffer (one per run of adjacent
//               trainable parameters when some are frozen)
//   overlapped  during backward: an asynchronous all-reduce of each parameter the moment its gradient is
//               final; synchronize() waits for them
//   bucketed    during backward: buckets of at most bucket_size_mb MiB (dist/bucket_plan.h: reverse
//               memory order, each a slice of the gradient buffer — all-reduced in place, no copies),
//               each launched when its last gradient is final; synchronize() waits for them
// In every strategy: rank 0's parameters are broadcast at construction (ranks that start from different
// parameters agree); gradients are averaged (ReduceOp::average); frozen parameters (requires_grad false)
// are never communicated and their gradients are left as each rank computed them (the optimizer must
// skip them); with gradient accumulation only the last micro-batch communicates (gradient_ready with
// last_micro_batch false does nothing).
// bf16 communication (DdpOptions::bf16_communication): each bucket is rounded to bf16 into a staging copy
// (one bf16 buffer of the parameter count, bucket slices at the gradients' offsets) on the model's stream,
// all-reduced in bf16 (summed by the backend with a rounding to bf16 per addition) and written back to the
// fp32 gradients by the communicator (Communicator::all_reduce_widened: NCCL widens each bucket on its
// communication stream as soon as its reduction is done, while backward goes on; host backends when the
// completion is observed).
// Half the bytes on the wire; the cost is precision: each gradient carries a relative error of up to 2^-9
// from the rounding, plus one such rounding per reduction step (log2(world) to world - 1 of them by
// algorithm), so averaged gradients agree with fp32 communication to about 3 significant digits.
//
// Communication buffers (DdpOptions::buffer, Note [Communication buffers] in communicator.cpp): plain
// reduces each bucket in place; registered registers the gradient buffer (bf16: the staging buffer) with
// the communicator first; nccl_mem and symmetric reduce each bucket in a staging buffer the communicator
// allocates (fp32, or bf16 with bf16 communication) through all_reduce_staged, which on NCCL copies (or
// rounds) the bucket in and back on the communication stream. The results are the plain path's.
//
// Devices: the flat buffers may live on the CPU (a host communicator: MPI, single process) or on a CUDA
// device (the NCCL communicator of DistributedContext::communicator_for). Nothing goes through the host:
// collectives move the buffers where they are, the rounding to bf16 runs on the model's stream, and the
// communicator orders its collectives after that stream (and the stream after them on wait()).
// Communication time (comm_ms(), after synchronize()): the sum over the step's collectives of each one's
// duration, in milliseconds —
//   backends that time their collectives (Work::elapsed_ms(); NCCL: CUDA events around the collective on
//   the communication stream) give each duration themselves, read once synchronize() has waited (no
//   host synchronisation during backward) — a collective's duration includes the time it waits for the
//   slowest rank to join it;
//   host communicators (MPI, single process; and any in a world of one) are timed here on the host: a
//   collective runs from its issue (or from the observed completion of the collective before it, if
//   later) to the moment its completion is observed (is_completed() polls during backward, wait() in
//   synchronize()) — so collectives in flight together are counted once, as on NCCL's one stream;
//   a device communicator that does not time its collectives gives no figure (nullopt).
// It is communication time, not the time the step spends waiting for it: with the overlapped and
// bucketed strategies most of it runs while backward computes, and the step pays only what is left at
// synchronize(). With bf16 communication a NCCL collective's duration includes widening its result back
// to fp32 (on the communication stream); the rounding to bf16 is compute-stream work and is not included.
// Use (Trainer: see ddp_transformer.h for attach()):
//   DistributedDataParallel ddp(comm, model_view, options);   // broadcasts parameters
//   per step: backward calls ddp.gradient_ready(i, last) per parameter; then ddp.synchronize();
//             then the optimizer step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/buffer.h"
#include "core/stream.h"
#include "core/tensor.h"
#include "dist/bucket_plan.h"
#include "dist/communicator.h"

namespace ft {

enum class DdpStrategy { naive, flat, overlapped, bucketed };
const char* name_of(DdpStrategy strategy);
DdpStrategy parse_ddp_strategy(std::string_view text);  // "naive" | "flat" | "overlapped" | "bucketed"
std::vector<std::string> ddp_strategy_names();

struct DdpOptions {
  DdpStrategy strategy = DdpStrategy::bucketed;
  double bucket_size_mb = 25;       // bucketed: the most fp32 gradient bytes per bucket, in MiB (2^20 bytes)
  bool bf16_communication = false;  // all-reduce gradients rounded to bf16
  bool broadcast_parameters = true; // rank 0's parameters to every rank at construction
  // Where buckets are reduced (Note [Communication buffers], communicator.h): plain in place; registered in
  // place with the gradient buffer (bf16: the staging buffer) registered; nccl_mem and symmetric in a
  // staging buffer of the communicator's (all_reduce_staged: copied or rounded in and back on NCCL's stream).
  // Anything but plain needs a communicator that has such buffers (NCCL), else ft::Error (unsupported).
  CommBufferKind buffer = CommBufferKind::plain;
  // bf16 communication with plain or registered buffers: round each bucket to bf16 on the communicator's
  // stream (all_reduce_staged: beside backward) instead of the model's (in backward's way). The results
  // are the same.
  bool round_on_comm_stream = false;
};

// What DDP needs of a model.
struct DdpModel {
  Tensor parameters;                     // (numel) fp32, contiguous: the flat parameter buffer
  Tensor gradients;                      // (numel) fp32, contiguous: the flat gradient buffer, same layout
  std::vector<DdpParameter> tensors;     // each parameter's slice of both buffers, and its requires_grad
  std::vector<std::size_t> ready_order;  // indices into tensors, in the order backward finalises them
  Stream stream;                         // the model's stream (orders the bf16 casts)
};

// Checks that the flat buffers are contiguous fp32 vectors of one length on one device; `who` prefixes
// the error ("DDP", "ZeroOptimizer").
void check_flat_buffers(const char* who, const DdpModel& model);
// Checks that a device communicator orders its collectives after the model's stream (else the gradients
// could be reduced before backward has written them): ft::Error naming both streams.
void check_stream_order(const char* who, const Communicator& comm, const DdpModel& model);

// The buckets DDP plans for a model under these options (the strategy's cap); ft::Error for a bad bucket size.
BucketPlan plan_ddp_buckets(const DdpModel& model, const DdpOptions& options);
// The bytes of the largest bucket as communicated (fp32, or bf16 with bf16 communication): what a
// communicator with fixed mailboxes (the copy-engine one) must hold.
std::int64_t largest_bucket_bytes(const DdpModel& model, const DdpOptions& options);

class DistributedDataParallel {
 public:
  // Plans the buckets and broadcasts the parameters from rank 0 (DdpOptions::broadcast_parameters).
  DistributedDataParallel(Communicator& comm, DdpModel model, const DdpOptions& options = {});

  // Backward reports parameter `index` final for this micro-batch. On the last micro-batch the
  // overlapped and bucketed strategies launch every bucket that is complete (in plan order).
  void gradient_ready(std::size_t index, bool last_micro_batch);
  // After the last micro-batch's backward, before the optimizer step: issues what the strategy issues
  // after backward, waits for every collective and leaves the averaged gradients in the gradient buffer.
  // Throws ft::Error (runtime) when an overlapped/bucketed step did not hear of some trainable
  // parameter's gradient (backward must report each one, once).
  void synchronize();

  // The last synchronize()'s communication time (see the top of this file); nullopt before the first
  // step and for a device communicator that does not time its collectives.
  std::optional<double> comm_ms() const { return comm_ms_; }

  const BucketPlan& plan() const { return plan_; }
  const DdpOptions& options() const { return options_; }
  const DdpModel& model() const { return model_; }
  Communicator& communicator() { return comm_; }

 private:
  bool reduces_during_backward() const;
  void launch(std::size_t bucket);
  void launch_ready_buckets();
  void observe_completion(std::size_t bucket);
  std::optional<double> step_comm_ms();
  void reset_step();
  std::string unreported_parameters() const;

  Communicator& comm_;
  DdpModel model_;
  DdpOptions options_;
  BucketPlan plan_;
  OwnedTensor staging_;                      // (numel) bf16, bf16_communication with plain/registered buffers
  std::unique_ptr<CommBuffer> comm_buffer_;  // (numel) bf16 or fp32, nccl_mem and symmetric buffers
  std::unique_ptr<CommRegistration> registration_;  // registered buffers
  Tensor staged_;                            // the staging buffer's view (either of the two above), or none
  std::vector<std::size_t> members_;         // (buckets) trainable parameters per bucket
  std::vector<std::size_t> pending_;         // (buckets) members not yet reported this step
  std::vector<bool> reported_;               // (parameters) reported on this step's last micro-batch
  std::vector<WorkHandle> works_;            // (buckets) collectives in flight
  std::vector<double> issued_ms_;            // (buckets) host clock at each launch
  std::vector<double> completed_ms_;         // (buckets) host clock when its completion was first observed
  std::size_t next_launch_ = 0;              // buckets [0, next_launch_) are launched
  std::size_t oldest_in_flight_ = 0;         // buckets before it have completed
  std::optional<double> comm_ms_;            // the last synchronize()'s communication time
};

}  // namespace ft
