// naive_reference.h — the attention contract computed in double on plain contiguous arrays: S and P
// are materialised per (batch, head). The CPU oracle (cpu_naive.cpp) converts tensors to and from
// these arrays; tests use it directly for finite differences in double.
#pragma once

#include <cstdint>
#include <vector>

namespace ft::attention_ref {

// One attention problem. Arrays are contiguous, row-major, in the logical layouts below.
struct ReferenceProblem {
  std::int64_t batch = 1, heads_q = 1, heads_kv = 1, len_q = 1, len_k = 1, head_dim = 1;
  double scale = 1.0;
  std::int64_t window_left = -1;   // resolved: -1 = unbounded
  std::int64_t window_right = -1;  // resolved: 0 for causal, -1 = unbounded
  std::int64_t sink_tokens = 0;
  std::vector<double> q;      // (B, Hq, Nq, D)
  std::vector<double> k;      // (B, Hkv, Nk, D)
  std::vector<double> v;      // (B, Hkv, Nk, D)
  std::vector<double> sinks;  // (Hq) sink logits; empty = none
};

struct ReferenceOutput {
  std::vector<double> o;    // (B, Hq, Nq, D)
  std::vector<double> lse;  // (B, Hq, Nq), -inf for a row that sees nothing
};

struct ReferenceGrads {
  std::vector<double> dq;      // (B, Hq, Nq, D)
  std::vector<double> dk;      // (B, Hkv, Nk, D)
  std::vector<double> dv;      // (B, Hkv, Nk, D)
  std::vector<double> dsinks;  // (Hq); empty when the problem has no sinks
};

// o, lse <- attention(q, k, v). Throws ft::Error when the arrays do not match the sizes.
ReferenceOutput reference_forward(const ReferenceProblem& p);

// Gradients by recomputation from the given o (B, Hq, Nq, D), lse (B, Hq, Nq) and d_o (B, Hq, Nq, D),
// as the contract states them; kv-head gradients sum over their query-head group.
ReferenceGrads reference_backward(const ReferenceProblem& p, const std::vector<double>& o,
                                  const std::vector<double>& lse, const std::vector<double>& d_o);

}  // namespace ft::attention_ref
