"""flashtrain.numpy — attention on host numpy arrays, with no framework beside numpy: the forward returns
(o, lse), the backward the gradients. Arrays are (B, H, N, D) or (B, N, D) (one head), any strides with
a contiguous last dim (np.swapaxes of a (B, N, H, D) array works without a copy), float32 or float16.
Outputs are new arrays in the memory layout of the input they mirror (np.empty_like).
attention_varlen / attention_varlen_backward take packed sequences: (total, H, D) arrays and cumulative lengths."""
import numpy as np

from . import _C
from ._variant import missing_head_axis, window_bounds


def _sinks_f32(sinks):
    return None if sinks is None else np.ascontiguousarray(sinks, dtype=np.float32)  # (Hq)


def attention(q, k, v, *, causal=False, window=None, sink_tokens=0, sinks=None, scale=None, impl="flash"):
    """o (like q), lse (q's shape without D, float32) = attention(q (B, Hq, Nq, D), k, v (B, Hkv, Nk, D)).

    causal: keys j <= i + Nk - Nq. window: (left, right), -1/None = unbounded. sink_tokens: keys below it
    bypass the left window bound. sinks: (Hq) sink logits (gpt-oss). scale: default 1/sqrt(D).
    impl: 'flash' (tiled FlashAttention-2) or 'naive' (the float64 oracle)."""
    left, right = window_bounds(window)
    one_head = missing_head_axis(q=q, k=k, v=v)
    q, k, v = (np.asarray(x) for x in (q, k, v))
    if one_head:
        q, k, v = q[:, None], k[:, None], v[:, None]
    o = np.empty_like(q)                                 # (B, Hq, Nq, D)
    lse = np.empty(q.shape[:-1], dtype=np.float32)       # (B, Hq, Nq)
    _C.attention_forward(q, k, v, o, lse, sinks=_sinks_f32(sinks), causal=causal, window_left=left,
                         window_right=right, sink_tokens=sink_tokens, scale=scale, impl=impl)
    if one_head:
        return o[:, 0], lse[:, 0]
    return o, lse


def attention_backward(d_o, q, k, v, o, lse, *, causal=False, window=None, sink_tokens=0, sinks=None, scale=None,
                       impl="flash", deterministic=True):
    """(dq, dk, dv, dsinks) for the loss gradient d_o (like o), given the inputs and (o, lse) from attention()
    with the same options. dsinks is (Hq) float32 when sinks are given, else None. deterministic=False lets
    the CUDA flash backward accumulate dq in fp32 from the dK/dV kernel (faster, dq not bitwise
    reproducible; host arrays are unaffected)."""
    left, right = window_bounds(window)
    one_head = missing_head_axis(d_o=d_o, q=q, k=k, v=v, o=o)
    d_o, q, k, v, o, lse = (np.asarray(x) for x in (d_o, q, k, v, o, lse))
    if one_head:
        d_o, q, k, v, o, lse = d_o[:, None], q[:, None], k[:, None], v[:, None], o[:, None], lse[:, None]
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)  # like q, k, v
    sinks = _sinks_f32(sinks)
    dsinks = None if sinks is None else np.empty_like(sinks)           # (Hq)
    _C.attention_backward(q, k, v, o, lse, d_o, dq, dk, dv, sinks=sinks, dsinks=dsinks, causal=causal,
                          window_left=left, window_right=right, sink_tokens=sink_tokens, scale=scale, impl=impl,
                          deterministic=deterministic)
    if one_head:
        dq, dk, dv = dq[:, 0], dk[:, 0], dv[:, 0]
    return dq, dk, dv, dsinks


def _lengths(cu_seqlens):
    return np.ascontiguousarray(cu_seqlens, dtype=np.int32)  # (B + 1)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=False, window=None,
                     sink_tokens=0, sinks=None, scale=None, impl="flash"):
    """o (total_q, Hq, D), lse (Hq, total_q) float32 = attention over packed sequences: q (total_q, Hq, D), k, v
    (total_k, Hkv, D); sequence b is rows cu_seqlens[b]:cu_seqlens[b + 1] of each (B + 1 cumulative lengths,
    first 0, last the total; taken as int32). max_seqlen_q/k bound every sequence's length. The options of
    attention() apply within each sequence (causal and a right window need len_k >= len_q per sequence)."""
    left, right = window_bounds(window)
    q, k, v = (np.asarray(x) for x in (q, k, v))
    o = np.empty_like(q)                                          # (total_q, Hq, D)
    lse = np.empty(q.shape[1::-1], dtype=np.float32)             # (Hq, total_q) for a 3-D q
    _C.attention_varlen_forward(q, k, v, o, lse, _lengths(cu_seqlens_q), _lengths(cu_seqlens_k), int(max_seqlen_q),
                                int(max_seqlen_k), sinks=_sinks_f32(sinks), causal=causal, window_left=left,
                                window_right=right, sink_tokens=sink_tokens, scale=scale, impl=impl)
    return o, lse


def attention_varlen_backward(d_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *,
                              causal=False, window=None, sink_tokens=0, sinks=None, scale=None, impl="flash"):
    """(dq, dk, dv, dsinks) for the loss gradient d_o (total_q, Hq, D), given the inputs and (o, lse) from
    attention_varlen() with the same options; dsinks is (Hq) float32 when sinks are given, else None."""
    left, right = window_bounds(window)
    d_o, q, k, v, o, lse = (np.asarray(x) for x in (d_o, q, k, v, o, lse))
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)  # like q, k, v
    sinks = _sinks_f32(sinks)
    dsinks = None if sinks is None else np.empty_like(sinks)           # (Hq)
    _C.attention_varlen_backward(q, k, v, o, lse, d_o, dq, dk, dv, _lengths(cu_seqlens_q), _lengths(cu_seqlens_k),
                                 int(max_seqlen_q), int(max_seqlen_k), sinks=sinks, dsinks=dsinks, causal=causal,
                                 window_left=left, window_right=right, sink_tokens=sink_tokens, scale=scale,
                                 impl=impl)
    return dq, dk, dv, dsinks
