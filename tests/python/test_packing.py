"""test_packing.py — the Python data path of packed documents, numpy only (CI): flashtrain.packing.document_layout
on a hand-checked batch, and TransformerLM.logits(tokens, eos_id=...) equal to each document's logits computed
alone (attention within the document, RoPE positions from its start), while whole rows differ."""
import numpy as np
import pytest

import flashtrain
from flashtrain.model import TransformerLM
from flashtrain.packing import document_layout

EOS = 3


def test_document_layout_splits_rows_after_each_end_of_document():
    tokens = np.array([[5, 3, 7, 8, 3, 9, 9],
                       [3, 3, 6, 6, 6, 6, 3]])
    cu, positions, documents = document_layout(tokens, EOS)
    assert documents == 6
    assert cu.dtype == np.int32 and positions.dtype == np.int32
    np.testing.assert_array_equal(cu, [0, 2, 5, 7, 8, 9, 14, 14, 14, 14, 14, 14, 14, 14, 14])
    np.testing.assert_array_equal(positions, [[0, 1, 0, 1, 2, 0, 1], [0, 0, 0, 1, 2, 3, 4]])


def test_document_layout_refuses_bad_tokens():
    with pytest.raises(ValueError, match="non-empty"):
        document_layout(np.zeros((0, 4), dtype=np.int32), EOS)
    with pytest.raises(TypeError, match="integers"):
        document_layout(np.zeros((2, 4)), EOS)


def test_packed_logits_equal_each_document_alone():
    model = TransformerLM("tiny", context_length=24, max_batch=2)
    rng = np.random.default_rng(0)
    tokens = rng.integers(EOS + 1, model.vocab_size, size=(2, 24))
    tokens[0, [4, 5, 13]] = EOS
    tokens[1, [0, 20]] = EOS
    packed = model.logits(tokens, eos_id=EOS)                     # (2, 24, V)
    cu, _, documents = document_layout(tokens, EOS)
    flat = tokens.reshape(-1)
    alone = np.concatenate([model.logits(flat[cu[d]:cu[d + 1]][None])[0] for d in range(documents)])  # (48, V)
    np.testing.assert_allclose(packed.reshape(-1, model.vocab_size), alone, atol=2e-5, rtol=2e-5)
    whole_rows = model.logits(tokens)
    assert np.abs(whole_rows - packed).max() > 1e-3
