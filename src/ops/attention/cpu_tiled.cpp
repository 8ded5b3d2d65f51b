// cpu_tiled.cpp — FlashAttention-2 on the CPU, tile by tile as the GPU kernels do it, in fp32:
//   forward  = Algorithm 1: per query tile, a loop over the visible key tiles keeping a running max m,
//              running sum l and an output accumulator; O and L are written once per query tile.
//   backward = Algorithm 2: D = rowsum(dO * O) first, then an outer loop over key tiles and an inner
//              loop over the query tiles that see them, dK / dV accumulated per key tile.
// For bf16 / fp16 inputs P (and dS) are rounded to the input dtype before they meet V, dO, K or Q,
// as tensor-core GEMM operands would be. OpenMP threads take (batch, query head) pairs in the forward
// and (batch, kv head) pairs in the backward (so dK / dV sum over the query-head group without
// races); every output element is produced by one thread in a fixed order, so runs are deterministic
// whatever the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/attention/attention_impls.h"
#include "ops/attention/visibility.h"
#include "ops/cpu/elem.h"

namespace ft::attention_impl {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// max(a, b), NaN when either is (std::max keeps whichever NaN comes first and drops one that comes second).
float nan_max(float a, float b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<float>::quiet_NaN() : std::max(a, b);
}

using cpu::from_float;
using cpu::load;

// x as a GEMM operand of type T holds it: rounded to T (unchanged for fp32).
template <class T>
float round_to(float x) {
  return load(from_float<T>(x));
}

// a . b over n floats, in eight fixed lanes (vectorisable and deterministic).
inline float dot(const float* a, const float* b, std::int64_t n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int l = 0; l < 8; ++l) lane[l] += a[d + l] * b[d + l];
  for (; d < n; ++d) lane[0] += a[d] * b[d];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// y += alpha * x over n floats.
inline void axpy(float* y, float alpha, const float* x, std::int64_t n) {
  for (std::int64_t d = 0; d < n; ++d) y[d] += alpha * x[d];
}

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Whether a call has enough work (multiply-adds of S = Q K^T) to be worth waking OpenMP threads for.
bool worth_threads(const AttentionShape& s) {
  return s.batch * s.heads_q * s.len_q * s.len_k * s.head_dim >= (std::int64_t{1} << 22);
}

// The rows (tokens) of one (batch, head) slice of a (B, H, N, D) tensor, any strides.
template <class T>
struct Rows {
  T* base;
  std::int64_t stride;  // elements between consecutive rows
  T* row(std::int64_t r) const { return base + r * stride; }
};

template <class T>
Rows<T> rows_of(const Tensor& t, std::int64_t b, std::int64_t h) {
  return {t.data_as<T>() + b * t.stride(0) + h * t.stride(1), t.stride(2)};
}

// The (Nq) entries of one (batch, head) slice of a (B, H, Nq) fp32 tensor, any strides.
Rows<float> lse_of(const Tensor& lse, std::int64_t b, std::int64_t h) {
  return {lse.data_as<float>() + b * lse.stride(0) + h * lse.stride(1), lse.stride(2)};
}

// tile (rows, D) fp32 <- rows [row0, row0 + rows) of src.
template <class T>
void load_tile(float* tile, Rows<const T> src, std::int64_t row0, std::int64_t rows, std::int64_t D) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* in = src.row(row0 + r);
    for (std::int64_t d = 0; d < D; ++d) tile[r * D + d] = load(in[d]);
  }
}

// rows [row0, row0 + rows) of dst <- scale * tile (rows, D), rounded to T.
template <class T>
void store_tile(Rows<T> dst, const float* tile, std::int64_t row0, std::int64_t rows, std::int64_t D, float scale) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* out = dst.row(row0 + r);
    for (std::int64_t d = 0; d < D; ++d) out[d] = from_float<T>(scale * tile[r * D + d]);
  }
}

// One query tile: rows [row0, row0 + rows), and the keys any of its rows sees,
// [0, sink_end) ∪ [begin, end) (begin >= end when no row has a window key).
struct QueryTile {
  std::int64_t row0, rows;
  std::int64_t sink_end, begin, end;
};

// The query tiles of a problem and the key range of every row (visibility.h). Tiles of keys are
// skipped when no row of a query tile sees any of their keys; masks are applied only to tiles in
// which some row is blind to some key. A tile longer than its sequence shrinks to it.
class Tiling {
 public:
  Tiling(const AttentionShape& s, std::int64_t block_q, std::int64_t block_k)
      : block_q_(std::min(block_q, s.len_q)), block_k_(std::min(block_k, s.len_k)), len_k_(s.len_k) {
    ranges_.reserve(static_cast<std::size_t>(s.len_q));
    for (std::int64_t i = 0; i < s.len_q; ++i)
      ranges_.push_back(visible_keys(i, s.len_q, s.len_k, s.window_left, s.window_right, s.sink_tokens));
    for (std::int64_t row0 = 0; row0 < s.len_q; row0 += block_q_) {
      QueryTile tile{row0, std::min(block_q_, s.len_q - row0), 0, s.len_k, 0};
      for (std::int64_t i = row0; i < row0 + tile.rows; ++i) {
        const KeyRange& r = ranges_[i];
        tile.sink_end = std::max(tile.sink_end, r.sink_end);
        if (r.begin < r.end) {
          tile.begin = std::min(tile.begin, r.begin);
          tile.end = std::max(tile.end, r.end);
        }
      }
      tiles_.push_back(tile);
    }
  }

  std::int64_t block_q() const { return block_q_; }
  std::int64_t block_k() const { return block_k_; }
  std::int64_t key_tiles() const { return ceil_div(len_k_, block_k_); }
  const std::vector<QueryTile>& query_tiles() const { return tiles_; }
  const KeyRange& range(std::int64_t row) const { return ranges_[row]; }
  std::int64_t first_key(std::int64_t key_tile) const { return key_tile * block_k_; }
  std::int64_t tile_keys(std::int64_t key_tile) const { return std::min(block_k_, len_k_ - key_tile * block_k_); }

  // Key tiles that tile q sees, in order: the sink tiles first, then those of the window.
  template <class Fn>
  void for_each_key_tile(const QueryTile& q, Fn&& fn) const {
    const std::int64_t sink_tiles = ceil_div(q.sink_end, block_k_);
    for (std::int64_t kt = 0; kt < sink_tiles; ++kt) fn(kt);
    if (q.begin >= q.end) return;
    for (std::int64_t kt = std::max(q.begin / block_k_, sink_tiles); kt < ceil_div(q.end, block_k_); ++kt) fn(kt);
  }

  // Whether some row of query tile q sees some key of key tile kt.
  bool sees(const QueryTile& q, std::int64_t kt) const {
    const std::int64_t j0 = first_key(kt), j1 = j0 + tile_keys(kt);
    return j0 < q.sink_end || (q.begin < q.end && j0 < q.end && q.begin < j1);
  }

  // Whether some row of query tile q is blind to some key of key tile kt.
  bool needs_mask(const QueryTile& q, std::int64_t kt) const {
    const std::int64_t j0 = first_key(kt), j1 = j0 + tile_keys(kt);
    for (std::int64_t i = q.row0; i < q.row0 + q.rows; ++i) {
      const KeyRange& r = ranges_[i];
      if (!(j1 <= r.sink_end || (r.begin <= j0 && j1 <= r.end))) return true;
    }
    return false;
  }

 private:
  std::int64_t block_q_, block_k_, len_k_;
  std::vector<KeyRange> ranges_;  // (Nq) the keys each row sees
  std::vector<QueryTile> tiles_;  // (ceil(Nq / block_q))
};

// S row r of a tile: s[c] = scale * q . k_c for the kn keys of the tile starting at key j0,
// -inf for keys the row does not see (checked only when the tile needs a mask). Returns max s, NaN when
// a visible score is NaN (so that NaN inputs give NaN outputs, not an empty row).
float score_row(float* s, const float* q, const float* k_tile, std::int64_t kn, std::int64_t D, float scale,
                bool mask, const KeyRange& range, std::int64_t j0) {
  float top = kNegInf;
  for (std::int64_t c = 0; c < kn; ++c) {
    s[c] = (mask && !range.contains(j0 + c)) ? kNegInf : scale * dot(q, k_tile + c * D, D);
    top = nan_max(top, s[c]);
  }
  return top;
}

// ---- forward: Algorithm 1 -----------------------------------------------------------------------

template <class T>
void forward_head(const AttentionTensors& t, const AttentionShape& s, const Tiling& tiling, std::int64_t b,
                  std::int64_t h) {
  const std::int64_t D = s.head_dim, bq = tiling.block_q(), bk = tiling.block_k();
  const std::int64_t hk = h / (s.heads_q / s.heads_kv);
  const float scale = static_cast<float>(s.scale);
  const float sink = s.has_sinks ? t.sinks.data_as<const float>()[h] : kNegInf;
  const Rows<const T> q = rows_of<const T>(t.q, b, h);    // (Nq, D)
  const Rows<const T> k = rows_of<const T>(t.k, b, hk);   // (Nk, D)
  const Rows<const T> v = rows_of<const T>(t.v, b, hk);   // (Nk, D)
  const Rows<T> o = rows_of<T>(t.o, b, h);                // (Nq, D)
  const Rows<float> lse = lse_of(t.lse, b, h);            // (Nq)

  std::vector<float> q_tile(bq * D), k_tile(bk * D), v_tile(bk * D);  // (bq, D), (bk, D), (bk, D)
  std::vector<float> p_tile(bq * bk);                                 // (bq, bk) S, then P
  std::vector<float> acc(bq * D);                                     // (bq, D) unnormalised O
  std::vector<float> m(bq), l(bq);                                    // (bq) running max and sum

  for (const QueryTile& qt : tiling.query_tiles()) {
    load_tile(q_tile.data(), q, qt.row0, qt.rows, D);
    std::fill(acc.begin(), acc.end(), 0.0f);
    // The sink logit is a column of every row carrying no value: it starts the running max and sum.
    std::fill(m.begin(), m.end(), sink);
    std::fill(l.begin(), l.end(), sink == kNegInf ? 0.0f : 1.0f);

    tiling.for_each_key_tile(qt, [&](std::int64_t kt) {
      const std::int64_t j0 = tiling.first_key(kt), kn = tiling.tile_keys(kt);
      load_tile(k_tile.data(), k, j0, kn, D);
      load_tile(v_tile.data(), v, j0, kn, D);
      const bool mask = tiling.needs_mask(qt, kt);
      for (std::int64_t r = 0; r < qt.rows; ++r) {
        float* p = p_tile.data() + r * bk;  // (kn)
        const float top = score_row(p, q_tile.data() + r * D, k_tile.data(), kn, D, scale, mask,
                                    tiling.range(qt.row0 + r), j0);
        const float m_new = nan_max(m[r], top);
        if (m_new == kNegInf) continue;  // the row has seen nothing yet
        const float alpha = std::exp(m[r] - m_new);  // 0 while m = -inf
        float sum = 0;
        for (std::int64_t c = 0; c < kn; ++c) {
          const float pc = std::exp(p[c] - m_new);
          sum += pc;
          p[c] = round_to<T>(pc);
        }
        m[r] = m_new;
        l[r] = alpha * l[r] + sum;
        float* a = acc.data() + r * D;  // (D)
        for (std::int64_t d = 0; d < D; ++d) a[d] *= alpha;
        for (std::int64_t c = 0; c < kn; ++c)
          if (p[c] != 0) axpy(a, p[c], v_tile.data() + c * D, D);
      }
    });

    for (std::int64_t r = 0; r < qt.rows; ++r) {
      const bool blind = l[r] == 0;  // nothing visible and no sink: O = 0, L = -inf
      T* out = o.row(qt.row0 + r);
      const float inv = blind ? 0.0f : 1.0f / l[r];
      for (std::int64_t d = 0; d < D; ++d) out[d] = from_float<T>(acc[r * D + d] * inv);
      *lse.row(qt.row0 + r) = blind ? kNegInf : m[r] + std::log(l[r]);
    }
  }
}

// ---- backward: Algorithm 2 ----------------------------------------------------------------------

// delta (B, Hq, Nq) <- rowsum(dO * O); sink_terms (B, Hq) <- sum_i exp(s_h - L_i) * delta_i.
template <class T>
void backward_prepass(const AttentionTensors& t, const AttentionGrads& g, const AttentionShape& s,
                      std::vector<float>& delta, std::vector<float>& sink_terms) {
  const std::int64_t D = s.head_dim, Nq = s.len_q, heads = s.batch * s.heads_q;
#pragma omp parallel for schedule(static) if (worth_threads(s))
  for (std::int64_t bh = 0; bh < heads; ++bh) {
    const std::int64_t b = bh / s.heads_q, h = bh % s.heads_q;
    const Rows<const T> o = rows_of<const T>(t.o, b, h);      // (Nq, D)
    const Rows<const T> d_o = rows_of<const T>(g.d_o, b, h);  // (Nq, D)
    const Rows<float> lse = lse_of(t.lse, b, h);              // (Nq)
    float* dh = delta.data() + bh * Nq;                       // (Nq)
    float sink_sum = 0;
    for (std::int64_t i = 0; i < Nq; ++i) {
      float sum = 0;
      for (std::int64_t d = 0; d < D; ++d) sum += load(d_o.row(i)[d]) * load(o.row(i)[d]);
      dh[i] = sum;
      const float L = *lse.row(i);
      if (s.has_sinks && L != kNegInf) sink_sum += std::exp(t.sinks.data_as<const float>()[h] - L) * sum;
    }
    sink_terms[bh] = sink_sum;
  }
}

// dQ, dK, dV of kv head hk in batch b and of the query heads of its group.
template <class T>
void backward_kv_head(const AttentionTensors& t, const AttentionGrads& g, const AttentionShape& s,
                      const Tiling& tiling, const std::vector<float>& delta, std::int64_t b, std::int64_t hk) {
  const std::int64_t D = s.head_dim, Nq = s.len_q, bq = tiling.block_q(), bk = tiling.block_k();
  const std::int64_t group = s.heads_q / s.heads_kv;
  const float scale = static_cast<float>(s.scale);
  const Rows<const T> k = rows_of<const T>(t.k, b, hk);  // (Nk, D)
  const Rows<const T> v = rows_of<const T>(t.v, b, hk);  // (Nk, D)

  std::vector<float> k_tile(bk * D), v_tile(bk * D);    // (bk, D)
  std::vector<float> dk_acc(bk * D), dv_acc(bk * D);    // (bk, D) unscaled dK, dV of the key tile
  std::vector<float> q_tile(bq * D), do_tile(bq * D);   // (bq, D)
  std::vector<float> p_tile(bq * bk), ds_tile(bq * bk); // (bq, bk) P and dS
  std::vector<float> dq_acc(group * Nq * D, 0.0f);      // (group, Nq, D) unscaled dQ of the group

  for (std::int64_t kt = 0; kt < tiling.key_tiles(); ++kt) {
    const std::int64_t j0 = tiling.first_key(kt), kn = tiling.tile_keys(kt);
    load_tile(k_tile.data(), k, j0, kn, D);
    load_tile(v_tile.data(), v, j0, kn, D);
    std::fill(dk_acc.begin(), dk_acc.end(), 0.0f);
    std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);

    for (std::int64_t gi = 0; gi < group; ++gi) {
      const std::int64_t h = hk * group + gi;
      const Rows<const T> q = rows_of<const T>(t.q, b, h);      // (Nq, D)
      const Rows<const T> d_o = rows_of<const T>(g.d_o, b, h);  // (Nq, D)
      const Rows<float> lse = lse_of(t.lse, b, h);              // (Nq)
      const float* dh = delta.data() + (b * s.heads_q + h) * Nq;  // (Nq)
      float* dq = dq_acc.data() + gi * Nq * D;                  // (Nq, D)

      for (const QueryTile& qt : tiling.query_tiles()) {
        if (!tiling.sees(qt, kt)) continue;
        const bool mask = tiling.needs_mask(qt, kt);
        load_tile(q_tile.data(), q, qt.row0, qt.rows, D);
        load_tile(do_tile.data(), d_o, qt.row0, qt.rows, D);
        for (std::int64_t r = 0; r < qt.rows; ++r) {
          const std::int64_t i = qt.row0 + r;
          const float L = *lse.row(i);
          float* p = p_tile.data() + r * bk;   // (kn)
          float* ds = ds_tile.data() + r * bk; // (kn)
          const float* qr = q_tile.data() + r * D;
          const float* dor = do_tile.data() + r * D;
          if (L == kNegInf) {  // the row sees nothing: P = 0
            std::fill(p, p + kn, 0.0f);
            std::fill(ds, ds + kn, 0.0f);
            continue;
          }
          score_row(p, qr, k_tile.data(), kn, D, scale, mask, tiling.range(i), j0);
          for (std::int64_t c = 0; c < kn; ++c) {
            const float pc = std::exp(p[c] - L);  // P_ij, 0 where masked
            // dS_ij = P_ij (dO_i . v_j - D_i)
            ds[c] = pc == 0 ? 0.0f : round_to<T>(pc * (dot(dor, v_tile.data() + c * D, D) - dh[i]));
            p[c] = round_to<T>(pc);
          }
        }
        // dV_j += P^T dO_i;  dK_j += dS^T Q_i;  dQ_i += dS K_j (scale applied when written)
        for (std::int64_t r = 0; r < qt.rows; ++r) {
          const float* p = p_tile.data() + r * bk;
          const float* ds = ds_tile.data() + r * bk;
          const float* qr = q_tile.data() + r * D;
          const float* dor = do_tile.data() + r * D;
          float* dqr = dq + (qt.row0 + r) * D;
          for (std::int64_t c = 0; c < kn; ++c) {
            if (p[c] != 0) axpy(dv_acc.data() + c * D, p[c], dor, D);
            if (ds[c] != 0) {
              axpy(dk_acc.data() + c * D, ds[c], qr, D);
              axpy(dqr, ds[c], k_tile.data() + c * D, D);
            }
          }
        }
      }
    }
    store_tile(rows_of<T>(g.dk, b, hk), dk_acc.data(), j0, kn, D, scale);
    store_tile(rows_of<T>(g.dv, b, hk), dv_acc.data(), j0, kn, D, 1.0f);
  }
  for (std::int64_t gi = 0; gi < group; ++gi)
    store_tile(rows_of<T>(g.dq, b, hk * group + gi), dq_acc.data() + gi * Nq * D, 0, Nq, D, scale);
}

}  // namespace

void cpu_tiled_forward(const AttentionTensors& t, const AttentionShape& s, int block_q, int block_k) {
  const Tiling tiling(s, block_q, block_k);
  const std::int64_t heads = s.batch * s.heads_q;
  cpu::with_dtype(t.q.dtype(), [&](auto tag) {
    using T = decltype(tag);
#pragma omp parallel for schedule(dynamic) if (worth_threads(s))
    for (std::int64_t bh = 0; bh < heads; ++bh) forward_head<T>(t, s, tiling, bh / s.heads_q, bh % s.heads_q);
  });
}

void cpu_tiled_backward(const AttentionTensors& t, const AttentionGrads& g, const AttentionShape& s, int block_q,
                        int block_k) {
  const Tiling tiling(s, block_q, block_k);
  std::vector<float> delta(s.batch * s.heads_q * s.len_q);  // (B, Hq, Nq) D_i = dO_i . O_i
  std::vector<float> sink_terms(s.batch * s.heads_q);       // (B, Hq) sum_i exp(s_h - L_i) D_i
  const std::int64_t kv_heads = s.batch * s.heads_kv;
  cpu::with_dtype(t.q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    backward_prepass<T>(t, g, s, delta, sink_terms);
#pragma omp parallel for schedule(dynamic) if (worth_threads(s))
    for (std::int64_t bh = 0; bh < kv_heads; ++bh)
      backward_kv_head<T>(t, g, s, tiling, delta, bh / s.heads_kv, bh % s.heads_kv);
  });
  if (s.has_sinks) {
    // dsink_h = -sum_{b,i} exp(s_h - L_i) D_i, summed over the batch in a fixed order.
    float* dsinks = g.dsinks.data_as<float>();
    for (std::int64_t h = 0; h < s.heads_q; ++h) {
      float sum = 0;
      for (std::int64_t b = 0; b < s.batch; ++b) sum += sink_terms[b * s.heads_q + h];
      dsinks[h] = -sum;
    }
  }
}

}  // namespace ft::attention_impl
