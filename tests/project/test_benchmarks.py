"""The benchmark scripts' own logic, in-process and cheap: no timing is asserted anywhere.

The scripts' quick modes (``bench_ops.py --quick``, ``bench_mnist.py --quick``, ...) run in
``.ci/run`` (about half a minute on a small CI machine); here only their parts are checked: the
case lists cover gpumat.ops, validation rejects unwritten outputs and TF32-sized errors, every op's
case runs end to end at a tiny size on the host, make_table.py builds the ledger's table from
JSON, and bench_frontend interleaves its frameworks' samples and tabulates its rows.
"""

import importlib.util
import json
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH_DIR))

import _common  # noqa: E402
import bench_ops  # noqa: E402
import make_table  # noqa: E402

import gpumat  # noqa: E402
from gpumat import ops  # noqa: E402


def test_every_benchmarked_function_exists_in_ops():
    for key, name in bench_ops.OP_FUNCTION.items():
        assert callable(getattr(ops, name, None)), f"bench_ops times {key} as ops.{name}"
    assert set(bench_ops.OPS) == set(bench_ops.OP_FUNCTION)


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_case_lists(quick):
    cases = bench_ops.build_cases(quick)
    keys = [(c.group, c.name) for c in cases]
    assert len(keys) == len(set(keys)), "case names repeat within a group"
    assert {c.op for c in cases} == set(bench_ops.OPS), "every op has at least one case"
    for c in cases:
        spec = bench_ops.OPS[c.op]
        assert len(c.in_shapes) == len(spec.inputs), c.name
    mnist = {c.name for c in cases if c.group == "mnist"}
    assert "matmul_NN_1000x256x784_mlp_fwd1" in mnist and "matmul_TN_784x256x1000_dW1" in mnist
    groups = {c.group for c in cases}
    assert groups == ({"mnist", "large"} if quick else {"seed", "mnist", "gpt", "large"})


def test_compare_rejects_unwritten_and_tf32_sized_errors():
    rng = np.random.default_rng(0)
    ref = rng.uniform(-1, 1, (64, 64))
    ok, err, _ = bench_ops.compare(ref.astype(np.float32), ref, bench_ops.TOL_POINTWISE)
    assert ok and err < 1e-7
    poisoned = ref.astype(np.float32)
    poisoned[3, 5] = np.nan
    ok, err, msg = bench_ops.compare(poisoned, ref, bench_ops.TOL_SUM)
    assert not ok and math.isinf(err) and "(3, 5)" in msg
    tf32_like = (ref * (1 + 3e-4 * rng.standard_normal(ref.shape))).astype(np.float32)
    ok, err, msg = bench_ops.compare(tf32_like, ref, bench_ops.TOL_SUM)
    assert not ok and "relative error" in msg


def test_check_random():
    rng = np.random.default_rng(1)
    assert bench_ops.check_random(rng.random(100_000, dtype=np.float32), "uniform")[0]
    assert bench_ops.check_random(rng.standard_normal(100_000, dtype=np.float32), "normal")[0]
    assert not bench_ops.check_random(np.full(1000, 0.5, np.float32), "uniform")[0]
    assert not bench_ops.check_random(np.full(1000, np.nan, np.float32), "normal")[0]


def _tiny_cases():
    """One small case per op, shapes that are not multiples of anything."""
    C, b = bench_ops.Case, bench_ops
    return [
        b._set("fill", "t", (5, 7), 0.25),
        b._unary("copy", "t", "copy", (5, 7)),
        b._binary("add", "t", "add", (5, 7)),
        b._binary("multiply", "t", "multiply", (5, 7)),
        b._unary("add_const", "t", "add_const", (5, 7), value=0.5),
        b._unary("multiply_const", "t", "multiply_const", (5, 7), value=-1.5),
        b._unary("relu", "t", "relu", (5, 7)),
        b._binary("relu_gradient", "t", "relu_gradient", (5, 7)),
        C("axpy", "t", "axpy", [(5, 7), (5, 7)], (5, 7), {"alpha": -0.01}, "5x7"),
        b._unary("exp", "t", "exp", (5, 7)),
        b._unary("log", "t", "log", (5, 7)),
        b._binary("divide", "t", "divide", (5, 7)),
        b._binary("eq", "t", "eq", (5, 7)),
        b._one_hot("one_hot", "t", 5, 10),
        b._adadelta("adadelta", "t", (5, 7)),
        C("transpose", "t", "transpose", [(5, 7)], (7, 5), {"shape": (7, 5)}, "5x7"),
        b._special("broadcast_to", "t", "broadcast_to", (7,), (5, 7)),
        b._special("sum_to_size", "t", "sum_to_size", (5, 7), (7,)),
        b._special("argmax", "t", "argmax", (5, 7), (5,), axis=1),
        b._special("argmax0", "t", "argmax", (5, 7), (7,), axis=0),
        b._unary("softmax", "t", "softmax", (5, 7)),
        b._sce("cross_entropy", "t", (5, 7)),
        b._random("uniform", "t", "uniform", (100, 100)),
        b._random("normal", "t", "normal", (100, 100)),
        *[b._matmul("t", 5, 7, 3, ta, tb) for ta in (False, True) for tb in (False, True)],
        b._bmm("t", 3, 5, 7, 4),
    ]


def test_every_op_validates_and_times_on_the_host():
    import gpumat

    args = bench_ops.parse_args(["--ctx", "cpu", "--quick", "--repeat", "1", "--seed", "0"])
    runner = bench_ops.Runner(gpumat.cpu(), bench_ops.pick_reference("cpu", "auto"), args)
    runner.timing.update(warmup=1, target_ms=0.1)
    ceilings = {"copy_gbps": 1.0, "sgemm_gflops": 1.0}
    records = [runner.run(case, ceilings) for case in _tiny_cases()]
    for r in records:
        assert r["status"] == "ok", (r["name"], r.get("message"))
        assert r["ours"]["ms"] > 0 and r["ref"]["valid"], r["name"]
        assert ("gflops" in r["ours"]) == (r["op"] in ("matmul", "bmm"))
    table = _common.ops_table(records)
    assert table.count("\n") == len(records) + 2
    json.dumps(records, default=_common._json_default)  # the records are JSON-serialisable


def _header(kind, backend, name, date, quick=False):
    return {
        "schema": _common.SCHEMA,
        "benchmark": kind,
        "date": date,
        "git": {"commit": "a" * 40, "dirty": False, "source": "git"},
        "device": {"backend": backend, "name": name, "driver": "580.1"},
        "command": f"python3 benchmarks/bench_{kind}.py",
        "quick": quick,
    }


def _ops_run(date, name="NVIDIA H100 80GB HBM3", backend="gpu", quick=False, ms=1.25):
    case = {
        "name": "add",
        "group": "large",
        "op": "add",
        "shape": "8192x8192",
        "status": "ok",
        "rel_err": 1e-8,
        "ours": {"ms": ms, "gbps": 600.0, "pct_of_ceiling": 20.0},
        "ref": {"lib": "torch", "valid": True, "ms": 0.3, "speed_vs_ours": 0.3 / ms},
    }
    return {
        **_header("ops", backend, name, date, quick),
        "ceilings": {"copy_gbps": 3000.0, "copy_source": "torch copy"},
        "cases": [case],
    }


def _mnist_run(date):
    run = {
        "framework": "gpumat",
        "model": "mlp",
        "backend": "gpu",
        "epochs": 5,
        "epoch_s": 0.0625,
        "final_valid_accuracy": 0.97,
        "mallocs_per_epoch": 0,
        "peak_bytes": 12_000_000,
    }
    return {
        **_header("mnist", "gpu", "NVIDIA H100 80GB HBM3", date),
        "settings": {"num_train": 50000, "batch_size": 1000, "lr": 1.0, "epochs": 5},
        "runs": [run],
    }


def test_make_table_takes_the_latest_real_run_per_device(tmp_path):
    files = {
        "old.json": _ops_run("2026-11-01T10:00:00Z", ms=9.5),
        "new.json": _ops_run("2026-11-02T10:00:00Z", ms=1.25),
        "cpu_quick.json": _ops_run("2026-11-03T10:00:00Z", "Some CPU", "cpu", quick=True),
        "mnist.json": _mnist_run("2026-11-02T11:00:00Z"),
    }
    for fname, data in files.items():
        (tmp_path / fname).write_text(json.dumps(data))
    (tmp_path / "other.json").write_text('{"not": "a result"}')

    runs = make_table.select(make_table.load_runs([tmp_path]), include_quick=False, every=False)
    text = make_table.build(runs, {"large", "mnist"})
    assert "1.25" in text and "9.50" not in text, "only the latest run of a device"
    assert "Some CPU" not in text, "quick runs are left out"
    assert "NVIDIA H100 80GB HBM3" in text and "aaaaaaaaaa" in text and "driver 580.1" in text
    assert "MNIST training" in text and "0.9700" in text

    runs = make_table.select(make_table.load_runs([tmp_path]), include_quick=True, every=True)
    text = make_table.build(runs, {"large"})
    assert "9.50" in text and "QUICK" in text

    out = tmp_path / "table.md"
    assert make_table.main([str(tmp_path), "--out", str(out)]) == 0
    assert out.read_text().startswith("### Kernels")


def test_make_table_keeps_host_overhead_runs_apart(tmp_path):
    # A later --mlp-hidden run (tiny widths) must not replace the full-size run in the ledger.
    full = _mnist_run("2026-11-02T11:00:00Z")
    tiny = _mnist_run("2026-11-03T11:00:00Z")
    tiny["settings"]["mlp_hidden"] = [16, 16]
    tiny["runs"][0]["epoch_s"] = 0.0123
    (tmp_path / "full.json").write_text(json.dumps(full))
    (tmp_path / "tiny.json").write_text(json.dumps(tiny))
    runs = make_table.select(make_table.load_runs([tmp_path]), include_quick=False, every=False)
    text = make_table.build(runs, {"mnist"})
    assert "0.0625" in text and "0.0123" in text
    assert text.count("MLP hidden widths (16, 16)") == 1


def test_make_table_keeps_busy_machine_runs_apart(tmp_path):
    # A --busy run is its own kind: it neither replaces nor is replaced by an idle run.
    idle = _mnist_run("2026-11-02T11:00:00Z")
    busy = _mnist_run("2026-11-03T11:00:00Z")
    busy["notes"] = [_common.busy_note(2)]
    busy["runs"][0]["epoch_s"] = 0.0456
    (tmp_path / "idle.json").write_text(json.dumps(idle))
    (tmp_path / "busy.json").write_text(json.dumps(busy))
    runs = make_table.select(make_table.load_runs([tmp_path]), include_quick=False, every=False)
    assert {make_table.environment(d) for _, d in runs} == {(), ("BUSY_PROCESSES=2",)}
    text = make_table.build(runs, {"mnist"})
    assert "0.0625" in text and "0.0456" in text


def test_busy_processes_spin_and_are_always_stopped():
    import os

    with _common.busy_processes(2) as pids:
        assert len(pids) == 2
        for pid in pids:
            os.kill(pid, 0)  # alive
            if sys.platform.startswith("linux"):
                with open(f"/proc/{pid}/stat") as f:
                    assert f.read().split(") ")[1][0] == "R", "busy means running, not asleep"
    with pytest.raises(RuntimeError):
        with _common.busy_processes(1) as more:
            raise RuntimeError("a failing benchmark")
    for pid in pids + more:  # killed and reaped on exit, the failing body's too
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with _common.busy_processes(0) as none:
        assert none == []
    with pytest.raises(ValueError, match="k must be >= 0"):
        with _common.busy_processes(-1):
            pass


def test_bench_mnist_mlp_hidden_option():
    import bench_mnist

    assert bench_mnist.parse_args(["--mlp-hidden", "16,8"]).mlp_hidden == (16, 8)
    assert bench_mnist.parse_args([]).mlp_hidden is None
    for bad in ("16", "16,0", "a,b", "1,2,3"):
        with pytest.raises(SystemExit):
            bench_mnist.parse_args(["--mlp-hidden", bad])


def test_default_result_names(tmp_path):
    header = _header("ops", "cpu", "Intel(R) Xeon(R) @ 2.80GHz", "2026-11-22T22:36:09Z", True)
    path = _common.default_out_path("ops", header, tmp_path)
    assert path.name == "20261122_223609_ops_cpu_intel-r-xeon-r-2-80ghz_quick.json"
    assert _common.resolve_out(str(tmp_path), "ops", header).parent == tmp_path
    assert _common.resolve_out(str(tmp_path / "x.json"), "ops", header).name == "x.json"


def test_time_calls_rotates_over_the_sets():
    seen = []
    t = _common.time_calls(seen.append, 3, lambda: None, repeat=2, warmup=1, target_ms=0.01)
    assert set(seen) == {0, 1, 2}
    assert t["n_sets"] == 3 and t["repeat"] == 2 and t["ms"] >= 0


def test_frontend_table_ratios_and_programs():
    rows = [
        {"case": "mlp", "batch": 1000, "framework": "gpumat-eager", "step_s": 0.008},
        {"case": "mlp", "batch": 1000, "framework": "gpumat-compiled", "step_s": 0.005,
         "mallocs_per_step": 0.0, "schedule": "compiled"},
        {"case": "mlp", "batch": 1000, "framework": "torch", "step_s": 0.010},
        {"case": "mnist-net", "batch": 64, "framework": "gpumat-eager", "train_s": 50.0,
         "test_accuracy": 0.9824, "command": "python examples/mnist_net.py --epochs 1"},
        {"case": "mnist-net", "batch": 64, "framework": "torch", "train_s": 80.0,
         "test_accuracy": 0.982, "command": "python examples/mnist_net_torch.py --epochs 1"},
        {"case": "mnist-net (own process)", "batch": 64, "framework": "gpumat-compiled",
         "train_s": 40.0, "test_accuracy": 0.9824,
         "command": "python examples/mnist_net.py --epochs 1 --compile"},
        {"case": "mnist-net (own process)", "batch": 64, "framework": "torch", "train_s": 60.0,
         "test_accuracy": 0.982, "command": "python examples/mnist_net_torch.py --epochs 1"},
    ]  # fmt: skip
    text = _common.frontend_table(rows)
    lines = text.splitlines()
    eager = next(ln for ln in lines if "gpumat-eager" in ln)
    compiled = next(ln for ln in lines if "gpumat-compiled" in ln)
    assert "8.00" in eager and "1.25x" in eager  # torch's 10 ms over 8 ms
    assert "2.00x" in compiled and "| compiled" in compiled and " 0 | " in compiled
    program = next(ln for ln in lines if "mnist_net.py --epochs 1 " in ln)
    assert "50.0" in program and "0.9824" in program and "1.60x" in program
    twin = next(ln for ln in lines if "mnist_net_torch.py" in ln)
    assert twin.rstrip(" |").endswith("-")
    own = next(ln for ln in lines if "--compile (own process)" in ln)  # against its own twin
    assert "40.0" in own and "1.50x" in own


def test_bench_frontend_interleaves_the_frameworks():
    import bench_frontend

    calls = []

    def variant(name):
        return {
            "row": {"framework": name},
            "step": lambda x: calls.append((name, x)),
            "batches": [(0,), (1,)],
            "sync": lambda: None,
        }

    variants = [variant("a"), variant("b")]
    bench_frontend.time_interleaved(variants, steps=2, repeat=3, warmup=1)
    timed = [name for name, _ in calls[2:]]  # after one warm-up step each
    assert timed == ["a", "a", "b", "b"] * 3, "sample r of every framework before sample r + 1"
    assert [x for name, x in calls if name == "a"] == [0, 1, 0, 1, 0, 1, 0]
    for v in variants:
        assert v["row"]["repeat"] == 3 and v["row"]["steps"] == 2
        assert 0 <= v["row"]["step_s_min"] <= v["row"]["step_s"] <= v["row"]["step_s_max"]


def test_own_process_rows_time_each_library_alone(monkeypatch):
    import bench_frontend

    monkeypatch.setattr(bench_frontend, "OWN_PROCESS_ROUNDS", 2)
    args = types.SimpleNamespace(steps={"mlp": 1}, repeat=2, quick=False, seed=0)
    rows = bench_frontend.own_process_rows("mlp", bench_frontend.QUICK_CASES["mlp"], args)
    want = {"gpumat-eager", "gpumat-compiled"}
    has_torch = importlib.util.find_spec("torch") is not None
    if has_torch:  # and gpumat in a process that imported and used PyTorch first
        want |= {"torch", "gpumat-eager (PyTorch first)", "gpumat-compiled (PyTorch first)"}
    assert {r["framework"] for r in rows} == want
    for r in rows:
        assert r["case"] == "mlp (own process)" and r["processes"] == 2
        assert len(r["samples_s"]) == 4  # 2 samples from each of 2 processes
        assert r["step_s_min"] <= r["step_s"] <= r["step_s_max"]
        if r["framework"] == "torch":
            assert r["gpumat_loaded"] is False  # PyTorch alone: gpumat's libgomp not loaded
    shared = {"case": "mlp", "batch": 100, "framework": "gpumat-eager", "step_s": 1.1 * next(
        r["step_s"] for r in rows if r["framework"] == "gpumat-eager")}  # fmt: skip
    # a whole-program row (mnist-net's) has train_s, no step time: left out of the note
    program = {"case": "mnist-net", "framework": "gpumat-eager", "train_s": 30.0}
    note = bench_frontend.coexistence_note([shared, program, *rows])
    assert note is not None and "mlp 1.10x" in note and "mnist-net" not in note
    alone = [r for r in rows if "PyTorch first" not in r["framework"]]
    assert bench_frontend.coexistence_note(alone) is None  # nothing beside PyTorch to compare
    if has_torch:
        assert "imported and used PyTorch first" in bench_frontend.coexistence_note(rows)


def test_make_table_keeps_runs_of_other_models_and_groups(tmp_path):
    # bench_mnist --models mlp and a later --models logreg,cnn run: both stay in the tables, and
    # README's summary takes each model from the newest run that trained it.
    mlp = _mnist_run("2026-11-02T11:00:00Z")
    mlp["settings"]["models"] = ["mlp"]
    other = _mnist_run("2026-11-03T11:00:00Z")
    other["settings"]["models"] = ["logreg"]
    other["runs"][0].update(model="logreg", epoch_s=0.0311)
    # a bench_ops --only mnist run does not hide a run of the large group
    mnist_ops = _ops_run("2026-11-04T10:00:00Z", ms=2.5)
    mnist_ops["cases"][0]["group"] = "mnist"
    for name, data in {"mlp": mlp, "other": other, "large": _ops_run("2026-11-01T10:00:00Z"),
                       "mnist": mnist_ops}.items():  # fmt: skip
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    runs = make_table.select(make_table.load_runs([tmp_path]), include_quick=False, every=False)
    text = make_table.build(runs, {"large", "mnist"})
    assert "0.0625" in text and "0.0311" in text
    assert "1.25" in text and "2.50" in text
    summary = make_table.block_mnist_summary(runs, tmp_path)
    assert summary.index("| logreg") < summary.index("| mlp")
    assert "mlp: MNIST" in summary and "logreg: MNIST" in summary


def test_calibration_table_and_section(tmp_path):
    rows = [
        {"name": "relu", "group": "mnist", "shape": "1000x256", "measured_s": 5e-6,
         "estimate_s": 2e-6, "floor_s": 4e-7, "launches": 1, "estimate_over_measured": 0.4},
        {"name": "gone", "group": "mnist", "error": "no such case today"},
    ]  # fmt: skip
    table = _common.calibration_table(rows)
    assert "| relu" in table and "0.40" in table and "no such case today" in table
    data = {
        **_header("calibration", "gpu", "NVIDIA H200", "2026-11-26T15:00:00Z"),
        "settings": {"gpu_model": "H200"},
        "estimated_on": {"name": "gpumat emulated CUDA device"},
        "measured": {
            "file": "x_ops_gpu.json",
            "date": "2026-11-26",
            "git": {"commit": "a" * 40},
            "command": "python3 benchmarks/bench_ops.py --ctx gpu",
        },  # fmt: skip
        "summary": {
            "cases": 1,
            "median_estimate_over_measured": 0.4,
            "min_estimate_over_measured": 0.4,
            "max_estimate_over_measured": 0.4,
        },  # fmt: skip
        "runs": rows,
    }
    text = make_table.calibration_section(tmp_path / "c.json", data)
    assert "median estimate / measured 0.40 over 1 cases" in text and "H200 model" in text


def test_bench_attention_checks_before_it_times(tmp_path, monkeypatch):
    """The quick run on the host writes its ledger files with every case checked against float64
    and the fused path's extra memory below the composed path's; a kernel that gives wrong values
    is reported as FAIL and not timed."""
    import bench_attention

    assert bench_attention.main(["--quick", "--out", str(tmp_path) + "/"]) == 0
    (path,) = tmp_path.glob("*_attention_cpu_*_quick.json")
    data = json.loads(path.read_text())
    assert data["benchmark"] == "attention" and data["quick"]
    for row in data["runs"]:
        assert row["status"] == "ok" and row["rel_err"] < 1e-5, row
        assert row["timings"]["gpumat_fwd"]["ms"] > 0
    largest = max(data["memory"], key=lambda r: r["T"])
    assert 0 < largest["gpumat_fused_bytes"] < largest["gpumat_composed_bytes"]
    assert path.with_suffix(".md").read_text().startswith("# Fused attention")

    def wrong(q, k, v, out, scale, causal):  # a kernel that writes nothing
        pass

    monkeypatch.setattr(bench_attention.ops, "attention", wrong)
    args, rng = types.SimpleNamespace(repeat=1), np.random.default_rng(0)
    row = bench_attention.run_case((1, 2, 20, 8, True), gpumat.cpu(), None, args, rng)
    assert row["status"] == "FAIL" and "timings" not in row


def test_a_run_of_another_commits_build_stops_before_measuring():
    sha, other = "a" * 40, "b" * 40
    git = {"commit": sha, "dirty": False, "source": "git"}
    _common.check_build(git, {"path": "/x", "build_commit": sha})
    _common.check_build(git, {"path": "/x", "build_commit": sha + "+dirty"})
    _common.check_build(git, {"path": "/x", "build_commit": "unknown"})  # built outside git
    no_git = {"commit": "unknown", "dirty": None, "source": "none"}  # a copy without .git
    _common.check_build(no_git, {"path": "/x", "build_commit": other})
    with pytest.raises(SystemExit, match=f"built from commit {other}, not this checkout's {sha}"):
        _common.check_build(git, {"path": "/x", "build_commit": other})
    # the header names the gpumat that runs and the commit it was built from
    build = _common.gpumat_build()
    assert Path(build["path"]) == Path(gpumat.__file__).resolve().parent
    assert isinstance(build["build_commit"], str) and build["build_commit"]


def test_own_process_gpt_rows_start_from_the_same_weights(monkeypatch):
    import bench_frontend

    monkeypatch.setattr(bench_frontend, "OWN_PROCESS_ROUNDS", 1)
    args = types.SimpleNamespace(
        steps={"gpt": 1}, repeat=1, quick=True, seed=3, torch_compile=False
    )
    rows = bench_frontend.own_process_gpt_rows(args)
    want = {"gpumat-eager", "gpumat-compiled"}
    if importlib.util.find_spec("torch") is not None:
        want.add("torch")
    assert {r["framework"] for r in rows} == want
    first = {r["first_loss"] for r in rows}
    assert max(first) - min(first) <= 1e-4 * max(first)  # one set of weights and batches
    assert 3.0 < min(first) < 6.0  # about ln(65) = 4.17 from a fresh model, not a trained one
    for r in rows:
        assert r["case"] == "gpt (own process)" and len(r["samples_s"]) == 2
        if r["framework"] == "torch":
            assert r["gpumat_loaded"] is False  # PyTorch loaded before gpumat in its worker
