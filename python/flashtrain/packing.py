"""flashtrain.packing — the Python data path of training on packed documents (docs/training.md, Note [Packed
documents]): the document layout of a (B, T) token batch, as `flashtrain train --pack-documents --eos-id N`
computes it, for flash_attention_varlen and RoPE positions.

    cu_seqlens, positions, documents = flashtrain.packing.document_layout(tokens, eos_id)
    o = flash_attention_varlen(q, k, v, cu, cu, T, T, causal=True)   # q (B*T, H, D) rows of the batch

Each row is split after every eos_id token (a document ends with its end-of-document token; every row also
starts a document). cu_seqlens has the fixed capacity B*T + 1, its entries past the documents equal to B*T
(empty documents), so one shape serves every batch; T bounds every document's length (max_seqlen)."""
import numpy as np

from . import _C


def document_layout(tokens, eos_id):
    """(cu_seqlens (B*T + 1) int32, positions (B, T) int32, documents) of tokens (B, T) integer ids: document
    starts over the tokens flattened row by row, each token's position in its document, the document count."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.size == 0:
        raise ValueError(f"document_layout: tokens must be a non-empty (batch, seq) array, given shape {tokens.shape}")
    if tokens.dtype.kind not in "iu":
        raise TypeError(f"document_layout: tokens must be integers, given dtype {tokens.dtype}")
    if np.abs(tokens).max() >= 2**31:
        raise ValueError("document_layout: token ids must fit int32")
    return _C.document_layout(np.ascontiguousarray(tokens, dtype=np.int32), int(eos_id))


__all__ = ["document_layout"]
