#!/usr/bin/env python3
"""plot_val_loss.py — the training and validation loss curves of a `flashtrain train --json` document as a
PNG, with a horizontal line at a baseline loss (e.g. tools/unigram_loss.py's).
    python3 tools/plot_val_loss.py train.json --baseline 5.12 --baseline-label unigram --output val_loss.png"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("document", help="the results document of flashtrain train --json")
    parser.add_argument("--baseline", type=float, help="a loss drawn as a horizontal line")
    parser.add_argument("--baseline-label", default="baseline")
    parser.add_argument("--output", required=True, help="the PNG to write")
    args = parser.parse_args()
    with open(args.document) as f:
        doc = json.load(f)
    rows = doc.get("rows", [])
    val = [(r["step"], r["val_loss"]) for r in rows if r.get("val_loss") is not None]
    if not val:
        sys.exit(f"plot_val_loss: error: {args.document} has no val_loss rows (train with --val-data)")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], color="0.7", label="training loss")
    ax.plot(*zip(*val), marker="o", label="validation loss")
    if args.baseline is not None:
        ax.axhline(args.baseline, color="tab:red", linestyle="--", label=f"{args.baseline_label} ({args.baseline:.3f})")
    config = doc.get("config", {})
    ax.set_title(f"flashtrain {config.get('size', '')} {config.get('precision', '')} on {doc.get('device', '')}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"plot_val_loss: wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
