// nvtx.h — RAII NVTX ranges so Nsight tools can filter by phase and layer; no-ops in a CPU-only build.
#pragma once

#include <string>

namespace ft {

class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  explicit NvtxRange(const std::string& name) : NvtxRange(name.c_str()) {}
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace ft
