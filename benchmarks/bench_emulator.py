#!/usr/bin/env python3
"""Benchmark the emulated CUDA device: how long its kernels and an MNIST epoch take on the CPU,
with every launch checked and with repeated launches run unchecked.

Usage::

    python3 benchmarks/bench_emulator.py                   # the full run (about 2 minutes)
    python3 benchmarks/bench_emulator.py --quick --out /tmp/  # CI smoke run (small sizes)

The emulated device (``gpumat.emu()``, docs/emulator.md) is a correctness tool: these times say
how long checking CUDA code takes on a CPU, nothing about a GPU. Two modes per case, set through
``GPUMAT_EMU_CHECK_REPEATS`` (read at every launch):

- ``checked``: ``all``, every launch runs the instrumented build of its kernel (memcheck,
  racecheck and initcheck on every load and store);
- ``default``: 3, a launch that repeats one which has passed the checks three times (same kernel,
  geometry and arguments, no allocation in between) runs the kernel's unchecked build.

Cases: single kernels on fixed random inputs, each timed by ``_common.time_calls`` (the device is
synchronized around each sample; the same launch repeats, so in ``default`` mode all but the
first three run unchecked): ``softmax`` and ``cross_entropy_with_gradient`` on MNIST
logits (1000, 10), the MLP's first-layer product (1000, 784) @ (784, 256) with bias and ReLU. And
whole programs, in a subprocess per mode: ``python examples/mnist.py -m mlp|logreg -c emu -e 1``,
whose epoch time (training only, batches of 1000) the program reports.

Measured per row: ``ms`` (kernels: the median time per call; epochs: the epoch's seconds x 1000)
and ``x checked`` (the checked mode's time over the row's). Output: a table, a JSON file and its
markdown in ``benchmarks/results/`` (``--out`` elsewhere); no speed is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from unittest import mock

import _common
import numpy as np

import gpumat
from gpumat import ops

MODES = {"checked": "all", "default": "3"}


def kernel_cases(quick: bool):
    """(name, shape text, make) where make(ctx) returns a callable that launches the kernel."""
    rows = 100 if quick else 1000
    rng = np.random.default_rng(0)

    def softmax(ctx):
        x = gpumat.array(rng.standard_normal((rows, 10)).astype(np.float32), ctx)
        out = gpumat.empty((rows, 10), ctx)
        return lambda: ops.softmax(x, out)

    def cross_entropy(ctx):
        x = gpumat.array(rng.standard_normal((rows, 10)).astype(np.float32), ctx)
        y = np.zeros((rows, 10), np.float32)
        y[np.arange(rows), rng.integers(0, 10, rows)] = 1.0
        labels = gpumat.array(y, ctx)
        loss, grad = gpumat.empty((1,), ctx), gpumat.empty((rows, 10), ctx)
        return lambda: ops.cross_entropy_with_gradient(x, labels, loss, grad)

    k, n = (196, 64) if quick else (784, 256)

    def dense(ctx):
        x = gpumat.array(rng.standard_normal((rows, k)).astype(np.float32), ctx)
        w = gpumat.array(rng.standard_normal((k, n)).astype(np.float32), ctx)
        b = gpumat.array(rng.standard_normal(n).astype(np.float32), ctx)
        out = gpumat.empty((rows, n), ctx)
        return lambda: ops.matmul_bias(x, w, b, out, False, False, relu=True)

    return [
        ("softmax", f"({rows}, 10)", softmax),
        # the case keeps its ledger name (the op is now gpumat.ops.cross_entropy_with_gradient)
        ("softmax_cross_entropy_with_gradient", f"({rows}, 10)", cross_entropy),
        ("matmul_bias (relu)", f"({rows}, {k}) @ ({k}, {n})", dense),
    ]


def time_kernels(quick: bool) -> list[dict]:
    ctx = gpumat.emu(0)
    rows = []
    for name, shape, make in kernel_cases(quick):
        call = make(ctx)
        for mode, value in MODES.items():
            # read at every launch: set for the launches made inside
            with mock.patch.dict(os.environ, {"GPUMAT_EMU_CHECK_REPEATS": value}):
                t = _common.time_calls(
                    lambda _i, call=call: call(),
                    1,
                    lambda: gpumat.synchronize(ctx),
                    repeat=3 if quick else 7,
                    warmup=4,
                    target_ms=20 if quick else 200,
                )
            rows.append({"case": name, "shape": shape, "mode": mode, "ms": t["ms"], "timing": t})
    return rows


def time_epochs(quick: bool) -> list[dict]:
    rows = []
    script = os.path.join(_common.REPO_ROOT, "examples", "mnist.py")
    for model in ("logreg", "mlp"):
        for mode, value in MODES.items():
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "history.json")
                cmd = [sys.executable, script, "-m", model, "-c", "emu", "-e", "1", "--no-progress"]
                if quick:
                    cmd += ["--train-size", "2000"]
                env = {**os.environ, "GPUMAT_EMU_CHECK_REPEATS": value}
                run = [*cmd, "--json", out]
                subprocess.run(run, env=env, check=True, capture_output=True, text=True)
                with open(out) as f:
                    history = json.load(f)[0]
            seconds = history["mean_epoch_time_s"]
            rows.append(
                {
                    "case": f"{model} epoch",
                    "shape": f"{'2,000' if quick else '50,000'} images",
                    "mode": mode,
                    "ms": seconds * 1e3,
                    "valid_accuracy": history.get("final_valid_accuracy"),
                    "command": " ".join(cmd[1:]),
                }
            )
    return rows


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke run)")
    parser.add_argument("--out", help="JSON file or folder (default: benchmarks/results/)")
    args = parser.parse_args(argv[1:])
    header = _common.run_header("emulator", "emu", args.quick, argv)
    load_before = os.getloadavg()[0]
    rows = time_kernels(args.quick) + time_epochs(args.quick)
    text = _common.emulator_table(rows)
    print(text)
    data = {
        **header,
        "settings": {"modes": MODES},
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "rows": rows,
    }
    md = _common.header_markdown(header, "gpumat emulated CUDA device") + "\n" + text + "\n"
    paths = _common.write_results(_common.resolve_out(args.out, "emulator", header), data, md)
    print("wrote", *paths)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
