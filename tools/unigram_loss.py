#!/usr/bin/env python3
"""unigram_loss.py — the validation loss of a unigram model of token files: each id's probability is its
frequency in the training tokens with add-one smoothing over the vocabulary, (count + 1) / (N + V), and the
loss is the mean negative natural log probability of the validation ids — the baseline a language model
must beat, in the units `flashtrain train` reports.
    python3 tools/unigram_loss.py --train tokens_train.npy --val tokens_val.npy --vocab 4096
Prints the loss (one number) on stdout."""
import argparse
import sys

import numpy as np


def unigram_loss(train, val, vocab):
    counts = np.bincount(train, minlength=vocab).astype(np.float64)
    if counts.size > vocab:
        sys.exit(f"unigram_loss: error: the training ids reach {counts.size - 1}, outside --vocab {vocab}")
    log_p = np.log(counts + 1.0) - np.log(train.size + vocab)
    if val.size == 0 or val.max() >= vocab:
        sys.exit("unigram_loss: error: the validation file is empty or has ids outside --vocab")
    return float(-log_p[val].mean())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", required=True, help="training token file (.npy)")
    parser.add_argument("--val", required=True, help="validation token file (.npy)")
    parser.add_argument("--vocab", type=int, required=True, help="vocabulary size")
    args = parser.parse_args()
    train = np.load(args.train).astype(np.int64).ravel()
    val = np.load(args.val).astype(np.int64).ravel()
    print(f"{unigram_loss(train, val, args.vocab):.4f}")


if __name__ == "__main__":
    main()
