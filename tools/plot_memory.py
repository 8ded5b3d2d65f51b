#!/usr/bin/env python3
"""plot_memory.py — draws the active-memory timeline of a memory profile as a PNG: the bytes flashtrain
holds on the profiled device over time, stacked by what they are for (parameters, gradients, optimizer
state, activations, workspace, other), with the phases (init, warmup, forward, backward, optimizer)
shaded behind and the peak of each phase in the legend.

The input is the document `flashtrain bench model --profile memory --memory-json PATH` writes
(benchmark "memory-timeline": "memory_device", "start_bytes", "phases", "events" with time_ms, device,
bytes, current_bytes, tag, phase, category). Needs matplotlib (Agg backend, no display).

    python3 tools/plot_memory.py bench/results/memory-2.7b-train-h200.json --out docs/figures/memory-2.7b-train.png
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "workspace", "other")
CATEGORY_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860")
PHASE_COLORS = ("#e8e8e8", "#fff2cc", "#dbe9f6", "#fbe0dc", "#e2f0d9", "#ece2f0")


def load(path):
    """The memory-timeline document at path; ValueError when it is another kind of document."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or doc.get("benchmark") != "memory-timeline":
        raise ValueError(f"{path}: expected a memory-timeline document (flashtrain bench model --profile memory)")
    return doc


def stacked_series(doc):
    """(times_ms, {category: bytes list}) for the profiled device: a point at 0, one after every event,
    and one at the end of the last phase. Memory held before recording counts as "other"; a free of such
    memory is taken from "other" (as the C++ summary does)."""
    device = doc.get("memory_device")
    live = {c: 0 for c in CATEGORIES}
    live["other"] = int(doc.get("start_bytes", 0))
    by_tag = {}
    times = [0.0]
    series = {c: [live[c]] for c in CATEGORIES}

    def sample(t):
        times.append(t)
        for c in CATEGORIES:
            series[c].append(live[c])

    for e in doc.get("events", []):
        if device is not None and e.get("device") != device:
            continue
        category = e.get("category") if e.get("category") in CATEGORIES else "other"
        tag = e.get("tag", "")
        size = int(e.get("bytes", 0))
        if size >= 0:
            by_tag[tag] = by_tag.get(tag, 0) + size
            live[category] += size
        else:
            recorded = min(-size, by_tag.get(tag, 0))
            by_tag[tag] = by_tag.get(tag, 0) - recorded
            live[category] -= recorded
            live["other"] -= -size - recorded
        sample(float(e.get("time_ms", times[-1])))
    phases = doc.get("phases", [])
    end = max([times[-1]] + [float(p.get("end_ms", 0.0)) for p in phases])
    sample(end)
    return times, series


def unit_of(max_bytes):
    """(divisor, name): GiB from 1 GiB up, else MiB."""
    return (1024.0**3, "GiB") if max_bytes >= 1024.0**3 else (1024.0**2, "MiB")


def draw(doc, out_path, title=None):
    """Writes the timeline figure of doc to out_path (PNG) and returns out_path."""
    times, series = stacked_series(doc)
    totals = [sum(series[c][i] for c in CATEGORIES) for i in range(len(times))]
    divisor, unit = unit_of(max(totals) if totals else 0)

    fig, ax = plt.subplots(figsize=(10, 5), dpi=120)
    rows = {r.get("phase"): r for r in doc.get("rows", []) if isinstance(r, dict)}
    for i, phase in enumerate(doc.get("phases", [])):
        name = phase.get("name", "?")
        start, end = float(phase.get("start_ms", 0.0)), float(phase.get("end_ms", 0.0))
        peak = rows.get(name, {}).get("peak_bytes")
        label = f"{name} (peak {peak / divisor:.2f} {unit})" if isinstance(peak, (int, float)) else name
        ax.axvspan(start, max(end, start), color=PHASE_COLORS[i % len(PHASE_COLORS)], alpha=0.8, label=label, lw=0)
        if i > 0:
            ax.axvline(start, color="0.4", lw=0.8, ls="--", zorder=3)

    shown = [c for c in CATEGORIES if any(series[c])]
    ax.stackplot(times, [[b / divisor for b in series[c]] for c in shown], step="post",
                 labels=[c.replace("_", " ") for c in shown],
                 colors=[CATEGORY_COLORS[CATEGORIES.index(c)] for c in shown], alpha=0.85)
    ax.step(times, [t / divisor for t in totals], where="post", color="black", lw=1.2, label="active memory")

    config = doc.get("config", {})
    if title is None:
        parts = [str(config[k]) for k in ("size", "precision", "mode") if k in config]
        if "ctx" in config:
            parts.append(f"ctx {config['ctx']}")
        if "batch" in config:
            parts.append(f"batch {config['batch']}")
        title = "memory timeline: " + ", ".join(parts) if parts else "memory timeline"
        if doc.get("device"):
            title += f"\n{doc['device']}"
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel(f"memory held ({unit})")
    ax.set_xlim(left=0, right=max(times[-1], 1e-3))
    ax.set_ylim(bottom=0)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    out_dir = os.path.dirname(out_path)
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
    fig.savefig(out_path, format="png")
    plt.close(fig)
    return out_path


def main(argv=None):
    parser = argparse.ArgumentParser(description="Draw a flashtrain memory timeline (JSON) as a PNG.")
    parser.add_argument("timeline", help="the --memory-json document of flashtrain bench model --profile memory")
    parser.add_argument("--out", help="PNG path (default: the input path with .png)")
    parser.add_argument("--title", help="figure title (default: from the document's config)")
    args = parser.parse_args(argv)
    try:
        doc = load(args.timeline)
    except (OSError, ValueError) as e:
        print(f"plot_memory.py: {e}", file=sys.stderr)
        return 2
    out = args.out or os.path.splitext(args.timeline)[0] + ".png"
    print(draw(doc, out, args.title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
