// visibility.h — which keys a query row sees under the attention contract, shared by every
// implementation (host and device). Row i of Nq sees keys j in [0, sink_end) ∪ [begin, end):
//   off = Nk - Nq (bottom-right alignment); hi = i + off + right (right = -1: Nk - 1);
//   lo = i + off - left (left = -1: 0); sink tokens j < n_sink bypass lo but not hi.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FT_HOST_DEVICE inline
#endif

namespace ft {

struct KeyRange {
  std::int64_t sink_end;  // keys [0, sink_end) are visible sink tokens
  std::int64_t begin;     // keys [begin, end) are the visible window; begin >= sink_end
  std::int64_t end;
  FT_HOST_DEVICE bool empty() const { return sink_end == 0 && begin >= end; }
  FT_HOST_DEVICE bool contains(std::int64_t j) const { return j < sink_end || (j >= begin && j < end); }
};

FT_HOST_DEVICE std::int64_t ft_min64(std::int64_t a, std::int64_t b) { return a < b ? a : b; }
FT_HOST_DEVICE std::int64_t ft_max64(std::int64_t a, std::int64_t b) { return a > b ? a : b; }

// Keys visible to query row i. window_left / window_right are resolved (-1 = unbounded; causal is
// window_right = 0).
FT_HOST_DEVICE KeyRange visible_keys(std::int64_t i, std::int64_t len_q, std::int64_t len_k,
                                     std::int64_t window_left, std::int64_t window_right,
                                     std::int64_t sink_tokens) {
  const std::int64_t diag = i + (len_k - len_q);
  const std::int64_t end = window_right < 0 ? len_k : ft_max64(0, ft_min64(len_k, diag + window_right + 1));
  const std::int64_t lo = window_left < 0 ? 0 : ft_max64(0, diag - window_left);
  const std::int64_t sink_end = ft_min64(ft_min64(sink_tokens, len_k), end);
  const std::int64_t begin = ft_min64(ft_max64(lo, sink_end), end);
  return {sink_end, begin, end};
}

}  // namespace ft
