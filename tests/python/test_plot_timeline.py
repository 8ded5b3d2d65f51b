"""test_plot_timeline.py — tools/plot_timeline.py on a synthetic kernel-profile document in the format
`flashtrain bench model --profile kernels --kernels-json` writes (two steps, a compute stream and an NCCL
stream on one device): the window chosen, the lanes' order, the bars clipped to the window, the class
shares, a valid non-blank PNG, and clear errors for other documents, unknown windows and documents whose
records were left out. Needs matplotlib (CI)."""
import json
import os
import subprocess
import sys

import matplotlib.image
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "tools")
sys.path.insert(0, TOOLS)
import plot_timeline  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
US = 1000  # ns


def run_tool(*args):
    return subprocess.run([sys.executable, os.path.join(TOOLS, "plot_timeline.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def record(name, cls, start_us, length_us, ranges, stream=7, kind="kernel"):
    return {"kind": kind, "name": name, "class": cls, "device": 0, "stream": stream, "start_ns": start_us * US,
            "end_ns": (start_us + length_us) * US, "correlation": 1, "bytes": 0, "ranges": ranges}


def profile_doc():
    """Two steps of 1000 us from 100 us: per step a memset, GEMM, flash attention, an elementwise kernel on
    stream 7 and an NCCL all-reduce on stream 13 overlapping the backward GEMM; one GEMM of step 1 runs
    past the step's window start of step 2 (it does not: windows are back to back); a memcpy outside."""
    records = []
    for s in range(2):
        t = 100 + 1000 * s
        step = f"step {s + 1}"
        records += [
            record("memset", "memory", t, 10, [step], kind="memset"),
            record("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", "matmul", t + 20, 300, [step, "model forward"]),
            record("void ft::flash::flash_fwd_kernel<__nv_bfloat16, 64, true>(ft::flash::FlashFwdParams)",
                   "attention", t + 330, 100, [step, "model forward"]),
            record("void ft::gpu::(anonymous namespace)::adamw_kernel(float*)", "other", t + 450, 100,
                   [step, "optimizer step"]),
            record("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication",
                   t + 300, 200, [step, "all-reduce"], stream=13),
        ]
    records.append(record("memcpy DtoH", "memory", 2200, 5, [], kind="memcpy"))
    windows = [{"name": "step 1", "start_ns": 100 * US, "end_ns": 650 * US},
               {"name": "step 2", "start_ns": 1100 * US, "end_ns": 1650 * US}]
    streams = [{"device": 0, "stream": 13, "lane": "communication", "records": 2},
               {"device": 0, "stream": 7, "lane": "compute", "records": 9}]
    return {"benchmark": "kernel-profile", "commit": "abc123", "date": "2026-01-01T00:00:00Z",
            "device": "synthetic GPU", "config": {"size": "small", "precision": "bf16", "mode": "train", "ctx": 512,
                                                  "batch": 4},
            "rows": [{"range": "step *", "occurrences": 2}], "ranges": [], "origin_ns": 5, "duration_ns": 2300 * US,
            "dropped": 0, "windows": windows, "streams": streams, "records": records}


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


def test_window_choice():
    doc = profile_doc()
    assert plot_timeline.pick_window(doc)[0] == "step 2"  # the first step may carry one-time costs
    assert plot_timeline.pick_window(doc, "step 1") == ("step 1", 100 * US, 650 * US)
    with pytest.raises(ValueError, match="no window 'step 9'; the windows are: step 1, step 2"):
        plot_timeline.pick_window(doc, "step 9")
    doc["windows"] = doc["windows"][:1]
    assert plot_timeline.pick_window(doc)[0] == "step 1"
    doc["windows"] = []  # no windows: the whole profile
    assert plot_timeline.pick_window(doc) == ("profile", 100 * US, 2205 * US)


def test_lanes_compute_first_then_communication():
    doc = profile_doc()
    assert plot_timeline.lanes(doc) == [(0, 7, "compute"), (0, 13, "communication")]
    doc.pop("streams")  # an NCCL kernel makes its stream a communication lane by itself
    doc["records"].append(record("ncclKernel_AllGather", "communication", 120, 10, ["step 1"], stream=2))
    assert plot_timeline.lanes(doc) == [(0, 7, "compute"), (0, 2, "communication"), (0, 13, "communication")]


def test_bars_are_clipped_to_the_window_and_shares_add_up():
    doc = profile_doc()
    doc["records"].append(record("long gemm", "matmul", 1000, 200, ["step 2", "x"]))  # starts before step 2
    lane_bars = plot_timeline.bars(doc, plot_timeline.pick_window(doc))
    compute = lane_bars[(0, 7)]
    assert compute["memory"] == [(0.0, 0.01)]
    assert (0.0, 0.1) in compute["matmul"]  # the long GEMM's part inside step 2: 1100 to 1200 us
    assert (0.02, 0.3) in compute["matmul"]
    assert lane_bars[(0, 13)]["communication"] == [(0.3, 0.2)]
    assert all(start >= 0 and start + width <= 0.55 + 1e-9
               for by_class in lane_bars.values() for spans in by_class.values() for start, width in spans)
    shares = plot_timeline.class_shares(lane_bars)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["communication"] == pytest.approx(0.2 / 0.81)


def test_plot_timeline_writes_a_png(tmp_path):
    path = write(tmp_path, "kernels-small-train.json", profile_doc())
    run = run_tool(path)
    assert run.returncode == 0, run.stderr
    assert_png(tmp_path / "kernels-small-train.png")
    run = run_tool(path, "--window", "step 1", "--out", tmp_path / "figures" / "step1.png", "--title", "t")
    assert run.returncode == 0, run.stderr
    assert_png(tmp_path / "figures" / "step1.png")
    run = run_tool(path, "--list")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["step 1\t0.100 ms\t0.550 ms", "step 2\t1.100 ms\t0.550 ms"]


def test_timeline_documents_are_drawn_too(tmp_path):
    doc = profile_doc()
    doc["benchmark"] = "kernel-timeline"
    run = run_tool(write(tmp_path, "timeline.json", doc), "--out", tmp_path / "t.png")
    assert run.returncode == 0, run.stderr
    assert_png(tmp_path / "t.png")


def test_errors(tmp_path):
    model = write(tmp_path, "model.json", {"benchmark": "model", "config": {}, "rows": []})
    run = run_tool(model, "--out", tmp_path / "x.png")
    assert run.returncode == 2
    assert "expected a kernel-profile or kernel-timeline document" in run.stderr
    assert not (tmp_path / "x.png").exists()

    doc = profile_doc()
    doc.pop("records")
    doc["records_omitted"] = 250000
    run = run_tool(write(tmp_path, "big.json", doc))
    assert run.returncode == 2
    assert "lists no records (too many to list: 250000)" in run.stderr

    run = run_tool(write(tmp_path, "k.json", profile_doc()), "--window", "step 3")
    assert run.returncode == 2
    assert "no window 'step 3'" in run.stderr

    run = run_tool(write(tmp_path, "broken.json", "{not json"))
    assert run.returncode == 2
    assert "broken.json: not a JSON document" in run.stderr
