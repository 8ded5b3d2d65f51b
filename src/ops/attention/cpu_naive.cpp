// cpu_naive.cpp — the CPU oracle: reads the tensors (any dtype, any strides) into double arrays,
// runs the double-precision reference (naive_reference.h) and writes the results back, rounded to
// each output's dtype.
#include "core/tensor_io.h"
#include "ops/attention/attention_impls.h"
#include "ops/attention/naive_reference.h"

namespace ft::attention_impl {

namespace {

attention_ref::ReferenceProblem make_problem(const AttentionTensors& t, const AttentionShape& s) {
  attention_ref::ReferenceProblem p;
  p.batch = s.batch;
  p.heads_q = s.heads_q;
  p.heads_kv = s.heads_kv;
  p.len_q = s.len_q;
  p.len_k = s.len_k;
  p.head_dim = s.head_dim;
  p.scale = s.scale;
  p.window_left = s.window_left;
  p.window_right = s.window_right;
  p.sink_tokens = s.sink_tokens;
  p.q = read_as_double(t.q);  // (B, Hq, Nq, D)
  p.k = read_as_double(t.k);  // (B, Hkv, Nk, D)
  p.v = read_as_double(t.v);  // (B, Hkv, Nk, D)
  if (s.has_sinks) p.sinks = read_as_double(t.sinks);  // (Hq)
  return p;
}

}  // namespace

void cpu_naive_forward(const AttentionTensors& t, const AttentionShape& s) {
  const attention_ref::ReferenceOutput out = attention_ref::reference_forward(make_problem(t, s));
  write_from_double(t.o, out.o);
  write_from_double(t.lse, out.lse);
}

void cpu_naive_backward(const AttentionTensors& t, const AttentionGrads& g, const AttentionShape& s) {
  const attention_ref::ReferenceGrads grads =
      attention_ref::reference_backward(make_problem(t, s), read_as_double(t.o), read_as_double(t.lse),
                                        read_as_double(g.d_o));
  write_from_double(g.dq, grads.dq);
  write_from_double(g.dk, grads.dk);
  write_from_double(g.dv, grads.dv);
  if (s.has_sinks) write_from_double(g.dsinks, grads.dsinks);
}

}  // namespace ft::attention_impl
