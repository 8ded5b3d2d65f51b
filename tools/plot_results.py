#!/usr/bin/env python3
"""plot_results.py — figures from bench/results JSON documents (design.md, "Results JSON"), one set per
document, named after it (bench/results/attention-scaling-h200.json -> OUT/attention-scaling-h200-*.png):

  attention, attention-leaderboard   -latency.png  fwd/bwd/fwd+bwd ms vs sequence length N, a line per
                                                   implementation, dtype and head dim D (and B, H, causal
                                                   where the document varies them)
                                     -tflops.png   the same in TFLOP/s
                                     -memory.png   peak and before-backward memory (GiB) vs N
  model                              -step-time.png  step time (median ms) vs model size, a panel per
                                                     mode, a line per context and precision
                                     -memory.png     peak memory (GiB) vs model size
                                     -throughput.png tokens/s vs model size
  memory-timeline                    -timeline.png the active-memory timeline (tools/plot_memory.py)

Rows that ran out of memory ("oom": true) are marked with an x at the top of the axes instead of a
point; rows missing a figure or a coordinate are left out; other benchmarks are skipped with a note.
Needs matplotlib (Agg backend, no display).

    python3 tools/plot_results.py bench/results/*.json --out docs/figures/
"""

import argparse
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.lines import Line2D  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_memory  # noqa: E402

# A line per series: its colour from the colour fields, its dash from the style field.
ATTENTION_STYLE, ATTENTION_COLOURS = "impl", ("dtype", "D", "B", "H", "causal")
MODEL_STYLE, MODEL_COLOURS = "precision", ("ctx", "attention", "batch")
SIZE_ORDER = ("tiny", "small", "medium", "large", "xl", "2.7b")
DASHES = ("-", "--", ":", "-.")


def number(value):
    """value as a finite float, or None (missing, null, text, NaN, infinite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def describe(field, value):
    if field == "causal":
        return "causal" if value else "non-causal"
    if field in ("D", "B", "H", "ctx", "batch"):
        return f"{field}={value}"
    return str(value)


def values_of(rows, field):
    """The distinct values of field among rows, in order of appearance."""
    seen = []
    for r in rows:
        if r.get(field) not in seen:
            seen.append(r.get(field))
    return seen


def document_title(doc, kind, rows, fields):
    """"kind: benchmark, sweep NAME, the fields that are the same in every row" and the device."""
    parts = [str(doc.get("benchmark", "?"))]
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    if config.get("sweep"):
        parts.append(f"sweep {config['sweep']}")
    for f in fields:
        values = values_of(rows, f)
        if len(values) == 1 and values[0] is not None:
            parts.append(describe(f, values[0]))
    line = f"{kind}: " + ", ".join(parts)
    if doc.get("device"):
        line += f"\n{doc['device']}"
    return line


def save(fig, out_dir, name):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def draw_panels(panels, x_of, style_field, colour_fields, title, x_label, log_x=False, x_ticks=None):
    """panels: (panel title, rows, y field, y label) each. A line per series of a panel's rows (colour by
    colour_fields, dash by style_field, the legend naming only the fields that vary); OOM rows as x marks at
    the top. Returns the figure, or None when no panel has a point."""
    all_rows = [r for _, rows, _, _ in panels for r in rows]
    styles = values_of(all_rows, style_field)
    colour_keys = []
    for r in all_rows:
        key = tuple(r.get(f) for f in colour_fields)
        if key not in colour_keys:
            colour_keys.append(key)
    named = [f for f in colour_fields if len(values_of(all_rows, f)) > 1]
    name_style = len(styles) > 1 or not named
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def plottable(r, field):
        return not r.get("oom") and x_of(r) is not None and number(r.get(field)) is not None

    drawable = [p for p in panels if any(plottable(r, p[2]) for r in p[1])]
    if not drawable:
        return None
    fig, axes = plt.subplots(1, len(drawable), figsize=(5.5 * len(drawable), 4.2), dpi=110, squeeze=False)
    handles = {}
    for ax, (panel_title, rows, field, y_label) in zip(axes[0], drawable):
        values = []
        series = {}
        for r in rows:
            series.setdefault((r.get(style_field), tuple(r.get(f) for f in colour_fields)), []).append(r)
        for (style, colour_key), members in series.items():
            points = sorted((x_of(r), number(r.get(field))) for r in members if plottable(r, field))
            ooms = sorted(x_of(r) for r in members if r.get("oom") and x_of(r) is not None)
            colour = palette[colour_keys.index(colour_key) % len(palette)]
            dash = DASHES[styles.index(style) % len(DASHES)]
            label = " ".join(([describe(style_field, style)] if name_style else []) +
                             [describe(f, v) for f, v in zip(colour_fields, colour_key) if f in named])
            if points:
                values += [p[1] for p in points]
                (line,) = ax.plot([p[0] for p in points], [p[1] for p in points], dash, marker="o", ms=3,
                                  color=colour, label=label)
                handles.setdefault(label, line)
            if ooms:
                ax.plot(ooms, [0.97] * len(ooms), "x", color=colour, ms=7, mew=2, transform=ax.get_xaxis_transform())
                handles.setdefault("out of memory", Line2D([], [], ls="", marker="x", color="0.3", ms=7, mew=2))
        if log_x:
            ax.set_xscale("log", base=2)
        if x_ticks:
            ax.set_xticks(range(len(x_ticks)), x_ticks)
            ax.set_xlim(-0.5, len(x_ticks) - 0.5)
        if values and min(values) > 0 and max(values) / min(values) > 50:  # spans decades: log scale
            ax.set_yscale("log")
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.set_title(panel_title, fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0][-1].legend(list(handles.values()), list(handles.keys()), fontsize=7, loc="upper left",
                       bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.suptitle(title, fontsize=10)
    return fig


def plot_attention(doc, stem, out_dir):
    rows = [r for r in doc.get("rows", []) if isinstance(r, dict)]
    figures = (
        ("latency", [("forward", "fwd_ms", "ms"), ("backward", "bwd_ms", "ms"),
                     ("forward + backward", "fwd_bwd_ms", "ms")]),
        ("tflops", [("forward", "fwd_tflops", "TFLOP/s"), ("backward", "bwd_tflops", "TFLOP/s"),
                    ("forward + backward", "fwd_bwd_tflops", "TFLOP/s")]),
        ("memory", [("peak over forward + backward", "peak_gib", "GiB"),
                    ("after forward, before backward", "mem_before_bwd_gib", "GiB")]),
    )
    fields = (ATTENTION_STYLE,) + ATTENTION_COLOURS
    written = []
    for kind, panels in figures:
        fig = draw_panels([(t, rows, f, y) for t, f, y in panels], lambda r: number(r.get("N")), ATTENTION_STYLE,
                          ATTENTION_COLOURS, document_title(doc, kind, rows, fields), "sequence length N", log_x=True)
        if fig is not None:
            written.append(save(fig, out_dir, f"{stem}-{kind}.png"))
    return written


def size_positions(rows):
    """{size name: x position}: sizes ordered by parameter count (else the known order, else first seen)."""
    params, first_seen = {}, {}
    for i, r in enumerate(rows):
        size = r.get("size")
        if size is None:
            continue
        first_seen.setdefault(size, i)
        if number(r.get("parameters")) is not None:
            params[size] = number(r["parameters"])

    def order(size):
        known = SIZE_ORDER.index(size) if size in SIZE_ORDER else len(SIZE_ORDER)
        return (params.get(size, math.inf), known, first_seen[size])

    return {size: i for i, size in enumerate(sorted(first_seen, key=order))}, params


def plot_model(doc, stem, out_dir):
    rows = [r for r in doc.get("rows", []) if isinstance(r, dict)]
    positions, params = size_positions(rows)
    ticks = [f"{s}\n{params[s] / 1e6:.0f}M" if s in params else str(s) for s in sorted(positions, key=positions.get)]
    modes = values_of(rows, "mode")
    figures = (
        ("step-time", "step_ms", "median step time (ms)"),
        ("memory", "peak_gib", "peak memory (GiB)"),
        ("throughput", "tokens_per_s", "tokens/s"),
    )
    fields = ("mode", MODEL_STYLE) + MODEL_COLOURS
    written = []
    for kind, field, y_label in figures:
        panels = [(f"mode {m}" if m is not None else "all rows", [r for r in rows if r.get("mode") == m], field,
                   y_label) for m in modes]
        fig = draw_panels(panels, lambda r: positions.get(r.get("size")), MODEL_STYLE, MODEL_COLOURS,
                          document_title(doc, kind, rows, fields), "model size", x_ticks=ticks)
        if fig is not None:
            written.append(save(fig, out_dir, f"{stem}-{kind}.png"))
    return written


def plot_memory_timeline(doc, stem, out_dir):
    return [plot_memory.draw(doc, os.path.join(out_dir, f"{stem}-timeline.png"))]


PLOTTERS = {
    "attention": plot_attention,
    "attention-leaderboard": plot_attention,
    "model": plot_model,
    "memory-timeline": plot_memory_timeline,
}


def plot_document(path, out_dir):
    """The figures written for the document at path; raises OSError or ValueError for unreadable files."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("rows", []), list):
        raise ValueError(f"{path}: not a results document (expected an object with a rows list)")
    plotter = PLOTTERS.get(doc.get("benchmark"))
    if plotter is None:
        print(f"{path}: no figures for benchmark {doc.get('benchmark')!r}; skipped", file=sys.stderr)
        return []
    stem = os.path.splitext(os.path.basename(path))[0]
    written = plotter(doc, stem, out_dir)
    if not written:
        print(f"{path}: no plottable rows (all OOM or without figures); no figure", file=sys.stderr)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description="Figures from flashtrain bench/results JSON documents.")
    parser.add_argument("documents", nargs="+", help="results JSON files (bench/results/*.json)")
    parser.add_argument("--out", default="docs/figures", help="folder of the PNG files (created when missing)")
    args = parser.parse_args(argv)
    failed = 0
    for path in args.documents:
        try:
            for figure in plot_document(path, args.out):
                print(figure)
        except (OSError, ValueError) as e:
            print(f"plot_results.py: {path}: {e}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
