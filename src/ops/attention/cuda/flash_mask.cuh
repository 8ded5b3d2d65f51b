// flash_mask.cuh — internal (CUDA builds only): the visible band at tile granularity. Per-row key
// ranges come from visible_keys() (visibility.h); because every bound there is non-decreasing in the
// row, a tile's bounds follow from its first and last row. Tiles outside the band are never visited,
// tiles wholly inside it are "full" (no per-element test), the rest are masked element by element.
#pragma once

#include <cstdint>

#include "ops/attention/cuda/flash_params.h"
#include "ops/attention/visibility.h"

namespace ft::flash {

template <bool kHasMask>
__device__ __forceinline__ KeyRange row_keys(std::int64_t row, const FlashShape& s) {
  if constexpr (kHasMask)
    return visible_keys(row, s.len_q, s.len_k, s.window_left, s.window_right, s.sink_tokens);
  else
    return KeyRange{0, 0, s.len_k};
}

// The key tiles a query tile visits: sink tiles [0, sink_tiles), then the window tiles
// [win_begin, win_end) (win_begin >= sink_tiles, so no tile is visited twice).
struct KeyTiles {
  int sink_tiles = 0, win_begin = 0, win_end = 0;
  __device__ int count() const { return sink_tiles + (win_end > win_begin ? win_end - win_begin : 0); }
  __device__ int tile(int it) const { return it < sink_tiles ? it : win_begin + (it - sink_tiles); }
};

__device__ __forceinline__ KeyTiles key_tiles(const KeyRange& first, const KeyRange& last, int block_n) {
  KeyTiles kt;
  kt.sink_tiles = static_cast<int>((last.sink_end + block_n - 1) / block_n);
  kt.win_begin = static_cast<int>(first.begin / block_n);
  if (kt.win_begin < kt.sink_tiles) kt.win_begin = kt.sink_tiles;
  kt.win_end = static_cast<int>((last.end + block_n - 1) / block_n);
  return kt;
}

// True when every row from `first` to `last` sees every key of [n0, n0 + block_n) (all < len_k). Range is
// KeyRange with a 64-bit n0, or RowKeys (below) with an int one where it runs once per key tile.
template <class Range, class Index>
__device__ __forceinline__ bool tile_full(const Range& first, const Range& last, Index n0, int block_n, int len_k) {
  const Index n1 = n0 + block_n;
  if (n1 > len_k) return false;
  return n1 <= first.sink_end || (n0 >= last.begin && n1 <= first.end);
}

// The query rows [begin, end) that see key j (the inverse of visible_keys: j is visible to row i when
// j < end_i and (j < sink_tokens or j >= lo_i)); empty for j >= len_k.
struct QueryRange {
  std::int64_t begin = 0, end = 0;
};

// Shape: FlashShape, or any type with its len_q, len_k, window_left, window_right and sink_tokens (SeqShapeRef).
template <bool kHasMask, class Shape>
__device__ __forceinline__ QueryRange key_queries(std::int64_t j, const Shape& s) {
  if (j >= s.len_k) return {0, 0};
  if constexpr (!kHasMask) {
    return {0, s.len_q};
  } else {
    const std::int64_t off = static_cast<std::int64_t>(s.len_k) - s.len_q;
    QueryRange r;
    r.begin = s.window_right < 0 ? 0 : ft_max64(0, j - off - s.window_right);
    r.end = (j < s.sink_tokens || s.window_left < 0) ? s.len_q : ft_min64(s.len_q, j - off + s.window_left + 1);
    return r;
  }
}

// The query tiles (of BM rows) that see some key of the key tile (BN keys) at n0: [first, first + count).
// Both bounds of key_queries are non-decreasing in the key, except that sink keys are seen up to the last
// row.
struct TileSpan {
  int first = 0, count = 0;
  __device__ bool contains(int tile) const { return tile >= first && tile < first + count; }
};
template <bool kHasMask, int BN, int BM, class Shape>
__device__ __forceinline__ TileSpan key_tile_queries(int n0, const Shape& s) {
  const int key_last = min(n0 + BN, s.len_k) - 1;
  const std::int64_t q_begin = key_queries<kHasMask>(n0, s).begin;
  const std::int64_t q_end = n0 < s.sink_tokens ? s.len_q : key_queries<kHasMask>(key_last, s).end;
  TileSpan span;
  span.first = static_cast<int>(q_begin / BM);
  span.count = q_end > q_begin ? static_cast<int>((q_end + BM - 1) / BM) - span.first : 0;
  return span;
}

// The first index of [lo, hi) at which pred, false and then true over the range, is true (hi if it never
// is), found by the warp testing 32 evenly spaced indices a round, each round narrowing the range
// 32-fold (two rounds for 1024 indices). Every lane of the warp calls it with the same range and gets
// the index.
template <class Pred>
__device__ __forceinline__ int warp_first_true(int lo, int hi, int lane, Pred pred) {
  while (hi - lo > 32) {
    const int step = (hi - lo + 31) / 32, n = lo + step * lane;
    const int falses = __popc(~__ballot_sync(0xffffffffu, n >= hi || pred(n)));  // lanes [0, falses)
    if (falses == 0) return lo;
    hi = min(hi, lo + step * falses);  // the first candidate found true, or the range's end
    lo += step * (falses - 1) + 1;     // past the last candidate found false
  }
  return lo + __popc(~__ballot_sync(0xffffffffu, lo + lane >= hi || pred(lo + lane)));
}

// The query tiles of `span` (those of the key tile at n0, BN keys: key_tile_queries) that are full
// (tile_full: every row of the tile sees every key of the key tile). They form an interval, because every
// bound of visible_keys is non-decreasing in the row: "the first row's keys end at or past the key tile's
// end" holds from some tile on, "the last row's keys begin at or before its start" up to some tile, and a
// key tile of sink keys needs only the first. Every lane of the warp calls it and gets the interval.
template <bool kHasMask, int BN, int BM>
__device__ __forceinline__ TileSpan full_query_tiles(int n0, const FlashShape& s, const TileSpan& span, int lane) {
  const int n1 = n0 + BN, end = span.first + span.count;
  if (n1 > s.len_k) return TileSpan{span.first, 0};
  const int lo = warp_first_true(span.first, end, lane, [&](int m) {
    return n1 <= row_keys<kHasMask>(static_cast<std::int64_t>(m) * BM, s).end;
  });
  const bool sink_tile = kHasMask && n1 <= ft_min64(s.sink_tokens, s.len_k);
  const int hi = sink_tile ? end : warp_first_true(span.first, end, lane, [&](int m) {
    const std::int64_t last_row = ft_min64(static_cast<std::int64_t>(m) * BM + BM, s.len_q) - 1;
    return n0 < row_keys<kHasMask>(last_row, s).begin;
  });
  return TileSpan{lo, hi > lo ? hi - lo : 0};
}

// A row's KeyRange in 32-bit registers (lengths are < 2^30), for the per-element masks.
struct RowKeys {
  int sink_end = 0, begin = 0, end = 0;
  __device__ RowKeys() = default;
  __device__ explicit RowKeys(const KeyRange& r)
      : sink_end(static_cast<int>(r.sink_end)), begin(static_cast<int>(r.begin)), end(static_cast<int>(r.end)) {}
  __device__ bool contains(int j) const { return j < sink_end || (j >= begin && j < end); }
};

// Likewise for a key's QueryRange.
struct KeyQueries {
  int begin = 0, end = 0;
  __device__ KeyQueries() = default;
  __device__ explicit KeyQueries(const QueryRange& r)
      : begin(static_cast<int>(r.begin)), end(static_cast<int>(r.end)) {}
  __device__ bool contains(int i) const { return i >= begin && i < end; }
};

}  // namespace ft::flash
