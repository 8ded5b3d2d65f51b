// attention_problem.h — every tensor of one attention forward + backward call, for the tests that compare
// attention implementations on the same values (test_attention_tiled_vs_naive, test_attention_naive_cuda):
// q, k, v, o and their gradients stored (B, H, N, D) or (B, N, H, D), the log-sum-exp and, with sink
// logits, the sinks and their gradient, on any device.
#pragma once

#include <cstdint>
#include <utility>

#include "core/buffer.h"
#include "core/device.h"
#include "ops/attention.h"

namespace ft::testing_util {

// A logical (B, H, N, D) tensor stored as (B, H, N, D), or as (B, N, H, D) seen through a transpose.
struct Held {
  OwnedTensor owner;
  Tensor view;
};

inline Held make_bhnd(std::int64_t B, std::int64_t H, std::int64_t N, std::int64_t D, DType dtype, bool bnhd,
                      Device device = Device::cpu()) {
  if (!bnhd) {
    OwnedTensor owner({B, H, N, D}, dtype, device, "test");
    Tensor view = owner.tensor();
    return {std::move(owner), view};
  }
  OwnedTensor owner({B, N, H, D}, dtype, device, "test");
  Tensor view = owner.tensor().transpose(1, 2);
  return {std::move(owner), view};
}

// Every tensor of one forward + backward call on a test case c (a struct with B, Hq, Hkv, Nq, Nk, D and
// sinks, whether the call has sink logits).
struct AttentionProblem {
  Held q, k, v, o, d_o, dq, dk, dv;
  OwnedTensor lse, sinks, dsinks;

  template <class Case>
  AttentionProblem(const Case& c, DType dtype, bool bnhd, Device device = Device::cpu())
      : q(make_bhnd(c.B, c.Hq, c.Nq, c.D, dtype, bnhd, device)),
        k(make_bhnd(c.B, c.Hkv, c.Nk, c.D, dtype, bnhd, device)),
        v(make_bhnd(c.B, c.Hkv, c.Nk, c.D, dtype, bnhd, device)),
        o(make_bhnd(c.B, c.Hq, c.Nq, c.D, dtype, bnhd, device)),
        d_o(make_bhnd(c.B, c.Hq, c.Nq, c.D, dtype, bnhd, device)),
        dq(make_bhnd(c.B, c.Hq, c.Nq, c.D, dtype, bnhd, device)),
        dk(make_bhnd(c.B, c.Hkv, c.Nk, c.D, dtype, bnhd, device)),
        dv(make_bhnd(c.B, c.Hkv, c.Nk, c.D, dtype, bnhd, device)),
        lse({c.B, c.Hq, c.Nq}, DType::f32, device, "test") {
    if (c.sinks) {
      sinks = OwnedTensor({c.Hq}, DType::f32, device, "test");
      dsinks = OwnedTensor({c.Hq}, DType::f32, device, "test");
    }
  }
  AttentionTensors tensors() const {
    AttentionTensors t;
    t.q = q.view, t.k = k.view, t.v = v.view, t.o = o.view, t.lse = lse;
    if (sinks.defined()) t.sinks = sinks;
    return t;
  }
  AttentionGrads grads() const {
    AttentionGrads g;
    g.d_o = d_o.view, g.dq = dq.view, g.dk = dk.view, g.dv = dv.view;
    if (dsinks.defined()) g.dsinks = dsinks;
    return g;
  }
};

}  // namespace ft::testing_util
