"""test_reference_logits.py — a reference PyTorch Transformer LM (written here from design.md's model contract:
pre-norm blocks, RMSNorm eps 1e-5 in fp32, RoPE theta 10000 on interleaved pairs per head, causal softmax
attention, SwiGLU, untied LM head), randomly initialised with non-unit RMSNorm weights, torch.save'd, exported
with tools/export_reference_safetensors.py run as a user runs it, loaded by flashtrain.model.TransformerLM and
compared on random tokens with the reference's float64 logits: fp32 on the CPU (and on CUDA when a GPU is
present), bf16 within a bf16 tolerance. Also: a config that does not match the file is refused, naming the
tensors. Needs torch (skipped without it); the safetensors package is optional (the export script writes
the format itself without it). Measured errors go into the JUnit XML (record_property)."""
import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import flashtrain  # noqa: E402
from flashtrain.model import TransformerLM  # noqa: E402

EXPORT_TOOL = Path(__file__).resolve().parents[2] / "tools" / "export_reference_safetensors.py"
CUDA = flashtrain.built_with_cuda and flashtrain.cuda_available()
# A small config with a head dim the CUDA attention kernels have (32) and a vocabulary that is no power of two.
CONFIG = {"d_model": 128, "d_ff": 344, "num_layers": 2, "num_heads": 4, "vocab_size": 257, "context_length": 48}
BATCH, SEQ = 5, 40  # more sequences than max_batch (4): logits() runs two forwards; SEQ < context_length
# max |got - want| / max |want| against the float64 reference. fp32 on the CPU is exact fp32 throughout; on
# CUDA the fp32 GEMMs are exact but fp32 attention runs on the TF32 tensor cores (design.md); bf16 rounds
# every GEMM and attention operand to 8 bits of mantissa. The CPU measured 5.5e-7 (fp32) and 4.8e-3 (bf16).
TOLERANCE = {("cpu", "fp32"): 1e-4, ("cuda", "fp32"): 2e-3, ("cpu", "bf16"): 2e-2, ("cuda", "bf16"): 2e-2}


# ---- the reference model --------------------------------------------------------------------------------------

def truncated_normal(shape, std):
    weight = torch.empty(shape)
    nn.init.trunc_normal_(weight, mean=0.0, std=std, a=-3 * std, b=3 * std)
    return nn.Parameter(weight)


class Linear(nn.Module):
    """y = x W^T, W (d_out, d_in), no bias."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.weight = truncated_normal((d_out, d_in), math.sqrt(2 / (d_in + d_out)))

    def forward(self, x):
        return x @ self.weight.T


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last dim, in at least fp32."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        dtype = torch.promote_types(x.dtype, torch.float32)
        x_wide = x.to(dtype)
        rms = torch.rsqrt(x_wide.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x_wide * rms * self.weight.to(dtype)).to(x.dtype)


def rope(x, theta=10000.0):
    """x (B, H, T, Dh) with each interleaved pair (x[2i], x[2i+1]) at position t rotated by t * theta^(-2i/Dh)."""
    length, dim = x.shape[-2], x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)                # (Dh/2)
    angle = torch.arange(length, dtype=torch.float64)[:, None] * inv_freq[None, :]          # (T, Dh/2)
    cos, sin = angle.cos().to(x), angle.sin().to(x)
    x0, x1 = x[..., 0::2], x[..., 1::2]                                                     # (B, H, T, Dh/2)
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)     # (B, H, T, Dh)


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj, self.k_proj = Linear(d_model, d_model), Linear(d_model, d_model)
        self.v_proj, self.output_proj = Linear(d_model, d_model), Linear(d_model, d_model)

    def forward(self, x):
        batch, length, d_model = x.shape
        head_dim = d_model // self.num_heads

        def heads(y):  # (B, T, d) -> (B, H, T, Dh)
            return y.view(batch, length, self.num_heads, head_dim).transpose(1, 2)

        q, k, v = rope(heads(self.q_proj(x))), rope(heads(self.k_proj(x))), heads(self.v_proj(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(head_dim)                           # (B, H, T, T)
        visible = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()  # (T, T)
        weights = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
        o = (weights @ v).transpose(1, 2).reshape(batch, length, d_model)                # (B, T, d)
        return self.output_proj(o)


class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.w1, self.w2, self.w3 = Linear(d_model, d_ff), Linear(d_ff, d_model), Linear(d_model, d_ff)

    def forward(self, x):
        return self.w2(nn.functional.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, d_model, d_ff, num_heads):
        super().__init__()
        self.ln1, self.attn = RMSNorm(d_model), CausalSelfAttention(d_model, num_heads)
        self.ln2, self.ffn = RMSNorm(d_model), SwiGLU(d_model, d_ff)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.ffn(self.ln2(x))


class ReferenceLM(nn.Module):
    def __init__(self, d_model, d_ff, num_layers, num_heads, vocab_size, context_length):
        super().__init__()
        self.context_length = context_length
        self.token_embeddings = nn.Embedding(vocab_size, d_model)
        nn.init.trunc_normal_(self.token_embeddings.weight, mean=0.0, std=1.0, a=-3.0, b=3.0)
        self.layers = nn.ModuleList(Block(d_model, d_ff, num_heads) for _ in range(num_layers))
        self.ln_final = RMSNorm(d_model)
        self.lm_head = Linear(d_model, vocab_size)

    def forward(self, tokens):  # (B, T) -> (B, T, vocab)
        x = self.token_embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.ln_final(x))


# ---- fixtures -------------------------------------------------------------------------------------------------

def export(checkpoint, output):
    """Runs the export script as a user would."""
    result = subprocess.run([sys.executable, str(EXPORT_TOOL), str(checkpoint), str(output)], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, f"export failed:\n{result.stdout}{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """(state dict, exported .safetensors path, tokens (B, T) int64, float64 reference logits (B, T, V))."""
    torch.manual_seed(20261122)
    model = ReferenceLM(**CONFIG)
    with torch.no_grad():  # non-unit norm weights, so a skipped or misplaced norm weight shows
        for name, param in model.named_parameters():
            if name.endswith(("ln1.weight", "ln2.weight", "ln_final.weight")):
                param.uniform_(0.5, 1.5)
    folder = tmp_path_factory.mktemp("reference")
    torch.save(model.state_dict(), folder / "reference.pt")
    path = folder / "reference.safetensors"
    export(folder / "reference.pt", path)

    tokens = torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        want = model.double()(tokens).numpy()  # (B, T, V) float64
    return model.float().state_dict(), path, tokens.numpy(), want


def relative_error(got, want):
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def load_export_tool():
    spec = importlib.util.spec_from_file_location("export_reference_safetensors", EXPORT_TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- tests ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not CUDA, reason="needs a CUDA build of flashtrain and a visible GPU"))])
def test_logits_match_the_reference_model(reference, device, precision, record_property):
    _, path, tokens, want = reference
    model = TransformerLM(**CONFIG, device=device, precision=precision)
    model.load_safetensors(path)
    got = model.logits(tokens)
    assert got.shape == (BATCH, SEQ, CONFIG["vocab_size"]) and got.dtype == np.float32
    error = relative_error(got, want)
    record_property("relative_error", error)
    assert error <= TOLERANCE[device, precision], f"{device} {precision}: relative error {error:.3g}"


def test_loading_replaces_the_random_initialisation(reference):
    _, path, tokens, want = reference
    model = TransformerLM(**CONFIG)
    before = model.logits(tokens)
    model.load_safetensors(path)
    assert relative_error(before, want) > 0.1
    assert relative_error(model.logits(tokens), want) <= TOLERANCE["cpu", "fp32"]


def test_parameter_names_and_count_are_the_reference_state_dict(reference):
    state, _, _, _ = reference
    model = TransformerLM(**CONFIG)
    assert sorted(model.parameter_names()) == sorted(state)
    assert model.num_parameters() == sum(t.numel() for t in state.values())


def test_a_wrong_d_model_names_the_mismatched_tensors(reference):
    _, path, _, _ = reference
    model = TransformerLM(**{**CONFIG, "d_model": 96, "num_heads": 3})
    with pytest.raises(RuntimeError, match=r"model weights .*reference\.safetensors does not match the 21 expected "
                                           r"tensors: 21 mismatched: token_embeddings\.weight \(expected "
                                           r"F32\[257, 96\], file has F32\[257, 128\]\)"):
        model.load_safetensors(path)


def test_a_missing_layer_is_named(reference):
    _, path, _, _ = reference
    model = TransformerLM(**{**CONFIG, "num_layers": 3})
    with pytest.raises(RuntimeError, match=r"9 missing: layers\.2\.attn\.q_proj\.weight, .*layers\.2\.ln2\.weight"):
        model.load_safetensors(path)


def test_tokens_outside_the_vocabulary_are_refused(reference):
    _, path, tokens, _ = reference
    model = TransformerLM(**CONFIG)
    bad = tokens.copy()
    bad[1, 3] = CONFIG["vocab_size"]
    bad[4, 6] = -1
    with pytest.raises(ValueError, match=r"token id 257 at position \[1, 3\] of tokens \[5, 40\] is out of range: "
                                         r"expected 0 <= id < vocab_size 257"):
        model.logits(bad)
    with pytest.raises(ValueError, match=r"token id -1 at position \[2, 6\]"):
        model.logits(bad[2:])
    with pytest.raises(ValueError, match=r"token id 4294967296 at position \[0, 0\]"):  # not wrapped to 0 by int32
        model.logits(np.full((1, 2), 2**32))
    with pytest.raises(TypeError, match=r"tokens must be integers, given dtype float32"):
        model.logits(tokens.astype(np.float32))
    with pytest.raises(ValueError, match=r"sequence length must be in \[1, max_seq_len = 48\], given 49"):
        model.logits(np.zeros((1, 49), dtype=np.int64))


def test_the_builtin_writer_matches_the_safetensors_package(reference, tmp_path):
    """The export script's own writer (used without the safetensors package) against the package's reader,
    and flashtrain loading what it wrote."""
    safetensors_torch = pytest.importorskip("safetensors.torch")
    state, _, tokens, want = reference
    path = tmp_path / "builtin.safetensors"
    load_export_tool().write_safetensors({name: t.contiguous() for name, t in state.items()}, path, {"format": "pt"})
    loaded = safetensors_torch.load_file(str(path))
    assert sorted(loaded) == sorted(state)
    assert all(torch.equal(loaded[name], state[name]) for name in state)
    model = TransformerLM(**CONFIG)
    model.load_safetensors(path)
    assert relative_error(model.logits(tokens), want) <= TOLERANCE["cpu", "fp32"]
