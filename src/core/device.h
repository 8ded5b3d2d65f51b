// device.h — where a tensor lives: the host ("cpu") or one CUDA device ("cuda:N").
#pragma once

#include <string>
#include <string_view>

namespace ft {

struct Device {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device cpu() { return {Kind::cpu, 0}; }
  static Device cuda(int index = 0) { return {Kind::cuda, index}; }
  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  std::string to_string() const;  // "cpu", "cuda:0"
  friend bool operator==(const Device&, const Device&) = default;
};

// Accepts "cpu", "cuda" (= cuda:0), "cuda:N", "gpu" (= cuda:0).
Device parse_device(std::string_view text);

// True when this build has CUDA and at least one device is visible.
bool cuda_available();
// Number of visible CUDA devices (0 in a CPU-only build or without a GPU).
int cuda_device_count();
// A device description: "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)" or the host CPU.
std::string describe_device(Device device);

}  // namespace ft
