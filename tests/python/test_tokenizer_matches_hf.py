"""test_tokenizer_matches_hf.py — flashtrain's C++ byte-level BPE (src/text/tokenizer.h) against the Hugging
Face `tokenizers` package on the same files: tokenizers trained by tools/train_tokenizer.py (and variants of
their tokenizer.json: add_prefix_space, merges as "a b" strings, ignore_merges) encode a varied corpus —
prose with contractions and numbers, whitespace runs, CJK, emoji sequences, combining marks, other scripts,
Unicode spaces and number forms, "<|endoftext|>" inside text, bytes that are not valid UTF-8, random code
points, Python sources — with `flashtrain data prepare`, whose token file must hold exactly the package's
ids of each document (read as UTF-8 with "replace", as flashtrain reads it), each after the end-of-text id.
Needs the `tokenizers` package and a built flashtrain (FLASHTRAIN_BIN, or build/bin, build-cpu/bin)."""
import json
import os
import random
import subprocess
import sys
import sysconfig
import unicodedata

import numpy as np
import pytest

tokenizers = pytest.importorskip("tokenizers")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def flashtrain_binary():
    candidates = [os.environ.get("FLASHTRAIN_BIN", "")]
    candidates += [os.path.join(os.path.dirname(p), "bin", "flashtrain") for p in sys.path if p.endswith("python")]
    candidates += [os.path.join(ROOT, b, "bin", "flashtrain") for b in ("build", "build-cpu")]
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    pytest.skip("no flashtrain binary (set FLASHTRAIN_BIN or build into build/ or build-cpu/)")


def random_text(seed, length):
    """Random assigned, non-surrogate code points, biased to ASCII, spaces and a few scripts."""
    rng = random.Random(seed)
    pools = [range(0x20, 0x7F), range(0xA0, 0x250), range(0x370, 0x530), range(0x900, 0x980), range(0x3040, 0x3100),
             range(0x4E00, 0x4F00), range(0xAC00, 0xAD00), range(0x1F300, 0x1F650), range(0x2000, 0x2070),
             range(0xFF00, 0xFF70), range(0x300, 0x370)]
    out = []
    while len(out) < length:
        r = rng.random()
        if r < 0.15:
            out.append(rng.choice(" \t\n\r\x0b\x0c\x85\xa0\u3000\u2028 "))
        else:
            c = chr(rng.choice(rng.choice(pools)))
            if unicodedata.category(c) not in ("Cn", "Cs"):
                out.append(c)
    return "".join(out)


def write_corpus(folder):
    docs = {
        "prose.txt": "It's the end. Don't stop; we'll see. They're HERE, I'M sure 'twas 'S 've 'll 'd 'm 't.\n"
                     "Numbers: 3.14159, 2024-11-26, 1e10, 0x1F, 1,000,000 and 42nd.\n" * 3,
        "spaces.txt": "a    b\t\tc   \n\n\n   d \t \n e  \r\n  f" + " " * 17 + "\n\t\n" + "x   ",
        "unicode.txt": "日本語のテキスト。中文字符，한국어 텍스트! 👩‍👩‍👧 👍🏽 🇫🇷 e\u0301 a\u0308o\u0308 "
                       "नमस्ते दुनिया مرحبا بالعالم Ⅻ ² ½ １２３ ＡＢＣ\u00a0nbsp\u3000ideo\u2028line\u0085nel "
                       "Ελληνικά Кириллица ﬁ ß ǅ ʰ ー 〆",
        "special.txt": "before<|endoftext|>after <|endoftext|><|endoftext|> tail<|endo",
        "empty.txt": "",
        "zz_random1.txt": random_text(1, 3000),
        "zz_random2.txt": random_text(2, 3000),
    }
    for name, text in docs.items():
        with open(os.path.join(folder, name), "w", encoding="utf-8", newline="") as f:
            f.write(text)
    with open(os.path.join(folder, "invalid.bin"), "wb") as f:
        f.write(b"abc\xff\xfe def \xc3\x28 x\xe2\x82 \xed\xa0\x80 y\xf0\x9f\x98 ok\x80 \xc0\xaf \xf4\x90\x80\x80"
                b" caf\xc3\xa9 \xe6\x97\xa5" + bytes(range(256)))
    rng = random.Random(3)
    with open(os.path.join(folder, "soup.bin"), "wb") as f:
        f.write(bytes(rng.choice(b" \n\tab\x80\xc3\xa9\xe2\x82\xac\xf0\x9f") for _ in range(4000)))
    stdlib = sysconfig.get_paths()["stdlib"]
    for name in ("textwrap.py", "string.py", "json/decoder.py"):
        with open(os.path.join(stdlib, name), "rb") as src, open(os.path.join(folder, name.replace("/", "_")), "wb") as dst:
            dst.write(src.read())


def expected_ids(tokenizer_path, folder):
    tok = tokenizers.Tokenizer.from_file(tokenizer_path)
    eot = tok.token_to_id("<|endoftext|>")
    ids, where = [], []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            raw = f.read()
        if not raw:
            continue
        doc = [eot] + tok.encode(raw.decode("utf-8", "replace")).ids
        where += [(name, i) for i in range(len(doc))]
        ids += doc
    return np.array(ids, dtype=np.int64), where


def prepare(binary, tokenizer_path, folder, output):
    result = subprocess.run([binary, "data", "prepare", "--tokenizer", tokenizer_path, "--input", folder, "--output",
                             output, "--val-fraction", "0", "--threads", "3"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return np.load(output).astype(np.int64)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    base = tmp_path_factory.mktemp("tokenizer")
    corpus = base / "corpus"
    corpus.mkdir()
    write_corpus(str(corpus))
    trained = str(base / "trained.json")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "train_tokenizer.py"), "--input", str(corpus),
                    "--vocab-size", "1500", "--min-frequency", "1", "--output", trained], check=True, timeout=300)
    return flashtrain_binary(), base, str(corpus), trained


def variant(base, trained, name, edit):
    with open(trained, encoding="utf-8") as f:
        spec = json.load(f)
    edit(spec)
    path = str(base / f"{name}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False)
    return path


def string_merges(spec):
    spec["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]


def prefix_space(spec):
    spec["pre_tokenizer"]["add_prefix_space"] = True


def ignore_merges(spec):
    spec["model"]["ignore_merges"] = True


@pytest.mark.parametrize("name,edit", [("trained", None), ("string_merges", string_merges),
                                       ("prefix_space", prefix_space), ("ignore_merges", ignore_merges)])
def test_ids_match_the_tokenizers_package(setup, name, edit):
    binary, base, corpus, trained = setup
    path = trained if edit is None else variant(base, trained, name, edit)
    want, where = expected_ids(path, corpus)
    got = prepare(binary, path, corpus, str(base / f"{name}.npy"))
    if got.shape != want.shape or not np.array_equal(got, want):
        n = min(len(got), len(want))
        first = next((i for i in range(n) if got[i] != want[i]), n)
        pytest.fail(f"{name}: {len(got)} ids, expected {len(want)}; first difference at {first} "
                    f"({where[min(first, len(where) - 1)]}): got {got[first:first + 8].tolist()}, "
                    f"expected {want[first:first + 8].tolist()}")
    assert len(want) > 5000
