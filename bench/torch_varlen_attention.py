"""torch_varlen_attention.py — packed-document attention side by side in one process: flashtrain's varlen
attention (flashtrain.torch.flash_attention_varlen), PyTorch's own varlen attention where this torch has one
(torch.nn.attention.varlen.varlen_attn, probed by signature; else the internal aten._flash_attention_forward
with cumulative lengths; else reported missing), FlexAttention with a causal document mask (torch.compile'd),
and flashtrain's dense causal kernel on the same tokens as (16, 8192) rows for reference.

The documents are those of `flashtrain bench attention --sweep varlen`: 131072 tokens in documents of lengths
uniform in [256, 16384] drawn from the same SplitMix64 stream (seed 0 unless --seed), the last cut to the total;
Hq 32, Hkv 8, D 128, bf16, causal. TFLOP/s count the FLOPs the documents need: forward sum(4 Hq n^2 D) / 2,
backward 2.5x forward (the dense row: its own 16 x 4 Hq 8192^2 D / 2).
Timing: triton.testing.do_bench (median ms) when triton is installed, else CUDA events over --rep-ms; backward =
forward+backward - forward.

The --json document is the results format of docs/design.md: its commit is the one the flashtrain package
was built from (flashtrain.git_commit, as the C++ benchmarks stamp theirs), its date the run's in UTC.

Run on the GPU machine with the Python package built:
  PYTHONPATH=build/python python3 bench/torch_varlen_attention.py [--rep-ms 300] [--json out.json]"""
import argparse
import datetime
import inspect
import json
import sys

import torch

import flashtrain
from flashtrain.torch import flash_attention, flash_attention_varlen

MASK64 = (1 << 64) - 1


class SplitMix64:
    """ft::Rng (model/data_loader.h): draw i is mix(seed + (i + 1) * golden gamma); below() is Lemire's method."""

    def __init__(self, seed):
        self.seed, self.counter = seed, 0

    def next(self):
        self.counter += 1
        z = (self.seed + self.counter * 0x9E3779B97F4A7C15) & MASK64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def below(self, n):
        product = self.next() * n
        if (product & MASK64) < n:
            threshold = (2**64 - n) % n
            while (product & MASK64) < threshold:
                product = self.next() * n
        return product >> 64


def document_lengths(total, low, high, seed):
    """flashtrain's document_lengths (apps/flashtrain/varlen_bench.h): uniform in [low, high], last cut."""
    rng, lengths, covered = SplitMix64(seed), [], 0
    while covered < total:
        length = min(low + rng.below(high - low + 1), total - covered)
        lengths.append(length)
        covered += length
    return lengths


def timer(rep_ms):
    try:
        from triton.testing import do_bench
        return lambda fn: do_bench(fn, rep=rep_ms, warmup=max(25, rep_ms // 4)), "triton.testing.do_bench median"
    except ImportError:
        def events(fn):
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            n = max(3, int(rep_ms / max(start.elapsed_time(end), 1e-3)))
            start.record()
            for _ in range(n):
                fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / n
        return events, "CUDA events, mean"


def torch_varlen():
    """(name, fn(q, k, v, cu, max_len) -> o) for this torch's varlen attention, or (name, None) when it has none."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        varlen_attn = None
    if varlen_attn is not None:
        params = inspect.signature(varlen_attn).parameters
        causal = {"is_causal": True} if "is_causal" in params else {"window_size": (-1, 0)}
        gqa = "enable_gqa" in params

        def run(q, k, v, cu, max_len):
            if not gqa:  # older signatures want as many kv heads as query heads
                k, v = (x.repeat_interleave(q.shape[1] // x.shape[1], dim=1) for x in (k, v))
            extra = {"enable_gqa": True} if gqa else {}
            return varlen_attn(q, k, v, cu, cu, max_len, max_len, **causal, **extra)
        return "torch varlen_attn" + ("" if gqa else " (kv heads expanded)"), run
    if hasattr(torch.ops.aten, "_flash_attention_forward"):
        def run(q, k, v, cu, max_len):
            k, v = (x.repeat_interleave(q.shape[1] // x.shape[1], dim=1) for x in (k, v))
            return torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, max_len, max_len, 0.0, True,
                                                           return_debug_mask=False)[0]
        return "torch aten._flash_attention_forward (kv heads expanded)", run
    return "torch varlen attention", None


def flex_document_attention(lengths, device):
    """fn(q, k, v) -> o over (1, H, total, D) tensors: FlexAttention with a causal document mask."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    document = torch.repeat_interleave(torch.arange(len(lengths), device=device),
                                       torch.tensor(lengths, device=device))  # (total) document of each token

    def mask(b, h, q_idx, kv_idx):
        return (document[q_idx] == document[kv_idx]) & (q_idx >= kv_idx)

    total = sum(lengths)
    # Compiled, the mask is evaluated per (128, 128) block; uncompiled, create_block_mask would materialise
    # the whole total x total mask (128 GiB here).
    compile_mask = {"_compile": True} if "_compile" in inspect.signature(create_block_mask).parameters else {}
    block_mask = create_block_mask(mask, B=1, H=None, Q_LEN=total, KV_LEN=total, device=device, **compile_mask)
    compiled = torch.compile(flex_attention)
    return lambda q, k, v: compiled(q, k, v, block_mask=block_mask, enable_gqa=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rep-ms", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    total, hq, hkv, dim, dense_n = 131072, 32, 8, 128, 8192
    device, dtype = "cuda", torch.bfloat16
    bench, timing = timer(args.rep_ms)
    lengths = document_lengths(total, 256, 16384, args.seed)
    fwd_flops = sum(4 * hq * n * n * dim for n in lengths) / 2
    dense_flops = (total // dense_n) * 4 * hq * dense_n * dense_n * dim / 2
    print(f"{torch.cuda.get_device_name()} | torch {torch.__version__} | {len(lengths)} documents, {total} tokens, "
          f"max {max(lengths)} | Hq {hq} Hkv {hkv} D {dim} bf16 causal | {timing}", flush=True)

    torch.manual_seed(0)
    q = torch.randn(total, hq, dim, device=device, dtype=dtype, requires_grad=True)   # (total, Hq, D)
    k = torch.randn(total, hkv, dim, device=device, dtype=dtype, requires_grad=True)  # (total, Hkv, D)
    v = torch.randn(total, hkv, dim, device=device, dtype=dtype, requires_grad=True)
    cu = torch.tensor([0] + lengths, device=device, dtype=torch.int32).cumsum(0, dtype=torch.int32)  # (B + 1)
    max_len = max(lengths)
    grad = torch.randn(total, hq, dim, device=device, dtype=dtype)

    def heads_major(x):  # (total, H, D) -> (1, H, total, D) view
        return x.transpose(0, 1).unsqueeze(0)

    def dense_rows(x):  # (total, H, D) -> (16, H, 8192, D) view: the same tokens as whole rows
        return x.view(total // dense_n, dense_n, x.shape[1], dim).transpose(1, 2)

    torch_name, torch_fn = torch_varlen()
    # (name, fn() -> o (total, Hq, D), forward FLOPs)
    impls = [("flashtrain varlen", lambda: flash_attention_varlen(q, k, v, cu, cu, max_len, max_len, causal=True),
              fwd_flops),
             (torch_name, None if torch_fn is None else (lambda: torch_fn(q, k, v, cu, max_len)), fwd_flops)]
    try:
        flex = flex_document_attention(lengths, device)
        impls.append(("FlexAttention document mask",
                      lambda: flex(heads_major(q), heads_major(k), heads_major(v)).squeeze(0).transpose(0, 1),
                      fwd_flops))
    except Exception as e:  # noqa: BLE001 — report and go on with the others
        print(f"FlexAttention document mask: unavailable ({type(e).__name__}: {str(e)[:160]})", flush=True)
    impls.append(("flashtrain dense 16x8192 (same tokens)",
                  lambda: flash_attention(dense_rows(q), dense_rows(k), dense_rows(v), causal=True)
                  .transpose(1, 2).reshape(total, hq, dim), dense_flops))

    rows = []
    for name, fn, flops in impls:
        if fn is None:
            print(f"{name:44s} not in this torch", flush=True)
            rows.append({"impl": name, "available": False})
            continue
        try:
            fwd = bench(fn)
            fwd_bwd = bench(lambda: fn().backward(grad))
        except Exception as e:  # noqa: BLE001
            print(f"{name:44s} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
            rows.append({"impl": name, "error": f"{type(e).__name__}: {str(e)[:200]}"})
            continue
        bwd = fwd_bwd - fwd
        row = {"impl": name, "varlen": "dense" not in name, "fwd_ms": fwd, "bwd_ms": bwd, "fwd_bwd_ms": fwd_bwd,
               "fwd_tflops": flops / fwd / 1e9, "bwd_tflops": 2.5 * flops / bwd / 1e9,
               "fwd_bwd_tflops": 3.5 * flops / fwd_bwd / 1e9}
        rows.append(row)
        print(f"{name:44s} fwd {fwd:8.3f} ms {row['fwd_tflops']:5.0f} TF/s | bwd {bwd:8.3f} ms "
              f"{row['bwd_tflops']:5.0f} TF/s | fwd+bwd {fwd_bwd:8.3f} ms {row['fwd_bwd_tflops']:5.0f} TF/s",
              flush=True)
    if args.json:
        with open(args.json, "w") as out:
            date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            json.dump({"benchmark": "attention-varlen-torch", "commit": flashtrain.git_commit, "date": date,
                       "device": torch.cuda.get_device_name(),
                       "config": {"torch": torch.__version__, "documents": len(lengths), "total_tokens": total,
                                  "max_seqlen": max_len, "Hq": hq, "Hkv": hkv, "D": dim, "dtype": "bf16",
                                  "causal": True, "seed": args.seed, "timing": timing},
                       "rows": rows}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
