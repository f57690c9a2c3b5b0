#!/usr/bin/env python3
"""Build the documentation's performance tables from the ledger's JSON files.

Usage::

    python3 benchmarks/make_table.py --write      # rewrite the generated blocks of the docs
    python3 benchmarks/make_table.py --check      # exit 1 if a committed block is stale
    python3 benchmarks/make_table.py [FILE_OR_DIR ...] [--out perf.md] [--all] [--include-quick]

The docs (README.md, benchmarks/README.md, docs/*.md) hold generated blocks between two marker
comments, ``<!-- make_table: NAME ... -->`` and ``<!-- /make_table: NAME -->``; ``--write``
replaces each block's text with what :data:`BLOCKS` builds from ``benchmarks/results/*.json``, and
``--check`` (run by ``tests/project/test_docs.py``) fails when a committed block differs, so no
table in the docs can go stale or be edited by hand. The blocks:

- ``mnist-summary`` (README.md): gpumat against PyTorch on one device (a GPU before the host),
  each model from the newest full-size MNIST run that trained it there, a source line per file.
- ``emulator`` (docs/emulator.md): the latest emulated-device run (bench_emulator.py), its source
  line and the legend.
- ``ops``, ``mnist``, ``frontend``, ``distributed`` (benchmarks/README.md): every kind of run's
  latest file, with its full source line (date, commit, device, driver, command, file) and the
  column legend.
- ``distributed-summary`` (docs/distributed.md): the latest data-parallel run, one device line.

Without ``--write``/``--check`` it prints the ``ops``, ``mnist``, ``frontend``, ``distributed`` and
``emulator`` sections of the given files or folders (default ``benchmarks/results``) to stdout or
``--out``. A run's *kind* is its benchmark, backend, device name, quick flag, MLP widths (a
host-overhead run), the environment its notes record (e.g. ``OMP_NUM_THREADS=1``) and what it
covers (an MNIST run's models, a kernel run's case groups, a front-end run's cases); the latest
run of each kind is shown (``--all``: every run, newest first). Quick runs (``"quick": true``: CI
smoke runs with small sizes) are left out unless ``--include-quick``, and are labelled when
included. Only numbers from those files appear; nothing is computed but formatting and ratios of
two numbers of one file.

``--groups`` chooses which bench_ops case groups appear (default ``mnist,gpt,large``; the dlsys
course's test sizes, group ``seed`` in the files, are in the JSON files and the per-run markdown).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from _common import (
    CALIBRATION_LEGEND,
    DISTRIBUTED_LEGEND,
    EMULATOR_LEGEND,
    FRONTEND_LEGEND,
    MNIST_LEGEND,
    OPS_LEGEND,
    RESULTS_DIR,
    SCHEMA,
    calibration_table,
    distributed_table,
    emulator_table,
    fmt_num,
    format_table,
    frontend_table,
    mnist_table,
    ops_table,
)

REPO_ROOT = RESULTS_DIR.parent.parent
DEFAULT_GROUPS = frozenset({"mnist", "gpt", "large"})
_ENV_NOTE = re.compile(r"environment: ([A-Z_][A-Z0-9_]*=[^\s,;()]+)")


def load_runs(paths: list[Path]) -> list[tuple[Path, dict]]:
    """(file, data) of every ledger JSON file among ``paths`` (files or folders)."""
    files: list[Path] = []
    for p in paths:
        files += sorted(p.glob("*.json")) if p.is_dir() else [p]
    runs = []
    for f in files:
        try:
            data = json.loads(f.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            print(f"make_table: skipping {f}: {exc}", file=sys.stderr)
            continue
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            print(f"make_table: skipping {f}: not a {SCHEMA} file", file=sys.stderr)
            continue
        runs.append((f, data))
    return runs


# gpumat's own OpenMP wait settings (gpumat/__init__.py), which runs before 2026-11-28T13:30Z found
# in os.environ and recorded as if a user had set them: such runs are of the default kind.
_GPUMAT_OWN_SETTINGS = frozenset({"OMP_WAIT_POLICY=PASSIVE", "GOMP_SPINCOUNT=2000"})


def environment(d: dict) -> tuple[str, ...]:
    """The environment settings a run's notes record, e.g. ``("OMP_NUM_THREADS=1",)`` (not
    gpumat's own defaults, which earlier runs recorded too)."""
    found = {m for n in d.get("notes") or [] for m in _ENV_NOTE.findall(str(n))}
    return tuple(sorted(found - _GPUMAT_OWN_SETTINGS))


def run_kind(d: dict) -> tuple:
    """What makes two runs comparable: a later run of the same kind replaces an earlier one."""
    settings = d.get("settings") or {}
    hidden = settings.get("mlp_hidden")  # a host-overhead run is its own kind
    # What a run covers: a run of some models, or of some case groups (`--only mnist`), does not
    # replace a run of others.
    if d["benchmark"] == "mnist":
        covers = tuple(sorted(settings.get("models") or ()))
    elif d["benchmark"] == "ops":
        covers = tuple(sorted({c.get("group", "?") for c in d.get("cases", [])}))
    elif d["benchmark"] == "frontend":  # a run of the gpt case alone leaves the others shown
        covers = tuple(sorted({r.get("case", "?") for r in d.get("runs", [])}))
    else:
        covers = ()
    return (
        d["benchmark"],
        d["device"]["backend"],
        d["device"]["name"],
        bool(d.get("quick")),
        tuple(hidden or ()),
        environment(d),
        covers,
    )


def select(runs, include_quick: bool, every: bool):
    """The runs to show, newest first: the latest of each kind (``every``: all of them)."""
    runs = [r for r in runs if include_quick or not r[1].get("quick")]
    runs = sorted(runs, key=lambda r: r[1]["date"], reverse=True)
    if every:
        return runs
    seen, out = set(), []
    for f, d in runs:
        key = run_kind(d)
        if key not in seen:
            seen.add(key)
            out.append((f, d))
    return out


def _rel(path: Path) -> str:
    """``path`` relative to the repository root when it is inside it, else as given."""
    try:
        return path.resolve().relative_to(REPO_ROOT.resolve()).as_posix()
    except ValueError:
        return str(path)


def _link(path: Path, doc_dir: Path) -> str:
    """A markdown link target for ``path`` from a doc in ``doc_dir``."""
    return Path(os.path.relpath(path.resolve(), doc_dir.resolve())).as_posix()


def source_line(path: Path, d: dict) -> str:
    """The full provenance of a run: device, driver, date, commit, command and its file."""
    dev, git = d["device"], d["git"]
    commit = git.get("commit", "unknown")
    commit = commit[:10] if len(commit) == 40 else commit
    dirty = "+uncommitted changes" if git.get("dirty") else ""
    quick = " **QUICK smoke run, not a measurement**" if d.get("quick") else ""
    if d.get("complete") is False:
        quick += " **INCOMPLETE run (stopped early)**"
    return (
        f"{dev['backend']}: **{dev['name']}** (driver {dev.get('driver', 'unknown')}), "
        f"{d['date']}, commit `{commit}`{dirty}, `{d['command']}`, from `{_rel(path)}`{quick}\n"
    )


def device_line(path: Path, d: dict, doc_dir: Path) -> str:
    """The one line a user doc gives about where a table's numbers come from."""
    dev = d["device"]
    cores = dev.get("cores") or (d.get("host") or {}).get("cores")
    name = f"{dev['name']}, {cores} cores" if dev["backend"] == "cpu" and cores else dev["name"]
    if dev["backend"] != "cpu":
        name += f" (driver {dev.get('driver', 'unknown')})"
    env = "".join(f", `{e}`" for e in environment(d))
    return (
        f"Device: {dev['backend']}, {name}{env}; {d['date'][:10]}; `{d['command']}`; "
        f"from [{path.name}]({_link(path, doc_dir)}).\n"
    )


def _count(n) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def _uniform(rows: list[dict], key: str):
    values = {r.get(key) for r in rows if "epoch_s" in r}
    return values.pop() if len(values) == 1 else None


def mnist_settings(d: dict) -> str:
    """The settings sentence of an MNIST run: images, batch, lr, epochs, MLP widths."""
    s, rows = d.get("settings", {}), d.get("runs", [])
    batch = s.get("batch_size") or _uniform(rows, "batch_size")
    lr = s.get("lr") or _uniform(rows, "lr")
    recipe = (
        f"batch {batch}, lr {lr}"
        if batch is not None and lr is not None
        else "each model's recipe (batch size, optimizer, lr)"
    )
    hidden = f", MLP hidden widths {tuple(s['mlp_hidden'])}" if s.get("mlp_hidden") else ""
    images = _count(s.get("num_train"))
    return f"{images} training images, {recipe}, {s.get('epochs')} epochs{hidden}."


def notes_lines(d: dict) -> str:
    """A run's notes, one ``Note: ...`` line each."""
    return "".join(f"Note: {n}.\n" for n in d.get("notes", []))


def ops_section(path: Path, d: dict, groups) -> str:
    c = d.get("ceilings", {})
    parts = [f"copy {fmt_num(c.get('copy_gbps'))} GB/s ({c.get('copy_source', '?')})"]
    if c.get("sgemm_gflops"):
        mm = c.get("sgemm_shape", ["?"])[0]
        parts.append(f"SGEMM {fmt_num(c['sgemm_gflops'])} GFLOP/s at {mm}^3 ({c['sgemm_source']})")
    cases = [r for r in d.get("cases", []) if r.get("group") in groups]
    notes = notes_lines(d)
    return (
        source_line(path, d)
        + f"\nCeilings measured in the same run: {'; '.join(parts)}.\n{notes}\n"
        + ops_table(cases)
    )


def mnist_section(path: Path, d: dict) -> str:
    notes = notes_lines(d)
    table = mnist_table(d.get("runs", []))
    return source_line(path, d) + f"\n{mnist_settings(d)}\n{notes}\n" + table


def load_sentence(d: dict, before: str) -> str:
    """The sentence on a run's ``load_average_1min`` ("1-minute load average X before <before>, Y
    after."), or "" when the run did not record it."""
    load = d.get("load_average_1min") or {}
    if load.get("before") is None or load.get("after") is None:
        return ""
    return f"1-minute load average {load['before']:.2f} before {before}, {load['after']:.2f} after."


def distributed_section(path: Path, d: dict) -> str:
    s = d.get("settings", {})
    load = load_sentence(d, "the runs")
    load_text = f" {load}" if load else ""
    return (
        source_line(path, d)
        + f"\n{s.get('model')} on {s.get('ctx')}, {_count(s.get('num_train'))} training images, "
        f"global batch {s.get('batch_size')}, lr {s.get('lr')}, {s.get('epochs')} epochs; "
        f"{_mpi_name(s)}.{load_text}\n\n" + distributed_table(d.get("runs", []))
    )


def emulator_section(path: Path, d: dict) -> str:
    load = load_sentence(d, "the run")
    load_line = f"{load}\n" if load else ""
    return source_line(path, d) + load_line + "\n" + emulator_table(d.get("rows", []))


def calibration_section(path: Path, d: dict) -> str:
    """A calibration run: where the times were measured, where the model ran, the table."""
    m, s = d.get("measured", {}), d.get("summary", {})
    mgit = m.get("git", {}).get("commit", "?")[:10]
    median = s.get("median_estimate_over_measured")
    spread = (
        f"median estimate / measured {median:.2f} over {s['cases']} cases "
        f"({s['min_estimate_over_measured']:.2f} to {s['max_estimate_over_measured']:.2f})"
        if median is not None
        else "no case ran"
    )
    return (
        source_line(path, d) + f"\nMeasured: `{m.get('file')}` ({m.get('date')}, commit `{mgit}`, "
        f"`{m.get('command')}`). "
        f"Estimated with the {d.get('settings', {}).get('gpu_model')} model on the emulated "
        f"device ({(d.get('estimated_on') or {}).get('name', '?')}); {spread}.\n\n"
        + calibration_table(d.get("runs", []))
    )


def frontend_section(path: Path, d: dict) -> str:
    notes = notes_lines(d)
    return (
        source_line(path, d)
        + f"\n{load_sentence(d, 'the run')}\n{notes}\n"
        + frontend_table(d.get("runs", []))
    )


def _mpi_name(settings: dict) -> str:
    mpi = settings.get("mpi")
    return " ".join(str(mpi).split()) if mpi else "no MPI library recorded"


# Each benchmark's section: its heading in build()'s output, in this order.
_SECTION_TITLES = {
    "ops": "Kernels (`benchmarks/bench_ops.py`)",
    "mnist": "MNIST training (`benchmarks/bench_mnist.py`)",
    "frontend": "Front-end training steps (`benchmarks/bench_frontend.py`)",
    "distributed": "Data-parallel training (`benchmarks/bench_distributed.py`)",
    "emulator": "The emulated CUDA device (`benchmarks/bench_emulator.py`)",
    "calibration": "The profile's calibration (`benchmarks/calibrate_profile.py`)",
}


def _section_body(kind: str, groups) -> Callable[[Path, dict], str]:
    """How one run of benchmark ``kind`` is shown (kernel runs: the case ``groups``)."""
    if kind == "ops":
        return lambda f, d: ops_section(f, d, groups)
    return {
        "mnist": mnist_section,
        "frontend": frontend_section,
        "distributed": distributed_section,
        "emulator": emulator_section,
        "calibration": calibration_section,
    }[kind]


def build(runs, groups) -> str:
    """Every benchmark's section of ``runs`` (:data:`_SECTION_TITLES`), headed."""
    out = []
    for kind, title in _SECTION_TITLES.items():
        text = _sections(runs, kind, _section_body(kind, groups))
        if text:
            out.append(f"### {title}\n\n{text}")
    if not out:
        return "No benchmark results yet: see benchmarks/results/README.md for how to make some.\n"
    return "\n".join(out)


_LEGENDS = {
    "ops": OPS_LEGEND,
    "mnist": MNIST_LEGEND,
    "frontend": FRONTEND_LEGEND,
    "distributed": DISTRIBUTED_LEGEND,
    "emulator": EMULATOR_LEGEND,
    "calibration": CALIBRATION_LEGEND,
}


def _sections(runs, kind: str, body: Callable[[Path, dict], str]) -> str:
    chosen = [(f, d) for f, d in runs if d["benchmark"] == kind]
    if not chosen:
        return ""
    return "\n".join(body(f, d) for f, d in chosen) + "\n" + _LEGENDS[kind]


# --------------------------------------------------------------------------------------------------
# the generated blocks of the docs
# --------------------------------------------------------------------------------------------------

_SUMMARY_FRAMEWORKS = ("gpumat", "torch", "torch-compile")


def _full_size_mnist(d: dict) -> bool:
    s = d.get("settings") or {}
    return d["benchmark"] == "mnist" and not s.get("mlp_hidden") and not environment(d)


def _summary_rows(d: dict, model: str, backend: str) -> list[list[str]]:
    """README's rows of one model on one backend from one MNIST run: gpumat's defaults, eager
    PyTorch and torch.compile."""
    rows = [
        r
        for r in d.get("runs", [])
        if r.get("model") == model
        and r.get("backend") == backend
        and r.get("framework") in _SUMMARY_FRAMEWORKS
    ]
    eager = next((r.get("epoch_s") for r in rows if r["framework"] == "torch"), None)
    table = []
    for r in rows:
        if "epoch_s" not in r:
            table.append([r["model"], r["backend"], r["framework"], "error", "-", "-", "-"])
            continue
        vs = f"{eager / r['epoch_s']:.2f}x" if eager and r["framework"] != "torch" else "-"
        steps = r.get("steps_per_epoch")
        acc = r.get("final_valid_accuracy")
        table.append(
            [
                r["model"],
                r["backend"],
                r["framework"],
                fmt_num(r["epoch_s"]),
                "-" if acc is None else f"{acc:.4f}",
                fmt_num(steps / r["epoch_s"]) if steps else "-",
                vs,
            ]
        )
    return table


def block_mnist_summary(runs, doc_dir: Path) -> str:
    """README's results table: gpumat's defaults against PyTorch on one device (a GPU before the
    host), each model from the newest full-size MNIST run that trained it there; a line per
    source."""
    candidates = [(f, d) for f, d in runs if not d.get("quick") and d.get("complete") is not False]
    candidates = [(f, d) for f, d in candidates if _full_size_mnist(d)]
    if not candidates:
        return "No MNIST training run in `benchmarks/results/` yet.\n"

    has_gpu = any(r.get("backend") == "gpu" for _, d in candidates for r in d.get("runs", []))
    backend = "gpu" if has_gpu else "cpu"
    source_of: dict[str, tuple[Path, dict]] = {}  # model -> the newest run that trained it
    for f, d in sorted(candidates, key=lambda r: r[1]["date"], reverse=True):
        for r in d.get("runs", []):
            if r.get("backend") == backend:
                source_of.setdefault(r["model"], (f, d))
    order = [m for m in ("logreg", "mlp", "cnn") if m in source_of]
    order += sorted(m for m in source_of if m not in order)
    table, sources = [], {}
    for model in order:
        path, d = source_of[model]
        sources.setdefault(path, (d, []))[1].append(model)
        table += _summary_rows(d, model, backend)
    lines = "".join(
        f"{', '.join(models)}: MNIST, {mnist_settings(d)} " + device_line(path, d, doc_dir)
        for path, (d, models) in sources.items()
    )
    headers = ["model", "device", "framework", "epoch s", "valid acc", "steps/s", "x torch"]
    return (
        lines
        + "\n"
        + format_table(headers, table, "lll" + "r" * 4)
        + "\nepoch s: median seconds per training epoch after the first (validation excluded). "
        "valid acc: validation accuracy after the last epoch. x torch: eager PyTorch's epoch "
        "time over this row's (above 1: faster than eager PyTorch). gpumat: the executor's "
        "defaults (fusion, compiled steps, CUDA graphs on a GPU); torch-compile: "
        "`torch.compile` of the forward and loss.\n"
    )


def block_distributed_summary(runs, doc_dir: Path) -> str:
    """docs/distributed.md's table: the latest data-parallel run, with one device line."""
    chosen = [(f, d) for f, d in select(runs, False, False) if d["benchmark"] == "distributed"]
    if not chosen:
        return "No data-parallel run in `benchmarks/results/` yet.\n"
    path, d = chosen[0]
    s = d.get("settings", {})
    return (
        f"MNIST {s.get('model')}, global batch {s.get('batch_size')}, lr {s.get('lr')}, "
        f"{s.get('epochs')} epochs; {_mpi_name(s)}.\n"
        + device_line(path, d, doc_dir)
        + "\n"
        + distributed_table(d.get("runs", []))
        + "\n"
        + DISTRIBUTED_LEGEND
    )


# ---- gpumat.profile runs (benchmarks/profile_steps.py) ----------------------------------------

PROFILE_LEGEND = (
    "ESTIMATES from gpumat.profile's roofline model of the emulated device's counters (docs/"
    "profile.md), never measurements. ld/st sect/req: 32-byte sectors per warp request of global "
    "loads/stores (4 = a coalesced 128-byte request); eff: bytes asked for over bytes of the "
    "sectors moved; smem wf/req: shared-memory wavefronts per request (1 = no bank conflict); "
    "occupancy: theoretical, from ptxas' registers and shared memory for the GPU's architecture "
    "(limiter in brackets); DRAM MB: bytes of the sectors touched at least once; est/floor us: "
    "the model's time and max(bytes / bandwidth, FLOPs / peak), summed over calls; bound: the "
    "model's largest term.\n"
)


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def _one(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def _profile_runs(runs) -> list[tuple[Path, dict]]:
    """Full (not quick) profile runs, newest first."""
    chosen = [(f, d) for f, d in runs if d["benchmark"] == "profile" and not d.get("quick")]
    return sorted(chosen, key=lambda r: r[1]["date"], reverse=True)


def _excess(k: dict) -> float:
    return k["estimate_s"] - k["floor_s"]


def profile_kernel_table(run: dict, top: int = 8) -> str:
    """The kernels of one profiled step, furthest from their floor (estimate - floor) first."""
    rows = []
    for k in sorted(run["kernels"], key=_excess, reverse=True)[:top]:
        occ = k.get("occupancy")
        rows.append(
            [
                k["name"],
                k["calls"],
                _one(k["load_sectors_per_request"]),
                _pct(k["load_efficiency"]),
                _one(k["store_sectors_per_request"]),
                _pct(k["store_efficiency"]),
                _one(k["shared_wavefronts_per_request"]),
                "-" if occ is None else f"{100 * occ['occupancy']:.0f}% ({occ['limiter']})",
                k["counters"]["blocks"] // k["calls"],
                f"{k['dram_bytes'] / 1e6:.2f}",
                f"{k['estimate_s'] * 1e6:.1f}",
                f"{k['floor_s'] * 1e6:.2f}",
                k["bound"],
            ]
        )
    headers = ["kernel", "calls", "ld sect/req", "ld eff", "st sect/req", "st eff"]
    headers += ["smem wf/req", "occupancy", "blocks/call", "DRAM MB", "est us", "floor us", "bound"]
    return format_table(headers, rows, "l" + "r" * 11 + "l")


def profile_totals_line(run: dict) -> str:
    t, m = run["totals"], run["model"]
    return (
        f"**{run['model_name']}**, batch {run['batch_size']}, one training step: "
        f"{t['launches']} launches, estimate {t['estimate_s'] * 1e6:.1f} us on {m['name']}; "
        f"physical floor {t['floor_s'] * 1e6:.1f} us = max({t['dram_bytes'] / 1e6:.1f} MB of "
        f"DRAM traffic / {m['dram_bytes_per_s'] / 1e12:.2f} TB/s, {t['flops'] / 1e9:.2f} GFLOP / "
        f"{m['fp32_flops_per_s'] / 1e12:.1f} TFLOP/s).\n"
    )


def profile_changes(before: dict, after: dict) -> str:
    """Kernels whose counters or estimate changed between two profiles of one model."""
    old = {k["name"]: k for k in before["kernels"]}
    new = {k["name"]: k for k in after["kernels"]}
    columns = [
        lambda k: str(k["calls"]),
        lambda k: str(k["counters"]["blocks"]),
        lambda k: _one(k["shared_wavefronts_per_request"]),
        lambda k: f"{k['dram_bytes'] / 1e6:.2f}",
        lambda k: f"{k['estimate_s'] * 1e6:.1f}",
    ]
    rows = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a and b and (a["estimate_s"], a["counters"]) == (b["estimate_s"], b["counters"]):
            continue
        rows.append(
            [name]
            + [f"{'-' if a is None else f(a)} -> {'-' if b is None else f(b)}" for f in columns]
        )
    if not rows:
        return ""
    headers = ["kernel", "calls", "blocks", "smem wf/req", "DRAM MB", "est us"]
    return format_table(headers, rows, "l" + "r" * 5)


def _same_model(run: dict, d: dict | None) -> dict | None:
    """The profile of ``run``'s model and batch size in ledger file ``d``, or None."""
    for r in (d or {}).get("runs", []):
        if r["model_name"] == run["model_name"] and r["batch_size"] == run["batch_size"]:
            return r
    return None


def block_profile(runs, doc_dir: Path) -> str:
    """benchmarks/README.md's ``profile`` tables: the latest profiled training steps, then what
    changed from each profile to the next (newest first): the fixes' before/after counters."""
    chosen = _profile_runs(runs)
    if not chosen:
        return "No `profile` run in `benchmarks/results/` yet.\n"
    path, d = chosen[0]
    out = [source_line(path, d)]
    for r in d.get("runs", []):
        out += ["", profile_totals_line(r), profile_kernel_table(r)]
        for (_, newer), (_, older) in zip(chosen, chosen[1:], strict=False):
            a, b = _same_model(r, older), _same_model(r, newer)
            changes = profile_changes(a, b) if a and b else ""
            if changes:
                out += [
                    f"From commit `{older['git'].get('commit', '?')[:10]}` (estimate "
                    f"{a['totals']['estimate_s'] * 1e6:.1f} us) to `"
                    f"{newer['git'].get('commit', '?')[:10]}` (estimate "
                    f"{b['totals']['estimate_s'] * 1e6:.1f} us), the kernels that changed "
                    "(before -> after):\n",
                    changes,
                ]
    return "\n".join(out) + "\n" + PROFILE_LEGEND


def block_profile_summary(runs, doc_dir: Path) -> str:
    """docs/profile.md's summary: each model's step estimate and floor and its three kernels
    furthest from their floor, from the latest profile run; and the same from the first profile
    in the ledger (before the fixes the counters led to)."""
    chosen = _profile_runs(runs)
    if not chosen:
        return "No `profile` run in `benchmarks/results/` yet.\n"
    (path, d), (_, first) = chosen[0], chosen[-1]
    out = [device_line(path, d, doc_dir)]
    for r in d.get("runs", []):
        out += ["", profile_totals_line(r), profile_kernel_table(r, top=3)]
        prev = _same_model(r, first) if first is not d else None
        if prev is not None:
            t = prev["totals"]
            worst = sorted(prev["kernels"], key=_excess, reverse=True)[:3]
            names = "; ".join(
                f"{k['name']} (est {k['estimate_s'] * 1e6:.1f} us, floor "
                f"{k['floor_s'] * 1e6:.2f} us, {k['counters']['blocks'] // k['calls']} blocks/call)"
                for k in worst
            )
            out.append(
                f"The first profile (commit `{first['git'].get('commit', '?')[:10]}`, before the "
                f"fixes): estimate {t['estimate_s'] * 1e6:.1f} us, floor "
                f"{t['floor_s'] * 1e6:.1f} us; its kernels furthest from their floor: {names}.\n"
            )
    return "\n".join(out) + "\n" + PROFILE_LEGEND


def _block_sections(kind: str):
    def block(runs, doc_dir: Path) -> str:
        text = _sections(select(runs, False, False), kind, _section_body(kind, DEFAULT_GROUPS))
        return text or f"No `{kind}` run in `benchmarks/results/` yet.\n"

    block.__doc__ = f"benchmarks/README.md's ``{kind}`` tables: the latest run of each kind."
    return block


BLOCKS: dict[str, Callable[[list, Path], str]] = {
    "mnist-summary": block_mnist_summary,
    "distributed-summary": block_distributed_summary,
    "ops": _block_sections("ops"),
    "mnist": _block_sections("mnist"),
    "frontend": _block_sections("frontend"),
    "distributed": _block_sections("distributed"),
    "emulator": _block_sections("emulator"),
    "calibration": _block_sections("calibration"),
    "profile": block_profile,
    "profile-summary": block_profile_summary,
}

_BEGIN = re.compile(r"<!-- make_table: ([\w-]+)\b[^\n]*?-->\n")
_END = "<!-- /make_table: {} -->"
BEGIN_MARKER = (
    "<!-- make_table: {} (generated from benchmarks/results by benchmarks/make_table.py --write;"
    " do not edit) -->"
)


def doc_files(root: Path = REPO_ROOT) -> list[Path]:
    """The markdown files that may hold generated blocks."""
    return [root / "README.md", root / "benchmarks" / "README.md", *sorted(root.glob("docs/*.md"))]


def render(text: str, doc_path: Path, runs) -> tuple[str, list[str]]:
    """``text`` with every generated block rebuilt from ``runs``; also the blocks' names.

    Raises:
        ValueError: an unknown block name, or a begin marker without its end marker.
    """
    out, names, pos = [], [], 0
    for m in _BEGIN.finditer(text):
        if m.start() < pos:
            raise ValueError(f"{doc_path}: make_table block {m.group(1)!r} is nested in another")
        name = m.group(1)
        if name not in BLOCKS:
            raise ValueError(
                f"{doc_path}: unknown make_table block {name!r} (known: {', '.join(BLOCKS)})"
            )
        end = text.find(_END.format(name), m.end())
        if end < 0:
            raise ValueError(f"{doc_path}: make_table block {name!r} has no {_END.format(name)}")
        out += [text[pos : m.start()], BEGIN_MARKER.format(name), "\n"]
        out.append(BLOCKS[name](runs, doc_path.parent))
        pos = end
        names.append(name)
    out.append(text[pos:])
    return "".join(out), names


def stale_blocks(paths: list[Path], runs) -> list[str]:
    """'file: block' for every generated block whose committed text differs from the ledger's."""
    stale = []
    for path in paths:
        if not path.exists():
            continue
        text = path.read_text()
        new, _ = render(text, path, runs)
        if new == text:
            continue
        committed = dict(_split_blocks(text))
        names = [name for name, body in _split_blocks(new) if committed.get(name) != body]
        stale += [f"{_rel(path)}: {name}" for name in names or ["marker lines"]]
    return stale


def _split_blocks(text: str):
    for m in _BEGIN.finditer(text):
        end = text.find(_END.format(m.group(1)), m.end())
        yield m.group(1), text[m.end() : end]


def write_docs(paths: list[Path], runs) -> list[Path]:
    """Rewrites the generated blocks of ``paths``; returns the files that changed."""
    changed = []
    for path in paths:
        if not path.exists():
            continue
        text = path.read_text()
        new, _ = render(text, path, runs)
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "paths", nargs="*", type=Path, help=f"JSON files or folders (default {RESULTS_DIR})"
    )
    p.add_argument(
        "--out", type=Path, default=None, help="write the markdown here (default stdout)"
    )
    p.add_argument("--all", action="store_true", help="every run, not only the latest per kind")
    p.add_argument("--include-quick", action="store_true", help="include quick (smoke) runs")
    p.add_argument("--groups", default="mnist,gpt,large", help="bench_ops groups to show")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the docs' generated blocks")
    mode.add_argument("--check", action="store_true", help="exit 1 if a generated block is stale")
    args = p.parse_args(argv)
    loaded = load_runs(args.paths or [RESULTS_DIR])
    if args.write or args.check:
        if args.paths or args.out or args.all or args.include_quick:
            p.error("--write and --check always read benchmarks/results and print nothing else")
        if args.write:
            for path in write_docs(doc_files(), loaded):
                print(f"rewrote the generated tables of {_rel(path)}", file=sys.stderr)
            return 0
        stale = stale_blocks(doc_files(), loaded)
        for s in stale:
            print(f"stale: {s} (run python3 benchmarks/make_table.py --write)", file=sys.stderr)
        return 1 if stale else 0
    runs = select(loaded, args.include_quick, args.all)
    text = build(runs, {g.strip() for g in args.groups.split(",")})
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
