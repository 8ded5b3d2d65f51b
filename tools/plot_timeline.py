#!/usr/bin/env python3
"""plot_timeline.py — draws one step of a kernel timeline as a PNG: a horizontal lane per (device, stream),
compute streams first, then the communication streams (those that ran NCCL kernels), every kernel,
memcpy and memset a bar coloured by its class (matmul, attention, other, communication, memory), over
the window of one outermost NVTX range ("step 2" by default: the first profiled step may carry one-time
costs). The legend gives each class's share of the window's device time.

The input is the document `flashtrain bench model --profile kernels --kernels-json PATH` writes
(benchmark "kernel-profile", with its records) or a "kernel-timeline" document: "records" with kind, name,
class, device, stream, start_ns, end_ns (relative to the profile's start) and ranges; "windows" with
name, start_ns, end_ns; "streams" with device, stream, lane. Needs matplotlib (Agg backend, no display).

    python3 tools/plot_timeline.py bench/results/kernels-small-train.json --out docs/figures/timeline.png
    python3 tools/plot_timeline.py kernels.json --window "step 5"      (--list shows the windows)
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.patches import Patch  # noqa: E402

CLASSES = ("matmul", "attention", "other", "communication", "memory")
CLASS_COLORS = {"matmul": "#4c72b0", "attention": "#dd8452", "other": "#55a868", "communication": "#c44e52",
                "memory": "#8172b3"}
DOCUMENTS = ("kernel-profile", "kernel-timeline")


def load(path):
    """The kernel document at path; ValueError when it is another kind of document or lists no records."""
    with open(path, encoding="utf-8") as f:
        try:
            doc = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not a JSON document ({e})") from e
    if not isinstance(doc, dict) or doc.get("benchmark") not in DOCUMENTS:
        raise ValueError(f"{path}: expected a kernel-profile or kernel-timeline document "
                         "(flashtrain bench model --profile kernels --kernels-json PATH)")
    if not isinstance(doc.get("records"), list):
        omitted = doc.get("records_omitted")
        why = f" (too many to list: {omitted})" if omitted is not None else ""
        raise ValueError(f"{path}: the document lists no records{why}; profile fewer steps")
    return doc


def record_class(record):
    """The record's class as the C++ summary gave it; memory for copies and sets, other when unknown."""
    cls = record.get("class")
    if cls in CLASSES:
        return cls
    return "memory" if record.get("kind") in ("memcpy", "memset") else "other"


def windows(doc):
    """[(name, start_ns, end_ns)] of the outermost ranges, in order; the whole profile when none."""
    out = [(w["name"], int(w["start_ns"]), int(w["end_ns"])) for w in doc.get("windows", [])
           if isinstance(w, dict) and {"name", "start_ns", "end_ns"} <= w.keys()]
    if not out and doc["records"]:
        out = [("profile", min(int(r["start_ns"]) for r in doc["records"]),
                max(int(r["end_ns"]) for r in doc["records"]))]
    return out


def pick_window(doc, name=None):
    """The window called name; by default "step 2" if present, else the first "step ..." one, else the first.
    ValueError naming the windows when name is not among them, or when there is none."""
    found = windows(doc)
    if not found:
        raise ValueError("the document has no records to draw")
    if name is not None:
        for w in found:
            if w[0] == name:
                return w
        raise ValueError(f"no window '{name}'; the windows are: " + ", ".join(w[0] for w in found))
    for w in found:
        if w[0] == "step 2":
            return w
    steps = [w for w in found if w[0].startswith("step ")]
    return steps[0] if steps else found[0]


def lanes(doc):
    """[(device, stream, lane)] in drawing order (top to bottom): compute streams, then communication
    streams, each by device and stream id. A stream is communication when the document says so or when
    it ran a communication kernel."""
    kinds = {}
    for s in doc.get("streams", []):
        if isinstance(s, dict) and "device" in s and "stream" in s:
            kinds[(int(s["device"]), int(s["stream"]))] = s.get("lane", "compute")
    for r in doc["records"]:
        key = (int(r.get("device", 0)), int(r.get("stream", 0)))
        if record_class(r) == "communication":
            kinds[key] = "communication"
        kinds.setdefault(key, "compute")
    order = sorted(kinds, key=lambda k: (kinds[k] == "communication", k))
    return [(device, stream, kinds[(device, stream)]) for device, stream in order]


def bars(doc, window):
    """{(device, stream): {class: [(start_ms, width_ms)]}} of the records overlapping the window, clipped
    to it, with times in ms from the window's start."""
    _, start, end = window
    out = {}
    for r in doc["records"]:
        r_start, r_end = int(r["start_ns"]), int(r["end_ns"])
        if not (r_start < end and (r_end > start or r_start >= start)):
            continue  # outside the window (a record of no length counts when it starts inside)
        s, e = max(r_start, start), min(r_end, end)
        key = (int(r.get("device", 0)), int(r.get("stream", 0)))
        out.setdefault(key, {}).setdefault(record_class(r), []).append(((s - start) / 1e6, max(e - s, 0) / 1e6))
    return out


def class_shares(lane_bars):
    """{class: fraction of the drawn device time}."""
    totals = {c: 0.0 for c in CLASSES}
    for by_class in lane_bars.values():
        for cls, spans in by_class.items():
            totals[cls] += sum(width for _, width in spans)
    whole = sum(totals.values())
    return {c: (t / whole if whole > 0 else 0.0) for c, t in totals.items()}


def draw(doc, out_path, window_name=None, title=None):
    """Writes the figure of one window of doc to out_path (PNG) and returns out_path."""
    window = pick_window(doc, window_name)
    lane_list = lanes(doc)
    lane_bars = bars(doc, window)
    shares = class_shares(lane_bars)
    width_ms = max((window[2] - window[1]) / 1e6, 1e-6)
    min_width = width_ms / 2000  # so that the shortest kernels stay visible

    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.6 * len(lane_list)), dpi=120)
    labels = []
    for row, (device, stream, lane) in enumerate(lane_list):
        y = len(lane_list) - 1 - row
        for cls, spans in lane_bars.get((device, stream), {}).items():
            ax.broken_barh([(s, max(w, min_width)) for s, w in spans], (y - 0.4, 0.8),
                           facecolors=CLASS_COLORS[cls], edgecolor="none")
        labels.append((y, f"cuda:{device} stream {stream}\n({lane})"))
    ax.set_yticks([y for y, _ in labels], [text for _, text in labels], fontsize=8)
    ax.set_ylim(-0.6, len(lane_list) - 0.4)
    ax.set_xlim(0, width_ms)
    ax.set_xlabel(f"time in {window[0]} (ms)")
    ax.grid(True, axis="x", alpha=0.3)
    handles = [Patch(color=CLASS_COLORS[c], label=f"{c} ({100 * shares[c]:.1f}%)") for c in CLASSES if shares[c] > 0]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)

    config = doc.get("config", {})
    if title is None:
        parts = [str(config[k]) for k in ("size", "precision", "mode") if k in config]
        if "ctx" in config:
            parts.append(f"ctx {config['ctx']}")
        if "batch" in config:
            parts.append(f"batch {config['batch']}")
        title = f"kernel timeline of {window[0]} ({width_ms:.3f} ms)"
        if parts:
            title += ": " + ", ".join(parts)
        if doc.get("device"):
            title += f"\n{doc['device']}"
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    out_dir = os.path.dirname(out_path)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    fig.savefig(out_path, format="png")
    plt.close(fig)
    return out_path


def main(argv=None):
    parser = argparse.ArgumentParser(description="Draw one step of a flashtrain kernel timeline (JSON) as a PNG.")
    parser.add_argument("timeline", help="the --kernels-json document of flashtrain bench model --profile kernels")
    parser.add_argument("--window", help='the outermost range to draw (default: "step 2", else the first step)')
    parser.add_argument("--list", action="store_true", help="print the windows (name, start, length) and exit")
    parser.add_argument("--out", help="PNG path (default: the input path with .png)")
    parser.add_argument("--title", help="figure title (default: from the document's config)")
    args = parser.parse_args(argv)
    try:
        doc = load(args.timeline)
        if args.list:
            for name, start, end in windows(doc):
                print(f"{name}\t{start / 1e6:.3f} ms\t{(end - start) / 1e6:.3f} ms")
            return 0
        out = args.out or os.path.splitext(args.timeline)[0] + ".png"
        print(draw(doc, out, args.window, args.title))
    except (OSError, ValueError) as e:
        print(f"plot_timeline.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
