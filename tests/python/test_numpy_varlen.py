"""test_numpy_varlen.py — flashtrain.numpy.attention_varlen and its backward on the host, numpy only (CI): packed
sequences (empty, length-1 and longer ones) against the float64 reference of attention_reference.py run on each
sequence, for both implementations and every variant; each sequence equals the dense call bit for bit; bad
cumulative lengths raise ValueError / TypeError naming what was expected."""
import numpy as np
import pytest

import attention_reference as ref
import flashtrain
from flashtrain.numpy import attention, attention_backward, attention_varlen, attention_varlen_backward

LEN_Q = [5, 0, 1, 40, 0, 17]
LEN_K_ALIGNED = [5, 0, 1, 40, 3, 30]  # causal / right windows: len_k >= len_q per sequence
LEN_K_FREE = [9, 4, 0, 23, 0, 17]     # keys without queries, queries without keys

# name -> (Hq, Hkv, D, options)
VARIANTS = {
    "plain": (2, 2, 16, {}),
    "causal": (4, 4, 16, {"causal": True}),
    "window_left": (2, 2, 16, {"window": (6, 0)}),
    "window_both": (3, 3, 16, {"window": (4, 3)}),
    "sink_tokens": (2, 2, 16, {"window": (5, 0), "sink_tokens": 2}),
    "sink_logits_causal_gqa": (6, 2, 24, {"causal": True, "sinks": True}),
    "sink_logits_free": (2, 1, 16, {"sinks": True}),
    "scale": (2, 2, 8, {"scale": 0.3, "causal": True}),
}


def cumulative(lengths):
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)  # (B + 1)


def make_problem(name, dtype, seed=0):
    heads, heads_kv, dim, options = VARIANTS[name]
    options = dict(options)
    right_bounded = options.get("causal") or (options.get("window") or (-1, -1))[1] >= 0
    len_k = LEN_K_ALIGNED if right_bounded else LEN_K_FREE
    cu_q, cu_k = cumulative(LEN_Q), cumulative(len_k)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((cu_q[-1], heads, dim)).astype(dtype)     # (total_q, Hq, D)
    k = rng.standard_normal((cu_k[-1], heads_kv, dim)).astype(dtype)  # (total_k, Hkv, D)
    v = rng.standard_normal((cu_k[-1], heads_kv, dim)).astype(dtype)
    if options.pop("sinks", False):
        options["sinks"] = rng.standard_normal(heads).astype(np.float32)  # (Hq)
    return q, k, v, cu_q, cu_k, options


def lengths_args(cu_q, cu_k):
    return cu_q, cu_k, int(np.diff(cu_q).max()), int(np.diff(cu_k).max())


def dense(x):
    """(N, H, D) rows of one sequence -> (1, H, N, D)."""
    return np.ascontiguousarray(x.transpose(1, 0, 2)[None])


def packed_reference(q, k, v, d_o, cu_q, cu_k, options):
    """o, lse, dq, dk, dv, dsinks of the packed problem in float64, one reference call per sequence."""
    opts = {key: options[key] for key in ("causal", "window", "sink_tokens", "sinks", "scale") if key in options}
    o = np.zeros(q.shape)
    lse = np.full((q.shape[1], q.shape[0]), -np.inf)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    dsinks = None if options.get("sinks") is None else np.zeros(q.shape[1])
    for b in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if cu_q[b] == cu_q[b + 1] or cu_k[b] == cu_k[b + 1]:
            if dsinks is not None:  # queries without keys: L is the sink logit (a blind row sees only the sink)
                lse[:, qs] = np.asarray(options["sinks"], dtype=np.float64)[:, None]
            continue
        o_b, lse_b, p = ref.forward(dense(q[qs]), dense(k[ks]), dense(v[ks]), **opts)
        grads = ref.backward(dense(d_o[qs]), dense(q[qs]), dense(k[ks]), dense(v[ks]), o_b, lse_b, p,
                             opts.get("sinks"), opts.get("scale"))
        o[qs], lse[:, qs] = o_b[0].transpose(1, 0, 2), lse_b[0]
        dq[qs], dk[ks], dv[ks] = (g[0].transpose(1, 0, 2) for g in grads[:3])
        if dsinks is not None:
            dsinks += grads[3]
    return o, lse, dq, dk, dv, dsinks


@pytest.mark.parametrize("impl", ["flash", "naive"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_varlen_matches_reference_per_sequence(name, impl):
    q, k, v, cu_q, cu_k, options = make_problem(name, np.float32)
    d_o = np.random.default_rng(7).standard_normal(q.shape).astype(np.float32)
    o, lse = attention_varlen(q, k, v, *lengths_args(cu_q, cu_k), impl=impl, **options)
    assert o.shape == q.shape and o.dtype == np.float32
    assert lse.shape == (q.shape[1], q.shape[0]) and lse.dtype == np.float32
    grads = attention_varlen_backward(d_o, q, k, v, o, lse, *lengths_args(cu_q, cu_k), impl=impl, **options)
    want = packed_reference(q, k, v, d_o, cu_q, cu_k, options)
    tol = 2e-5 if impl == "flash" else 2e-6
    for got, expected, what in zip((o, lse) + grads, want, ("o", "lse", "dq", "dk", "dv", "dsinks")):
        if expected is None:
            assert got is None, what
            continue
        scale = max(1.0, np.abs(expected[np.isfinite(expected)]).max())
        np.testing.assert_allclose(got, expected, atol=tol * scale, rtol=tol, err_msg=what)


@pytest.mark.parametrize("impl", ["flash", "naive"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_each_sequence_is_the_dense_call(dtype, impl):
    q, k, v, cu_q, cu_k, options = make_problem("sink_logits_causal_gqa", dtype, seed=3)
    d_o = np.random.default_rng(8).standard_normal(q.shape).astype(dtype)
    o, lse = attention_varlen(q, k, v, *lengths_args(cu_q, cu_k), impl=impl, **options)
    dq, dk, dv, _ = attention_varlen_backward(d_o, q, k, v, o, lse, *lengths_args(cu_q, cu_k), impl=impl, **options)
    for b in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if cu_q[b] == cu_q[b + 1]:
            continue
        o_b, lse_b = attention(dense(q[qs]), dense(k[ks]), dense(v[ks]), impl=impl, **options)
        np.testing.assert_array_equal(o[qs], o_b[0].transpose(1, 0, 2))
        np.testing.assert_array_equal(lse[:, qs], lse_b[0])
        dq_b, dk_b, dv_b, _ = attention_backward(dense(d_o[qs]), dense(q[qs]), dense(k[ks]), dense(v[ks]), o_b, lse_b,
                                                 impl=impl, **options)
        np.testing.assert_array_equal(dq[qs], dq_b[0].transpose(1, 0, 2))
        np.testing.assert_array_equal(dk[ks], dk_b[0].transpose(1, 0, 2))
        np.testing.assert_array_equal(dv[ks], dv_b[0].transpose(1, 0, 2))


def test_sequences_without_keys_give_zero_output():
    q, k, v, cu_q, cu_k, options = make_problem("plain", np.float32)
    o, lse = attention_varlen(q, k, v, *lengths_args(cu_q, cu_k))
    blind = slice(cu_q[2], cu_q[3])  # sequence 2: one query, no keys
    assert np.all(o[blind] == 0) and np.all(np.isneginf(lse[:, blind]))
    q, k, v, cu_q, cu_k, options = make_problem("sink_logits_free", np.float32)
    o, lse = attention_varlen(q, k, v, *lengths_args(cu_q, cu_k), **options)
    assert np.all(o[blind] == 0)
    np.testing.assert_array_equal(lse[:, blind], np.repeat(options["sinks"][:, None], blind.stop - blind.start, 1))


@pytest.mark.parametrize("cu_k, message", [
    ([0, 5, 3, 10, 43, 53, 83], "cu_seqlens_k must be non-decreasing"),
    ([1, 5, 5, 6, 46, 49, 79], "cu_seqlens_k must start at 0"),
    ([0, 5, 5, 6, 46, 49, 78], "last entry of cu_seqlens_k must be the total token count: expected 79"),
    ([0, 5, 5, 6, 46, 49], "the same number of sequences"),
    ([0, 4, 4, 5, 45, 48, 79], "causal attention aligns"),
])
def test_bad_lengths_raise_value_error(cu_k, message):
    q, k, v, cu_q, _, options = make_problem("causal", np.float32)
    with pytest.raises(ValueError, match=message):
        attention_varlen(q, k, v, cu_q, np.array(cu_k), 40, 40, **options)


def test_sequence_longer_than_max_seqlen_raises():
    q, k, v, cu_q, cu_k, options = make_problem("causal", np.float32)
    with pytest.raises(ValueError, match="sequence 3 is longer than max_seqlen_q: expected at most 39 tokens, given 40"):
        attention_varlen(q, k, v, cu_q, cu_k, 39, 40, **options)


def test_lengths_must_be_int32_arrays():
    q, k, v, cu_q, cu_k, options = make_problem("plain", np.float32)
    o, lse = np.empty_like(q), np.empty((q.shape[1], q.shape[0]), dtype=np.float32)
    with pytest.raises(TypeError, match="cu_seqlens_q has dtype int64: expected int32"):
        flashtrain.attention_varlen_forward(q, k, v, o, lse, cu_q.astype(np.int64), cu_k, 40, 40)
    with pytest.raises(ValueError, match="cu_seqlens_k must be 1-D"):
        flashtrain.attention_varlen_forward(q, k, v, o, lse, cu_q, cu_k[None], 40, 40)
    with pytest.raises(ValueError, match=r"q must be \(total_q, Hq, D\)"):
        attention_varlen(q[None], k, v, cu_q, cu_k, 40, 40)
