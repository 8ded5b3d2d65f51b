// fsdp_checkpoint.h — checkpoints of a ZeRO-2/3 run (dist/fsdp.h), which no rank could write whole: a folder
// with one file per rank and an index.
//   rank_<r>_of_<W>.safetensors  rank r's shards, (shard_numel) fp32 each: "shard.master" (the parameters),
//                                "optimizer.m.shard" and "optimizer.v.shard" (AdamW), and the counters in
//                                the metadata (model/checkpoint.h's format)
//   index.json                   {"format": "flashtrain-zero-shards", "version": 1, "world", "step",
//                                "model": {vocab, d_model, d_ff, layers, heads}, "parameters", "shard_numel",
//                                "units": [[offset, numel, piece], ...] (Note [ZeRO-3 shards]), "files"}
// Every rank writes its file (atomically), then rank 0 the index once all have: a folder with an index is
// complete. Loading checks the index against the run first — the world size (the shards are cut for one)
// and the model's shape — with an ft::Error (io) naming both sides, then each rank reads its own file:
// the resumed run continues bit for bit. ZeRO-2 and ZeRO-3 cut the same shards: either resumes the other.
// gather_fsdp_checkpoint rebuilds the whole parameters from the files into one safetensors file under the
// reference state-dict names (model/checkpoint.h's load_parameters and the reference model read it).
#pragma once

#include <string>

#include "dist/fsdp.h"
#include "model/checkpoint.h"

namespace ft {

// Collective: every rank of fsdp's communicator calls it with the same folder (created if missing).
void save_fsdp_checkpoint(const std::string& folder, Fsdp& fsdp, const TrainingCounters& counters);

// Collective: restores every rank's shards and the step count (Fsdp::restore_step, then refresh()); returns
// the counters. ft::Error (io) for a folder without a complete index, another world size or another shape.
TrainingCounters load_fsdp_checkpoint(const std::string& folder, Fsdp& fsdp);

// One process: the whole parameters of a sharded checkpoint into `path` (reference names, fp32, the counters
// in the metadata), staged on the host one rank's file at a time. ft::Error (io) for a missing or
// inconsistent file.
void gather_fsdp_checkpoint(const std::string& folder, const std::string& path);

}  // namespace ft
