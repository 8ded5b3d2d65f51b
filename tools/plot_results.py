#!/usr/bin/env python3
"""plot_results.py — figures from bench/results JSON documents (docs/design.md, "Results JSON"), one set per
document, named after it (bench/results/attention-scaling-h200.json -> OUT/attention-scaling-h200-*.png),
except comm documents, which are drawn together, and model documents of one sweep over sizes (below):

  attention, attention-leaderboard   -latency.png  fwd/bwd/fwd+bwd ms vs sequence length N, a line per
                                                   implementation, dtype and head dim D (and B, H, causal
                                                   where the document varies them)
                                     -tflops.png   the same in TFLOP/s
                                     -memory.png   peak and before-backward memory (GiB) vs N
  model                              -step-time.png  step time (median ms) vs model size (ordered by
                                                     parameter count), a panel per mode, a colour per
                                                     context, a dash per precision (solid, dashed, ... in
                                                     name order: bf16 solid, fp32 dashed)
                                     -memory.png     peak memory (GiB) vs model size
                                     -throughput.png tokens/s vs model size
                                     Documents given together with the same device and config (attention,
                                     batch, cuda_graph, tf32, steps, ...) that hold different sizes make
                                     one set, named after their file names' common start less the size
                                     (model-sweep-{small,xl}-h200.json -> OUT/model-sweep-h200-*.png),
                                     the title naming the commit of each size
  memory-timeline                    -timeline.png the active-memory timeline (tools/plot_memory.py)
  ddp                                -step-time.png  a bar per row (strategy, bucket MiB): median step_ms
                                                     with the row's all-reduce time comm_ms beside it, lines
                                                     at the single row's step and at 1.10x it (the goal);
                                                     a panel per model case (size, ctx, precision)
  zero                               -memory.png     peak GiB at after_init, before_optimizer_step and
                                                     after_optimizer_step, a bar per zero mode, stacked by
                                                     category (parameters, gradients, optimizer state,
                                                     activations, workspace, other) where rows carry it
                                     -step-time.png  median step_ms per zero mode
  comm (all the documents given)     OUT/comm-busbw.png  bus bandwidth (GB/s) vs message size, a line per
                                                         backend and world (and document, where two
                                                         hold the same backend and world); rows without
                                                         a positive busbw (a world of one) left out
                                     OUT/comm-time.png   time_ms vs message size, the same lines

Rows that ran out of memory ("oom": true) are marked with an x at the top of the axes (bars: "OOM" in
the row's place) instead of a point; rows missing a figure or a coordinate are left out; other benchmarks
are skipped with a note. Needs matplotlib (Agg backend, no display).

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
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import NullLocator  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot_memory  # noqa: E402

# A line per series: its colour from the colour fields, its dash from the style field.
ATTENTION_STYLE, ATTENTION_COLOURS = "impl", ("dtype", "D", "B", "H", "causal")
MODEL_STYLE, MODEL_COLOURS = "precision", ("ctx", "attention", "batch")
SIZE_ORDER = ("tiny", "small", "medium", "large", "xl", "2.7b")
DASHES = ("-", "--", ":", "-.")
# A ddp or zero document's rows come in model cases (a panel each); its title names the run's fields that
# every row shares.
MODEL_CASE = ("size", "ctx", "precision")
RUN_FIELDS = MODEL_CASE + ("world", "local_batch", "backend")
DDP_GOAL = 1.10  # a data-parallel step within 10% of the single-device step
ZERO_POINTS = ("after_init", "before_optimizer_step", "after_optimizer_step")
MAX_X_TICKS = 10  # labelled x values (x_format), every k-th where more were measured
VISIBLE_GIB = 2**-10  # a category under 1 MiB is left out of the legend


def stem_of(path):
    """bench/results/model-sweep-xl-h200.json -> model-sweep-xl-h200."""
    return os.path.splitext(os.path.basename(path))[0]


def document_rows(doc):
    return [r for r in doc.get("rows", []) if isinstance(r, dict)]


def number(value):
    """value as a finite float, or None (missing, null, text, NaN, infinite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def describe(field, value):
    if field == "causal":
        return "causal" if value else "non-causal"
    if field in ("D", "B", "H", "ctx", "batch", "world"):
        return f"{field}={value}"
    if field == "local_batch":
        return f"local batch {value}"
    return str(value)


def format_bytes(n):
    """1048576 -> "1 MiB", 65536 -> "64 KiB", 1000 -> "1000 B"."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def group_by(rows, fields):
    """[(values of fields, rows with them)] in order of first appearance."""
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r.get(f) for f in fields), []).append(r)
    return list(groups.items())


def case_title(key, cases):
    """The fields of a model case that differ between the document's cases ("" when there is one case)."""
    return " ".join(describe(f, v) for i, (f, v) in enumerate(zip(MODEL_CASE, key))
                    if len({k[i] for k, _ in cases}) > 1)


def values_of(rows, field):
    """The distinct values of field among rows, in order of appearance."""
    seen = []
    for r in rows:
        if r.get(field) not in seen:
            seen.append(r.get(field))
    return seen


def document_title(doc, kind, rows, fields, extra=()):
    """"kind: benchmark, sweep NAME, the fields that are the same in every row, extra" and the device."""
    parts = [str(doc.get("benchmark", "?"))]
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    if config.get("sweep"):
        parts.append(f"sweep {config['sweep']}")
    for f in fields:
        values = values_of(rows, f)
        if len(values) == 1 and values[0] is not None:
            parts.append(describe(f, values[0]))
    line = f"{kind}: " + ", ".join(parts + list(extra))
    if doc.get("device"):
        line += f"\n{doc['device']}"
    return line


def set_title(fig, title, fontsize=10):
    """The figure's title, the figure widened where a line of it would not fit (about 0.6 em a character)."""
    fig.suptitle(title, fontsize=fontsize)
    needed = 0.6 * fontsize / 72 * max(len(line) for line in title.splitlines()) + 0.4  # inches
    fig.set_figwidth(max(fig.get_figwidth(), needed))


def save(fig, out_dir, name):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def draw_panels(panels, x_of, style_field, colour_fields, title, x_label, log_x=False, x_ticks=None,
                x_format=None, always_named=()):
    """panels: (panel title, rows, y field, y label) each. A line per series of a panel's rows (colour by
    colour_fields, dash by style_field, the legend naming only the fields that vary and those in
    always_named); OOM rows as x marks at the top; x_format (a function of x) labels ticks at the measured x
    values. Returns the figure, or None when no panel has a point."""
    all_rows = [r for _, rows, _, _ in panels for r in rows]
    styles = sorted(values_of(all_rows, style_field), key=str)  # dashes in name order: bf16 solid, fp32 dashed
    colour_keys = []
    for r in all_rows:
        key = tuple(r.get(f) for f in colour_fields)
        if key not in colour_keys:
            colour_keys.append(key)
    named = [f for f in colour_fields if f in always_named or len(values_of(all_rows, f)) > 1]
    name_style = len(styles) > 1 or not named or style_field in always_named
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
        if x_format:
            xs = sorted({x_of(r) for r in rows if x_of(r) is not None})
            xs = xs[::math.ceil(len(xs) / MAX_X_TICKS)]
            ax.set_xticks(xs, [x_format(x) for x in xs])
            ax.xaxis.set_minor_locator(NullLocator())
        if values and min(values) > 0 and max(values) / min(values) > 50:  # spans decades: log scale
            ax.set_yscale("log")
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.set_title(panel_title, fontsize=10)
        ax.grid(True, alpha=0.3)
    axes[0][-1].legend(list(handles.values()), list(handles.keys()), fontsize=7, loc="upper left",
                       bbox_to_anchor=(1.01, 1.0), frameon=False, handlelength=3.5)  # long enough to show dashes
    set_title(fig, title)
    return fig


def plot_attention(doc, stem, out_dir):
    rows = document_rows(doc)
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


def model_sets(documents):
    """documents: (path, document) each -> [(name, documents)]. Documents of one device and config that hold
    different sizes make one set, named after their file names' common start with the size taken out
    (model-sweep-small-h200 + model-sweep-xl-h200 -> model-sweep-h200); a document alone keeps its name."""
    sets = []  # (device and config, sizes held, [(path, document)], [its file name's words less its sizes])
    for path, doc in documents:
        key = json.dumps([doc.get("device"), doc.get("config")], sort_keys=True)
        sizes = set(values_of(document_rows(doc), "size"))
        joined = next((s for s in sets if s[0] == key and not s[1] & sizes), None)
        if joined is None:
            joined = (key, set(), [], [])
            sets.append(joined)
        joined[1].update(sizes)
        joined[2].append((path, doc))
        joined[3].append([w for w in stem_of(path).split("-") if w not in sizes])
    named = {}  # name: documents
    for _, _, members, words in sets:
        name = stem_of(members[0][0]) if len(members) == 1 else "-".join(os.path.commonprefix(words)) or "model"
        unique, n = name, 1
        while unique in named:  # another set's name: numbered
            n += 1
            unique = f"{name}-{n}"
        named[unique] = members
    return list(named.items())


def plot_model(documents, name, out_dir):
    """documents: (path, document) each of one model set, drawn against the model size; a set of several
    documents names in its title the commit each size was measured at."""
    rows = [r for _, doc in documents for r in document_rows(doc)]
    positions, params = size_positions(rows)
    ticks = [f"{s}\n{params[s] / 1e6:.0f}M" if s in params else str(s) for s in sorted(positions, key=positions.get)]
    commit_of = {s: doc.get("commit", "?") for _, doc in documents for s in values_of(document_rows(doc), "size")}
    commits = {}  # commit: the sizes measured at it, smallest first
    for size in sorted(positions, key=positions.get):
        commits.setdefault(commit_of[size], []).append(str(size))
    note = "; ".join(f"commit {c}: {', '.join(sizes)}" for c, sizes in commits.items())
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
        title = document_title(documents[0][1], kind, rows, fields) + (f"\n{note}" if len(documents) > 1 else "")
        fig = draw_panels(panels, lambda r: positions.get(r.get("size")), MODEL_STYLE, MODEL_COLOURS, title,
                          "model size", x_ticks=ticks)
        if fig is not None:
            written.append(save(fig, out_dir, f"{name}-{kind}.png"))
    return written


def plot_memory_timeline(doc, stem, out_dir):
    return [plot_memory.draw(doc, os.path.join(out_dir, f"{stem}-timeline.png"))]


def bar_slots(rows, has_figure):
    """The rows that get a place among the bars: those with a figure, and those that ran out of memory."""
    return [r for r in rows if r.get("oom") or has_figure(r)]


def mark_oom(ax, x):
    top = ax.get_xaxis_transform()  # x in data, y in axes fraction
    ax.plot(x, 0.97, "x", color="0.3", ms=7, mew=2, transform=top)
    ax.text(x, 0.92, "OOM", ha="center", va="top", fontsize=7, color="0.3", transform=top)


def oom_handle():
    return Line2D([], [], ls="", marker="x", color="0.3", ms=7, mew=2, label="out of memory")


def bar_figure(panel_count, bar_count):
    """A figure of panel_count panels one above the other, wide enough for bar_count bars and a legend."""
    fig, axes = plt.subplots(panel_count, 1, figsize=(3.0 + 0.8 * max(bar_count, 3), 3.9 * panel_count), dpi=110,
                             squeeze=False)
    return fig, list(axes[:, 0])


def ddp_label(r, name_bf16):
    label = str(r.get("strategy"))
    if number(r.get("bucket_mb")) is not None:
        label += f"\n{number(r['bucket_mb']):g} MiB"
    if name_bf16 and r.get("bf16_comm"):
        label += "\nbf16 comm"
    return label


def draw_ddp_case(ax, slots, name_bf16):
    """A model case's rows: the median step_ms and, beside it, the all-reduce time comm_ms; dashed and dotted
    lines at the single row's step_ms and at DDP_GOAL times it. Returns the single step_ms or None."""
    single = next((number(r.get("step_ms")) for r in slots if r.get("strategy") == "single" and not r.get("oom")),
                  None)
    width = 0.4
    heights = [single * DDP_GOAL] if single else []
    for i, r in enumerate(slots):
        if r.get("oom"):
            mark_oom(ax, i)
            continue
        step, comm = number(r.get("step_ms")), number(r.get("comm_ms"))
        ax.bar(i - width / 2, step, width, color="C0")
        note = f"{step:.1f}" + (f"\n{step / single:.2f}×" if single else "")
        ax.annotate(note, (i - width / 2, step), xytext=(0, 2), textcoords="offset points", ha="center",
                    va="bottom", fontsize=7, bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 0.3})
        heights.append(step)
        if comm is not None:
            ax.bar(i + width / 2, comm, width, color="C1", hatch="//", edgecolor="white", lw=0)
            heights.append(comm)
    if single:
        ax.axhline(single, ls="--", color="0.25", lw=1)
        ax.axhline(single * DDP_GOAL, ls=":", color="C3", lw=1.5)
    ax.set_xticks(range(len(slots)), [ddp_label(r, name_bf16) for r in slots], fontsize=8)
    ax.set_xlim(-0.6, len(slots) - 0.4)
    ax.set_ylim(0, 1.2 * max(heights, default=1.0))  # room for the notes above the bars
    ax.set_ylabel("ms")
    ax.grid(True, axis="y", alpha=0.3)
    return single


def plot_ddp(doc, stem, out_dir):
    rows = document_rows(doc)

    def timed(r):
        return number(r.get("step_ms")) is not None

    if not any(timed(r) and not r.get("oom") for r in rows):
        return []
    cases = [(key, bar_slots(members, timed)) for key, members in group_by(rows, MODEL_CASE)]
    cases = [(key, slots) for key, slots in cases if slots]
    bf16 = values_of([r for r in rows if r.get("strategy") != "single"], "bf16_comm")
    extra = [("bf16" if bf16[0] else "fp32") + " all-reduce"] if len(bf16) == 1 and isinstance(bf16[0], bool) else []
    fig, axes = bar_figure(len(cases), max(len(slots) for _, slots in cases))
    for ax, (key, slots) in zip(axes, cases):
        single = draw_ddp_case(ax, slots, len(bf16) > 1)
        ax.set_title(case_title(key, cases), fontsize=10)
        handles = [Patch(color="C0", label="step_ms (median step)"),
                   Patch(facecolor="C1", hatch="//", edgecolor="white", label="comm_ms (all-reduce time,\n"
                                                                              "partly under backward)")]
        if single:
            handles += [Line2D([], [], ls="--", color="0.25", label=f"single: {single:.1f} ms"),
                        Line2D([], [], ls=":", color="C3", lw=1.5,
                               label=f"goal: {DDP_GOAL:.2f} × single = {single * DDP_GOAL:.1f} ms")]
        if any(r.get("oom") for r in slots):
            handles.append(oom_handle())
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    set_title(fig, document_title(doc, "step time", rows, RUN_FIELDS, extra))
    return [save(fig, out_dir, f"{stem}-step-time.png")]


def zero_label(r):
    return str(r.get("zero")).replace("_", "\n")


def memory_at(r, point):
    """A zero row's memory at point ({"peak_gib": .., "<category>_gib": .., ...}); point "peak": the row's peak."""
    if point == "peak":
        return {"peak_gib": r.get("peak_gib")}
    memory = r.get("memory")
    record = memory.get(point) if isinstance(memory, dict) else None
    return record if isinstance(record, dict) else {}


def zero_points(rows):
    """The memory points the rows carry, in ZERO_POINTS order; ["peak"] (the row's peak_gib) when none do."""
    points = [p for p in ZERO_POINTS if any(memory_at(r, p) for r in rows)]
    if not points and any(number(r.get("peak_gib")) is not None for r in rows):
        points = ["peak"]
    return points


def draw_zero_memory(ax, slots, points):
    """A bar per row (zero mode) at each point, stacked by category where the point carries the split, else
    plain grey; its peak written above. Returns the categories drawn and whether a plain bar was."""
    width = 0.8 / len(slots)
    ticks, drawn, plain = [], set(), False
    for g, point in enumerate(points):
        for m, r in enumerate(slots):
            x = g + (m - (len(slots) - 1) / 2) * width
            ticks.append(x)
            if r.get("oom"):
                mark_oom(ax, x)
                continue
            record = memory_at(r, point)
            parts = [(c, number(record.get(f"{c}_gib"))) for c in plot_memory.CATEGORIES]
            parts = [(c, v) for c, v in parts if v is not None]
            bottom = 0.0
            for c, v in parts:
                colour = plot_memory.CATEGORY_COLORS[plot_memory.CATEGORIES.index(c)]
                ax.bar(x, v, 0.9 * width, bottom=bottom, color=colour)
                bottom += v
                if v >= VISIBLE_GIB:
                    drawn.add(c)
            peak = number(record.get("peak_gib"))
            if not parts and peak is not None:
                ax.bar(x, peak, 0.9 * width, color="0.65")
                plain = True
            top = peak if peak is not None else (bottom if parts else None)
            if top is not None:
                ax.text(x, max(top, bottom), f"{top:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(ticks, [zero_label(r) for _ in points for r in slots], fontsize=7)
    groups = ax.secondary_xaxis("bottom")  # the point names under the modes' names
    groups.set_xticks(range(len(points)), [p.replace("_", " ") for p in points], fontsize=9)
    groups.tick_params(length=0, pad=30)
    groups.spines["bottom"].set_visible(False)
    ax.set_xlim(-0.5, len(points) - 0.5)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.1)
    ax.set_ylabel("peak memory (GiB)")
    ax.grid(True, axis="y", alpha=0.3)
    return drawn, plain


def draw_zero_steps(ax, slots):
    for i, r in enumerate(slots):
        if r.get("oom"):
            mark_oom(ax, i)
            continue
        step = number(r.get("step_ms"))
        ax.bar(i, step, 0.6, color="C0")
        ax.text(i, step, f"{step:.1f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(slots)), [zero_label(r) for r in slots], fontsize=8)
    ax.set_xlim(-0.6, len(slots) - 0.4)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.12)
    ax.set_ylabel("median step time (ms)")
    ax.grid(True, axis="y", alpha=0.3)


def plot_zero(doc, stem, out_dir):
    rows = document_rows(doc)
    buckets = values_of([r for r in rows if r.get("bucket_mb") is not None], "bucket_mb")
    extra = [f"DDP buckets {buckets[0]:g} MiB"] if len(buckets) == 1 and number(buckets[0]) is not None else []
    written = []
    points = zero_points(rows)

    def has_memory(r):
        return any(number(v) is not None for p in points for v in memory_at(r, p).values())

    cases = [(key, bar_slots(members, has_memory)) for key, members in group_by(rows, MODEL_CASE)]
    cases = [(key, slots) for key, slots in cases if slots]
    if any(has_memory(r) and not r.get("oom") for r in rows):
        fig, axes = bar_figure(len(cases), len(points) * max(len(slots) for _, slots in cases))
        for ax, (key, slots) in zip(axes, cases):
            drawn, plain = draw_zero_memory(ax, slots, points)
            ax.set_title(case_title(key, cases), fontsize=10)
            handles = [Patch(color=plot_memory.CATEGORY_COLORS[i], label=c.replace("_", " "))
                       for i, c in enumerate(plot_memory.CATEGORIES) if c in drawn][::-1]  # the stack's order
            handles += [Patch(color="0.65", label="peak (no breakdown)")] if plain else []
            handles += [oom_handle()] if any(r.get("oom") for r in slots) else []
            ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        set_title(fig, document_title(doc, "memory", rows, RUN_FIELDS, extra))
        written.append(save(fig, out_dir, f"{stem}-memory.png"))

    def timed(r):
        return number(r.get("step_ms")) is not None

    cases = [(key, bar_slots(members, timed)) for key, members in group_by(rows, MODEL_CASE)]
    cases = [(key, slots) for key, slots in cases if slots]
    if any(timed(r) and not r.get("oom") for r in rows):
        fig, axes = bar_figure(len(cases), max(len(slots) for _, slots in cases))
        for ax, (key, slots) in zip(axes, cases):
            draw_zero_steps(ax, slots)
            ax.set_title(case_title(key, cases), fontsize=10)
            if any(r.get("oom") for r in slots):
                ax.legend(handles=[oom_handle()], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                          frameon=False)
        set_title(fig, document_title(doc, "step time", rows, RUN_FIELDS, extra))
        written.append(save(fig, out_dir, f"{stem}-step-time.png"))
    return written


def comm_title(documents, kind):
    """"kind: comm, the collective, dtype and op where every document agrees", then a line per backend naming
    its devices."""
    configs = [doc.get("config") if isinstance(doc.get("config"), dict) else {} for _, doc in documents]
    parts = ["comm"]
    for field in ("collective", "dtype", "op"):
        values = {str(c.get(field)) for c in configs}
        if len(values) == 1 and None not in (c.get(field) for c in configs):
            parts.append(values.pop())
    devices = {}
    for _, doc in documents:
        for backend in values_of(document_rows(doc), "backend"):
            if doc.get("device") and doc["device"] not in devices.setdefault(backend, []):
                devices[backend].append(doc["device"])
    line = f"{kind}: " + ", ".join(parts)
    if devices:
        line += "".join(f"\n{b} on {', '.join(d)}" for b, d in devices.items() if d)
    return line


def plot_comm(documents, name, out_dir):
    """documents: (path, document) each, drawn together as OUT/NAME-busbw.png and OUT/NAME-time.png: a line
    per backend (dash) and world (colour), and per document where two hold the same backend and world."""
    rows, sources = [], {}
    for path, doc in documents:
        stem = stem_of(path)
        for r in document_rows(doc):
            rows.append(dict(r, source=stem))
            sources.setdefault((r.get("backend"), r.get("world")), set()).add(stem)
    if all(len(stems) == 1 for stems in sources.values()):
        rows = [dict(r, source=None) for r in rows]
    figures = (
        ("bus bandwidth", "busbw", [r for r in rows if (number(r.get("busbw_gbps")) or 0) > 0], "busbw_gbps",
         "bus bandwidth (GB/s)", "all-reduce bus bandwidth = algbw × 2 (world − 1) / world"),
        ("time", "time", rows, "time_ms", "time (ms)", "all-reduce time: max over ranks of the median iteration"),
    )
    written = []
    for kind, suffix, members, field, y_label, panel_title in figures:
        fig = draw_panels([(panel_title, members, field, y_label)], lambda r: number(r.get("bytes")), "backend",
                          ("world", "source"), comm_title(documents, kind), "message size", log_x=True,
                          x_format=format_bytes, always_named=("backend", "world"))
        if fig is not None:
            written.append(save(fig, out_dir, f"{name}-{suffix}.png"))
    return written


PLOTTERS = {
    "attention": plot_attention,
    "attention-leaderboard": plot_attention,
    "memory-timeline": plot_memory_timeline,
    "ddp": plot_ddp,
    "zero": plot_zero,
}
# Benchmarks whose documents are drawn in sets, after the others: (documents -> [(name, set)], draws a set).
COMBINED = {"comm": (lambda documents: [("comm", documents)], plot_comm), "model": (model_sets, plot_model)}


def load_document(path):
    """The results document at path; raises OSError or ValueError for unreadable files."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("rows", []), list):
        raise ValueError(f"{path}: not a results document (expected an object with a rows list)")
    return doc


def report(written, paths):
    """Prints the figures written for the documents at paths, or a note that they gave none."""
    if not written:
        print(f"{', '.join(map(str, paths))}: no plottable rows (all OOM or without figures); no figure",
              file=sys.stderr)
    for figure in written:
        print(figure)


def plot_document(path, doc, out_dir):
    """Draws the document doc read from path and reports its figures."""
    plotter = PLOTTERS.get(doc.get("benchmark"))
    if plotter is None:
        print(f"{path}: no figures for benchmark {doc.get('benchmark')!r}; skipped", file=sys.stderr)
        return
    report(plotter(doc, stem_of(path), out_dir), [path])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("documents", nargs="+", help="results JSON files (bench/results/*.json)")
    parser.add_argument("--out", default="docs/figures", help="folder of the PNG files (created when missing)")
    args = parser.parse_args(argv)
    failed = 0
    combined = {}  # benchmark: [(path, document)]
    for path in args.documents:
        try:
            doc = load_document(path)
            if doc.get("benchmark") in COMBINED:
                combined.setdefault(doc["benchmark"], []).append((path, doc))
                continue
            plot_document(path, doc, args.out)
        except (OSError, ValueError) as e:
            print(f"plot_results.py: {path}: {e}", file=sys.stderr)
            failed += 1
    for benchmark, documents in combined.items():
        grouping, plotter = COMBINED[benchmark]
        for name, members in grouping(documents):
            report(plotter(members, name, args.out), [path for path, _ in members])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
