// nvtx.cpp — NvtxRange over NVTX 3 (header-only) when CUDA is present.
#include "core/nvtx.h"

#if FT_HAS_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace ft {

#if FT_HAS_CUDA
NvtxRange::NvtxRange(const char* name) { nvtxRangePushA(name); }
NvtxRange::~NvtxRange() { nvtxRangePop(); }
#else
NvtxRange::NvtxRange(const char*) {}
NvtxRange::~NvtxRange() {}
#endif

}  // namespace ft
