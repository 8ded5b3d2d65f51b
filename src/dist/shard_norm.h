// shard_norm.h — the global gradient norm of sharded gradients (ZeRO-1/2's ranges, ZeRO-3's shards): each
// rank's sum of squares of the gradients it holds, gathered from every rank and added in rank order in
// double, so every rank computes the same norm to double precision. The sum travels as a (hi, lo) fp32 pair
// (hi + lo == sum to ~2^-48) written into a device buffer by fill kernels: collectives move fp32 or bf16
// only, and device backends move device memory only. One host synchronisation (the gathered pairs read back).
#pragma once

#include "core/device.h"
#include "core/stream.h"
#include "dist/communicator.h"

namespace ft {

// sqrt(sum over ranks of local_sum_squares); collective (every rank calls it). device: where comm moves
// buffers (the CPU for host communicators, this rank's GPU for NCCL); stream: the one that orders the fills.
double global_norm(Communicator& comm, double local_sum_squares, const Device& device, const Stream& stream);

}  // namespace ft
