#!/usr/bin/env python3
"""Build the README's performance tables from the ledger's JSON files.

Usage::

    python3 benchmarks/make_table.py                          # benchmarks/results/*.json
    python3 benchmarks/make_table.py FILE_OR_DIR ... [--out perf.md] [--all] [--include-quick]

For each benchmark (``ops``, ``mnist``) and each device (backend and device name), the latest run
is shown (``--all``: every run, newest first). Quick runs (``"quick": true``: CI smoke runs with
small sizes) are left out unless ``--include-quick``, and are labelled when included. Every table
names its source: date, git commit, device, driver and the command, and the JSON file it came from.
Only numbers from those files appear; nothing is computed but formatting.

``--groups`` chooses which bench_ops case groups appear (default ``mnist,large``; the ``seed``
group is in the JSON files and the per-run markdown).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _common import (
    MNIST_LEGEND,
    OPS_LEGEND,
    RESULTS_DIR,
    SCHEMA,
    fmt_num,
    mnist_table,
    ops_table,
)


def load_runs(paths: list[Path]) -> list[tuple[Path, dict]]:
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


def select(runs, include_quick: bool, every: bool):
    runs = [r for r in runs if include_quick or not r[1].get("quick")]
    runs.sort(key=lambda r: r[1]["date"], reverse=True)
    if every:
        return runs
    seen, out = set(), []
    for f, d in runs:
        hidden = (d.get("settings") or {}).get("mlp_hidden")  # a host-overhead run is its own kind
        key = (
            d["benchmark"],
            d["device"]["backend"],
            d["device"]["name"],
            bool(d.get("quick")),
            tuple(hidden or ()),
        )
        if key not in seen:
            seen.add(key)
            out.append((f, d))
    return out


def _rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(RESULTS_DIR.parent.parent))
    except ValueError:
        return str(path)


def source_line(path: Path, d: dict) -> str:
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


def ops_section(path: Path, d: dict, groups: set[str]) -> str:
    c = d.get("ceilings", {})
    parts = [f"copy {fmt_num(c.get('copy_gbps'))} GB/s ({c.get('copy_source', '?')})"]
    if c.get("sgemm_gflops"):
        mm = c.get("sgemm_shape", ["?"])[0]
        parts.append(f"SGEMM {fmt_num(c['sgemm_gflops'])} GFLOP/s at {mm}^3 ({c['sgemm_source']})")
    cases = [r for r in d.get("cases", []) if r.get("group") in groups]
    return (
        source_line(path, d)
        + f"\nCeilings measured in the same run: {'; '.join(parts)}.\n\n"
        + ops_table(cases)
    )


def mnist_section(path: Path, d: dict) -> str:
    s = d.get("settings", {})
    notes = "".join(f"Note: {n}.\n" for n in d.get("notes", []))
    return (
        source_line(path, d)
        + f"\n{s.get('num_train')} training images, batch {s.get('batch_size')}, lr {s.get('lr')}, "
        f"{s.get('epochs')} epochs"
        + (f", MLP hidden widths {tuple(s['mlp_hidden'])}" if s.get("mlp_hidden") else "")
        + f".\n{notes}\n"
        + mnist_table(d.get("runs", []))
    )


def build(runs, groups: set[str]) -> str:
    ops_runs = [r for r in runs if r[1]["benchmark"] == "ops"]
    mnist_runs = [r for r in runs if r[1]["benchmark"] == "mnist"]
    out = []
    if ops_runs:
        out.append("### Kernels (`benchmarks/bench_ops.py`)\n")
        for f, d in ops_runs:
            out.append(ops_section(f, d, groups))
        out.append(OPS_LEGEND)
    if mnist_runs:
        out.append("### MNIST training (`benchmarks/bench_mnist.py`)\n")
        for f, d in mnist_runs:
            out.append(mnist_section(f, d))
        out.append(MNIST_LEGEND)
    if not out:
        return "No benchmark results yet: see benchmarks/results/README.md for how to make some.\n"
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "paths", nargs="*", type=Path, help=f"JSON files or folders (default {RESULTS_DIR})"
    )
    p.add_argument(
        "--out", type=Path, default=None, help="write the markdown here (default stdout)"
    )
    p.add_argument("--all", action="store_true", help="every run, not only the latest per device")
    p.add_argument("--include-quick", action="store_true", help="include quick (smoke) runs")
    p.add_argument("--groups", default="mnist,large", help="bench_ops groups to show")
    args = p.parse_args(argv)
    runs = select(load_runs(args.paths or [RESULTS_DIR]), args.include_quick, args.all)
    text = build(runs, {g.strip() for g in args.groups.split(",")})
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
