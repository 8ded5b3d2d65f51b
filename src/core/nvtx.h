// nvtx.h — RAII NVTX ranges so Nsight tools can filter by phase and layer (no-ops in a CPU-only build),
// and a process-wide observer of those ranges: the kernel profiler (src/bench/kernel_profiler.h) uses it
// to attribute each kernel to the ranges open when it was launched.
#pragma once

#include <string>

namespace ft {

// Told of every NvtxRange opened and closed while it is installed, on the thread that opens or closes
// the range. A range notifies the observer that saw it open, and only that one, when it closes, so one
// observer always sees pushes and pops in pairs (per thread, innermost first) — except for ranges still
// open when the observer is removed, whose pops come later. The functions must not throw; the object
// must outlive every range that saw it (a static object).
struct NvtxObserver {
  void (*push)(const char* name) = nullptr;  // a range opened
  void (*pop)() = nullptr;                   // the innermost range this observer saw opening closed
};

// Installs observer (nullptr removes it) and returns the one installed before. Costs each NvtxRange one
// atomic load while no observer is installed.
const NvtxObserver* set_nvtx_observer(const NvtxObserver* observer);

class NvtxRange {
 public:
  explicit NvtxRange(const char* name);
  explicit NvtxRange(const std::string& name) : NvtxRange(name.c_str()) {}
  ~NvtxRange();
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  const NvtxObserver* observer_ = nullptr;  // the observer told of the opening, told of the closing too
};

}  // namespace ft
