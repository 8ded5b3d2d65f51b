"""flashtrain.model — the flashtrain Transformer LM (docs/design.md's model contract, src/model) for inference from
numpy: build a config, load weights exported from the reference PyTorch model
(tools/export_reference_safetensors.py) or a flashtrain checkpoint, and compute fp32 logits.

    model = flashtrain.model.TransformerLM("small", vocab_size=10000, device="cuda", precision="bf16")
    model = flashtrain.model.TransformerLM(d_model=64, d_ff=172, num_layers=2, num_heads=4, vocab_size=97,
                                           context_length=32)
    model.load_safetensors("model.safetensors")   # RuntimeError naming every missing/mismatched tensor
    logits = model.logits(tokens)                 # tokens (B, T) ints -> (B, T, vocab_size) float32
    logits = model.logits(tokens, eos_id=0)       # packed documents: attention within each document
    new = model.generate(prompt, max_new_tokens=20, temperature=0.8, top_k=50, seed=1)  # KV-cache decoding
"""
import os

import numpy as np

from . import _C


class TransformerLM:
    """The Transformer LM for inference (forward only; no gradients or backward buffers are allocated).

    size: a named config ("tiny", "small", "medium", "large", "xl", "2.7b", "8b") or None; the keyword fields
    replace its values (without a size, d_model, d_ff, num_layers and num_heads are required; vocab_size defaults
    to 10000, context_length to 512 and rope_theta to 10000). A bad shape (num_heads not dividing d_model, an odd
    head dim or one above 256) raises ValueError naming the field. device: "cpu" or "cuda[:N]". precision: "fp32" (exact fp32 GEMMs) or
    "bf16" (autocast-style mixed precision: bf16 GEMM and attention operands, fp32 norms and accumulation).
    max_batch: sequences per forward (logits() splits larger batches). Parameters start randomly initialised."""

    def __init__(self, size=None, *, d_model=None, d_ff=None, num_layers=None, num_heads=None, vocab_size=None,
                 context_length=None, rope_theta=None, device="cpu", precision="fp32", max_batch=4):
        self._model = _C.TransformerLM(size, d_model=d_model, d_ff=d_ff, num_layers=num_layers, num_heads=num_heads,
                                       vocab_size=vocab_size, context_length=context_length, rope_theta=rope_theta,
                                       device=device, precision=precision, max_batch=max_batch)

    def load_safetensors(self, path):
        """Every parameter from a safetensors file under its state-dict name (token_embeddings.weight,
        layers.N.attn.q_proj.weight, ..., lm_head.weight), fp32; optimizer.* entries of a checkpoint are
        ignored. A missing, unexpected or mismatched (dtype or shape) tensor raises RuntimeError listing all
        of them, before any parameter changes; so does a file that is missing, corrupt (its header is read
        without recursion, within size and nesting limits) or not a regular file (a FIFO or a folder is
        refused at once). A path holding a NUL character raises ValueError, as open() does."""
        self._model.load_safetensors(os.fspath(path))

    def logits(self, tokens, *, eos_id=None):
        """(B, T, vocab_size) float32 logits of tokens (B, T): integer ids in [0, vocab_size), T at most
        context_length; position t sees tokens 0..t (causal). eos_id: packed documents (flashtrain.packing),
        each row split after every eos_id token; position t then sees only the earlier tokens of its own
        document, and RoPE positions restart at each document's start."""
        tokens = np.asarray(tokens)
        if tokens.ndim != 2:
            raise ValueError(f"TransformerLM.logits: tokens must be (batch, seq), given shape {tokens.shape}")
        if tokens.dtype.kind not in "iu":
            raise TypeError(f"TransformerLM.logits: tokens must be integers, given dtype {tokens.dtype}")
        # Checked here, before the int32 cast and before logits() splits the batch into forwards of max_batch.
        outside = (tokens < 0) | (tokens >= self.vocab_size)
        if outside.any():
            position = [int(i) for i in np.argwhere(outside)[0]]
            raise ValueError(f"TransformerLM.logits: token id {tokens[tuple(position)]} at position {position} of "
                             f"tokens {list(tokens.shape)} is out of range: expected 0 <= id < vocab_size "
                             f"{self.vocab_size}")
        ids = np.ascontiguousarray(tokens, dtype=np.int32)  # (B, T)
        out = np.empty(ids.shape + (self.vocab_size,), dtype=np.float32)  # (B, T, V)
        self._model.logits(ids, out, None if eos_id is None else int(eos_id))
        return out

    def generate(self, prompt, max_new_tokens=32, *, temperature=1.0, top_k=0, top_p=1.0, seed=0):
        """The max_new_tokens ids generated after prompt: (T,) ids -> (max_new_tokens,), or (B, T) -> (B,
        max_new_tokens) int32, B at most max_batch. A prefill of the prompt fills a KV cache per layer, then
        each new token is one decode step against it. temperature 0 is greedy (the tokens repeated logits()
        calls would pick); otherwise logits / temperature are sampled among the top_k most likely ids (0 =
        all), then the smallest set reaching probability top_p in (0, 1]; the same seed gives the same
        tokens. The prompt plus the new tokens must fit in context_length."""
        prompt = np.asarray(prompt)
        if prompt.ndim not in (1, 2):
            raise ValueError(f"TransformerLM.generate: prompt must be (seq,) or (batch, seq), given shape {prompt.shape}")
        if prompt.dtype.kind not in "iu":
            raise TypeError(f"TransformerLM.generate: prompt must be integers, given dtype {prompt.dtype}")
        rows = prompt.reshape(-1, prompt.shape[-1]) if prompt.size else prompt.reshape(1, 0)
        out = self._model.generate(rows.astype(np.int64).tolist(), int(max_new_tokens), float(temperature),
                                   int(top_k), float(top_p), int(seed))
        out = np.array(out, dtype=np.int32)  # (B, max_new_tokens)
        return out[0] if prompt.ndim == 1 else out

    def parameter_names(self):
        """The state-dict names, in the order of flashtrain's flat parameter buffer."""
        return self._model.parameter_names()

    def num_parameters(self):
        """The total parameter count."""
        return self._model.num_parameters()

    @property
    def config(self):
        """The model's sizes as a dict (name, d_model, d_ff, num_layers, num_heads, vocab_size, context_length,
        rope_theta)."""
        m = self._model
        return {"name": m.config_name, "d_model": m.d_model, "d_ff": m.d_ff, "num_layers": m.num_layers,
                "num_heads": m.num_heads, "vocab_size": m.vocab_size, "context_length": m.context_length,
                "rope_theta": m.rope_theta}

    @property
    def vocab_size(self):
        return self._model.vocab_size

    @property
    def context_length(self):
        return self._model.context_length

    @property
    def device(self):
        return self._model.device

    @property
    def precision(self):
        return self._model.precision

    def __repr__(self):
        sizes = ", ".join(f"{key}={value}" for key, value in self.config.items() if key != "name")
        return (f"TransformerLM({self.config['name']!r}, {sizes}, device={self.device!r}, "
                f"precision={self.precision!r})")


__all__ = ["TransformerLM"]
