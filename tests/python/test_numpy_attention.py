"""test_numpy_attention.py — flashtrain.numpy and the DLPack entry points on the host, numpy only (CI):
values and gradients of every attention variant against the float64 reference in attention_reference.py,
for both implementations (flash: tiled FlashAttention-2, naive: the oracle) in float32 and float16."""
import numpy as np
import pytest

import attention_reference as ref
import flashtrain
from flashtrain.numpy import attention, attention_backward

# name -> (B, Hq, Hkv, Nq, Nk, D, options)
VARIANTS = {
    "plain": (2, 4, 4, 37, 37, 16, {}),
    "causal": (2, 4, 4, 37, 37, 16, {"causal": True}),
    "causal_decode": (1, 4, 4, 5, 40, 32, {"causal": True}),
    "causal_empty_rows": (1, 2, 2, 30, 20, 16, {"causal": True}),
    "window_left": (2, 2, 2, 50, 50, 16, {"window": (8, 0)}),
    "window_both": (1, 3, 3, 45, 60, 16, {"window": (4, 3)}),
    "sink_tokens": (2, 2, 2, 50, 50, 16, {"window": (6, 0), "sink_tokens": 3}),
    "sink_logits": (2, 4, 4, 33, 33, 16, {"sinks": True}),
    "sink_logits_causal_gqa": (2, 6, 2, 40, 40, 16, {"causal": True, "sinks": True}),
    "sinks_and_empty_rows": (1, 2, 1, 30, 20, 16, {"causal": True, "sinks": True}),
    "gqa": (2, 8, 2, 29, 41, 24, {}),
    "mqa_window": (1, 4, 1, 64, 64, 16, {"window": (10, 10), "sink_tokens": 2}),
    "scale": (1, 2, 2, 20, 20, 8, {"scale": 0.3, "causal": True}),
}

# (o, lse, gradients) absolute/relative tolerances per implementation and dtype
TOLERANCE = {
    ("flash", np.float32): (2e-5, 2e-5, 5e-5),
    ("naive", np.float32): (2e-6, 2e-6, 5e-6),
    ("flash", np.float16): (3e-3, 2e-4, None),
    ("naive", np.float16): (2e-3, 2e-5, None),
}


def make_problem(name, dtype, layout="bhnd", seed=0):
    batch, heads, heads_kv, len_q, len_k, dim, options = VARIANTS[name]
    rng = np.random.default_rng(seed)

    def tensor(h, n):
        # (B, H, N, D) values; "bnhd" stores them as (B, N, H, D) and views them back without a copy.
        x = rng.standard_normal((batch, n, h, dim) if layout == "bnhd" else (batch, h, n, dim)).astype(dtype)
        return x.swapaxes(1, 2) if layout == "bnhd" else x

    q, k, v = tensor(heads, len_q), tensor(heads_kv, len_k), tensor(heads_kv, len_k)
    options = dict(options)
    if options.pop("sinks", False):
        options["sinks"] = rng.standard_normal(heads).astype(np.float32)  # (Hq)
    return q, k, v, options


def reference_options(options):
    return {key: options.get(key) for key in ("causal", "window", "sink_tokens", "sinks", "scale")
            if options.get(key) is not None}


@pytest.mark.parametrize("impl", ["flash", "naive"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_forward_matches_reference(name, dtype, impl):
    q, k, v, options = make_problem(name, dtype)
    o, lse = attention(q, k, v, impl=impl, **options)
    o_ref, lse_ref, _ = ref.forward(q, k, v, **reference_options(options))
    atol_o, atol_lse, _ = TOLERANCE[(impl, dtype)]
    assert o.dtype == dtype and o.shape == q.shape
    assert lse.dtype == np.float32 and lse.shape == q.shape[:-1]
    np.testing.assert_allclose(o.astype(np.float64), o_ref, atol=atol_o, rtol=atol_o)
    np.testing.assert_allclose(lse, lse_ref, atol=atol_lse, rtol=atol_lse)


@pytest.mark.parametrize("impl", ["flash", "naive"])
@pytest.mark.parametrize("name", list(VARIANTS))
def test_backward_matches_reference(name, impl):
    q, k, v, options = make_problem(name, np.float32, seed=1)
    o, lse = attention(q, k, v, impl=impl, **options)
    d_o = np.random.default_rng(2).standard_normal(q.shape).astype(np.float32)
    dq, dk, dv, dsinks = attention_backward(d_o, q, k, v, o, lse, impl=impl, **options)
    o_ref, lse_ref, p = ref.forward(q, k, v, **reference_options(options))
    expected = ref.backward(d_o, q, k, v, o_ref, lse_ref, p, options.get("sinks"), options.get("scale"))
    tol = TOLERANCE[(impl, np.float32)][2]
    for got, want, what in zip((dq, dk, dv, dsinks), expected, ("dq", "dk", "dv", "dsinks")):
        if want is None:
            assert got is None, what
            continue
        assert got.dtype == np.float32 and got.shape == want.shape, what
        scale = max(1.0, np.abs(want).max())
        np.testing.assert_allclose(got, want, atol=tol * scale, rtol=tol, err_msg=what)


@pytest.mark.parametrize("impl", ["flash", "naive"])
def test_host_backward_ignores_deterministic(impl):
    # deterministic=False only changes the CUDA flash backward; the host implementations are deterministic.
    q, k, v, options = make_problem("sink_logits_causal_gqa", np.float32, seed=4)
    o, lse = attention(q, k, v, impl=impl, **options)
    d_o = np.random.default_rng(5).standard_normal(q.shape).astype(np.float32)
    fixed = attention_backward(d_o, q, k, v, o, lse, impl=impl, **options)
    free = attention_backward(d_o, q, k, v, o, lse, impl=impl, deterministic=False, **options)
    for a, b, what in zip(fixed, free, ("dq", "dk", "dv", "dsinks")):
        np.testing.assert_array_equal(a, b, err_msg=what)


def test_empty_rows_give_zero_output_and_minus_infinite_lse():
    q, k, v, options = make_problem("causal_empty_rows", np.float32)
    o, lse = attention(q, k, v, **options)
    blind = q.shape[2] - k.shape[2]  # rows i < Nq - Nk see no key
    assert np.all(o[:, :, :blind] == 0) and np.all(np.isneginf(lse[:, :, :blind]))
    assert np.all(np.isfinite(lse[:, :, blind:]))
    d_o = np.ones_like(o)
    dq, dk, dv, _ = attention_backward(d_o, q, k, v, o, lse, **options)
    assert np.all(dq[:, :, :blind] == 0)
    assert all(np.all(np.isfinite(g)) for g in (dq, dk, dv))


@pytest.mark.parametrize("name", ["causal", "gqa", "sink_logits_causal_gqa"])
def test_bnhd_layout_matches_bhnd(name):
    q, k, v, options = make_problem(name, np.float32, layout="bnhd", seed=3)
    assert not q.flags.c_contiguous and q.strides[-1] == q.itemsize
    o, lse = attention(q, k, v, **options)
    o_dense, lse_dense = attention(*(np.ascontiguousarray(x) for x in (q, k, v)), **options)
    assert o.strides == q.strides  # the output keeps the input's memory layout
    np.testing.assert_array_equal(o, o_dense)
    np.testing.assert_array_equal(lse, lse_dense)
    d_o = np.random.default_rng(4).standard_normal(q.shape).astype(np.float32)
    grads = attention_backward(d_o, q, k, v, o, lse, **options)
    grads_dense = attention_backward(d_o, *(np.ascontiguousarray(x) for x in (q, k, v)), o_dense, lse_dense, **options)
    for got, want in zip(grads, grads_dense):
        if want is not None:
            np.testing.assert_array_equal(got, want)


def test_three_dim_inputs_are_one_head():
    q, k, v, options = make_problem("causal", np.float32)
    q3, k3, v3 = q[:, 0], k[:, 0], v[:, 0]  # (B, N, D)
    o3, lse3 = attention(q3, k3, v3, **options)
    o4, lse4 = attention(q3[:, None], k3[:, None], v3[:, None], **options)
    assert o3.shape == q3.shape and lse3.shape == q3.shape[:-1]
    np.testing.assert_array_equal(o3, o4[:, 0])
    np.testing.assert_array_equal(lse3, lse4[:, 0])
    d_o = np.ones_like(o3)
    dq3, dk3, dv3, _ = attention_backward(d_o, q3, k3, v3, o3, lse3, **options)
    assert dq3.shape == q3.shape and dk3.shape == k3.shape and dv3.shape == v3.shape


def test_dlpack_entry_point_writes_strided_outputs():
    # The raw entry point writes into the caller's arrays, here a (B, N, H, D) buffer seen as (B, H, N, D).
    q, k, v, options = make_problem("sink_logits_causal_gqa", np.float32)
    o_storage = np.full((q.shape[0], q.shape[2], q.shape[1], q.shape[3]), np.nan, np.float32)  # (B, Nq, Hq, D)
    lse = np.full(q.shape[:-1], np.nan, np.float32)                                           # (B, Hq, Nq)
    flashtrain.attention_forward(q, k, v, o_storage.swapaxes(1, 2), lse, sinks=options["sinks"], causal=True)
    o_ref, lse_ref, _ = ref.forward(q, k, v, causal=True, sinks=options["sinks"])
    np.testing.assert_allclose(o_storage.swapaxes(1, 2), o_ref, atol=2e-5, rtol=2e-5)
    np.testing.assert_allclose(lse, lse_ref, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("name", ["window_both", "sink_tokens", "sink_logits_causal_gqa"])
def test_reference_backward_matches_finite_differences(name):
    # The reference backward (the contract's formulas) against central differences of the reference forward,
    # for the loss sum(O * W) (and W's own seed), so the backward tests above compare against a checked oracle.
    q, k, v, options = make_problem(name, np.float64, seed=5)
    options = reference_options(options)
    weight = np.random.default_rng(6).standard_normal(q.shape)

    def loss(q_, k_, v_, sinks_):
        return (ref.forward(q_, k_, v_, **{**options, "sinks": sinks_})[0] * weight).sum()

    sinks = options.get("sinks")
    o, lse, p = ref.forward(q, k, v, **options)
    analytic = ref.backward(weight, q, k, v, o, lse, p, sinks, options.get("scale"))
    rng = np.random.default_rng(7)
    step = 1e-6
    for which, array in enumerate((q, k, v, sinks)):
        if array is None:
            continue
        for flat in rng.choice(array.size, size=6, replace=False):
            index = np.unravel_index(flat, array.shape)
            args = [np.array(x, dtype=np.float64, copy=True) if x is not None else None for x in (q, k, v, sinks)]
            args[which][index] += step
            up = loss(*args)
            args[which][index] -= 2 * step
            down = loss(*args)
            numeric = (up - down) / (2 * step)
            assert abs(analytic[which][index] - numeric) <= 1e-6 * max(1.0, abs(numeric)), (which, index)
