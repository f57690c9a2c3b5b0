#!/usr/bin/env python3
"""Calibrate gpumat.profile's roofline model against kernel times measured on a GPU.

Usage::

    python3 benchmarks/calibrate_profile.py results/<date>_ops_gpu_nvidia-h200.json
    python3 benchmarks/calibrate_profile.py FILE --groups seed,mnist --gpu H200 --out /tmp/

Reads a ``bench_ops.py --ctx gpu`` ledger file (measured: the median milliseconds per call of
each case on the GPU, host-timed between device synchronizations), reruns each of its cases of the
chosen groups (default ``seed,mnist``: the ``large`` group's 64M-element arrays are too slow to
emulate) once on the emulated device under :func:`gpumat.profile.profile`, with the same shapes
and parameters and fresh random inputs, and writes a ledger file (``"benchmark":
"calibration"``) with, per case: the measured time, the model's estimate for the GPU (``--gpu``,
default the measured device's model: ``H100``, ``H200``, ``A100`` or ``T4``), its physical floor
(``max(DRAM bytes / bandwidth, FLOPs / peak)``), the launches, and ``estimate / measured``.

A ratio under 1 means the model is optimistic: the GPU took longer than the roofline and launch
latency allow, usually the per-call host overhead of a small kernel (a Python call, argument
checks, the launch itself), which the model's 2 us launch latency underestimates; a ratio above 1
means the GPU beat the model (caches: the model charges every byte to DRAM). The estimate is a
model's, never a measurement; the measured times are the file's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_ops  # noqa: E402 (this folder's module, on the path just set)
from _common import (  # noqa: E402
    CALIBRATION_LEGEND,
    calibration_table,
    header_markdown,
    resolve_out,
    run_header,
    software_info,
    write_results,
)

import gpumat  # noqa: E402
from gpumat import profile  # noqa: E402


def model_for(device_name: str) -> str | None:
    """The :data:`gpumat.profile.GPUS` key named in a measured device's name ("NVIDIA H200" ->
    "H200"), or None."""
    return next((m for m in profile.GPUS if m in device_name.upper()), None)


def estimate_case(case: bench_ops.Case, gpu: str, rng) -> dict:
    """One call of ``case`` on the emulated device under the profiler: the model's totals."""
    spec = bench_ops.OPS[case.op]
    ctx = gpumat.emu(0)
    ins = [
        gpumat.array(a, ctx) for a in bench_ops.draw_inputs(spec, case.in_shapes, rng, case.params)
    ]
    out = ins[1] if spec.inplace else gpumat.empty(case.out_shape, ctx)
    with profile.profile() as prof:
        spec.ours(ins, out, case.params)
        gpumat.devices.synchronize(ctx)
    totals = prof.totals(gpu)
    kernels = prof.kernels(gpu)
    return {
        "estimate_s": totals["estimate_s"],
        "floor_s": totals["floor_s"],
        "launches": totals["launches"],
        "dram_bytes": totals["dram_bytes"],
        "flops": totals["flops"],
        "kernels": [
            {"name": k["name"], "calls": k["calls"], "estimate_s": k["estimate_s"]} for k in kernels
        ],
    }


def calibrate(
    measured: dict, groups: set[str], gpu: str, seed: int | None, limit: int | None = None
) -> list[dict]:
    """A record per measured case of ``groups`` that validated (the first ``limit`` of them):
    measured and estimated times."""
    cases = {(c.name, c.group): c for c in bench_ops.build_cases(quick=False)}
    rng = np.random.default_rng(seed)
    rows = []
    for m in measured["cases"]:
        if m.get("group") not in groups or m.get("status") != "ok" or "ours" not in m:
            continue
        if limit is not None and len(rows) >= limit:
            break
        case = cases.get((m["name"], m["group"]))
        if case is None:
            rows.append({"name": m["name"], "group": m["group"], "error": "no such case today"})
            continue
        print(f"  {m['group']}/{m['name']} {case.label} ...", flush=True)
        est = estimate_case(case, gpu, rng)
        measured_s = m["ours"]["ms"] / 1e3
        rows.append(
            {
                "name": m["name"],
                "group": m["group"],
                "shape": case.label,
                "measured_s": measured_s,
                **est,
                "estimate_over_measured": est["estimate_s"] / measured_s,
                "floor_over_measured": est["floor_s"] / measured_s,
            }
        )
    return rows


def summary(rows: list[dict]) -> dict:
    """The median ratio, and its spread, over the cases that ran."""
    ratios = [r["estimate_over_measured"] for r in rows if "estimate_over_measured" in r]
    if not ratios:
        return {}
    return {
        "cases": len(ratios),
        "median_estimate_over_measured": float(np.median(ratios)),
        "min_estimate_over_measured": float(min(ratios)),
        "max_estimate_over_measured": float(max(ratios)),
    }


def main(argv=None) -> int:
    """Parse the options, estimate every measured case, print the table, write the ledger files."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("measured", help="a bench_ops.py --ctx gpu ledger file (JSON)")
    p.add_argument("--groups", default="seed,mnist", help="case groups (default seed,mnist)")
    p.add_argument("--gpu", default=None, choices=sorted(profile.GPUS),
                   help="the model (default: the measured device's)")  # fmt: skip
    p.add_argument("--seed", type=int, default=None, help="numpy seed of the inputs")
    p.add_argument("--quick", action="store_true", help="three mnist cases: a smoke run (CI)")
    p.add_argument("--out", default=None, help="JSON file or folder (default benchmarks/results)")
    p.add_argument("--no-write", action="store_true", help="print only, write no files")
    args = p.parse_args(argv)
    path = Path(args.measured)
    try:
        measured = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        p.error(f"cannot read {path}: {exc}")
    if measured.get("benchmark") != "ops" or measured.get("device", {}).get("backend") != "gpu":
        p.error(f"{path} is not a bench_ops.py run on a GPU")
    gpu = args.gpu or model_for(measured["device"]["name"])
    if gpu is None:
        p.error(f"no model of {measured['device']['name']!r}; pass --gpu")
    groups = {"mnist"} if args.quick else {g.strip() for g in args.groups.split(",") if g.strip()}

    argv_used = ["benchmarks/calibrate_profile.py", *(sys.argv[1:] if argv is None else argv)]
    header = run_header("calibration", "emu", args.quick, argv_used)
    # The measured device is what the file is about; the estimate ran on the emulated device.
    header["estimated_on"] = header["device"]
    header["device"] = measured["device"]
    names = ", ".join(sorted(groups))
    print(f"calibrating gpumat.profile's {gpu} model against {path.name} ({names})")
    rows = calibrate(measured, groups, gpu, args.seed, 3 if args.quick else None)
    data = {
        **header,
        "software": software_info(),
        "settings": {"gpu_model": gpu, "groups": sorted(groups), "seed": args.seed},
        "model": dataclasses.asdict(profile.GPUS[gpu]),
        "measured": {
            "file": path.name,
            "date": measured["date"],
            "git": measured["git"],
            "command": measured["command"],
            "device": measured["device"],
        },
        "summary": summary(rows),
        "runs": rows,
    }
    text = calibration_table(rows)
    print("\n" + text)
    print(json.dumps(data["summary"]))
    if not args.no_write:
        out = resolve_out(args.out, "calibration", data)
        md = (
            header_markdown(data, "gpumat.profile calibration")
            + "\n"
            + text
            + "\n"
            + CALIBRATION_LEGEND
        )
        json_path, md_path = write_results(out, data, md)
        print(f"wrote {json_path} and {md_path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
