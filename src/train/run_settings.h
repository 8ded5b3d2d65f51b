// run_settings.h — the settings every rank of a data-parallel training run must share, named by the
// options that set them, for check_ranks_agree (dist/config_agreement.h): the build (version, commit), the
// model shape, precision, attention, recomputation and loss chunking, the device kind, batch, steps, accumulation, the optimiser and
// schedule, clipping, the data-parallel strategy, buckets and ZeRO mode, evaluation and logging intervals,
// the seed, checkpointing, and the identity of every file all ranks read (--data, --val-data, --resume,
// --init-from: byte size and a hash of the first MiB, or why it cannot be read).
#pragma once

#include <string>
#include <vector>

#include "dist/config_agreement.h"
#include "train/train_run.h"

namespace ft {

std::vector<RunSetting> run_settings(const TrainPlan& plan);

// "123456 bytes, first MiB fnv1a 0123456789abcdef", "none" for an empty path, or "unreadable: <why>".
std::string file_identity(const std::string& path);

}  // namespace ft
