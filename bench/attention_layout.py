"""attention_layout.py — whether the flashtrain attention (the torch custom op) at the 8B shape and at
B2 H16 N8192 D128 depends on its inputs' layout, (B, H, N, D) contiguous against the model's strided views
(q, k, v of one (B, N, 3, H, D) tensor, dO (B, N, H, D)), or on dO's values (ones, as the anchor's
.sum().backward() gives, against random); cuDNN (torch SDPA) beside it on the same tensors. bf16, causal,
triton do_bench medians. On the GPU machine with the Python package built:
    PYTHONPATH=build/python python3 bench/attention_layout.py [REP_MS]"""
import sys, torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
from triton.testing import do_bench
from flashtrain.torch import flash_attention

REP = int(sys.argv[1]) if len(sys.argv) > 1 else 200
print(torch.cuda.get_device_name(), torch.__version__, flush=True)

def cudnn(q, k, v):
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

IMPLS = {"flashtrain": lambda q, k, v: flash_attention(q, k, v, causal=True), "cuDNN": cudnn}
for B, H, N, D in [(1, 32, 32768, 128), (2, 16, 8192, 128)]:
    torch.manual_seed(0)
    fl = 4 * B * H * N * N * D / 2
    packed = torch.randn(B, N, 3, H, D, device="cuda", dtype=torch.bfloat16)
    cases = {
        "BHND": [packed[:, :, i].transpose(1, 2).contiguous() for i in range(3)],
        "packed BNHD": [packed[:, :, i].transpose(1, 2) for i in range(3)],
        "q packed": [packed[:, :, 0].transpose(1, 2)] + [packed[:, :, i].transpose(1, 2).contiguous() for i in (1, 2)],
        "kv packed": [packed[:, :, 0].transpose(1, 2).contiguous()] + [packed[:, :, i].transpose(1, 2) for i in (1, 2)],
    }
    for layout, qkv in cases.items():
        q, k, v = (t.detach().requires_grad_() for t in qkv)
        if N < 32768 and layout in ("q packed", "kv packed"): continue
        for do_kind in (("ones", "randn") if layout == "BHND" else ("randn",)):
            g = torch.randn(B, N, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
            if layout in ("BHND", "kv packed"): g = g.contiguous()
            if do_kind == "ones": g = torch.ones_like(g)
            for name, fn in IMPLS.items():
                if name == "cuDNN" and layout != "BHND": continue
                try:
                    tf = do_bench(lambda: fn(q, k, v), rep=REP, warmup=100)
                    tfb = do_bench(lambda: fn(q, k, v).backward(g), rep=REP, warmup=100, grad_to_none=[q, k, v])
                    print(f"B{B} H{H} N{N} D{D} {layout:12s} dO {do_kind:5s} {name:10s} fwd {tf:7.3f} ms | bwd {tfb-tf:7.3f} ms "
                          f"{2.5*fl/(tfb-tf)/1e9:4.0f} TF/s | fwd+bwd {tfb:7.3f} ms", flush=True)
                except Exception as e:
                    print(f"B{B} {layout} {do_kind} {name} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
