// version.h — the flashtrain version and the git commit it was built from (stamped at build time).
#pragma once

namespace ft {

const char* version();     // "0.1.0"
const char* git_commit();  // short hash, "-dirty" when built from uncommitted changes, or "unknown"
// Whether this build has the CUDA sources compiled in.
constexpr bool built_with_cuda() { return FT_HAS_CUDA != 0; }

}  // namespace ft
