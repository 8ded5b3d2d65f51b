"""test_plot_tools.py — tools/plot_results.py and tools/plot_memory.py on small synthetic documents in the
bench/results format (and on the recorded ones in bench/results): the figures are written as valid,
non-blank PNG files; OOM rows, missing fields, unreadable files and other benchmarks are handled; model
documents of one device and config holding different sizes make one set (a colour per context, a dash per
precision), others stay apart; comm documents combine into one bus-bandwidth and one time figure with a
line per backend and world; ddp bars carry the single-device and goal lines; zero memory bars stack to
the categories' sum; the memory timeline's stacked categories add up to the allocator's current bytes.
Needs matplotlib (CI)."""
import itertools
import json
import os
import subprocess
import sys

import matplotlib.image
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "tools")
sys.path.insert(0, TOOLS)
import plot_memory  # noqa: E402
import plot_results  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_tool(script, *args):
    return subprocess.run([sys.executable, os.path.join(TOOLS, script), *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def write(folder, name, doc):
    path = folder / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    pixels = matplotlib.image.imread(str(path))  # (height, width, channels)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels.std() > 0.01, f"{path} is blank"


def results(benchmark, rows, **config):
    return {"benchmark": benchmark, "commit": "abc123", "date": "2026-01-01T00:00:00Z",
            "device": "synthetic GPU", "config": config, "rows": rows}


def attention_rows():
    rows = []
    for impl in ("flash", "naive"):
        for n in (128, 256, 512, 1024, 2048):
            row = {"impl": impl, "B": 1, "H": 1, "N": n, "D": 64, "dtype": "bf16", "causal": True}
            if impl == "naive" and n == 2048:
                row.update({"oom": True, "error": "out of memory"})
            else:
                scale = n * n / 1e6 * (4 if impl == "naive" else 1)
                row.update({"fwd_ms": scale, "bwd_ms": 2.5 * scale, "fwd_bwd_ms": 3.5 * scale,
                            "fwd_tflops": 100.0 / (1 + scale), "bwd_tflops": 80.0, "fwd_bwd_tflops": 90.0,
                            "mem_before_bwd_gib": n / 1e4, "peak_gib": n / 5e3})
            rows.append(row)
    rows[1].pop("bwd_ms")          # a missing figure
    rows[2]["fwd_tflops"] = None   # a null one
    rows.append({"impl": "flash", "dtype": "bf16"})  # no N at all
    return rows


MODEL_SIZES = {"small": 128e6, "medium": 423e6, "xl": 1.5e9, "2.7b": 3.4e9}  # parameters


def model_rows(sizes=("small", "medium", "2.7b"), precisions=("bf16",)):
    """ctx 128 and 256, fwd and train rows of each size and precision; 2.7b train runs out of memory and the
    first row has no peak_gib."""
    rows = []
    for size in sizes:
        params = MODEL_SIZES[size]
        for ctx, mode, precision in itertools.product((128, 256), ("fwd", "train"), precisions):
            row = {"size": size, "parameters": params, "ctx": ctx, "precision": precision, "mode": mode,
                   "batch": 4, "attention": "flash"}
            if size == "2.7b" and mode == "train":
                row.update({"oom": True, "error": "out of memory"})
            else:
                step = params / 1e7 * ctx / 128 * (3 if mode == "train" else 1) * (2 if precision == "fp32" else 1)
                row.update({"step_ms": step, "mean_ms": step, "std_ms": 0.1, "min_ms": step,
                            "first_step_ms": 2 * step, "peak_gib": params * 8 / 2**30,
                            "tokens_per_s": 4 * ctx / step * 1e3})
            rows.append(row)
    rows[0].pop("peak_gib")
    return rows


def timeline_doc():
    """A GPU-like step: parameters, gradients, activations at init (on top of 1000 bytes held before), op
    temporaries in forward and backward, an optimizer phase without events, and a cpu event to ignore."""
    events, level = [], 1000

    def add(t, size, tag, category, phase, device="cuda:0"):
        nonlocal level
        if device == "cuda:0":
            level += size
        events.append({"time_ms": t, "device": device, "bytes": size, "current_bytes": level if device == "cuda:0"
                       else size, "tag": tag, "phase": phase, "category": category})

    add(0.1, 4000, "parameters", "parameters", "init")
    add(0.2, 64, "init staging", "other", "init", device="cpu")
    add(0.3, 4000, "gradients", "gradients", "init")
    add(0.4, 6000, "activations", "activations", "init")
    add(1.5, 3000, "attention.naive.S", "workspace", "forward")
    add(1.8, -3000, "attention.naive.S", "workspace", "forward")
    add(2.5, 2000, "attention.naive.dk", "workspace", "backward")
    add(2.9, -2000, "attention.naive.dk", "workspace", "backward")
    add(3.0, -400, "old buffer", "workspace", "backward")  # allocated before recording
    phases = [{"name": name, "start_ms": start, "end_ms": end}
              for name, start, end in (("init", 0.0, 1.0), ("forward", 1.0, 2.0), ("backward", 2.0, 3.2),
                                       ("optimizer", 3.2, 4.0))]
    rows = [{"phase": "init", "peak_bytes": 15000}, {"phase": "forward", "peak_bytes": 18000},
            {"phase": "backward", "peak_bytes": 17000}, {"phase": "optimizer", "peak_bytes": 14600}]
    doc = results("memory-timeline", rows, size="tiny", ctx=32, precision="fp32", mode="train", batch=2)
    doc.update({"memory_device": "cuda:0", "start_bytes": 1000, "end_bytes": level, "phases": phases,
                "events": events})
    return doc


def comm_doc(backend, world, device, null_busbw=False):
    """An all-reduce sweep of one world: 1 MiB .. 256 MiB, busbw = algbw 2 (world - 1) / world."""
    rows = []
    for size in (2**20, 2**24, 2**28):
        time_ms = 0.05 + size / 2e8 * world
        algbw = size / (time_ms * 1e-3) / 1e9
        busbw = None if null_busbw else algbw * 2 * (world - 1) / world
        rows.append({"world": world, "backend": backend, "bytes": size, "time_ms": time_ms,
                     "min_rank_ms": time_ms, "algbw_gbps": algbw, "busbw_gbps": busbw})
    doc = results("comm", rows, world=world, backend=backend, collective="all_reduce", dtype="fp32", op="sum")
    doc["device"] = device
    return doc


def ddp_rows():
    """Two model cases (ctx 512 and 1024): single, naive, flat and bucketed rows, a null comm_ms, an OOM row."""
    case = {"size": "small", "precision": "bf16", "world": 2, "local_batch": 2, "backend": "nccl",
            "parameters": 128e6}
    rows = []
    for strategy, bucket, step, comm in (("single", None, 100.0, 0.0), ("naive", None, 200.0, 90.0),
                                         ("flat", None, 150.0, 40.0), ("bucketed", 25.0, 108.0, 50.0),
                                         ("bucketed", 100.0, 104.0, None), ("bucketed", 1000.0, None, None)):
        row = dict(case, ctx=512, strategy=strategy, bucket_mb=bucket, bf16_comm=False)
        row.update({"oom": True, "error": "out of memory"} if step is None else
                   {"step_ms": step, "comm_ms": comm, "peak_gib": 3.0, "collectives": 10})
        rows.append(row)
    for strategy, bucket, step in (("single", None, 180.0), ("bucketed", 25.0, 195.0)):
        rows.append(dict(case, ctx=1024, strategy=strategy, bucket_mb=bucket, bf16_comm=False, step_ms=step,
                         comm_ms=20.0, peak_gib=5.0))
    return rows


ZERO_SPLIT = {"off": (2.0, 2.0, 4.0, 1.0, 0.25), "reduce_scatter": (2.0, 3.0, 2.0, 1.0, 0.25)}  # GiB


def zero_rows(breakdown=True):
    """off and reduce_scatter rows (with the memory split at each point when breakdown) and an OOM
    owner_broadcast row."""
    rows = []
    for mode, step in (("off", 80.0), ("owner_broadcast", None), ("reduce_scatter", 82.0)):
        row = {"zero": mode, "sharded": mode != "off", "size": "small", "ctx": 512, "precision": "bf16",
               "world": 2, "local_batch": 2, "backend": "nccl", "bucket_mb": None if mode == "reduce_scatter" else 25.0}
        if step is None:
            row.update({"oom": True, "error": "out of memory"})
            rows.append(row)
            continue
        split = ZERO_SPLIT[mode]
        row.update({"step_ms": step, "peak_gib": sum(split) + 0.5, "optimizer_state_gib": split[2]})
        if breakdown:
            point = dict(zip(("parameters_gib", "gradients_gib", "optimizer_state_gib", "activations_gib",
                              "workspace_gib"), split), peak_gib=sum(split), end_gib=sum(split) - 0.25)
            before_step = dict(point, workspace_gib=0.5, peak_gib=sum(split) + 0.25)  # 0.25 GiB more workspace
            row["memory"] = {"after_init": point, "before_optimizer_step": before_step, "after_optimizer_step": point}
        rows.append(row)
    return rows


@pytest.fixture
def saved(monkeypatch):
    """{file name: figure} of every figure plot_results saves in this process (still written to disk)."""
    figures = {}
    write_png = plot_results.save

    def keep(fig, out_dir, name):
        figures[name] = fig
        return write_png(fig, out_dir, name)

    monkeypatch.setattr(plot_results, "save", keep)
    return figures


def legend_labels(fig):
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def bar_heights(ax):
    """{bar centre x: total height of the bars stacked there}."""
    totals = {}
    for bar in ax.patches:
        x = round(bar.get_x() + bar.get_width() / 2, 6)
        totals[x] = totals.get(x, 0.0) + bar.get_height()
    return totals


def test_attention_figures_with_oom_and_missing_fields(tmp_path):
    doc = write(tmp_path, "attention-scaling-test.json", results("attention", attention_rows(), sweep="scaling"))
    out = tmp_path / "figures"
    run = run_tool("plot_results.py", doc, "--out", out)
    assert run.returncode == 0, run.stderr
    for kind in ("latency", "tflops", "memory"):
        figure = out / f"attention-scaling-test-{kind}.png"
        assert str(figure) in run.stdout
        assert_png(figure)


def test_model_figures_by_size(tmp_path):
    doc = write(tmp_path, "model-test.json", results("model", model_rows(), warmup=5, steps=10))
    run = run_tool("plot_results.py", doc, "--out", tmp_path)
    assert run.returncode == 0, run.stderr
    for kind in ("step-time", "memory", "throughput"):
        assert_png(tmp_path / f"model-test-{kind}.png")


def sweep_doc(size, commit="abc123", device="synthetic GPU", **config):
    """One size of a model sweep, fp32 rows before bf16 ones; config: what differs from the sweep's config."""
    doc = results("model", model_rows((size,), ("fp32", "bf16")), **{"batch": 4, "tf32": False, **config})
    doc.update(commit=commit, device=device)
    return doc


def draw_sweep(folder, sizes):
    """Draws one document per (size, commit) of sizes, given together; returns the figures' folder."""
    docs = [write(folder, f"model-sweep-{size}-test.json", sweep_doc(size, commit)) for size, commit in sizes]
    out = folder / "figures"
    assert plot_results.main([*map(str, docs), "--out", str(out)]) == 0
    return out


def series_lines(ax):
    """{legend label: line} of the drawn series (OOM marks have no label)."""
    return {l.get_label(): l for l in ax.get_lines() if not l.get_label().startswith("_")}


def test_model_documents_of_one_sweep_make_one_set(tmp_path, saved):
    out = draw_sweep(tmp_path, (("2.7b", "def456"), ("small", "abc123"), ("medium", "abc123")))
    assert sorted(os.listdir(out)) == [f"model-sweep-test-{kind}.png" for kind in ("memory", "step-time", "throughput")]
    for name in os.listdir(out):
        assert_png(out / name)
    fig = saved["model-sweep-test-step-time.png"]
    fwd, train = fig.axes
    assert (fwd.get_title(), train.get_title()) == ("mode fwd", "mode train")
    for ax in (fwd, train):  # sizes by parameter count, not by the order given
        assert [t.get_text() for t in ax.get_xticklabels()] == ["small\n128M", "medium\n423M", "2.7b\n3400M"]
    bf16 = series_lines(fwd)["bf16 ctx=128"]
    assert list(bf16.get_xdata()) == [0, 1, 2]
    assert list(bf16.get_ydata()) == pytest.approx([MODEL_SIZES[s] / 1e7 for s in ("small", "medium", "2.7b")])
    assert list(series_lines(train)["bf16 ctx=128"].get_xdata()) == [0, 1]  # 2.7b train ran out of memory...
    marks = [l for l in train.get_lines() if l.get_marker() == "x"]
    assert sorted(x for l in marks for x in l.get_xdata()) == [2] * 4  # ... marked at its place, per series
    assert "out of memory" in legend_labels(fig)
    assert "commit abc123: small, medium; commit def456: 2.7b" in fig.texts[0].get_text()


def test_model_set_colour_by_context_and_dash_by_precision(tmp_path, saved):
    draw_sweep(tmp_path, (("small", "abc123"), ("medium", "abc123")))
    for kind in ("step-time", "memory", "throughput"):
        lines = series_lines(saved[f"model-sweep-test-{kind}.png"].axes[1])  # train: every row has each figure
        assert sorted(lines) == ["bf16 ctx=128", "bf16 ctx=256", "fp32 ctx=128", "fp32 ctx=256"]
        for label, line in lines.items():
            assert line.get_linestyle() == ("-" if label.startswith("bf16") else "--"), label
        for ctx in ("ctx=128", "ctx=256"):
            assert lines[f"bf16 {ctx}"].get_color() == lines[f"fp32 {ctx}"].get_color()
        assert lines["bf16 ctx=128"].get_color() != lines["bf16 ctx=256"].get_color()


def test_model_documents_of_other_configs_or_the_same_size_stay_apart(tmp_path):
    docs = [write(tmp_path, name, doc) for name, doc in (
        ("model-a-small.json", sweep_doc("small")),
        ("model-a-xl.json", sweep_doc("xl", tf32=True)),                # another config
        ("model-a-medium.json", sweep_doc("medium", device="GPU 2")),  # another device
        ("model-a-small-rerun.json", sweep_doc("small")))]              # the same size again
    run = run_tool("plot_results.py", *docs, "--out", tmp_path / "figures")
    assert run.returncode == 0, run.stderr
    stems = ("model-a-small", "model-a-xl", "model-a-medium", "model-a-small-rerun")
    assert sorted(os.listdir(tmp_path / "figures")) == sorted(f"{stem}-{kind}.png" for stem in stems
                                                              for kind in ("step-time", "memory", "throughput"))


def test_model_sets_of_the_same_name_are_numbered(tmp_path):
    for folder, tf32 in (("a", False), ("b", True)):
        (tmp_path / folder).mkdir()
        for size in ("small", "xl"):
            write(tmp_path / folder, f"model-{size}.json", sweep_doc(size, tf32=tf32))
    sets = plot_results.model_sets([(str(p), plot_results.load_document(p)) for p in sorted(tmp_path.glob("*/*.json"))])
    assert [(name, len(members)) for name, members in sets] == [("model", 2), ("model-2", 2)]


def test_only_oom_rows_give_no_figure(tmp_path):
    rows = [{"size": "xl", "ctx": 1024, "precision": "fp32", "mode": "train", "oom": True}]
    doc = write(tmp_path, "model-oom.json", results("model", rows))
    run = run_tool("plot_results.py", doc, "--out", tmp_path / "figures")
    assert run.returncode == 0, run.stderr
    assert "no plottable rows" in run.stderr
    assert not (tmp_path / "figures").exists() or not list((tmp_path / "figures").iterdir())


def test_other_benchmarks_are_skipped_and_bad_files_reported(tmp_path):
    train = write(tmp_path, "train.json", results("train", [{"step": 1, "loss": 9.2}]))
    broken = write(tmp_path, "broken.json", "{not json")
    listing = write(tmp_path, "list.json", [1, 2])
    good = write(tmp_path, "model-good.json", results("model", model_rows()))
    run = run_tool("plot_results.py", train, broken, listing, good, "--out", tmp_path / "figures")
    assert run.returncode == 1
    assert "no figures for benchmark 'train'" in run.stderr
    assert "broken.json" in run.stderr and "list.json" in run.stderr
    assert_png(tmp_path / "figures" / "model-good-step-time.png")  # the good document is still drawn


def test_memory_timeline_series_add_up_to_current_bytes():
    doc = timeline_doc()
    times, series = plot_memory.stacked_series(doc)
    cuda_events = [e for e in doc["events"] if e["device"] == "cuda:0"]
    assert len(times) == len(cuda_events) + 2  # the start, every event, the end
    totals = [sum(series[c][i] for c in plot_memory.CATEGORIES) for i in range(len(times))]
    assert totals[0] == doc["start_bytes"]
    assert totals[1:-1] == [e["current_bytes"] for e in cuda_events]
    assert totals[-1] == doc["end_bytes"]
    assert times[-1] == 4.0
    assert series["workspace"][4] == 3000  # the naive S buffer during forward
    assert series["other"][-1] == 600      # 1000 held before, 400 of it freed in backward
    assert all(v >= 0 for c in plot_memory.CATEGORIES for v in series[c])


def test_plot_memory_writes_a_png(tmp_path):
    timeline = write(tmp_path, "memory-tiny-train.json", timeline_doc())
    run = run_tool("plot_memory.py", timeline)
    assert run.returncode == 0, run.stderr
    assert_png(tmp_path / "memory-tiny-train.png")
    run = run_tool("plot_results.py", timeline, "--out", tmp_path / "figures")
    assert run.returncode == 0, run.stderr
    assert_png(tmp_path / "figures" / "memory-tiny-train-timeline.png")


def test_plot_memory_refuses_other_documents(tmp_path):
    doc = write(tmp_path, "model.json", results("model", model_rows()))
    run = run_tool("plot_memory.py", doc, "--out", tmp_path / "x.png")
    assert run.returncode == 2
    assert "expected a memory-timeline document" in run.stderr
    assert not (tmp_path / "x.png").exists()


def test_recorded_results(tmp_path):
    recorded = sorted(p for p in os.listdir(os.path.join(ROOT, "bench", "results")) if p.endswith(".json"))
    if not recorded:
        pytest.skip("no recorded results in bench/results")
    run = run_tool("plot_results.py", *[os.path.join(ROOT, "bench", "results", p) for p in recorded], "--out", tmp_path)
    assert run.returncode == 0, run.stderr
    figures = [line for line in run.stdout.splitlines() if line.endswith(".png")]
    assert figures
    for figure in figures:
        assert_png(tmp_path / os.path.basename(figure))


def test_comm_documents_combine_into_one_figure(tmp_path, saved, capsys):
    docs = [write(tmp_path, f"comm-{b}-{w}.json", comm_doc(b, w, device))
            for b, w, device in (("nccl", 2, "GPU"), ("mpi", 2, "CPU"), ("mpi", 4, "CPU"), ("mpi", 1, "CPU"))]
    out = tmp_path / "figures"
    assert plot_results.main([*map(str, docs), "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["comm-busbw.png", "comm-time.png"]
    printed = capsys.readouterr().out.split()
    for name in ("comm-busbw.png", "comm-time.png"):
        assert str(out / name) in printed
        assert_png(out / name)
    # world 1 moves nothing (busbw 0): no bus-bandwidth line, but its time is drawn
    assert legend_labels(saved["comm-busbw.png"]) == ["nccl world=2", "mpi world=2", "mpi world=4"]
    assert legend_labels(saved["comm-time.png"]) == ["nccl world=2", "mpi world=2", "mpi world=4", "mpi world=1"]
    (nccl, *_) = saved["comm-busbw.png"].axes[0].get_lines()
    assert list(nccl.get_xdata()) == [2**20, 2**24, 2**28]
    assert list(nccl.get_ydata()) == [r["busbw_gbps"] for r in comm_doc("nccl", 2, "GPU")["rows"]]
    title = saved["comm-busbw.png"].texts[0].get_text()
    assert "all_reduce" in title and "nccl on GPU" in title and "mpi on CPU" in title


def test_comm_same_world_in_two_documents_and_null_busbw(tmp_path, saved):
    first = write(tmp_path, "comm-a.json", comm_doc("mpi", 2, "host A"))
    second = write(tmp_path, "comm-b.json", comm_doc("mpi", 2, "host B"))
    assert plot_results.main([str(first), str(second), "--out", str(tmp_path / "f")]) == 0
    assert legend_labels(saved["comm-busbw.png"]) == ["mpi world=2 comm-a", "mpi world=2 comm-b"]
    assert_png(tmp_path / "f" / "comm-busbw.png")
    single = write(tmp_path, "comm-one.json", comm_doc("mpi", 1, "host A", null_busbw=True))
    run = run_tool("plot_results.py", single, "--out", tmp_path / "g")
    assert run.returncode == 0, run.stderr
    assert sorted(os.listdir(tmp_path / "g")) == ["comm-time.png"]
    assert_png(tmp_path / "g" / "comm-time.png")


def test_ddp_bars_with_single_and_goal_lines(tmp_path, saved):
    doc = write(tmp_path, "ddp-test.json", results("ddp", ddp_rows(), world=2, bf16_comm=False))
    assert plot_results.main([str(doc), "--out", str(tmp_path)]) == 0
    assert_png(tmp_path / "ddp-test-step-time.png")
    fig = saved["ddp-test-step-time.png"]
    first, second = fig.axes  # a panel per model case
    assert first.get_title() == "ctx=512" and second.get_title() == "ctx=1024"
    assert [t.get_text() for t in first.get_xticklabels()] == [
        "single", "naive", "flat", "bucketed\n25 MiB", "bucketed\n100 MiB", "bucketed\n1000 MiB"]
    lines = {l.get_linestyle(): l.get_ydata()[0] for l in first.get_lines() if l.get_linestyle() in ("--", ":")}
    assert lines["--"] == pytest.approx(100.0) and lines[":"] == pytest.approx(110.0)  # single, 1.10 x single
    heights = sorted(b.get_height() for b in first.patches)
    assert heights == [0.0, 40.0, 50.0, 90.0, 100.0, 104.0, 108.0, 150.0, 200.0]  # steps, comms (null: none)
    assert "OOM" in [t.get_text() for t in first.texts]
    assert any("2.00×" in t.get_text() for t in first.texts)  # naive: twice the single step
    assert "out of memory" in legend_labels(fig)
    title = fig.texts[0].get_text()
    assert "ddp" in title and "small" in title and "bf16" in title and "world=2" in title and "fp32 all-reduce" in title


def test_zero_memory_stacked_by_category_and_step_time(tmp_path, saved):
    doc = write(tmp_path, "zero-test.json", results("zero", zero_rows(), world=2))
    assert plot_results.main([str(doc), "--out", str(tmp_path)]) == 0
    for kind in ("memory", "step-time"):
        assert_png(tmp_path / f"zero-test-{kind}.png")
    (memory,) = saved["zero-test-memory.png"].axes
    totals = sorted(bar_heights(memory).values())
    expected = [sum(ZERO_SPLIT[m]) + extra for m in ZERO_SPLIT for extra in (0.0, 0.25, 0.0)]  # 3 points each
    assert totals == pytest.approx(sorted(expected))
    assert len(memory.patches) == 3 * 2 * 5  # points x modes drawn x categories
    assert [t.get_text() for t in memory.get_xticklabels()][:3] == ["off", "owner\nbroadcast", "reduce\nscatter"]
    assert [t.get_text() for t in memory.texts].count("OOM") == 3
    assert legend_labels(saved["zero-test-memory.png"])[:5] == [
        "workspace", "activations", "optimizer state", "gradients", "parameters"]
    (steps,) = saved["zero-test-step-time.png"].axes
    assert [b.get_height() for b in steps.patches] == [80.0, 82.0]


def test_zero_memory_without_breakdown_uses_the_row_peak(tmp_path, saved):
    doc = write(tmp_path, "zero-plain.json", results("zero", zero_rows(breakdown=False)))
    assert plot_results.main([str(doc), "--out", str(tmp_path)]) == 0
    assert_png(tmp_path / "zero-plain-memory.png")
    (memory,) = saved["zero-plain-memory.png"].axes
    assert list(bar_heights(memory).values()) == pytest.approx([sum(ZERO_SPLIT["off"]) + 0.5,
                                                                sum(ZERO_SPLIT["reduce_scatter"]) + 0.5])
    assert "peak (no breakdown)" in legend_labels(saved["zero-plain-memory.png"])


# Not named `benchmark`: pytest-benchmark, where installed, owns a fixture of that name.
@pytest.mark.parametrize("kind", ["ddp", "zero"])
def test_ddp_and_zero_with_only_oom_rows_give_no_figure(tmp_path, kind):
    rows = [{"strategy": "flat", "zero": "off", "size": "xl", "ctx": 1024, "precision": "fp32", "oom": True}]
    doc = write(tmp_path, f"{kind}-oom.json", results(kind, rows))
    run = run_tool("plot_results.py", doc, "--out", tmp_path / "figures")
    assert run.returncode == 0, run.stderr
    assert "no plottable rows" in run.stderr
    assert not (tmp_path / "figures").exists() or not list((tmp_path / "figures").iterdir())
