// naive_reference.cpp — attention forward and backward in double, materialising S and P for each
// (batch, query head); the definition every other implementation is tested against.
#include "ops/attention/naive_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "ops/attention/visibility.h"

namespace ft::attention_ref {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

void check_problem(const ReferenceProblem& p) {
  FT_CHECK(p.batch >= 1 && p.heads_q >= 1 && p.heads_kv >= 1 && p.len_q >= 1 && p.len_k >= 1 && p.head_dim >= 1,
           "reference attention: every size must be >= 1, given B = ", p.batch, ", Hq = ", p.heads_q,
           ", Hkv = ", p.heads_kv, ", Nq = ", p.len_q, ", Nk = ", p.len_k, ", D = ", p.head_dim);
  FT_CHECK(p.heads_q % p.heads_kv == 0, "reference attention: Hq must be a multiple of Hkv, given Hq = ",
           p.heads_q, ", Hkv = ", p.heads_kv);
  const auto q_size = static_cast<std::size_t>(p.batch * p.heads_q * p.len_q * p.head_dim);
  const auto kv_size = static_cast<std::size_t>(p.batch * p.heads_kv * p.len_k * p.head_dim);
  FT_CHECK(p.q.size() == q_size, "reference attention: q must hold ", q_size, " values, given ", p.q.size());
  FT_CHECK(p.k.size() == kv_size, "reference attention: k must hold ", kv_size, " values, given ", p.k.size());
  FT_CHECK(p.v.size() == kv_size, "reference attention: v must hold ", kv_size, " values, given ", p.v.size());
  FT_CHECK(p.sinks.empty() || p.sinks.size() == static_cast<std::size_t>(p.heads_q),
           "reference attention: sinks must hold Hq = ", p.heads_q, " values or none, given ", p.sinks.size());
}

// Offsets of the first element of one (batch, head) slice.
std::int64_t q_slice(const ReferenceProblem& p, std::int64_t b, std::int64_t h) {
  return (b * p.heads_q + h) * p.len_q * p.head_dim;
}
std::int64_t kv_slice(const ReferenceProblem& p, std::int64_t b, std::int64_t h) {
  const std::int64_t hk = h / (p.heads_q / p.heads_kv);
  return (b * p.heads_kv + hk) * p.len_k * p.head_dim;
}

double sink_of(const ReferenceProblem& p, std::int64_t h) { return p.sinks.empty() ? kNegInf : p.sinks[h]; }

// S (Nq, Nk) of query head h in batch b: scale * q_i . k_j where visible, -inf elsewhere.
std::vector<double> scores(const ReferenceProblem& p, std::int64_t b, std::int64_t h) {
  const std::int64_t D = p.head_dim;
  const double* q = p.q.data() + q_slice(p, b, h);   // (Nq, D)
  const double* k = p.k.data() + kv_slice(p, b, h);  // (Nk, D)
  std::vector<double> s(static_cast<std::size_t>(p.len_q * p.len_k), kNegInf);  // (Nq, Nk)
  for (std::int64_t i = 0; i < p.len_q; ++i) {
    const KeyRange range = visible_keys(i, p.len_q, p.len_k, p.window_left, p.window_right, p.sink_tokens);
    for (std::int64_t j = 0; j < p.len_k; ++j) {
      if (!range.contains(j)) continue;
      double dot = 0;
      for (std::int64_t d = 0; d < D; ++d) dot += q[i * D + d] * k[j * D + d];
      s[i * p.len_k + j] = p.scale * dot;
    }
  }
  return s;
}

// P (Nq, Nk) = exp(S - L) from scores S (Nq, Nk) and lse L (Nq); rows with L = -inf see nothing.
std::vector<double> probabilities(const std::vector<double>& s, const double* lse, std::int64_t len_q,
                                  std::int64_t len_k) {
  std::vector<double> prob(s.size(), 0.0);  // (Nq, Nk)
  for (std::int64_t i = 0; i < len_q; ++i) {
    if (lse[i] == kNegInf) continue;
    for (std::int64_t j = 0; j < len_k; ++j) prob[i * len_k + j] = std::exp(s[i * len_k + j] - lse[i]);
  }
  return prob;
}

}  // namespace

ReferenceOutput reference_forward(const ReferenceProblem& p) {
  check_problem(p);
  const std::int64_t Nq = p.len_q, Nk = p.len_k, D = p.head_dim;
  ReferenceOutput out;
  out.o.assign(p.q.size(), 0.0);
  out.lse.assign(static_cast<std::size_t>(p.batch * p.heads_q * Nq), kNegInf);
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      const std::vector<double> s = scores(p, b, h);  // (Nq, Nk)
      const double sink = sink_of(p, h);
      double* lse = out.lse.data() + (b * p.heads_q + h) * Nq;  // (Nq)
      for (std::int64_t i = 0; i < Nq; ++i) {
        const double* row = s.data() + i * Nk;
        double top = sink;  // the row's max, NaN when any score is (NaN inputs give NaN outputs)
        for (std::int64_t j = 0; j < Nk; ++j)
          top = std::isnan(top) || std::isnan(row[j]) ? std::numeric_limits<double>::quiet_NaN() : std::max(top, row[j]);
        if (top == kNegInf) continue;  // nothing visible and no sink: O = 0, L = -inf
        double sum = std::exp(sink - top);
        for (std::int64_t j = 0; j < Nk; ++j) sum += std::exp(row[j] - top);
        lse[i] = top + std::log(sum);
      }
      const std::vector<double> prob = probabilities(s, lse, Nq, Nk);  // (Nq, Nk)
      const double* v = p.v.data() + kv_slice(p, b, h);                 // (Nk, D)
      double* o = out.o.data() + q_slice(p, b, h);                      // (Nq, D)
      for (std::int64_t i = 0; i < Nq; ++i)
        for (std::int64_t j = 0; j < Nk; ++j) {
          const double pij = prob[i * Nk + j];
          if (pij == 0) continue;
          for (std::int64_t d = 0; d < D; ++d) o[i * D + d] += pij * v[j * D + d];
        }
    }
  }
  return out;
}

ReferenceGrads reference_backward(const ReferenceProblem& p, const std::vector<double>& o,
                                  const std::vector<double>& lse, const std::vector<double>& d_o) {
  check_problem(p);
  const std::int64_t Nq = p.len_q, Nk = p.len_k, D = p.head_dim;
  FT_CHECK(o.size() == p.q.size(), "reference attention: o must hold ", p.q.size(), " values, given ", o.size());
  FT_CHECK(d_o.size() == p.q.size(), "reference attention: d_o must hold ", p.q.size(), " values, given ",
           d_o.size());
  FT_CHECK(lse.size() == static_cast<std::size_t>(p.batch * p.heads_q * Nq), "reference attention: lse must hold ",
           p.batch * p.heads_q * Nq, " values, given ", lse.size());
  ReferenceGrads g;
  g.dq.assign(p.q.size(), 0.0);
  g.dk.assign(p.k.size(), 0.0);
  g.dv.assign(p.v.size(), 0.0);
  if (!p.sinks.empty()) g.dsinks.assign(p.sinks.size(), 0.0);

  std::vector<double> delta(static_cast<std::size_t>(Nq));  // (Nq) D_i = dO_i . O_i
  std::vector<double> ds(static_cast<std::size_t>(Nq * Nk));  // (Nq, Nk)
  for (std::int64_t b = 0; b < p.batch; ++b) {
    for (std::int64_t h = 0; h < p.heads_q; ++h) {
      const std::int64_t qo = q_slice(p, b, h), ko = kv_slice(p, b, h);
      const double* q = p.q.data() + qo;     // (Nq, D)
      const double* k = p.k.data() + ko;     // (Nk, D)
      const double* v = p.v.data() + ko;     // (Nk, D)
      const double* oh = o.data() + qo;      // (Nq, D)
      const double* doh = d_o.data() + qo;   // (Nq, D)
      const double* lh = lse.data() + (b * p.heads_q + h) * Nq;  // (Nq)
      double* dq = g.dq.data() + qo;         // (Nq, D)
      double* dk = g.dk.data() + ko;         // (Nk, D)
      double* dv = g.dv.data() + ko;         // (Nk, D)

      const std::vector<double> prob = probabilities(scores(p, b, h), lh, Nq, Nk);  // (Nq, Nk)
      for (std::int64_t i = 0; i < Nq; ++i) {
        double dot = 0;
        for (std::int64_t d = 0; d < D; ++d) dot += doh[i * D + d] * oh[i * D + d];
        delta[i] = dot;
      }
      for (std::int64_t i = 0; i < Nq; ++i)
        for (std::int64_t j = 0; j < Nk; ++j) {
          const double pij = prob[i * Nk + j];
          double dp = 0;  // dP_ij = dO_i . v_j
          for (std::int64_t d = 0; d < D; ++d) dp += doh[i * D + d] * v[j * D + d];
          ds[i * Nk + j] = pij * (dp - delta[i]);
          for (std::int64_t d = 0; d < D; ++d) dv[j * D + d] += pij * doh[i * D + d];
        }
      for (std::int64_t i = 0; i < Nq; ++i)
        for (std::int64_t j = 0; j < Nk; ++j) {
          const double dsij = p.scale * ds[i * Nk + j];
          if (dsij == 0) continue;
          for (std::int64_t d = 0; d < D; ++d) {
            dq[i * D + d] += dsij * k[j * D + d];
            dk[j * D + d] += dsij * q[i * D + d];
          }
        }
      if (!p.sinks.empty()) {
        for (std::int64_t i = 0; i < Nq; ++i)
          if (lh[i] != kNegInf) g.dsinks[h] -= std::exp(p.sinks[h] - lh[i]) * delta[i];
      }
    }
  }
  return g;
}

}  // namespace ft::attention_ref
