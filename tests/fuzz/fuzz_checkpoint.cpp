// fuzz_checkpoint.cpp — libFuzzer target of checkpoint loading: the input is a file load_checkpoint reads
// into a small fixed model (w (2, 3) with AdamW state m, v) and load_parameters reads into w; the metadata
// counters, the all-or-nothing name match and the optimiser-state checks all see it. ft::Error is the
// expected outcome of bad input.
//   build-fuzz/bin/fuzz_checkpoint -max_total_time=60 -timeout=5 build-fuzz/tests/fuzz/corpus/checkpoint
#include <cstddef>
#include <cstdint>

#include "core/buffer.h"
#include "core/error.h"
#include "model/checkpoint.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static ft::fuzz::ScratchFile file("checkpoint.safetensors");
  static ft::OwnedTensor w({2, 3}, ft::DType::f32, ft::Device::cpu(), "fuzz");  // (2, 3)
  static ft::OwnedTensor m({2, 3}, ft::DType::f32, ft::Device::cpu(), "fuzz");  // (2, 3)
  static ft::OwnedTensor v({2, 3}, ft::DType::f32, ft::Device::cpu(), "fuzz");  // (2, 3)
  const std::string& path = file.write(data, size);
  try {
    ft::load_checkpoint(path, {{"w", w}},
                        {{ft::optimizer_state_name("m", "w"), m}, {ft::optimizer_state_name("v", "w"), v}});
  } catch (const ft::Error&) {
  }
  try {
    ft::load_parameters(path, {{"w", w}});
  } catch (const ft::Error&) {
  }
  return 0;
}
