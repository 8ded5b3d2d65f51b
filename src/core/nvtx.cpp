// nvtx.cpp — NvtxRange over NVTX 3 (header-only) when CUDA is present, and the range observer hook.
#include "core/nvtx.h"

#include <atomic>

#if FT_HAS_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace ft {

namespace {
std::atomic<const NvtxObserver*> g_observer{nullptr};
}  // namespace

const NvtxObserver* set_nvtx_observer(const NvtxObserver* observer) {
  return g_observer.exchange(observer, std::memory_order_acq_rel);
}

NvtxRange::NvtxRange(const char* name) : observer_(g_observer.load(std::memory_order_acquire)) {
#if FT_HAS_CUDA
  nvtxRangePushA(name);
#endif
  if (observer_) observer_->push(name);
}

NvtxRange::~NvtxRange() {
  if (observer_) observer_->pop();
#if FT_HAS_CUDA
  nvtxRangePop();
#endif
}

}  // namespace ft
