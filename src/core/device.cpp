// device.cpp — Device parsing and CUDA device discovery (no CUDA needed in a CPU-only build).
#include "core/device.h"

#include <charconv>
#include <fstream>
#include <thread>

#include "core/error.h"
#if FT_HAS_CUDA
#include <cuda_runtime.h>
#endif

namespace ft {

std::string Device::to_string() const {
  return is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::cpu();
  if (text == "cuda" || text == "gpu") return Device::cuda(0);
  if (text.substr(0, 5) == "cuda:") {
    auto digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) return Device::cuda(index);
  }
  FT_THROW(invalid_argument, "unknown device '", text, "': expected cpu, cuda or cuda:N");
}

int cuda_device_count() {
#if FT_HAS_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

bool cuda_available() { return cuda_device_count() > 0; }

namespace {
std::string cpu_model() {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "CPU";
}
}  // namespace

std::string describe_device(Device device) {
  if (device.is_cpu()) {
    return str(cpu_model(), " (", std::thread::hardware_concurrency(), " threads)");
  }
#if FT_HAS_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device.index) != cudaSuccess) {
    cudaGetLastError();
    FT_THROW(unsupported, "no CUDA device ", device.to_string(), ": ", cuda_device_count(),
             " device(s) visible");
  }
  return str(prop.name, " (sm_", prop.major, prop.minor, ", ", prop.multiProcessorCount, " SMs, ",
             static_cast<double>(prop.totalGlobalMem) / (1ull << 30), " GiB)");
#else
  FT_THROW(unsupported, "device ", device.to_string(), " requested, but this flashtrain build has no CUDA");
#endif
}

}  // namespace ft
