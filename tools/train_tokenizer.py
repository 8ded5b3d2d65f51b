#!/usr/bin/env python3
"""train_tokenizer.py — trains a byte-level BPE tokenizer (GPT-2 style: ByteLevel pre-tokenizer and decoder,
the 256 byte tokens in the vocabulary, "<|endoftext|>" as an added special token with id 0) on text files
with the Hugging Face `tokenizers` package, and writes its tokenizer.json, which flashtrain reads
(src/text/tokenizer.h).
    python3 tools/train_tokenizer.py --input corpus/ more.txt --vocab-size 8192 --output tokenizer.json
    python3 tools/train_tokenizer.py --input "$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')" \
        --glob '*.py' --exclude site-packages --vocab-size 4096 --output stdlib-tokenizer.json
Folders are searched recursively for files matching --glob; files are read as UTF-8 with ill-formed bytes
replaced (as flashtrain reads them)."""
import argparse
import fnmatch
import os
import sys

END_OF_TEXT = "<|endoftext|>"


def find_files(inputs, pattern, exclude):
    files = []
    for path in inputs:
        if os.path.isdir(path):
            for folder, dirs, names in os.walk(path):
                dirs[:] = sorted(d for d in dirs if d not in exclude)
                files += [os.path.join(folder, n) for n in sorted(names) if fnmatch.fnmatch(n, pattern)]
        elif os.path.isfile(path):
            files.append(path)
        else:
            sys.exit(f"train_tokenizer: error: --input {path}: no such file or folder")
    return files


def read_documents(files):
    for path in files:
        with open(path, "rb") as f:
            yield f.read().decode("utf-8", "replace")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--input", nargs="+", required=True, help="text files or folders (searched recursively)")
    parser.add_argument("--glob", default="*", help="file name pattern inside folders (default: every file)")
    parser.add_argument("--exclude", nargs="*", default=[], help="folder names to skip inside folders")
    parser.add_argument("--vocab-size", type=int, default=8192, help="vocabulary size, the 257 base tokens included")
    parser.add_argument("--min-frequency", type=int, default=2, help="pairs seen fewer times are not merged")
    parser.add_argument("--output", required=True, help="the tokenizer.json to write")
    args = parser.parse_args()
    if args.vocab_size < 257:
        sys.exit(f"train_tokenizer: error: --vocab-size must be at least 257 (256 bytes and {END_OF_TEXT}), "
                 f"given {args.vocab_size}")

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    files = find_files(args.input, args.glob, set(args.exclude))
    size = sum(os.path.getsize(f) for f in files)
    if size == 0:
        sys.exit(f"train_tokenizer: error: no text in --input {' '.join(args.input)} (glob {args.glob!r})")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=args.vocab_size, min_frequency=args.min_frequency,
                                  special_tokens=[END_OF_TEXT], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(read_documents(files), trainer=trainer, length=len(files))
    tokenizer.save(args.output)
    print(f"train_tokenizer: {len(files)} files, {size / 1e6:.1f} MB -> {args.output} "
          f"(vocabulary {tokenizer.get_vocab_size()})", file=sys.stderr)


if __name__ == "__main__":
    main()
