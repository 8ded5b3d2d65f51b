"""test_generate.py — flashtrain.model.TransformerLM.generate (KV-cache generation, src/model/generator.h) on the
tiny model: greedy tokens equal the argmax of repeated logits() calls over the tokens so far (fp32 on the CPU,
and on CUDA when a GPU is present, where near ties may split within a small margin), one prompt or a batch;
seeded sampling is reproducible; a prompt too long for the context and top_p outside (0, 1] raise ValueError."""
import numpy as np
import pytest

import flashtrain
from flashtrain.model import TransformerLM

DEVICES = ["cpu"] + (["cuda"] if flashtrain.built_with_cuda and flashtrain.cuda_available() else [])


@pytest.mark.parametrize("device", DEVICES)
def test_greedy_equals_repeated_logits(device):
    model = TransformerLM("tiny", device=device, max_batch=2)
    prompts = np.array([[5, 17, 3], [90, 1, 44]])
    new = model.generate(prompts, max_new_tokens=12, temperature=0)
    assert new.shape == (2, 12) and new.dtype == np.int32
    seqs = prompts.copy()
    for i in range(12):
        last = model.logits(seqs)[:, -1, :]  # (B, V)
        for b in range(2):
            margin = last[b].max() - last[b, new[b, i]]
            assert margin <= (0 if device == "cpu" else 1e-3), (b, i, margin)
        seqs = np.concatenate([seqs, new[:, i:i + 1]], axis=1)
    np.testing.assert_array_equal(model.generate(prompts[0], max_new_tokens=12, temperature=0), new[0])


def test_seeded_sampling_is_reproducible():
    model = TransformerLM("tiny")
    a = model.generate([1, 2, 3], max_new_tokens=16, temperature=1.2, top_k=30, top_p=0.9, seed=5)
    np.testing.assert_array_equal(model.generate([1, 2, 3], max_new_tokens=16, temperature=1.2, top_k=30, top_p=0.9,
                                                 seed=5), a)
    assert not np.array_equal(model.generate([1, 2, 3], max_new_tokens=16, temperature=1.2, seed=6), a)


def test_bad_requests_raise():
    model = TransformerLM("tiny")  # context 32
    with pytest.raises(ValueError, match="too long for the model's context of 32"):
        model.generate(np.ones(32, dtype=np.int64), max_new_tokens=1)
    for top_p in (0.0, 1.5):
        with pytest.raises(ValueError, match=r"top-p must be in \(0, 1\]"):
            model.generate([1], max_new_tokens=2, top_p=top_p)
