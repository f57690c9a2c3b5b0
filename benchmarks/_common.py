"""Shared pieces of the benchmarks: run metadata, the timer, and the results ledger's files.

Used by the ``bench_*.py`` scripts (run as scripts, so this folder is on sys.path) and
by ``make_table.py``. See ``benchmarks/results/README.md`` for the ledger format.

Timing (``time_calls``): device work is asynchronous, and gpumat runs its kernels on its own
non-blocking CUDA stream, so CUDA events recorded by torch or CuPy on *their* streams would not
bracket gpumat's kernels. Every measurement therefore uses one method, for ours and for the
references alike: synchronize the device, read ``time.perf_counter``, issue ``inner`` calls back
to back (cycling through several input sets so repeated calls do not just re-read a warm cache),
synchronize, read the clock again. One sample is that time divided by ``inner``; the result is the
median of ``repeat`` samples, after warm-up calls. ``inner`` is chosen so one sample lasts about
``target_ms``, which keeps the synchronize and timer overhead (some microseconds) under a few
percent; for kernels shorter than a launch, the figure is the launch-bound time per call, which is
what a Python caller sees.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import math
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
SCHEMA = "gpumat-bench/1"


def _prefer_checkout_build() -> None:
    """Benchmarks measure this checkout: when it holds an in-place build (gpumat/_core*.so beside
    the sources), its folder goes first on sys.path, ahead of an installed gpumat (which may be an
    older commit's: a run from the repository root would otherwise import site-packages' copy)."""
    if any((REPO_ROOT / "gpumat").glob("_core*.so")) and str(REPO_ROOT) not in sys.path[:1]:
        sys.path.insert(0, str(REPO_ROOT))


_prefer_checkout_build()


# --------------------------------------------------------------------------------------------------
# run metadata
# --------------------------------------------------------------------------------------------------


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0)


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_info() -> dict:
    """``{"commit": sha or "unknown", "dirty": bool or None}``.

    ``$GPUMAT_GIT_COMMIT`` wins when set: a copy of the tree without ``.git`` (the GPU machine)
    cannot know its commit, so whoever starts the run passes it.
    """
    env = os.environ.get("GPUMAT_GIT_COMMIT", "").strip()
    if env:
        return {"commit": env, "dirty": None, "source": "GPUMAT_GIT_COMMIT"}
    sha = _run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT)
    if not sha:
        return {"commit": "unknown", "dirty": None, "source": "none"}
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT)
    return {"commit": sha, "dirty": bool(status), "source": "git"}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_info(index: int = 0) -> dict:
    """Name, driver and memory of CUDA device ``index`` from nvidia-smi (else torch, else CuPy)."""
    info: dict = {}
    if shutil.which("nvidia-smi"):
        out = _run(
            [
                "nvidia-smi",
                f"--id={index}",
                "--query-gpu=name,driver_version,memory.total,pci.bus_id",
                "--format=csv,noheader",
            ]
        )
        if out:
            parts = [p.strip() for p in out.splitlines()[0].split(",")]
            if len(parts) >= 4:
                info = {
                    "name": parts[0],
                    "driver": parts[1],
                    "memory": parts[2],
                    "pci_bus_id": parts[3],
                }
    if "name" not in info:
        torch = optional_import("torch")
        if torch is not None and torch.cuda.is_available():
            info["name"] = torch.cuda.get_device_name(index)
        else:
            cupy = optional_import("cupy")
            if cupy is not None:
                try:
                    props = cupy.cuda.runtime.getDeviceProperties(index)
                    info["name"] = props["name"].decode()
                except Exception:  # noqa: BLE001 (no device: leave the name unknown)
                    pass
    info.setdefault("name", "unknown GPU")
    info.setdefault("driver", "unknown")
    return info


def device_info(ctx_name: str) -> dict:
    """What ran the benchmark: ``backend`` ("cpu"/"gpu"), ``name``, ``driver`` and more."""
    if ctx_name == "gpu":
        return {"backend": "gpu", **gpu_info(0)}
    if ctx_name == "emu":  # the emulated CUDA device runs on the host's CPU
        return {
            "backend": "emu",
            "name": f"gpumat emulated CUDA device on {cpu_name()}",
            "driver": "none (emulated)",
            "cores": os.cpu_count(),
        }
    return {
        "backend": "cpu",
        "name": cpu_name(),
        "driver": "none (host)",
        "cores": os.cpu_count(),
    }


def optional_import(name: str):
    """The module, or None when it is not installed or fails to import."""
    try:
        return __import__(name)
    except Exception:  # noqa: BLE001 (a broken optional install is the same as none)
        return None


@contextlib.contextmanager
def busy_processes(k: int):
    """Runs the body with ``k`` background processes that each keep one core busy (a Python
    ``while True: pass``), started here and killed on exit, even on an exception: the benchmarks'
    ``--busy K`` mode, a shared laptop's load reproduced on demand. Yields their pids.

    Raises ValueError for k < 0; ``k = 0`` starts nothing.
    """
    if k < 0:
        raise ValueError(f"busy_processes: k must be >= 0, got {k}")
    spin = [sys.executable, "-c", "while True: pass"]
    procs = []
    try:
        for _ in range(k):
            procs.append(
                subprocess.Popen(spin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        if procs:
            time.sleep(1.0)  # past the interpreter's start-up: the loops are spinning
        yield [p.pid for p in procs]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def add_busy_option(parser) -> None:
    """Adds ``--busy K`` (a count >= 0, default 0) to a benchmark's argparse parser."""

    def count(text: str) -> int:
        k = int(text)
        if k < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {k}")
        return k

    parser.add_argument(
        "--busy", type=count, default=0, metavar="K",
        help="run beside K background processes, each spinning one core (default 0)",
    )  # fmt: skip


#: The environment variables that set how either library's threads run, and gpumat's host BLAS,
#: recorded in each ledger file's notes when set.
THREAD_ENV_VARS = (
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "GOMP_SPINCOUNT",
    "OPENBLAS_NUM_THREADS",
    "GPUMAT_DYNAMIC_THREADS",
    "GPUMAT_BLAS",
)


def busy_note(k: int) -> str:
    """The note a ``--busy K`` run records (make_table.py keeps such runs as their own kind)."""
    return f"environment: BUSY_PROCESSES={k} (background processes, each spinning one core)"


def software_info() -> dict:
    import numpy

    import gpumat

    info = {
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "gpumat": gpumat.build_info(),
        "platform": platform.platform(),
    }
    for name in ("torch", "cupy"):
        mod = sys.modules.get(name)
        if mod is not None:
            info[name] = getattr(mod, "__version__", "unknown")
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch.version, "cuda", None):
        info["torch_cuda"] = torch.version.cuda
    # threads and the BLAS / oneDNN builds of both libraries (issue 37's ledger fields)
    info["threads"] = {"gpumat": gpumat.get_num_threads()}
    info["gpumat_blas"] = gpumat.build_info()["blas"]  # the library in use (GPUMAT_BLAS)
    blas = optional_import("scipy_openblas32")
    if blas is not None:
        info["gpumat_blas_version"] = getattr(blas, "__version__", "unknown")
    if torch is not None:
        info["threads"]["torch"] = torch.get_num_threads()
        lines = [ln.strip(" -") for ln in torch.__config__.show().splitlines()]
        keep = ("oneDNN", "MKL-DNN", "Math Kernel Library", "OpenBLAS", "OpenMP")
        info["torch_config"] = [ln for ln in lines if any(k in ln for k in keep)]
        settings = dict(
            kv.strip().split("=", 1)
            for ln in lines if ln.startswith("Build settings:")
            for kv in ln.removeprefix("Build settings:").split(",") if "=" in kv
        )  # fmt: skip
        info["torch_config"] += [
            f"{k}={settings[k]}" for k in ("BLAS_INFO", "USE_MKLDNN", "USE_OPENMP") if k in settings
        ]
    return info


def gpumat_build() -> dict:
    """Where the imported gpumat lies and the commit it was built from (its _build_config)."""
    import gpumat
    from gpumat import _build_config

    return {
        "path": str(Path(gpumat.__file__).resolve().parent),
        "build_commit": getattr(_build_config, "GIT_COMMIT", "unknown"),
    }


def run_worker(script: str, args: list[str], marker: str):
    """Run ``benchmarks/<script> *args`` in a fresh interpreter, with the gpumat this process
    imported first on its path, and return the JSON after ``marker`` on the last stdout line
    that starts with it (how the own-process workers report).

    Raises:
        RuntimeError: the worker exited non-zero or printed no such line (its stderr in the
            message).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(gpumat_build()["path"]).parent), *filter(None, [env.get("PYTHONPATH")])]
    )
    out = subprocess.run(
        [sys.executable, str(BENCH_DIR / script), *args],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(marker)]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"{script} {' '.join(args[:2])} failed:\n{out.stderr}")
    return json.loads(lines[-1][len(marker) :])


def check_build(git: dict, build: dict) -> None:
    """Raises SystemExit when the imported gpumat was built from another commit than the one the
    ledger file would name (a stale in-place build, or an installed copy of an older commit);
    passes when either commit is unknown (a copy without .git, as on the GPU machine)."""
    built = build["build_commit"].removesuffix("+dirty")
    if git.get("source") != "git" or built == "unknown" or built == git["commit"]:
        return
    raise SystemExit(
        f"benchmarks: the gpumat imported from {build['path']} was built from commit {built}, "
        f"not this checkout's {git['commit']}: build it in place (python3 setup.py build_ext "
        "--inplace) or pip install . first, so that the ledger names the code it measured"
    )


def run_header(kind: str, ctx_name: str, quick: bool, argv: list[str]) -> dict:
    """The metadata block every result file starts with (see results/README.md). Raises
    SystemExit when the imported gpumat is not this checkout's build (:func:`check_build`)."""
    now = utc_now()
    git, build = git_info(), gpumat_build()
    check_build(git, build)
    return {
        "schema": SCHEMA,
        "benchmark": kind,
        "date": now.isoformat().replace("+00:00", "Z"),
        "git": git,
        "gpumat": build,
        "device": device_info(ctx_name),
        "host": {"cpu": cpu_name(), "cores": os.cpu_count(), "hostname": platform.node()},
        "command": " ".join(shlex.quote(a) for a in ["python3", *argv]),
        "quick": quick,
    }


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "unknown"


def default_out_path(kind: str, header: dict, folder: Path = RESULTS_DIR) -> Path:
    """``<folder>/<date>_<time>_<kind>_<backend>_<device>[_quick].json`` (UTC)."""
    stamp = header["date"].replace("-", "").replace(":", "").replace("T", "_").rstrip("Z")
    dev = header["device"]
    name = f"{stamp}_{kind}_{dev['backend']}_{_slug(dev['name'])}"
    if header.get("quick"):
        name += "_quick"
    return folder / f"{name}.json"


def resolve_out(out: str | None, kind: str, header: dict) -> Path:
    """``--out``: None gives the default name under results/; an existing folder (or a path
    ending in '/') gets the default name inside it; anything else is the JSON file's path."""
    if out is None:
        return default_out_path(kind, header)
    path = Path(out)
    if out.endswith(("/", os.sep)) or path.is_dir():
        return default_out_path(kind, header, path)
    return path


def write_results(path: Path, data: dict, markdown: str) -> tuple[Path, Path]:
    """Writes ``path`` (JSON) and the same name with ``.md`` (the printed report)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    md_path = path.with_suffix(".md")
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False, default=_json_default)
        f.write("\n")
    with open(md_path, "w") as f:
        f.write(markdown)
    return path, md_path


def _json_default(obj):
    if hasattr(obj, "item"):
        return obj.item()
    return str(obj)


def header_markdown(header: dict, title: str) -> str:
    dev = header["device"]
    git = header["git"]
    dirty = " (uncommitted changes)" if git.get("dirty") else ""
    lines = [
        f"# {title}",
        "",
        f"- date: {header['date']}",
        f"- git commit: {git['commit']}{dirty}",
        f"- device: {dev['backend']}: {dev['name']}; driver: {dev.get('driver', 'unknown')}",
        f"- command: `{header['command']}`",
    ]
    if header.get("quick"):
        lines.append("- QUICK MODE: small sizes and few repeats; a smoke test, not a measurement")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------


def compare(got: np.ndarray, ref: np.ndarray, tol: float) -> tuple[bool, float, str]:
    """llm.c's validate_result: (ok, relative 2-norm error, message naming the first mismatches)."""
    got = np.asarray(got, dtype=np.float64).reshape(ref.shape)
    bad_nan = ~np.isfinite(got) & np.isfinite(ref)
    if bad_nan.any():
        idx = np.argwhere(bad_nan)[:5]
        where = ", ".join(f"{tuple(int(v) for v in i)}: got {got[tuple(i)]}" for i in idx)
        return False, math.inf, f"{int(bad_nan.sum())} elements not finite (unwritten?): {where}"
    norm = float(np.linalg.norm(ref.ravel()))
    err = float(np.linalg.norm((got - ref).ravel())) / (norm if norm > 0 else 1.0)
    if not err <= tol:
        diff = np.abs(got - ref)
        flat = np.argsort(diff.ravel())[::-1][:5]
        idx = [np.unravel_index(int(i), ref.shape) for i in flat]
        where = "; ".join(
            f"{tuple(int(v) for v in i)}: got {got[i]:.7g}, ref {ref[i]:.7g}" for i in idx
        )
        return False, err, f"relative error {err:.3g} > {tol:g}; worst: {where}"
    return True, err, ""


# --------------------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------------------


def time_calls(
    call,
    n_sets: int,
    sync,
    *,
    repeat: int = 20,
    warmup: int = 3,
    target_ms: float = 5.0,
    max_inner: int = 1000,
) -> dict:
    """Median time of ``call(i)`` (i cycles over ``range(n_sets)``) in milliseconds.

    ``sync()`` must wait for all queued device work. See the module docstring for the method.

    Returns ``{"ms": median, "ms_min", "ms_max", "ms_iqr", "inner", "repeat", "n_sets"}`` (times
    per call in ms).
    """
    for i in range(max(warmup, n_sets)):
        call(i % n_sets)
    sync()
    # one calibration sample of a few calls decides `inner`
    t0 = time.perf_counter()
    probe = max(1, min(n_sets, 4))
    for i in range(probe):
        call(i % n_sets)
    sync()
    per_call = (time.perf_counter() - t0) / probe
    inner = int(max(1, min(max_inner, math.ceil(target_ms / 1e3 / max(per_call, 1e-9)))))
    samples = []
    k = 0
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            call(k % n_sets)
            k += 1
        sync()
        samples.append((time.perf_counter() - t0) / inner * 1e3)
    samples.sort()
    q = statistics.quantiles(samples, n=4) if len(samples) >= 2 else [samples[0]] * 3
    return {
        "ms": statistics.median(samples),
        "ms_min": samples[0],
        "ms_max": samples[-1],
        "ms_iqr": q[2] - q[0],
        "inner": inner,
        "repeat": repeat,
        "n_sets": n_sets,
    }


# --------------------------------------------------------------------------------------------------
# tables
# --------------------------------------------------------------------------------------------------


def format_table(headers: list[str], rows: list[list], align: str | None = None) -> str:
    """A GitHub markdown table (also readable as plain text). ``align``: one of 'l'/'r' per
    column (default: first column left, the rest right)."""
    cells = [[("" if c is None else str(c)) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for j, c in enumerate(row):
            widths[j] = max(widths[j], len(c))
    align = align or ("l" + "r" * (len(headers) - 1))

    def fmt(row):
        out = []
        for j, c in enumerate(row):
            out.append(c.ljust(widths[j]) if align[j] == "l" else c.rjust(widths[j]))
        return "| " + " | ".join(out) + " |"

    sep = (
        "|"
        + "|".join(
            ("-" * (w + 2)) if align[j] == "l" else ("-" * (w + 1) + ":")
            for j, w in enumerate(widths)
        )
        + "|"
    )
    return "\n".join([fmt(headers), sep, *(fmt(r) for r in cells)]) + "\n"


def fmt_num(x, digits: int = 3) -> str:
    """Significant-digit formatting for tables; None -> '-'."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - mag)
    return f"{x:.{decimals}f}"


# --------------------------------------------------------------------------------------------------
# the result tables, from the JSON records (shared by the benchmarks and make_table.py)
# --------------------------------------------------------------------------------------------------


def ops_table(cases: list[dict]) -> str:
    """bench_ops's table from its ``cases`` records (see OPS_LEGEND for the columns)."""
    rows = []
    for r in cases:
        ours = r.get("ours") or {}
        ref = r.get("ref") or {}
        if "gflops" in ours:
            rate = f"{fmt_num(ours['gflops'])} GFLOP/s"
        elif "gbps" in ours:
            rate = f"{fmt_num(ours['gbps'])} GB/s"
        else:
            rate = "-"
        pct = ours.get("pct_of_ceiling")
        ref_ms = ref.get("ms")
        speed = ref.get("speed_vs_ours")
        if ref and not ref.get("valid", True):
            ref_cell = "invalid"
        else:
            ref_cell = fmt_num(ref_ms)
        err = r.get("rel_err")
        rows.append(
            [
                r["name"],
                r["group"],
                r["shape"],
                r["status"],
                fmt_num(ours.get("ms")),
                rate,
                "-" if pct is None else f"{pct:.0f}%",
                ref_cell,
                "-" if speed is None else f"{speed:.2f}x",
                "-" if err is None else f"{err:.1e}",
            ]
        )
    headers = ["case", "group", "shape", "check", "ms", "rate", "% ceil", "ref ms", "x ref", "err"]
    return format_table(headers, rows, align="llll" + "r" * 6)


OPS_LEGEND = (
    "ms: median time per call. rate: GB/s (bytes read + written once) or GFLOP/s (2MNK). "
    "% ceil: of the copy bandwidth (memory-bound ops) or of the 4096^3 FP32 SGEMM (matmul; "
    "quick mode: 256^3). ref ms / x ref: the reference library at the same shape, and its time "
    "over ours (>1: gpumat faster). err: ||out-ref||/||ref|| against float64.\n"
)


def mnist_table(rows: list[dict]) -> str:
    """bench_mnist's table from its ``runs`` records (see MNIST_LEGEND for the columns)."""
    by_key = {(r["model"], r["backend"], r["framework"]): r for r in rows if "epoch_s" in r}
    out = []
    for r in rows:
        if "epoch_s" not in r:
            out.append([r["model"], r["backend"], r["framework"], "error", *["-"] * 8])
            continue
        peak = r.get("peak_bytes")
        mpe = r.get("mallocs_per_epoch")
        vs = "-"
        if r["framework"].startswith(("gpumat", "torch-")):
            t = by_key.get((r["model"], r["backend"], "torch"))
            if t and t.get("epoch_s") and r.get("epoch_s"):
                vs = f"{t['epoch_s'] / r['epoch_s']:.2f}x"
        steps = r.get("steps_per_epoch")
        sps = "-" if not steps or not r.get("epoch_s") else fmt_num(steps / r["epoch_s"], 3)
        out.append(
            [
                r["model"],
                r["backend"],
                r["framework"],
                str(r["epochs"]),
                fmt_num(r["epoch_s"], 3),
                "-" if r["final_valid_accuracy"] is None else f"{r['final_valid_accuracy']:.4f}",
                "-" if mpe is None else fmt_num(mpe, 2),
                "-" if peak is None else fmt_num(peak / 1e6, 3),
                "-" if r.get("launches_per_step") is None else fmt_num(r["launches_per_step"], 3),
                sps,
                r.get("schedule", "-").split(":")[0] or "-",
                vs,
            ]
        )
    headers = [
        "model",
        "backend",
        "framework",
        "epochs",
        "epoch s",
        "valid acc",
        "mallocs/epoch",
        "peak MB",
        "launches/step",
        "steps/s",
        "schedule",
        "x torch",
    ]
    return format_table(headers, out, align="lll" + "r" * 7 + "lr")


MNIST_LEGEND = (
    "epoch s: median seconds per training epoch after the first (validation excluded). valid acc: "
    "after the last epoch. mallocs/epoch: device allocations per epoch after the first (gpumat: "
    "device_malloc_calls; torch: new caching-allocator segments). peak MB: peak device bytes in "
    "use / 1e6 (gpumat allocator vs torch.cuda.max_memory_allocated). launches/step: gpumat op "
    "calls per training step (gpumat.launch_count; forward, backward and update). steps/s: "
    "training steps per second. schedule: how gpumat's executor ran the steps (python: a Python "
    "call per op; compiled: one native call per step; cuda-graph: one CUDA graph launch per "
    "step). gpumat: fusion, compiled steps and CUDA graphs (the defaults); gpumat-nograph: no "
    "CUDA graphs; gpumat-python: fused ops called from Python; gpumat-unfused: no fusion, from "
    "Python. torch-compile: torch.compile of forward and loss (mode reduce-overhead on a GPU). "
    "x torch: eager torch epoch time / this row's (>1: this row faster).\n"
)


def distributed_table(runs: list[dict]) -> str:
    """bench_distributed's table from its ``runs`` records (see DISTRIBUTED_LEGEND)."""
    headers = [
        "ranks",
        "threads/rank",
        "epoch s",
        "allreduce s",
        "allreduce share",
        "valid acc",
        "test acc",
    ]
    rows = []
    for r in runs:
        if "error" in r:
            rows.append([r["ranks"], "-", "error", "", "", "", ""])
            continue
        threads = {p.get("omp_num_threads") for p in r.get("per_rank") or [{}]}
        threads = "all" if threads == {None} else ",".join(sorted(str(t) for t in threads))
        rows.append(
            [
                r["ranks"],
                threads,
                fmt_num(r["epoch_s"]),
                fmt_num(r["allreduce_s"]),
                f"{100 * r['allreduce_share']:.1f}%",
                f"{r['final_valid_accuracy']:.4f}",
                f"{r['test_accuracy']:.4f}",
            ]
        )
    return format_table(headers, rows, "r" * 7)


DISTRIBUTED_LEGEND = (
    "threads/rank: OMP_NUM_THREADS of each rank (all: unset, every core). "
    "epoch s: median seconds per training epoch after the first (validation excluded), rank 0. "
    "allreduce s / share: seconds per epoch in the gradient allreduce (waiting for the slower rank "
    "included, host staging copies excluded) and its fraction of the epoch. 1 rank: one plain "
    "process without MPI. acc: after the last epoch, on the validation / test images (10,000 each; "
    "1,000 in quick mode).\n"
)


def time_interleaved(variants: list[dict], steps: int, repeat: int, warmup: int) -> None:
    """Times every variant (``step``, ``batches``, ``sync``, optional ``probe``) and adds its
    ``step_s`` (median seconds per step over ``repeat`` samples of ``steps`` steps), ``step_s_min``,
    ``step_s_max``, ``samples_s`` (every sample) and, with a probe (allocator counters),
    ``mallocs_per_step`` to its ``row``.

    The samples are interleaved (sample r of every variant, then sample r + 1): on a shared
    machine a burst of other work then slows every variant alike instead of one of them.
    """
    for v in variants:
        v["k"], v["samples"] = 0, []
        for _ in range(warmup):
            v["step"](*v["batches"][v["k"] % len(v["batches"])])
            v["k"] += 1
        v["sync"]()
        v["before"] = v["probe"]() if v.get("probe") else None
    for _ in range(repeat):
        for v in variants:
            v["sync"]()
            t0 = time.perf_counter()
            for _ in range(steps):
                v["step"](*v["batches"][v["k"] % len(v["batches"])])
                v["k"] += 1
            v["sync"]()
            v["samples"].append((time.perf_counter() - t0) / steps)
    for v in variants:
        s = v["samples"]
        v["row"].update(
            step_s=statistics.median(s), step_s_min=min(s), step_s_max=max(s), steps=steps,
            repeat=repeat, samples_s=s,
        )  # fmt: skip
        if v.get("probe"):
            v["row"]["mallocs_per_step"] = (v["probe"]() - v["before"]) / (steps * repeat)


def frontend_table(rows: list[dict]) -> str:
    """bench_frontend's table from its ``runs`` records (see FRONTEND_LEGEND for the columns)."""
    program_rows = [r for r in rows if "train_s" in r]
    rows = [r for r in rows if "train_s" not in r]
    torch_s = {r["case"]: r.get("step_s") for r in rows if r["framework"] == "torch"}
    out = []
    for r in rows:
        t = torch_s.get(r["case"])
        step = r.get("step_s")
        vs = f"{t / step:.2f}x" if t and step and r["framework"] != "torch" else "-"
        mallocs = r.get("mallocs_per_step")
        out.append(
            [
                r["case"],
                r["batch"],
                r["framework"],
                fmt_num(None if step is None else step * 1e3),
                fmt_num(None if not step else 1 / step),
                vs,
                "-" if mallocs is None else fmt_num(mallocs),
                r.get("schedule", "-"),
            ]
        )
    headers = ["case", "batch", "framework", "step ms", "steps/s", "x torch", "mallocs/step",
               "schedule"]  # fmt: skip
    text = format_table(headers, out, "lrl" + "r" * 4 + "l") if rows else ""
    if program_rows:
        # Each row against the twin of its own case: in the benchmark's process, or own process.
        torch_train = {r["case"]: r["train_s"] for r in program_rows if r["framework"] == "torch"}
        table = []
        for r in program_rows:
            t = torch_train.get(r["case"])
            own = " (own process)" if r["case"].endswith("(own process)") else ""
            table.append(
                [
                    r["command"] + own,
                    fmt_num(r["train_s"]),
                    f"{r['test_accuracy']:.4f}",
                    f"{t / r['train_s']:.2f}x" if t and r["framework"] != "torch" else "-",
                ]
            )
        headers = ["program (one epoch)", "train s", "test acc", "x torch"]
        text += ("\n" if text else "") + format_table(headers, table, "lrrr")
    return text


FRONTEND_LEGEND = (
    "step ms: median milliseconds per training step (zero_grad, forward, loss, backward, "
    "optimizer step). steps/s: its inverse. x torch: eager PyTorch's step time / this row's "
    "(>1: this row faster). mallocs/step: device allocations of gpumat's allocator per timed "
    "step (device_malloc_calls). schedule: how the compiled step runs (compiled: one native call "
    "per step; cuda-graph: one CUDA graph launch). gpumat-eager: gpumat.Tensor ops, each kernel "
    "run at once, backward through the recorded graph; gpumat-compiled: gpumat.compile of the "
    "same step (fusion, memory plan, one native call, then the optimizer's multi-tensor update); "
    "torch-compile: torch.compile of the forward and loss, eager backward and update. "
    "program: examples/mnist_net.py (gpumat) and examples/mnist_net_torch.py (its PyTorch twin), "
    "one epoch on the 50,000 training images in the benchmark's process ((own process): each "
    "in a fresh process of its own, against the twin's run there); train s: the epoch's "
    "training seconds (test excluded); test acc: on the 10,000 test images after it; x torch: "
    "the twin's train s over the row's.\n"
)


EMULATOR_LEGEND = (
    "The emulated CUDA device runs the CUDA kernels on the CPU to check them: its times say what "
    "checking costs, nothing about a GPU. mode checked: GPUMAT_EMU_CHECK_REPEATS=all, every "
    "launch runs the instrumented build of its kernel (memcheck, racecheck, initcheck on every "
    "load and store); mode default: a launch that repeats one which has passed the checks 3 "
    "times (same kernel, geometry and arguments, no allocation in between) runs the kernel's "
    "unchecked build. ms: kernels, the median milliseconds per call of the same launch repeated; "
    "epochs, the training seconds of one epoch of examples/mnist.py (batches of 1000) x 1000. "
    "x checked: the checked row's time over this row's.\n"
)


def emulator_table(rows: list[dict]) -> str:
    """bench_emulator's table from its ``rows`` records (see EMULATOR_LEGEND for the columns)."""
    checked = {r["case"]: r["ms"] for r in rows if r["mode"] == "checked"}
    body = [
        [
            r["case"],
            r["shape"],
            r["mode"],
            fmt_num(r["ms"]),
            f"{checked[r['case']] / r['ms']:.2f}" if r["case"] in checked else "-",
        ]
        for r in rows
    ]
    return format_table(["case", "shape", "mode", "ms", "x checked"], body, align="lllrr")


CALIBRATION_LEGEND = (
    "measured us: the GPU's median microseconds per call (bench_ops.py: host-timed between device "
    "synchronizations, so a small kernel's time is the per-call cost of a Python call and its "
    "launch). est us: gpumat.profile's roofline estimate of the same call on the named GPU, from "
    "the kernels' memory counters on the emulated device (a model, never a measurement; 2 us per "
    "launch at least). floor us: max(DRAM bytes / bandwidth, FLOPs / FP32 peak) of the call. "
    "est / measured: below 1, the model is optimistic.\n"
)


def calibration_table(rows: list[dict]) -> str:
    """The markdown table of a calibration run (also make_table's ``calibration`` block)."""
    table = []
    for r in rows:
        if "error" in r:
            table.append([r["name"], r["group"], "-", "error", "-", "-", "-", "-", r["error"]])
            continue
        table.append(
            [
                r["name"],
                r["group"],
                r["shape"],
                fmt_num(r["measured_s"] * 1e6),
                fmt_num(r["estimate_s"] * 1e6),
                fmt_num(r["floor_s"] * 1e6),
                str(r["launches"]),
                f"{r['estimate_over_measured']:.2f}",
                "",
            ]
        )
    headers = ["case", "group", "shape", "measured us", "est us", "floor us", "launches",
               "est / measured", "note"]  # fmt: skip
    return format_table(headers, table, "lll" + "r" * 5 + "l")
