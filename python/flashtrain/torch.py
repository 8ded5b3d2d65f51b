"""flashtrain.torch — flashtrain's attention for PyTorch (>= 2.4; this module imports torch, the rest of
the package does not).

  flash_attention(q, k, v, causal=..., window=..., sink_tokens=..., sinks=..., scale=..., deterministic=...,
                  kernels=...)
      differentiable in q, k, v and sinks; runs under torch.compile(fullgraph=True) without a graph
      break, through the custom ops flashtrain::attention_forward and flashtrain::attention_backward
      (registered with register_fake and register_autograd).
  flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=..., ...)
      the same over packed sequences ((total, H, D) tensors, int32 cumulative lengths), through the custom
      ops flashtrain::attention_varlen_forward and flashtrain::attention_varlen_backward.
  FlashAttentionFunction.apply(q, k, v, is_causal, window, sink_tokens, sinks, scale)
      the same as a torch.autograd.Function that saves exactly Q, K, V, O and L (and the sink logits
      when given).
  GroupedQueryAttention(d_model, num_heads, num_kv_heads, causal=...)
      an nn.Module: q/k/v/o projections around flash_attention.

Tensors are (B, H, N, D) or (B, N, D) (one head); k and v may have fewer heads than q (GQA/MQA). Any
strides work; only a last dim that is not contiguous costs a copy, so (B, N, H, D) storage is passed as
x.transpose(1, 2). CUDA tensors run on the current stream of their device. Sink logits are (Hq), used in
fp32. L (the logsumexp, fp32, shaped like q without its last dim) is not differentiable.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor, nn

from . import _C
from ._variant import missing_head_axis, window_bounds


def _stream(t: Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


def _last_dim_contiguous(t: Tensor) -> Tensor:
    return t if t.stride(-1) == 1 or t.size(-1) == 1 else t.contiguous()


def _sinks_f32(sinks: Optional[Tensor]) -> Optional[Tensor]:
    return None if sinks is None else sinks.to(torch.float32).contiguous()  # (Hq)


def _forward_outputs(q: Tensor) -> Tuple[Tensor, Tensor]:
    # o (B, Hq, Nq, D) in q's memory layout, lse (B, Hq, Nq) fp32.
    return torch.empty_like(q), q.new_empty(q.shape[:-1], dtype=torch.float32)


def _backward_outputs(q: Tensor, k: Tensor, v: Tensor,
                      sinks: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    # dq, dk, dv like q, k, v; dsinks (Hq) fp32, or (0) without sinks.
    dsinks = q.new_empty((0,) if sinks is None else sinks.shape, dtype=torch.float32)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), dsinks


def _detached(t: Optional[Tensor]) -> Optional[Tensor]:
    # DLPack refuses tensors that require grad; the kernels only read and write memory.
    return None if t is None else t.detach()


# ---- the custom ops: 4-D tensors (B, H, N, D), last dim contiguous, sinks fp32 or None ------------------------

@torch.library.custom_op("flashtrain::attention_forward", mutates_args=())
def attention_forward_op(q: Tensor, k: Tensor, v: Tensor, sinks: Optional[Tensor], causal: bool, window_left: int,
                         window_right: int, sink_tokens: int, scale: Optional[float],
                         impl: str = "flash", deterministic: bool = True,
                         kernels: str = "auto") -> Tuple[Tensor, Tensor]:
    """o (B, Hq, Nq, D), lse (B, Hq, Nq) fp32 = attention(q (B, Hq, Nq, D), k, v (B, Hkv, Nk, D)).
    deterministic only travels to the backward (register_autograd); kernels to both."""
    o, lse = _forward_outputs(q)  # (B, Hq, Nq, D), (B, Hq, Nq)
    _C.attention_forward(_detached(q), _detached(k), _detached(v), o, lse, sinks=_detached(sinks), causal=causal,
                         window_left=window_left, window_right=window_right, sink_tokens=sink_tokens, scale=scale,
                         impl=impl, kernels=kernels, stream=_stream(q))
    return o, lse


@attention_forward_op.register_fake
def _(q, k, v, sinks, causal, window_left, window_right, sink_tokens, scale, impl="flash", deterministic=True,
      kernels="auto"):
    return _forward_outputs(q)


@torch.library.custom_op("flashtrain::attention_backward", mutates_args=())
def attention_backward_op(d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor,
                          sinks: Optional[Tensor], causal: bool, window_left: int, window_right: int,
                          sink_tokens: int, scale: Optional[float], impl: str = "flash",
                          deterministic: bool = True, kernels: str = "auto") -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """dq, dk, dv (like q, k, v) and dsinks ((Hq) fp32; empty (0) without sinks) for the gradient d_o of o.
    deterministic=False lets the CUDA flash backward accumulate dq in fp32 from the dK/dV kernel (faster;
    not bitwise reproducible)."""
    dq, dk, dv, dsinks = _backward_outputs(q, k, v, sinks)  # like q, k, v; (Hq) or (0)
    _C.attention_backward(_detached(q), _detached(k), _detached(v), _detached(o), _detached(lse), _detached(d_o),
                          dq, dk, dv, sinks=_detached(sinks), dsinks=None if sinks is None else dsinks,
                          causal=causal, window_left=window_left, window_right=window_right,
                          sink_tokens=sink_tokens, scale=scale, impl=impl, kernels=kernels,
                          deterministic=deterministic, stream=_stream(q))
    return dq, dk, dv, dsinks


@attention_backward_op.register_fake
def _(d_o, q, k, v, o, lse, sinks, causal, window_left, window_right, sink_tokens, scale, impl="flash",
      deterministic=True, kernels="auto"):
    return _backward_outputs(q, k, v, sinks)


def _setup_context(ctx, inputs, output):
    q, k, v, sinks, causal, window_left, window_right, sink_tokens, scale, impl, deterministic, kernels = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, sinks)
    ctx.variant = (causal, window_left, window_right, sink_tokens, scale, impl, deterministic, kernels)


def _backward(ctx, grad_o, grad_lse):
    # grad_lse is not used: L is an output for inspection and for the backward, not a differentiable one.
    q, k, v, o, lse, sinks = ctx.saved_tensors
    dq, dk, dv, dsinks = attention_backward_op(_last_dim_contiguous(grad_o), q, k, v, o, lse, sinks, *ctx.variant)
    return dq, dk, dv, None if sinks is None else dsinks, None, None, None, None, None, None, None, None


attention_forward_op.register_autograd(_backward, setup_context=_setup_context)


# ---- the varlen custom ops: q (total_q, Hq, D), k/v (total_k, Hkv, D), int32 cumulative lengths (B + 1) --------

def _varlen_forward_outputs(q: Tensor) -> Tuple[Tensor, Tensor]:
    # o (total_q, Hq, D) in q's memory layout, lse (Hq, total_q) fp32.
    return torch.empty_like(q), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.custom_op("flashtrain::attention_varlen_forward", mutates_args=())
def attention_varlen_forward_op(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                                max_seqlen_q: int, max_seqlen_k: int, sinks: Optional[Tensor], causal: bool,
                                window_left: int, window_right: int, sink_tokens: int, scale: Optional[float],
                                impl: str = "flash", deterministic: bool = True,
                                kernels: str = "auto") -> Tuple[Tensor, Tensor]:
    """o (total_q, Hq, D), lse (Hq, total_q) fp32 = attention over the packed sequences of q (total_q, Hq, D)
    and k, v (total_k, Hkv, D) that cu_seqlens_q / cu_seqlens_k (int32, B + 1) describe."""
    o, lse = _varlen_forward_outputs(q)
    _C.attention_varlen_forward(_detached(q), _detached(k), _detached(v), o, lse, cu_seqlens_q, cu_seqlens_k,
                                max_seqlen_q, max_seqlen_k, sinks=_detached(sinks), causal=causal,
                                window_left=window_left, window_right=window_right, sink_tokens=sink_tokens,
                                scale=scale, impl=impl, kernels=kernels, stream=_stream(q))
    return o, lse


@attention_varlen_forward_op.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sinks, causal, window_left, window_right,
      sink_tokens, scale, impl="flash", deterministic=True, kernels="auto"):
    return _varlen_forward_outputs(q)


@torch.library.custom_op("flashtrain::attention_varlen_backward", mutates_args=())
def attention_varlen_backward_op(d_o: Tensor, q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor,
                                 cu_seqlens_q: Tensor, cu_seqlens_k: Tensor, max_seqlen_q: int, max_seqlen_k: int,
                                 sinks: Optional[Tensor], causal: bool, window_left: int, window_right: int,
                                 sink_tokens: int, scale: Optional[float], impl: str = "flash",
                                 deterministic: bool = True,
                                 kernels: str = "auto") -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """dq, dk, dv (like q, k, v) and dsinks ((Hq) fp32; empty (0) without sinks) for the gradient d_o of o."""
    dq, dk, dv, dsinks = _backward_outputs(q, k, v, sinks)
    _C.attention_varlen_backward(_detached(q), _detached(k), _detached(v), _detached(o), _detached(lse),
                                 _detached(d_o), dq, dk, dv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                 sinks=_detached(sinks), dsinks=None if sinks is None else dsinks, causal=causal,
                                 window_left=window_left, window_right=window_right, sink_tokens=sink_tokens,
                                 scale=scale, impl=impl, kernels=kernels, deterministic=deterministic,
                                 stream=_stream(q))
    return dq, dk, dv, dsinks


@attention_varlen_backward_op.register_fake
def _(d_o, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, sinks, causal, window_left,
      window_right, sink_tokens, scale, impl="flash", deterministic=True, kernels="auto"):
    return _backward_outputs(q, k, v, sinks)


def _varlen_setup_context(ctx, inputs, output):
    q, k, v, cu_q, cu_k, max_q, max_k, sinks, *variant = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k, sinks)
    ctx.lengths = (max_q, max_k)
    ctx.variant = tuple(variant)


def _varlen_backward(ctx, grad_o, grad_lse):
    # grad_lse is not used: L is not a differentiable output (as in the dense op).
    q, k, v, o, lse, cu_q, cu_k, sinks = ctx.saved_tensors
    dq, dk, dv, dsinks = attention_varlen_backward_op(_last_dim_contiguous(grad_o), q, k, v, o, lse, cu_q, cu_k,
                                                      *ctx.lengths, sinks, *ctx.variant)
    return (dq, dk, dv, None, None, None, None, None if sinks is None else dsinks) + (None,) * len(ctx.variant)


attention_varlen_forward_op.register_autograd(_varlen_backward, setup_context=_varlen_setup_context)


# ---- the functional API ---------------------------------------------------------------------------------------

def flash_attention(q: Tensor, k: Tensor, v: Tensor, causal: bool = False, window=None, sink_tokens: int = 0,
                    sinks: Optional[Tensor] = None, scale: Optional[float] = None, impl: str = "flash",
                    deterministic: bool = True, kernels: str = "auto") -> Tensor:
    """o = attention(q, k, v): q (B, Hq, Nq, D) and k, v (B, Hkv, Nk, D), or all (B, N, D); o is shaped like q.

    causal: key j visible to query i when j <= i + Nk - Nq (bottom-right aligned). window: (left, right),
    -1/None = unbounded. sink_tokens: keys j < sink_tokens bypass the left window bound (StreamingLLM).
    sinks: (Hq) sink logits (gpt-oss), differentiable. scale: default 1/sqrt(D). impl: 'flash' or 'naive'.
    deterministic: True gives bit-identical gradients run to run; False lets the CUDA flash backward
    accumulate dq in fp32 from the dK/dV kernel (faster; not bitwise reproducible). kernels: the CUDA
    flash kernel family, 'auto' (the Hopper sm90 kernels on an H100/H200 for bf16/fp16 at head dims 64
    and 128 with 16-byte aligned operands, the portable sm80 ones otherwise), 'sm80' or 'sm90' (an error
    where they cannot run); ignored on the CPU and by impl='naive'."""
    left, right = window_bounds(window)
    one_head = missing_head_axis(q=q, k=k, v=v)
    if one_head:
        q, k, v = q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)
    q, k, v = _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v)
    o, _ = attention_forward_op(q, k, v, _sinks_f32(sinks), causal, left, right, sink_tokens,
                                None if scale is None else float(scale), impl, bool(deterministic), kernels)
    return o.squeeze(1) if one_head else o


def flash_attention_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                           max_seqlen_q: int, max_seqlen_k: int, causal: bool = False, window=None,
                           sink_tokens: int = 0, sinks: Optional[Tensor] = None, scale: Optional[float] = None,
                           impl: str = "flash", deterministic: bool = True, kernels: str = "auto") -> Tensor:
    """o (total_q, Hq, D) = attention over packed sequences: q (total_q, Hq, D), k and v (total_k, Hkv, D);
    sequence b is rows cu_seqlens[b]:cu_seqlens[b + 1] of each (int32 tensors of B + 1 cumulative lengths on
    q's device: first 0, non-decreasing, last the total). max_seqlen_q / max_seqlen_k (ints) bound every
    sequence's length. Every option of flash_attention applies within each sequence, and no query sees another
    sequence's keys; causal and a right window align each sequence bottom-right and need len_k >= len_q.
    Differentiable in q, k, v and sinks. CUDA lengths are copied to the host to be checked (one sync)."""
    left, right = window_bounds(window)
    q, k, v = _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v)
    o, _ = attention_varlen_forward_op(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                                       _sinks_f32(sinks), causal, left, right, sink_tokens,
                                       None if scale is None else float(scale), impl, bool(deterministic), kernels)
    return o


class FlashAttentionFunction(torch.autograd.Function):
    """FlashAttention-2 as an autograd.Function: forward(ctx, q, k, v, is_causal=False, window=None,
    sink_tokens=0, sinks=None, scale=None) takes (B, N, D) or (B, H, N, D) tensors and saves exactly Q, K, V,
    O and L (L shaped like q without its last dim; the sink logits after them when given); backward returns
    the gradients of q, k, v and the sink logits."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal=False, window=None, sink_tokens=0, sinks=None, scale=None):
        left, right = window_bounds(window)
        one_head = missing_head_axis(q=q, k=k, v=v)
        scale = None if scale is None else float(scale)
        q4, k4, v4 = (_last_dim_contiguous(x.unsqueeze(1) if one_head else x) for x in (q, k, v))
        o, lse = attention_forward_op(q4, k4, v4, _sinks_f32(sinks), bool(is_causal), left, right, sink_tokens, scale)
        if one_head:
            o, lse = o.squeeze(1), lse.squeeze(1)  # (B, N, D), (B, N)
        ctx.save_for_backward(q, k, v, o, lse, *(() if sinks is None else (sinks,)))
        ctx.variant = (bool(is_causal), left, right, sink_tokens, scale)
        ctx.one_head = one_head
        return o

    @staticmethod
    def backward(ctx, grad_o):
        q, k, v, o, lse, *rest = ctx.saved_tensors
        sinks = rest[0] if rest else None
        if ctx.one_head:
            q, k, v, o, lse, grad_o = (x.unsqueeze(1) for x in (q, k, v, o, lse, grad_o))
        q, k, v, grad_o = (_last_dim_contiguous(x) for x in (q, k, v, grad_o))
        dq, dk, dv, dsinks = attention_backward_op(grad_o, q, k, v, o, lse, _sinks_f32(sinks), *ctx.variant)
        if ctx.one_head:
            dq, dk, dv = dq.squeeze(1), dk.squeeze(1), dv.squeeze(1)
        return dq, dk, dv, None, None, None, None if sinks is None else dsinks.to(sinks.dtype), None


# ---- the module -----------------------------------------------------------------------------------------------

class GroupedQueryAttention(nn.Module):
    """Multi-head self-attention with grouped key/value heads (GQA; MQA when num_kv_heads = 1; plain
    multi-head attention when num_kv_heads = num_heads) over flash_attention.

    x (B, N, d_model) -> q_proj (num_heads * head_dim), k_proj and v_proj (num_kv_heads * head_dim), heads
    split from the feature dim, attention, o_proj back to d_model. Optional learned sink logits (gpt-oss),
    one per query head, in fp32. No positional encoding is applied."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: Optional[int] = None, causal: bool = True, *,
                 head_dim: Optional[int] = None, window=None, sink_tokens: int = 0, sink_logits: bool = False,
                 bias: bool = False, device=None, dtype=None):
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_heads < 1 or num_kv_heads < 1 or num_heads % num_kv_heads != 0:
            raise ValueError(f"num_heads must be a positive multiple of num_kv_heads: given {num_heads}, {num_kv_heads}")
        if head_dim is None:
            if d_model % num_heads != 0:
                raise ValueError(f"d_model must divide into num_heads heads (or give head_dim): given {d_model}, "
                                 f"{num_heads}")
            head_dim = d_model // num_heads
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.causal, self.window, self.sink_tokens = causal, window, sink_tokens
        factory = {"device": device, "dtype": dtype}
        self.q_proj = nn.Linear(d_model, num_heads * head_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias, **factory)
        self.v_proj = nn.Linear(d_model, num_kv_heads * head_dim, bias=bias, **factory)
        self.o_proj = nn.Linear(num_heads * head_dim, d_model, bias=bias, **factory)
        self.sinks = nn.Parameter(torch.zeros(num_heads, device=device, dtype=torch.float32)) if sink_logits else None

    def forward(self, x: Tensor) -> Tensor:
        batch, length, _ = x.shape
        # (B, N, H * Dh) -> (B, H, N, Dh) views over (B, N, H, Dh) memory: no copies.
        q = self.q_proj(x).view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        o = flash_attention(q, k, v, causal=self.causal, window=self.window, sink_tokens=self.sink_tokens,
                            sinks=self.sinks)  # (B, H, N, Dh)
        return self.o_proj(o.transpose(1, 2).reshape(batch, length, self.num_heads * self.head_dim))


__all__ = ["flash_attention", "flash_attention_varlen", "FlashAttentionFunction", "GroupedQueryAttention",
           "attention_forward_op", "attention_backward_op", "attention_varlen_forward_op",
           "attention_varlen_backward_op"]
