"""test_plot_tools.py — tools/plot_results.py and tools/plot_memory.py on small synthetic documents in the
bench/results format (and on the recorded ones in bench/results): the figures are written as valid,
non-blank PNG files; OOM rows, missing fields, unreadable files and other benchmarks are handled; the
memory timeline's stacked categories add up to the allocator's current bytes. Needs matplotlib (CI)."""
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


def model_rows():
    rows = []
    for size, params in (("small", 128e6), ("medium", 423e6), ("2.7b", 3.4e9)):
        for ctx in (128, 256):
            for mode in ("fwd", "train"):
                row = {"size": size, "parameters": params, "ctx": ctx, "precision": "bf16", "mode": mode,
                       "batch": 4, "attention": "flash"}
                if size == "2.7b" and mode == "train":
                    row.update({"oom": True, "error": "out of memory"})
                else:
                    step = params / 1e7 * ctx / 128 * (3 if mode == "train" else 1)
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
