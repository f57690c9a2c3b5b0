#!/usr/bin/env python3
"""Profile one MNIST training step (forward, backward, optimizer update) on the emulated device.

    python3 benchmarks/profile_steps.py [--model mlp,cnn] [--batch N] [--gpu H100] [--quick]

Builds the model's step as ``gpumat.train.fit`` runs it (an Executor with fusion, compiled steps
and CUDA graphs over ``[loss, *grads]``, then the model's optimizer), runs two warm-up steps (the
eager run and the graph capture), then profiles one step with ``gpumat.profile`` on
``gpumat.emu(0)``. Prints the per-kernel table with the roofline ESTIMATE for the chosen GPU and
writes the ledger file ``results/<date>_profile_emu_<gpu>.json`` (+ ``.md``). The inputs are
random images and labels: the counters depend on the shapes only. The times in it are a model's,
never measurements (see docs/profile.md).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from _common import resolve_out, run_header, write_results

import gpumat
from gpumat import models, optim, profile
from gpumat.datasets import one_hot
from gpumat.runtime import Executor


def profile_step(name: str, batch: int, gpu: str) -> dict:
    """Profile one training step of model ``name`` at ``batch``: the profile's JSON plus the
    model, batch and the markdown table."""
    model = getattr(models, name)()
    ctx = gpumat.emu(0)
    rng = np.random.default_rng(0)
    params = model.init_params(ctx)
    values = list(params.values())
    opt = model.optimizer(values) if model.optimizer else optim.SGD(values, lr=0.1)
    ex = Executor([model.loss, *model.grads], device=ctx)
    x = rng.standard_normal((batch, *model.input_shape)).astype(np.float32)
    y = one_hot(rng.integers(0, model.num_classes, batch), model.num_classes)
    feed = {model.x: gpumat.array(x, ctx), model.y_: gpumat.array(y, ctx)}
    feed.update({model.params[k]: v for k, v in params.items()})

    def step():
        _, *grads = ex.run(feed)
        opt.step(grads)

    for _ in range(2):  # the eager run and the CUDA graph capture
        step()
    gpumat.synchronize(ctx)
    with profile.profile() as prof:
        step()
    out = prof.to_json(gpu)
    out["model_name"] = name
    out["batch_size"] = batch
    out["schedule"] = str(ex.schedule_report.mode) if ex.schedule_report else None
    out["table"] = prof.table(gpu)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mlp,cnn")
    p.add_argument("--batch", type=int, default=None, help="default: the model's (mlp 1000)")
    p.add_argument("--gpu", default="H100", choices=sorted(profile.GPUS))
    p.add_argument("--quick", action="store_true", help="batch 8, no ledger file")
    p.add_argument("--out", default=None, help="JSON file or folder (default: results/)")
    a = p.parse_args(argv)
    header = run_header("profile", "emu", a.quick, sys.argv if argv is None else argv)
    runs, md = [], []
    for name in a.model.split(","):
        model_batch = getattr(models, name)().batch_size or 1000
        batch = 8 if a.quick else (a.batch or model_batch)
        r = profile_step(name, batch, a.gpu)
        runs.append({k: v for k, v in r.items() if k != "table"})
        md.append(f"## {name}, batch {batch}: one training step on emu(0)\n\n{r['table']}\n")
        print(md[-1], flush=True)
    data = {**header, "settings": {"gpu": a.gpu, "models": a.model}, "runs": runs}
    if not a.quick:
        write_results(resolve_out(a.out, "profile", header), data, "\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
