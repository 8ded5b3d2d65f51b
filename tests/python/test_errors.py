"""test_errors.py — errors reach Python as the library raises them (numpy only, CI): ValueError for invalid
arguments, TypeError for dtypes without a flashtrain name, NotImplementedError for unsupported requests,
each with the C++ message and its "(file:line)"; Python-side argument errors as ValueError."""
import numpy as np
import pytest

import flashtrain
from flashtrain.numpy import attention, attention_backward


def arrays(batch=1, heads=2, heads_kv=2, len_q=8, len_k=8, dim=16, dtype=np.float32):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((batch, heads, len_q, dim)).astype(dtype)     # (B, Hq, Nq, D)
    k = rng.standard_normal((batch, heads_kv, len_k, dim)).astype(dtype)  # (B, Hkv, Nk, D)
    v = rng.standard_normal((batch, heads_kv, len_k, dim)).astype(dtype)  # (B, Hkv, Nk, D)
    return q, k, v


def test_heads_not_a_multiple_is_a_value_error():
    q, k, v = arrays(heads=3, heads_kv=2)
    with pytest.raises(ValueError, match=r"^attention: query heads must be a multiple of key/value heads: "
                                         r"given Hq = 3, Hkv = 2 \(attention_checks\.cpp:\d+\)$"):
        attention(q, k, v)


def test_strided_last_dim_is_a_value_error():
    q, k, v = arrays(dim=32)
    with pytest.raises(ValueError, match=r"q must have a contiguous last dim: expected stride 1, given 2"):
        attention(q[..., ::2], k[..., ::2], v[..., ::2])


def test_causal_with_a_right_window_is_a_value_error():
    q, k, v = arrays()
    with pytest.raises(ValueError, match=r"causal means window_right = 0, but window_right = 2 was given too"):
        attention(q, k, v, causal=True, window=(4, 2))


def test_wrong_sink_count_is_a_value_error():
    q, k, v = arrays(heads=4, heads_kv=2)
    with pytest.raises(ValueError, match=r"sinks must have shape \[4\] \(one value per query head\): given \[3\]"):
        attention(q, k, v, sinks=np.zeros(3, np.float32))


def test_missing_dsinks_is_a_value_error():
    q, k, v = arrays()
    sinks = np.zeros(2, np.float32)
    o, lse = attention(q, k, v, sinks=sinks)
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    with pytest.raises(ValueError, match=r"dsinks is required when sinks are given"):
        flashtrain.attention_backward(q, k, v, o, lse, o, dq, dk, dv, sinks=sinks)


def test_unknown_implementation_is_a_value_error():
    q, k, v = arrays()
    with pytest.raises(ValueError, match=r"unknown attention implementation 'fast': expected naive or flash"):
        attention(q, k, v, impl="fast")


def test_unknown_kernel_family_is_a_value_error():
    q, k, v = arrays()
    o, lse = np.empty_like(q), np.empty(q.shape[:-1], dtype=np.float32)  # (B, Hq, Nq, D), (B, Hq, Nq)
    with pytest.raises(ValueError, match=r"^unknown flash kernels 'hopper': expected auto, sm80 or sm90"):
        flashtrain.attention_forward(q, k, v, o, lse, kernels="hopper")
    flashtrain.attention_forward(q, k, v, o, lse, kernels="sm90")  # a valid family: ignored on the host
    np.testing.assert_allclose(o, attention(q, k, v)[0], rtol=0, atol=0)


def test_python_side_argument_errors_are_value_errors():
    q, k, v = arrays()
    with pytest.raises(ValueError, match=r"window must be None or a pair"):
        attention(q, k, v, window=5)
    with pytest.raises(ValueError, match=r"inputs must all be \(B, N, D\) or all \(B, H, N, D\): given dims q 3"):
        attention(q[:, 0], k, v)


def test_float64_is_a_type_error():
    q, k, v = arrays(dtype=np.float64)
    with pytest.raises(TypeError, match=r"^flashtrain: q has dtype float64: expected float32, float16 or bfloat16$"):
        attention(q, k, v)


def test_mixed_dtypes_are_a_value_error():
    q, k, v = arrays()
    with pytest.raises(ValueError, match=r"k must have the dtype of q: expected fp32, given fp16"):
        attention(q, k.astype(np.float16), v)


def test_head_dim_over_256_is_not_implemented():
    q, k, v = arrays(dim=272)
    with pytest.raises(NotImplementedError, match=r"^attention: unsupported head dim 272: expected at most 256 "
                                                  r"\(attention\.cpp:\d+\)$"):
        attention(q, k, v)


def test_mismatched_d_o_is_a_value_error():
    q, k, v = arrays()
    o, lse = attention(q, k, v)
    with pytest.raises(ValueError, match=r"d_o has the wrong shape"):
        attention_backward(o[:, :, :4], q, k, v, o, lse)


def test_model_shape_errors_are_value_errors_naming_the_field():
    from flashtrain.model import TransformerLM
    with pytest.raises(ValueError, match="num_heads must divide d_model"):
        TransformerLM(d_model=64, d_ff=128, num_layers=1, num_heads=3, vocab_size=50, context_length=8)
    with pytest.raises(ValueError, match="at most 256"):
        TransformerLM("tiny", d_model=1024, num_heads=2)
    model = TransformerLM("tiny", num_layers=1, rope_theta=5e5)
    assert model.config["name"] == "tiny-custom"
    assert model.config["rope_theta"] == 5e5
