"""attention_reference.py — the attention contract of design.md written out in float64 numpy for the
tests: which keys a query sees, the forward (O, L and P) and the backward by its formulas."""
import numpy as np


def visible(len_q, len_k, causal=False, window=None, sink_tokens=0):
    """(Nq, Nk) bool: key j is visible to query i (bottom-right aligned: off = Nk - Nq)."""
    left, right = (-1, -1) if window is None else window
    if causal:
        right = 0
    off = len_k - len_q
    i = np.arange(len_q)[:, None]  # (Nq, 1)
    j = np.arange(len_k)[None, :]  # (1, Nk)
    within_right = np.full((len_q, len_k), True) if right < 0 else j <= i + off + right
    within_left = np.full((len_q, len_k), True) if left < 0 else j >= i + off - left
    return within_right & (within_left | (j < sink_tokens))


def _expand_kv(x, heads_q):
    """(B, Hkv, Nk, D) -> (B, Hq, Nk, D): query head h reads kv head h // (Hq / Hkv)."""
    return np.repeat(x, heads_q // x.shape[1], axis=1)


def forward(q, k, v, causal=False, window=None, sink_tokens=0, sinks=None, scale=None):
    """o (B, Hq, Nq, D), lse (B, Hq, Nq) and P (B, Hq, Nq, Nk), in float64."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    batch, heads, len_q, dim = q.shape
    len_k = k.shape[2]
    scale = 1.0 / np.sqrt(dim) if scale is None else scale
    k_full, v_full = _expand_kv(k, heads), _expand_kv(v, heads)            # (B, Hq, Nk, D)
    mask = visible(len_q, len_k, causal, window, sink_tokens)              # (Nq, Nk)
    s = np.where(mask, scale * q @ k_full.swapaxes(-1, -2), -np.inf)       # (B, Hq, Nq, Nk)
    columns = s
    if sinks is not None:
        sink_column = np.broadcast_to(np.asarray(sinks, np.float64)[None, :, None, None], (batch, heads, len_q, 1))
        columns = np.concatenate([s, sink_column], axis=-1)                # (B, Hq, Nq, Nk + 1)
    m = columns.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        lse = np.log(np.exp(columns - m).sum(axis=-1)) + m[..., 0]         # (B, Hq, Nq), -inf on empty rows
        p = np.where(mask, np.exp(s - lse[..., None]), 0.0)                # (B, Hq, Nq, Nk)
    return p @ v_full, lse, p


def backward(d_o, q, k, v, o, lse, p, sinks=None, scale=None):
    """dq, dk, dv, dsinks (None without sinks) by the contract's formulas, in float64."""
    d_o, q, k, v = (np.asarray(x, dtype=np.float64) for x in (d_o, q, k, v))
    batch, heads, len_q, dim = q.shape
    heads_kv, len_k = k.shape[1], k.shape[2]
    scale = 1.0 / np.sqrt(dim) if scale is None else scale
    k_full, v_full = _expand_kv(k, heads), _expand_kv(v, heads)            # (B, Hq, Nk, D)
    delta = (d_o * o).sum(axis=-1)                                         # (B, Hq, Nq)
    ds = p * (d_o @ v_full.swapaxes(-1, -2) - delta[..., None])            # (B, Hq, Nq, Nk)
    dq = scale * ds @ k_full                                               # (B, Hq, Nq, D)
    group = heads // heads_kv
    dk = (scale * ds.swapaxes(-1, -2) @ q).reshape(batch, heads_kv, group, len_k, dim).sum(axis=2)
    dv = (p.swapaxes(-1, -2) @ d_o).reshape(batch, heads_kv, group, len_k, dim).sum(axis=2)
    dsinks = None
    if sinks is not None:
        sinks = np.asarray(sinks, np.float64)
        dsinks = -(np.exp(sinks[None, :, None] - lse) * delta).sum(axis=(0, 2))  # (Hq)
    return dq, dk, dv, dsinks
