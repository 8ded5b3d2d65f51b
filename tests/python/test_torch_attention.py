"""test_torch_attention.py — flashtrain.torch against PyTorch's own math attention (on the device machine
with CUDA; on the host wherever torch is installed; skipped without torch): values, L and gradients of
every variant in fp32, bf16 and fp16, each CUDA kernel family (kernels=), the autograd.Function's saved
tensors, the custom ops' registrations (torch.library.opcheck), torch.compile(fullgraph=True) of a GQA
module, the caller's CUDA stream, cupy arrays, and errors raised on the GPU. Measured errors go into the
JUnit XML (record_property)."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import attention_reference as ref  # noqa: E402
import flashtrain  # noqa: E402
from flashtrain.torch import (FlashAttentionFunction, GroupedQueryAttention, attention_forward_op,  # noqa: E402
                              flash_attention)

CUDA = flashtrain.built_with_cuda and torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# max |got - want| / max |want| against float64 math on the same rounded inputs (fp32 may use TF32 on the GPU;
# an H200 measured at most 1.5e-3 for fp32, 9.8e-4 for fp16 and 8.2e-3 for bf16 over this grid)
TOLERANCE = {torch.float32: 5e-3, torch.float16: 5e-3, torch.bfloat16: 2e-2}

# name -> (B, Hq, Hkv, Nq, Nk, D, options); head dims the CUDA kernels have (16, 32, 64, 80, 96, 128, 256)
VARIANTS = {
    "plain": (2, 4, 4, 128, 128, 64, {}),
    "causal": (2, 4, 4, 128, 128, 64, {"causal": True}),
    "causal_decode": (2, 4, 4, 17, 150, 64, {"causal": True}),
    "window_left": (2, 4, 4, 128, 128, 64, {"window": (32, 0)}),
    "window_both": (1, 4, 4, 96, 130, 32, {"window": (16, 8)}),
    "sink_tokens": (2, 4, 4, 128, 128, 64, {"window": (24, 0), "sink_tokens": 4}),
    "sink_logits_causal": (2, 4, 4, 128, 128, 64, {"causal": True, "sinks": True}),
    "gqa_sink_logits": (2, 8, 2, 100, 100, 128, {"causal": True, "sinks": True}),
    "mqa": (1, 8, 1, 64, 200, 128, {}),
    "scale": (2, 2, 2, 70, 70, 32, {"scale": 0.5, "causal": True}),
    "hdim96_window_sinks": (1, 4, 2, 80, 80, 96, {"window": (20, 5), "sink_tokens": 2, "sinks": True}),
    "hdim80_causal_gqa": (2, 4, 2, 77, 77, 80, {"causal": True}),
    "hdim16": (3, 2, 2, 40, 40, 16, {"causal": True}),
    "hdim256": (1, 2, 1, 64, 64, 256, {"causal": True}),
}


def make(name, dtype, device, seed=0):
    batch, heads, heads_kv, len_q, len_k, dim, options = VARIANTS[name]
    gen = torch.Generator().manual_seed(seed)

    def tensor(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype).requires_grad_()

    q = tensor(batch, heads, len_q, dim)     # (B, Hq, Nq, D)
    k = tensor(batch, heads_kv, len_k, dim)  # (B, Hkv, Nk, D)
    v = tensor(batch, heads_kv, len_k, dim)  # (B, Hkv, Nk, D)
    options = dict(options)
    sinks = None
    if options.pop("sinks", False):
        sinks = torch.randn(heads, generator=gen).to(device).requires_grad_()  # (Hq) fp32
    return q, k, v, sinks, options


def math_attention(q, k, v, sinks=None, causal=False, window=None, sink_tokens=0, scale=None):
    """o and L by PyTorch's math: SDPA's math backend with an explicit mask, or softmax with a sink column."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # (B, Hq, Nk, D)
    mask = torch.from_numpy(ref.visible(q.shape[2], k.shape[2], causal, window, sink_tokens)).to(q.device)
    scale_value = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (scale_value * q @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf"))  # (B, Hq, Nq, Nk)
    if sinks is not None:
        scores = torch.cat([scores, sinks.view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)], dim=-1)
    lse = torch.logsumexp(scores, dim=-1)  # (B, Hq, Nq)
    if sinks is None:
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale), lse
    return torch.softmax(scores, dim=-1)[..., :-1] @ v, lse


def seed_of(name):
    return sorted(VARIANTS).index(name) + 1


def relative_error(got, want):
    return ((got.double() - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(VARIANTS))
def test_values_and_gradients_match_math_attention(name, dtype, device, record_property):
    q, k, v, sinks, options = make(name, DTYPES[dtype], device)
    o = flash_attention(q, k, v, sinks=sinks, **options)
    inputs = (q, k, v) + (() if sinks is None else (sinks,))
    d_o = torch.randn(o.shape, generator=torch.Generator().manual_seed(seed_of(name))).to(o)
    grads = torch.autograd.grad(o, inputs, d_o)
    with torch.no_grad():
        _, lse = attention_forward_op(q, k, v, sinks, options.get("causal", False),
                                      *options.get("window", (-1, -1)), options.get("sink_tokens", 0),
                                      options.get("scale"))

    exact = [x.detach().double().requires_grad_() for x in inputs]
    o_ref, lse_ref = math_attention(*exact[:3], exact[3] if sinks is not None else None, **options)
    grads_ref = torch.autograd.grad(o_ref, exact, d_o.double())

    tol = TOLERANCE[DTYPES[dtype]]
    assert o.dtype == q.dtype and o.shape == q.shape and lse.shape == q.shape[:-1]
    errors = {"o": relative_error(o, o_ref), "lse": relative_error(lse, lse_ref.detach())}
    for what, got, want in zip(("dq", "dk", "dv", "dsinks"), grads, grads_ref):
        assert got.shape == want.shape and got.dtype == (torch.float32 if what == "dsinks" else q.dtype), what
        errors[what] = relative_error(got, want)
    record_property("errors", errors)
    assert all(err <= tol for err in errors.values()), errors


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["causal", "gqa_sink_logits", "hdim80_causal_gqa", "window_both", "hdim256"])
def test_non_deterministic_backward_matches_math_attention(name, device, record_property):
    # deterministic=False: on CUDA the flash backward accumulates dq with fp32 atomics (the host ignores it);
    # the gradients must meet the same tolerance as the default's.
    q, k, v, sinks, options = make(name, torch.bfloat16, device, seed=5)
    o = flash_attention(q, k, v, sinks=sinks, deterministic=False, **options)
    inputs = (q, k, v) + (() if sinks is None else (sinks,))
    d_o = torch.randn(o.shape, generator=torch.Generator().manual_seed(seed_of(name))).to(o)
    grads = torch.autograd.grad(o, inputs, d_o)
    exact = [x.detach().double().requires_grad_() for x in inputs]
    o_ref, _ = math_attention(*exact[:3], exact[3] if sinks is not None else None, **options)
    grads_ref = torch.autograd.grad(o_ref, exact, d_o.double())
    names = ("dq", "dk", "dv", "dsinks")
    errors = {what: relative_error(got, want) for what, got, want in zip(names, grads, grads_ref)}
    record_property("errors", errors)
    assert all(err <= TOLERANCE[torch.bfloat16] for err in errors.values()), errors


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kernels", ["auto", "sm80"])
@pytest.mark.parametrize("name", ["causal", "gqa_sink_logits", "sink_tokens"])
def test_each_kernel_family_matches_math_attention(name, kernels, device, record_property):
    # kernels picks the CUDA flash family (the host ignores it): 'auto' runs the sm90 kernels on a Hopper GPU
    # for these bf16 cases at head dims 64 and 128, 'sm80' the portable ones; both in both backward modes.
    q, k, v, sinks, options = make(name, torch.bfloat16, device, seed=7)
    inputs = (q, k, v) + (() if sinks is None else (sinks,))
    exact = [x.detach().double().requires_grad_() for x in inputs]
    o_ref, _ = math_attention(*exact[:3], exact[3] if sinks is not None else None, **options)
    d_o = torch.randn(o_ref.shape, generator=torch.Generator().manual_seed(seed_of(name))).to(device)
    grads_ref = torch.autograd.grad(o_ref, exact, d_o.double())
    for deterministic in (True, False):
        o = flash_attention(q, k, v, sinks=sinks, deterministic=deterministic, kernels=kernels, **options)
        grads = torch.autograd.grad(o, inputs, d_o.to(o))
        errors = {"o": relative_error(o, o_ref)}
        errors.update({what: relative_error(got, want)
                       for what, got, want in zip(("dq", "dk", "dv", "dsinks"), grads, grads_ref)})
        record_property(f"errors_deterministic_{deterministic}", errors)
        assert all(err <= TOLERANCE[torch.bfloat16] for err in errors.values()), (deterministic, errors)


def test_unknown_kernel_family_is_a_value_error():
    q = torch.randn(1, 2, 16, 64)
    with pytest.raises(ValueError, match=r"unknown flash kernels 'hopper': expected auto, sm80 or sm90"):
        flash_attention(q, q, q, kernels="hopper")


@pytest.mark.parametrize("device", DEVICES)
def test_empty_rows_give_zeros_and_no_nan(device):
    q = torch.randn(1, 2, 40, 64, device=device, dtype=torch.bfloat16, requires_grad=True)  # Nq > Nk: rows
    k = torch.randn(1, 2, 24, 64, device=device, dtype=torch.bfloat16, requires_grad=True)  # i < 16 see nothing
    v = torch.randn(1, 2, 24, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
    o, lse = attention_forward_op(q, k, v, None, True, -1, -1, 0, None)
    assert torch.all(o[:, :, :16] == 0) and torch.all(torch.isneginf(lse[:, :, :16]))
    o.backward(torch.ones_like(o))
    assert torch.all(q.grad[:, :, :16] == 0)
    assert all(torch.isfinite(g).all() for g in (q.grad, k.grad, v.grad))


@pytest.mark.parametrize("device", DEVICES)
def test_bnhd_layout_and_three_dim_inputs(device):
    torch.manual_seed(1)
    storage = [torch.randn(2, 50, 4, 64, device=device, requires_grad=True) for _ in range(3)]  # (B, N, H, D)
    q, k, v = (x.transpose(1, 2) for x in storage)                                          # (B, H, N, D) views
    o = flash_attention(q, k, v, causal=True)
    dense = [x.detach().transpose(1, 2).contiguous().requires_grad_() for x in storage]
    o_dense = flash_attention(*dense, causal=True)
    torch.testing.assert_close(o, o_dense, atol=0, rtol=0)
    o.sum().backward()  # d_o with zero strides: made contiguous before the kernel
    o_dense.sum().backward()
    for x, y in zip(storage, dense):
        torch.testing.assert_close(x.grad.transpose(1, 2), y.grad, atol=0, rtol=0)

    q3, k3, v3 = (x[:, 0].detach().requires_grad_() for x in dense)  # (B, N, D)
    o3 = flash_attention(q3, k3, v3, causal=True)
    assert o3.shape == q3.shape
    torch.testing.assert_close(o3, o_dense[:, 0], atol=0, rtol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_sinks", [False, True])
def test_function_saves_q_k_v_o_and_l(device, with_sinks):
    torch.manual_seed(2)
    if with_sinks:
        q, k, v = (torch.randn(2, 4, 33, 32, device=device, requires_grad=True) for _ in range(3))  # (B, H, N, D)
        sinks = torch.randn(4, device=device, requires_grad=True)                                 # (H)
    else:
        q, k, v = (torch.randn(2, 33, 32, device=device, requires_grad=True) for _ in range(3))  # (B, N, D)
        sinks = None
    o = FlashAttentionFunction.apply(q, k, v, True, None, 0, sinks)
    saved = o.grad_fn.saved_tensors
    assert len(saved) == 5 + with_sinks
    for got, want in zip(saved[:4] + saved[5:], (q, k, v, o) + ((sinks,) if with_sinks else ())):
        assert got.shape == want.shape and got.data_ptr() == want.data_ptr()
    lse = saved[4]
    assert lse.shape == q.shape[:-1] and lse.dtype == torch.float32

    squeeze = q.dim() == 3
    exact = [x.detach().double().requires_grad_() for x in (q, k, v)]
    as4 = [x.unsqueeze(1) if squeeze else x for x in exact]
    sinks64 = None if sinks is None else sinks.detach().double().requires_grad_()
    o_ref, lse_ref = math_attention(*as4, sinks64, causal=True)
    o_ref, lse_ref = (o_ref.squeeze(1), lse_ref.squeeze(1)) if squeeze else (o_ref, lse_ref)
    tol = TOLERANCE[torch.float32]
    assert relative_error(lse, lse_ref.detach()) < tol
    assert relative_error(o, o_ref.detach()) < tol

    d_o = torch.randn_like(o)
    o.backward(d_o)
    o_ref.backward(d_o.double())
    for got, want in zip((q, k, v) + ((sinks,) if with_sinks else ()), exact + ([sinks64] if with_sinks else [])):
        assert relative_error(got.grad, want.grad) < tol


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("with_sinks", [False, True])
def test_custom_op_registrations(device, with_sinks):
    torch.manual_seed(3)
    q = torch.randn(2, 4, 24, 32, device=device, requires_grad=True)
    k = torch.randn(2, 2, 24, 32, device=device, requires_grad=True)
    v = torch.randn(2, 2, 24, 32, device=device, requires_grad=True)
    sinks = torch.randn(4, device=device, requires_grad=True) if with_sinks else None
    torch.library.opcheck(torch.ops.flashtrain.attention_forward.default, (q, k, v, sinks, True, 8, -1, 2, None))
    with torch.no_grad():
        o, lse = attention_forward_op(q, k, v, sinks, True, 8, -1, 2, None)
    args = (torch.randn_like(o), q.detach(), k.detach(), v.detach(), o, lse,
            None if sinks is None else sinks.detach(), True, 8, -1, 2, None)
    torch.library.opcheck(torch.ops.flashtrain.attention_backward.default, args)


def test_torch_compile_fullgraph_of_a_gqa_module():
    device = "cuda" if CUDA else "cpu"
    dtype = torch.bfloat16 if CUDA else torch.float32
    torch._dynamo.reset()
    torch.manual_seed(4)
    module = GroupedQueryAttention(256, num_heads=8, num_kv_heads=2, causal=True, window=(48, 0), sink_logits=True,
                                   device=device, dtype=dtype)
    with torch.no_grad():
        module.sinks.normal_()
    compiled = torch.compile(module, fullgraph=True)
    x = torch.randn(2, 96, 256, device=device, dtype=dtype)  # (B, N, d_model)
    g = torch.randn_like(x)

    def run(fn):
        module.zero_grad(set_to_none=True)
        xi = x.clone().requires_grad_()
        y = fn(xi)
        y.backward(g)
        return [y, xi.grad] + [p.grad for p in module.parameters()]

    eager, graph = run(module), run(compiled)
    for a, b in zip(eager, graph):
        torch.testing.assert_close(b, a, atol=2e-2, rtol=2e-2)


# ---- CUDA only --------------------------------------------------------------------------------------------------

cuda_only = pytest.mark.skipif(not CUDA, reason="needs a CUDA build of flashtrain and a visible GPU")


@cuda_only
def test_runs_on_the_callers_current_stream():
    torch.manual_seed(5)
    q, k, v = (torch.randn(2, 8, 512, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    expected = flash_attention(q, k, v, causal=True)
    side = torch.cuda.Stream()
    q_side = torch.zeros_like(q)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # keeps the side stream busy: work on any other stream would read zeros
        q_side.copy_(q)
        o = flash_attention(q_side, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(o, expected, atol=0, rtol=0)


@cuda_only
def test_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((2, 4, 64, 64)).astype(np.float32) for _ in range(3))  # (B, H, N, D)
    o_host, lse_host = flashtrain.numpy.attention(q, k, v, window=(16, 0))
    qd, kd, vd = (cupy.asarray(x) for x in (q, k, v))
    o = cupy.empty_like(qd)
    lse = cupy.empty(q.shape[:-1], dtype=cupy.float32)
    flashtrain.attention_forward(qd, kd, vd, o, lse, window_left=16, window_right=0,
                                 stream=cupy.cuda.get_current_stream().ptr)
    np.testing.assert_allclose(cupy.asnumpy(o), o_host, atol=5e-3, rtol=5e-3)
    np.testing.assert_allclose(cupy.asnumpy(lse), lse_host, atol=5e-3, rtol=5e-3)


@cuda_only
def test_gpu_errors():
    q = torch.randn(1, 2, 16, 48, device="cuda", dtype=torch.float16)
    with pytest.raises(NotImplementedError, match=r"flash attention \(CUDA\): unsupported head dim 48"):
        flash_attention(q, q, q)
    with pytest.raises(ValueError, match=r"k must be on the device of q: expected cuda:0, given cpu"):
        flash_attention(q, q.cpu(), q)
    # kernels="sm90" where they cannot run says why: fp32 inputs on a Hopper GPU, the GPU itself elsewhere.
    x = torch.randn(1, 2, 16, 64, device="cuda")
    why = (r"run bf16 or fp16 at head dims 64 and 128" if torch.cuda.get_device_capability() == (9, 0)
           else r"need a compute capability 9\.0 GPU")
    with pytest.raises(NotImplementedError, match=r"flash attention: kernels sm90 " + why):
        flash_attention(x, x, x, kernels="sm90")
    huge = torch.zeros(1, 1, 1 << 19, 16, device="cuda", dtype=torch.bfloat16)  # S would take 1 TiB
    with pytest.raises(MemoryError, match=r"naive CUDA attention \(forward\) materialises S"):
        flash_attention(huge, huge, huge, impl="naive")


@pytest.mark.skipif(flashtrain.built_with_cuda or not torch.cuda.is_available(),
                    reason="for a CPU-only build on a machine with a GPU")
def test_cuda_tensors_in_a_cpu_only_build_are_not_implemented():
    q = torch.randn(1, 1, 8, 16, device="cuda")
    with pytest.raises(NotImplementedError, match=r"this flashtrain build has no CUDA"):
        flash_attention(q, q, q)
