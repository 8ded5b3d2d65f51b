"""test_text_cli_errors.py — the text commands' bad input through the flashtrain binary, as a user meets it:
a malformed tokenizer.json, one that is not byte-level BPE, an empty corpus, a prompt longer than the context,
--max-new-tokens past it, a checkpoint of another shape, --top-p outside (0, 1] — each exits with status 2 and
one "flashtrain: error:" line naming the problem; and the path that works (prepare, train one step, generate).
Needs the `tokenizers` package and a built flashtrain (FLASHTRAIN_BIN, or build/bin, build-cpu/bin)."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("tokenizers")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tokenizer_matches_hf import ROOT, flashtrain_binary  # noqa: E402


def run(*args):
    return subprocess.run([flashtrain_binary(), *map(str, args)], capture_output=True, text=True, timeout=300)


def expect_error(result, *fragments):
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("flashtrain: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[-1], (fragment, lines[-1])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tokenizer (fewer than 300 ids: the corpus is small), token files and a one-step tiny checkpoint
    (vocabulary 300, context 32)."""
    base = tmp_path_factory.mktemp("textcli")
    corpus = base / "corpus"
    corpus.mkdir()
    for i in range(4):
        (corpus / f"doc{i}.txt").write_text(f"def f{i}(x):\n    return x * {i} + 1  # it's fine\n" * 20)
    tokenizer = base / "tok.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "train_tokenizer.py"), "--input", str(corpus),
                    "--vocab-size", "300", "--output", str(tokenizer)], check=True, timeout=300)
    prepared = run("data", "prepare", "--tokenizer", tokenizer, "--input", corpus, "--output", base / "t.npy",
                   "--val-fraction", "0.25")
    assert prepared.returncode == 0, prepared.stderr
    assert "3 documents" in prepared.stdout and "1 documents" in prepared.stdout, prepared.stdout
    ckpt = base / "ckpt"
    trainer = run("train", "--size", "tiny", "--vocab", 300, "--steps", 1, "--batch", 2, "--device", "cpu", "--data",
                  base / "t_train.npy", "--checkpoint-dir", ckpt)
    assert trainer.returncode == 0, trainer.stderr
    return base, tokenizer, ckpt


def test_generate_works(trained):
    base, tokenizer, ckpt = trained
    result = run("generate", "--checkpoint", ckpt, "--tokenizer", tokenizer, "--vocab", 300, "--device", "cpu",
                 "--prompt", "def f",
                 "--max-new-tokens", 8, "--batch", 2, "--seed", 3)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("=== sample") == 2 and "def f" in result.stdout
    assert "ms/token" in result.stderr


def test_bad_tokenizer_files(trained, tmp_path):
    base = trained[0]
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": {"type": "BPE", ')
    expect_error(run("data", "prepare", "--tokenizer", broken, "--input", base / "corpus", "--output", tmp_path / "x.npy"),
                 "is not valid JSON")
    with open(trained[1]) as f:
        spec = json.load(f)
    spec["model"]["type"] = "Unigram"
    other = tmp_path / "unigram.json"
    other.write_text(json.dumps(spec))
    expect_error(run("data", "prepare", "--tokenizer", other, "--input", base / "corpus", "--output", tmp_path / "x.npy"),
                 "not byte-level BPE", "model type is 'Unigram'")


def test_empty_corpus(trained, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.txt").write_text("")
    expect_error(run("data", "prepare", "--tokenizer", trained[1], "--input", tmp_path / "empty", "--output",
                     tmp_path / "x.npy"), "empty corpus")


def test_bad_generation_requests(trained):
    base, tokenizer, ckpt = trained
    common = ["generate", "--checkpoint", ckpt, "--tokenizer", tokenizer, "--device", "cpu", "--vocab", "300"]
    expect_error(run(*common, "--prompt", "x = 1 " * 40), "--prompt is", "too long for the model's context of 32")
    expect_error(run(*common, "--prompt", "def", "--max-new-tokens", 40), "--max-new-tokens 40", "context of 32")
    for top_p in ("0", "1.5", "-1"):
        expect_error(run(*common, "--top-p", top_p), "top-p must be in (0, 1]")
    expect_error(run(*common, "--size", "tiny", "--vocab", 400), "--checkpoint", "token_embeddings.weight",
                 "give the options it was trained with")
