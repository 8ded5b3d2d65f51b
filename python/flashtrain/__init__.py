"""flashtrain — FlashAttention-2 forward and backward from the flashtrain C++/CUDA library, for every
variant of its attention contract: causal (bottom-right aligned), sliding window (left, right), sink
tokens, gpt-oss sink logits, custom scale, GQA/MQA, any strides with a contiguous last dim, in float32,
float16 and bfloat16, on the host or a CUDA device.

    flashtrain.attention_forward(q, k, v, o, lse, ...)   any DLPack arrays (torch, numpy, cupy), outputs given
    flashtrain.attention_backward(q, k, v, o, lse, d_o, dq, dk, dv, ...)
    flashtrain.attention_varlen_forward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, ...)
    flashtrain.attention_varlen_backward(...)            packed sequences (total, H, D), int32 cumulative lengths
    flashtrain.numpy.attention(q, k, v, ...)             numpy arrays in, (o, lse) out, on the host
    flashtrain.torch.flash_attention(q, k, v, ...)       autograd, torch.compile, an nn.Module (imports torch)
    flashtrain.model.TransformerLM(size, ...)            the LM engine's forward: load safetensors, logits
    flashtrain.packing.document_layout(tokens, eos_id)   packed documents: cumulative lengths and positions

Errors keep the library's message: ValueError (invalid argument), TypeError (a dtype other than
float32/float16/bfloat16), NotImplementedError (unsupported here: head dim, a CUDA array in a CPU-only
build, ...), MemoryError (out of memory), RuntimeError (files that are missing or corrupt, CUDA failures
and the rest; bytes of a message that are not UTF-8 appear as \\xNN escapes). Outputs must not share
memory with each other or with an input (ValueError). NaN in an input gives NaN in the outputs it
reaches: a query row of NaN gives that row's O and L NaN.
"""
import importlib

from . import _C
from . import model
from . import packing
from . import numpy
from ._C import (__version__, attention_backward, attention_forward, attention_varlen_backward,
                 attention_varlen_forward, built_with_cuda, cuda_available, gemm_autotune, git_commit,
                 set_gemm_autotune)

__all__ = ["attention_forward", "attention_backward", "attention_varlen_forward", "attention_varlen_backward",
           "built_with_cuda", "cuda_available", "gemm_autotune", "git_commit", "model", "numpy", "packing",
           "set_gemm_autotune", "torch"]


def __getattr__(name):
    # flashtrain.torch imports torch, so it loads on first use rather than with the package.
    if name == "torch":
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'flashtrain' has no attribute '{name}'")
