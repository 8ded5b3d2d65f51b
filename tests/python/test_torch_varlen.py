"""test_torch_varlen.py — flashtrain.torch.flash_attention_varlen (on the host wherever torch is installed, on
CUDA on the device machine; skipped without torch): values and gradients of packed sequences against the dense
flash_attention on each sequence, for every variant in fp32, bf16 and fp16; the custom ops' registrations
(torch.library.opcheck); torch.compile(fullgraph=True) with the backward; bad cumulative lengths."""
import pytest

torch = pytest.importorskip("torch")

import flashtrain  # noqa: E402
from flashtrain.torch import attention_varlen_forward_op, flash_attention, flash_attention_varlen  # noqa: E402

CUDA = flashtrain.built_with_cuda and torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# max |varlen - dense per sequence| / max |dense|: the same implementation on the same values (bitwise on the CPU;
# the CUDA varlen kernels may tile differently).
TOLERANCE = {torch.float32: 2e-3, torch.float16: 5e-3, torch.bfloat16: 2e-2}

LEN_Q = [5, 0, 1, 130, 0, 77, 64]
LEN_K_ALIGNED = [5, 0, 1, 130, 3, 90, 64]
LEN_K_FREE = [9, 40, 0, 100, 0, 77, 64]

# name -> (Hq, Hkv, D, options); head dims the CUDA kernels have
VARIANTS = {
    "plain": (4, 4, 64, {}),
    "causal": (4, 4, 64, {"causal": True}),
    "window_left": (4, 2, 64, {"window": (32, 0)}),
    "window_both": (4, 4, 32, {"window": (16, 8)}),
    "sink_tokens": (4, 4, 64, {"window": (24, 0), "sink_tokens": 4}),
    "gqa_sink_logits_causal": (8, 2, 128, {"causal": True, "sinks": True}),
    "mqa_free": (8, 1, 128, {}),
    "scale": (2, 2, 32, {"scale": 0.5, "causal": True}),
}


def lengths_of(options):
    right_bounded = options.get("causal") or (options.get("window") or (-1, -1))[1] >= 0
    return LEN_Q, LEN_K_ALIGNED if right_bounded else LEN_K_FREE


def cumulative(lengths, device):
    return torch.tensor([0] + lengths, dtype=torch.int32).cumsum(0, dtype=torch.int32).to(device)  # (B + 1)


def make(name, dtype, device, seed=0):
    heads, heads_kv, dim, options = VARIANTS[name]
    options = dict(options)
    len_q, len_k = lengths_of(options)
    gen = torch.Generator().manual_seed(seed)

    def tensor(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype).requires_grad_()

    q = tensor(sum(len_q), heads, dim)     # (total_q, Hq, D)
    k = tensor(sum(len_k), heads_kv, dim)  # (total_k, Hkv, D)
    v = tensor(sum(len_k), heads_kv, dim)
    sinks = None
    if options.pop("sinks", False):
        sinks = torch.randn(heads, generator=gen).to(device).requires_grad_()  # (Hq) fp32
    lengths = (cumulative(len_q, device), cumulative(len_k, device), max(len_q), max(len_k))
    return q, k, v, sinks, lengths, options


def relative_error(got, want):
    return ((got.double() - want.double()).abs().max() / want.double().abs().max().clamp_min(1e-6)).item()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(VARIANTS))
def test_varlen_matches_dense_calls_per_sequence(name, dtype, device):
    if device == "cpu" and dtype != "fp32" and name not in ("causal", "gqa_sink_logits_causal"):
        pytest.skip("host half-precision runs are slow; two variants cover them")
    q, k, v, sinks, lengths, options = make(name, DTYPES[dtype], device)
    cu_q, cu_k = lengths[0].tolist(), lengths[1].tolist()
    inputs = (q, k, v) + (() if sinks is None else (sinks,))
    o = flash_attention_varlen(q, k, v, *lengths, sinks=sinks, **options)
    assert o.shape == q.shape and o.dtype == q.dtype
    d_o = torch.randn(o.shape, generator=torch.Generator().manual_seed(5)).to(o)
    grads = torch.autograd.grad(o, inputs, d_o)

    o_want, grads_want = torch.zeros_like(o), [torch.zeros_like(x) for x in inputs]
    for b in range(len(cu_q) - 1):
        qs, ks = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        if qs.start == qs.stop or ks.start == ks.stop:
            continue
        parts = [x.detach()[s].transpose(0, 1).unsqueeze(0).requires_grad_() for x, s in zip((q, k, v), (qs, ks, ks))]
        sinks_b = None if sinks is None else sinks.detach().clone().requires_grad_()
        o_b = flash_attention(*parts, sinks=sinks_b, **options)  # (1, Hq, len_q, D)
        o_want[qs] = o_b[0].transpose(0, 1).detach()
        g = torch.autograd.grad(o_b, parts + ([] if sinks is None else [sinks_b]), d_o[qs].transpose(0, 1)[None])
        for want, got_b, s in zip(grads_want[:3], g[:3], (qs, ks, ks)):
            want[s] = got_b[0].transpose(0, 1)
        if sinks is not None:
            grads_want[3] += g[3]
    tol = TOLERANCE[DTYPES[dtype]]
    errors = {"o": relative_error(o, o_want)}
    errors.update({what: relative_error(got, want) for what, got, want in zip(("dq", "dk", "dv", "dsinks"), grads,
                                                                               grads_want)})
    assert all(err <= tol for err in errors.values()), errors
    blind = slice(cu_q[2], cu_q[3]) if cu_k[3] == cu_k[2] else None  # a query without keys: O = 0
    if blind is not None:
        assert torch.all(o[blind] == 0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_sinks", [False, True])
def test_custom_op_registrations(device, with_sinks):
    q, k, v, sinks, lengths, _ = make("gqa_sink_logits_causal", torch.float32, device, seed=2)
    sinks = sinks if with_sinks else None
    torch.library.opcheck(torch.ops.flashtrain.attention_varlen_forward.default,
                          (q, k, v, *lengths, sinks, True, 40, -1, 2, None))
    with torch.no_grad():
        o, lse = attention_varlen_forward_op(q, k, v, *lengths, sinks, True, 40, -1, 2, None)
    assert lse.shape == (q.shape[1], q.shape[0]) and lse.dtype == torch.float32
    args = (torch.randn_like(o), q.detach(), k.detach(), v.detach(), o, lse, *lengths,
            None if sinks is None else sinks.detach(), True, 40, -1, 2, None)
    torch.library.opcheck(torch.ops.flashtrain.attention_varlen_backward.default, args)


def test_torch_compile_fullgraph_forward_and_backward():
    device = "cuda" if CUDA else "cpu"
    dtype = torch.bfloat16 if CUDA else torch.float32
    torch._dynamo.reset()
    q, k, v, sinks, lengths, options = make("gqa_sink_logits_causal", dtype, device, seed=3)

    def step(q, k, v, sinks, cu_q, cu_k):
        o = flash_attention_varlen(q, k, v, cu_q, cu_k, lengths[2], lengths[3], sinks=sinks, **options)
        return (o.float() ** 2).sum()

    def grads(fn):
        inputs = [x.detach().clone().requires_grad_() for x in (q, k, v, sinks)]
        loss = fn(*inputs, lengths[0], lengths[1])
        loss.backward()
        return [loss] + [x.grad for x in inputs]

    eager, graph = grads(step), grads(torch.compile(step, fullgraph=True))
    for a, b in zip(eager, graph):
        torch.testing.assert_close(b, a, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("device", DEVICES)
def test_bad_lengths(device):
    q, k, v, sinks, (cu_q, cu_k, max_q, max_k), options = make("causal", torch.float32, device)
    with pytest.raises(TypeError, match="cu_seqlens_q has dtype int64: expected int32"):
        flash_attention_varlen(q, k, v, cu_q.long(), cu_k, max_q, max_k, **options)
    with pytest.raises(ValueError, match="sequence 3 is longer than max_seqlen_q"):
        flash_attention_varlen(q, k, v, cu_q, cu_k, max_q - 1, max_k, **options)
    bad = cu_k.clone()
    bad[1] = 4  # sequence 0: 5 queries, 4 keys
    with pytest.raises(ValueError, match="sequence 0 has 5 queries and 4 keys"):
        flash_attention_varlen(q, k, v, cu_q, bad, max_q, max_k, **options)
    if device == "cuda":
        with pytest.raises(ValueError, match="cu_seqlens_k must be on the device of q"):
            flash_attention_varlen(q, k, v, cu_q, cu_k.cpu(), max_q, max_k, **options)
