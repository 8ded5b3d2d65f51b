// checkpoint.h — a training state in one safetensors file, written atomically (temporary file, fsync,
// rename): the model parameters under their state-dict names ("token_embeddings.weight",
// "layers.0.attn.q_proj.weight", ...), the optimiser state under "optimizer.<slot>.<parameter>" (AdamW:
// slots m and v), and the counters (training step, optimiser step, the data loader's generator) in the
// header metadata as decimal strings. Independent of the model class: callers pass (name, Tensor) lists
// of views into their own buffers, on any device. Loading checks every expected tensor before writing any
// and reports missing, unexpected and mismatched names together (ft::Error kind io).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/data_loader.h"
#include "model/safetensors.h"

namespace ft {

struct TrainingCounters {
  std::int64_t step = 0;            // training steps completed
  std::int64_t optimizer_step = 0;  // optimiser steps taken (AdamW's t, for bias correction)
  RngState data_rng;                // the data loader's generator, for a bit-exact resume
};

// "optimizer.<slot>.<parameter>", e.g. optimizer_state_name("m", "lm_head.weight").
std::string optimizer_state_name(std::string_view slot, std::string_view parameter);

// Writes params and opt_state (names: parameters must not start with "optimizer.", optimiser state must;
// all unique) and counters to path. The metadata also carries "format": "pt" so the file loads with
// safetensors.torch and, after dropping the optimizer.* entries, into the reference model's state dict.
void save_checkpoint(const std::string& path, const std::vector<NamedTensor>& params,
                     const std::vector<NamedTensor>& opt_state, const TrainingCounters& counters);

// Reads a checkpoint written by save_checkpoint into params and opt_state (same names, dtypes and shapes;
// any device) and returns its counters. The file must hold exactly these tensors: any missing, unexpected
// or mismatched (dtype or shape) entry is an io error listing all of them, raised before anything is copied;
// so is optimiser state that is not finite, or a negative AdamW second moment (optimizer.v.*).
TrainingCounters load_checkpoint(const std::string& path, const std::vector<NamedTensor>& params,
                                 const std::vector<NamedTensor>& opt_state);

// Reads only model parameters, from a checkpoint or from a reference model's exported state dict:
// entries under "optimizer." are ignored, every other entry must be one of params. Errors as above.
void load_parameters(const std::string& path, const std::vector<NamedTensor>& params);

}  // namespace ft
