// tiny_bench_options.h — the model options the bench ddp / bench zero tests share: the tiny model on the
// CPU (vocab 97, ctx 16, fp32), one warm-up step and `steps` timed ones.
#pragma once

#include <cstdint>

#include "flashtrain/ddp_bench.h"

namespace ft::test {

inline cli::BenchModelOptions tiny_data_parallel_model(std::int64_t steps) {
  cli::BenchModelOptions o = cli::data_parallel_model_options();
  o.sizes = "tiny";
  o.vocab = 97;
  o.contexts = "16";
  o.precisions = "fp32";
  o.device = "cpu";
  o.warmup = 1;
  o.steps = steps;
  return o;
}

}  // namespace ft::test
