"""test_bad_input.py — the Python API under issue 36's bad inputs (numpy only, CI): NaN in q propagates to
that row's O and L; an array given as two outputs, or as an output and an input, is a ValueError; a path
holding NUL is a ValueError; a safetensors header with invalid UTF-8, a BOM or 60,000 levels of nesting is
a RuntimeError with a printable message (no crash); a FIFO is refused at once (no hang)."""
import os
import struct
import time

import numpy as np
import pytest

import flashtrain
from flashtrain.model import TransformerLM
from flashtrain.numpy import attention


def arrays(heads=2, len_q=8, len_k=8, dim=16):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, heads, len_q, dim)).astype(np.float32)  # (B, Hq, Nq, D)
    k = rng.standard_normal((1, heads, len_k, dim)).astype(np.float32)  # (B, Hkv, Nk, D)
    v = rng.standard_normal((1, heads, len_k, dim)).astype(np.float32)  # (B, Hkv, Nk, D)
    return q, k, v


@pytest.mark.parametrize("impl", ["flash", "naive"])
@pytest.mark.parametrize("causal", [False, True])
def test_nan_in_a_query_row_gives_nan_o_and_lse_for_that_row(impl, causal):
    q, k, v = arrays()
    q[0, 1, 5, 3] = np.nan
    o, lse = attention(q, k, v, impl=impl, causal=causal)
    assert np.isnan(o[0, 1, 5]).all()
    assert np.isnan(lse[0, 1, 5])
    finite = np.ones(lse.shape, bool)
    finite[0, 1, 5] = False
    assert np.isfinite(lse[finite]).all() and np.isfinite(o[finite]).all()


def test_nan_in_a_key_reaches_every_row_that_sees_it():
    q, k, v = arrays()
    k[0, 0, 6, 0] = np.nan
    o, lse = attention(q, k, v, causal=True)
    assert np.isfinite(lse[0, 0, :6]).all()  # rows 0..5 do not see key 6
    assert np.isnan(lse[0, 0, 6:]).all() and np.isnan(o[0, 0, 6:]).all()
    assert np.isfinite(lse[0, 1]).all()


def test_an_array_given_as_two_outputs_is_a_value_error():
    q, k, v = arrays()
    o, lse = attention(q, k, v)
    d_o = np.ones_like(q)
    dq, dv = np.empty_like(q), np.empty_like(v)
    with pytest.raises(ValueError, match=r"attention: outputs dq and dk share memory"):
        flashtrain.attention_backward(q, k, v, o, lse, d_o, dq, dq, dv)
    with pytest.raises(ValueError, match=r"attention: output dq shares memory with input q"):
        flashtrain.attention_backward(q, k, v, o, lse, d_o, q, np.empty_like(k), dv)
    with pytest.raises(ValueError, match=r"attention: output o shares memory with input v"):
        flashtrain.attention_forward(q, k, v, v, lse)
    with pytest.raises(ValueError, match=r"attention: outputs o and lse share memory"):
        flashtrain.attention_forward(q, k, v, o, o.reshape(-1)[:lse.size].reshape(lse.shape))


def tiny_model():
    return TransformerLM(d_model=16, d_ff=32, num_layers=1, num_heads=2, vocab_size=11, context_length=8)


def safetensors_file(path, header: bytes, data: bytes = b""):
    header += b" " * ((8 - len(header) % 8) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def test_a_path_holding_nul_is_a_value_error(tmp_path):
    good = tmp_path / "weights.safetensors"
    safetensors_file(good, b"{}")
    with pytest.raises(ValueError, match=r"the path holds a NUL character"):
        tiny_model().load_safetensors(str(good) + "\0ignored")


@pytest.mark.parametrize("header, expected", [
    (b'{"w\xff\xfe":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', r"is not valid JSON"),
    (b'\xef\xbb\xbf{}', r"byte-order mark"),
    (b'{"w":' + b"[" * 60000 + b"]" * 60000 + b"}", r"tensor 'w' is an array, expected an object"),
    (b'{"w":{"x":' + b"[" * 60000 + b"]" * 60000 + b"}}", r"nests deeper than 64 levels"),
])
def test_corrupt_headers_are_runtime_errors(tmp_path, header, expected):
    path = tmp_path / "bad.safetensors"
    safetensors_file(path, header, b"\0" * 4)
    with pytest.raises(RuntimeError, match=expected) as raised:
        tiny_model().load_safetensors(path)
    assert str(path) in str(raised.value)
    assert str(raised.value).isprintable()


def test_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"a FIFO \(named pipe\), not a regular file"):
        tiny_model().load_safetensors(fifo)
    assert time.monotonic() - start < 2
