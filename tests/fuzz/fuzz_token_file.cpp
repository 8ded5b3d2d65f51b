// fuzz_token_file.cpp — libFuzzer target of the token file reader: the input's first byte picks the
// vocabulary (uint16-sized or one that makes raw files uint32), the rest is the file; a DataLoader then
// checks every id against it and draws a batch. ft::Error is the expected outcome of bad input.
//   build-fuzz/bin/fuzz_token_file -max_total_time=60 -timeout=5 build-fuzz/tests/fuzz/corpus/token_file
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "model/data_loader.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static ft::fuzz::ScratchFile file("tokens");
  if (size == 0) return 0;
  constexpr std::int64_t kVocabs[] = {1, 97, 1000, 65536, 65537, 151936};
  const std::int64_t vocab = kVocabs[data[0] % 6];
  try {
    ft::DataLoader loader(file.write(data + 1, size - 1), {.batch = 2, .context = 4, .vocab = vocab, .seed = data[0]});
    ft::TokenBatch batch;
    loader.next(batch);
    for (std::int32_t id : batch.inputs)
      if (id < 0 || id >= vocab) __builtin_trap();  // an id the check let through
  } catch (const ft::Error&) {
  }
  return 0;
}
