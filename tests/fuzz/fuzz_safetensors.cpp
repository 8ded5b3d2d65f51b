// fuzz_safetensors.cpp — libFuzzer target of the safetensors reader: each input is a whole file for
// SafetensorsFile (length, header, data; every tensor then read as bytes) and, alone, a header text for
// parse_safetensors_header. ft::Error is the expected outcome of bad input; anything else (a crash, a
// sanitizer report, another exception, a stall past -timeout) is a finding.
//   build-fuzz/bin/fuzz_safetensors -max_total_time=60 -timeout=5 build-fuzz/tests/fuzz/corpus/safetensors
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <string_view>

#include "core/error.h"
#include "model/safetensors.h"
#include "model/safetensors_header.h"
#include "scratch_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static ft::fuzz::ScratchFile file("input.safetensors");
  try {
    const ft::SafetensorsFile reader(file.write(data, size));
    std::uint64_t sum = 0;
    for (const auto& entry : reader.entries()) {
      const std::uint8_t* bytes = reader.bytes(entry);
      sum = std::accumulate(bytes, bytes + entry.bytes(), sum);  // every byte an entry claims is readable
    }
    (void)reader.find("__metadata__");
  } catch (const ft::Error&) {
  }
  try {
    ft::parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(data), size), size, "input");
  } catch (const ft::Error&) {
  }
  return 0;
}
