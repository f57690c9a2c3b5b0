#!/usr/bin/env python3
"""Benchmark MNIST training: gpumat against the same model in PyTorch on the same device.

Usage::

    python3 benchmarks/bench_mnist.py                      # cpu, and gpu when available
    python3 benchmarks/bench_mnist.py --ctx gpu --epochs 5
    python3 benchmarks/bench_mnist.py --ctx cpu --quick --out /tmp/mnist.json   # CI smoke run
    python3 benchmarks/bench_mnist.py --ctx cpu --busy 1   # beside one core-spinning process

For each model (``logreg``: 784-10; ``mlp``: 784-256-100-10 with ReLU; ``cnn``: two 5x5
convolutions with ReLU and 2x2 max pools, then 1024-10; see ``gpumat.models``) and
each backend (``cpu``: gpumat's host kernels; ``gpu``: CUDA device 0; ``numpy``: the reference
executor, on request), gpumat trains with ``gpumat.train.fit`` (logreg and MLP: mini-batch SGD,
batch 1000, ``lr = gpumat.train.DEFAULT_LR``, as the dlsys course does; the CNN: its own Adam at
1e-3 and batch 64, at a constant rate; samples in order), then PyTorch trains the same model, from
the same initial values, in the same order, with the same loss (batch mean of the softmax
cross-entropy) and the same optimizer (``torch.optim.SGD`` or ``Adam``, same hyper-parameters),
on the same device (TF32 off on CUDA; batches copied from host memory each step, as gpumat
does; on CUDA PyTorch copies from page-locked memory with ``non_blocking=True``, so neither library
makes the host wait for the device at each batch). Without torch the PyTorch rows are skipped with
a note. Each PyTorch run has a fresh process of its own, as users run PyTorch
(``_mnist_torch_process.py``, which loads PyTorch first): a process holds one libgomp, and in
this one gpumat has loaded it with gpumat's OpenMP wait policy, under which PyTorch's MLP epoch
took 0.295 s instead of 0.213 s (2-core Xeon, benchmarks/README.md). ``--same-process-torch``
runs PyTorch here instead, after gpumat.

Measured, per model, backend and framework:

- ``epoch s``: seconds of one epoch's training steps (feed, forward, backward, update; the device
  is synchronized at the epoch's end by reading the loss back), excluding validation: the
  **median over the epochs after the first** (the first includes planning and warm-up).
- ``valid acc``: validation accuracy after the last epoch (fraction of the 10,000 validation
  images, or of the subset in quick mode).
- ``mallocs/epoch``: device allocations (cudaMalloc, or host allocations on cpu) per epoch after
  the first, from ``gpumat.memory_stats`` (``device_malloc_calls``); the design's rule is that this
  is 0. For PyTorch on CUDA: new segments of its caching allocator
  (``torch.cuda.memory_stats()["segment.all.allocated"]``).
- ``peak MB``: peak bytes in use on the device during training (MB = 1e6 bytes): gpumat's
  ``peak_bytes_in_use`` (its allocator's bins, so rounded up) vs ``torch.cuda.max_memory_allocated``
  (none for torch on cpu).
- ``launches/step``: gpumat op calls (``gpumat.launch_count``) per training step, forward,
  backward and SGD update (the median over steps, validation excluded).
- ``steps/s``: training steps per second (steps per epoch / ``epoch s``).
- ``schedule``: how gpumat's executor made its runs (``Executor.schedule_report``): ``python``
  (one Python call per op), ``compiled`` (one native call per step), ``cuda-graph`` (one CUDA
  graph launch per step).
- ``x torch``: PyTorch's epoch time over gpumat's (above 1: gpumat faster); for
  ``torch-compile`` rows, eager PyTorch's time over the compiled one's.

gpumat variants (``--variants``, comma-separated; default all that apply to the backend):
``gpumat`` (the executor's defaults: fusion pass, compiled steps, CUDA graphs on a GPU),
``gpumat-nograph`` (compiled steps without CUDA graphs; gpu only), ``gpumat-python`` (fused, one
Python call per op) and ``gpumat-unfused`` (no fusion, one Python call per op). PyTorch runs
eagerly (``torch``) and, on a GPU or with ``--torch-compile``, as
``torch.compile(loss, mode="reduce-overhead")`` (``torch-compile``: forward and backward compiled
and replayed as CUDA graphs; on cpu the default mode), with the same eager SGD update.

``--mlp-hidden 16,16 --batch-size 16 --models mlp`` makes each step's arithmetic small (0.84 MFLOP,
mostly the 784-wide first layer's two matmuls), so its steps/s measure mostly what a step costs the
host: Python, dispatch and launches, the ceiling on steps/s for a small network on any device and
the quantity compiled steps and CUDA graphs attack on a GPU, measured here without one.

``--quick`` trains 2 epochs on 5,000 training and 1,000 validation images (the second epoch is
the measured one). Output: a table, and a JSON file plus markdown (see ``benchmarks/results/
README.md``); no speed is asserted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
import traceback

import numpy as np
from _common import (
    MNIST_LEGEND,
    THREAD_ENV_VARS,
    add_busy_option,
    busy_note,
    busy_processes,
    device_info,
    fmt_num,
    header_markdown,
    mnist_table,
    optional_import,
    resolve_out,
    run_header,
    run_worker,
    software_info,
    write_results,
)

import gpumat
from gpumat import models, train
from gpumat.datasets import DatasetError, load_mnist
from gpumat.optim import SGD, Adam

TORCH_MODELS = ("logreg", "mlp", "cnn")  # models whose forward pass _torch_forward knows


def median_after_first(times):
    times = list(times)
    rest = times[1:] if len(times) > 1 else times
    return statistics.median(rest) if rest else None


# --------------------------------------------------------------------------------------------------
# gpumat
# --------------------------------------------------------------------------------------------------


#: The MLP's hidden widths when ``--mlp-hidden`` is given (None: the model's own, 256 and 100).
MLP_HIDDEN: tuple[int, int] | None = None


def build_model(name):
    """The gpumat model ``name`` with its default initial values (``--mlp-hidden`` applied)."""
    if name == "mlp" and MLP_HIDDEN is not None:
        return models.mlp(hidden=MLP_HIDDEN)
    return models.BUILDERS[name]()


def recipe(name, batch_size, lr):
    """(batch size, optimizer spec) of a model's benchmark run. A model that names its own
    optimizer (the CNN: Adam at 1e-3, batch 64) keeps it unless ``lr`` is given; the others train
    with SGD at ``lr`` (default ``gpumat.train.DEFAULT_LR``). The spec: ``("sgd", lr)`` or
    ``("adam", lr, (beta1, beta2), eps)``. Learning-rate schedules are not applied (constant lr)."""
    model = build_model(name)
    bs = batch_size or model.batch_size or train.DEFAULT_BATCH_SIZE
    if model.optimizer is None or lr is not None:
        return bs, ("sgd", train.DEFAULT_LR if lr is None else lr)
    opt = model.optimizer([np.zeros(1, np.float32)])
    if isinstance(opt, Adam):
        return bs, ("adam", opt.lr, tuple(opt.betas), opt.eps)
    if type(opt) is SGD:
        return bs, ("sgd", opt.lr)
    raise ValueError(f"bench_mnist: no PyTorch twin for {name}'s optimizer {opt!r}")


def gpumat_optimizer(params, spec):
    return SGD(params, spec[1]) if spec[0] == "sgd" else Adam(params, spec[1], spec[2], spec[3])


class _EpochProbe:
    """An optimizer that applies the run's SGD or Adam and snapshots the allocator's counters at
    each epoch's first step (``gpumat.train.fit`` takes any object with ``step(grads)``)."""

    def __init__(self, params, spec, ctx, steps_per_epoch):
        self.sgd = gpumat_optimizer(params, spec)
        self.ctx = ctx
        self.steps_per_epoch = steps_per_epoch
        self.steps = 0
        self.mallocs_at_epoch_start = []
        self.launch_marks = []  # (step, gpumat.launch_count) at each step's update

    def step(self, grads):
        if self.ctx is not None and self.steps % self.steps_per_epoch == 0:
            self.mallocs_at_epoch_start.append(gpumat.memory_stats(self.ctx)["device_malloc_calls"])
        if self.ctx is not None:
            self.launch_marks.append((self.steps, gpumat.launch_count(self.ctx)))
        self.sgd.step(grads)
        self.steps += 1

    def launches_per_step(self):
        """Median op calls between consecutive updates of one epoch: one whole step (the
        executor's forward and backward, then the update), without the epoch-end validation."""
        per = [
            c1 - c0
            for (s0, c0), (s1, c1) in itertools.pairwise(self.launch_marks)
            if s1 == s0 + 1 and s1 % self.steps_per_epoch != 0
        ]
        return statistics.median(per) if per else None


# Executor flags of each gpumat variant (see the module docstring).
GPUMAT_VARIANTS = {
    "gpumat": {"fusion": True, "compiled": True, "cuda_graph": True},
    "gpumat-nograph": {"fusion": True, "compiled": True, "cuda_graph": False},
    "gpumat-python": {"fusion": True, "compiled": False, "cuda_graph": False},
    "gpumat-unfused": {"fusion": False, "compiled": False, "cuda_graph": False},
}


def run_gpumat(name, data, ctx_name, epochs, batch_size, lr, variant="gpumat"):
    flags = GPUMAT_VARIANTS[variant]
    batch_size, spec = recipe(name, batch_size, lr)
    ctx = train.get_device(ctx_name)
    model = build_model(name)
    steps = len(data[0][0]) // batch_size
    probe = {}

    def factory(params):
        probe["opt"] = _EpochProbe(params, spec, ctx, steps)
        return probe["opt"]

    if ctx is not None:
        gpumat.synchronize(ctx)
        gpumat.reset_peak_memory_stats(ctx)
        before = gpumat.memory_stats(ctx)
    t0 = time.perf_counter()
    hist = train.fit(
        model,
        data,
        device=ctx,
        epochs=epochs,
        batch_size=batch_size,
        optimizer=factory,
        verbose=False,
        progress=False,
        executor=flags,
    )
    wall = time.perf_counter() - t0
    rec = {
        "framework": variant,
        **flags,
        "schedule": hist.schedule,
        "model": name,
        "backend": ctx_name,
        "epochs": hist.epochs,
        "epoch_time_s": hist.epoch_time_s,
        "epoch_s": median_after_first(hist.epoch_time_s),
        "loss": hist.loss,
        "valid_accuracy": hist.valid_accuracy,
        "final_valid_accuracy": hist.final_valid_accuracy,
        "wall_s": wall,
        "lr": spec[1],
        "optimizer": spec[0],
        "batch_size": batch_size,
        "steps_per_epoch": steps,
    }
    if ctx is not None:
        after = gpumat.memory_stats(ctx)
        marks = probe["opt"].mallocs_at_epoch_start
        rec["mallocs_total"] = after["device_malloc_calls"] - before["device_malloc_calls"]
        if len(marks) >= 2:
            # from the first step of epoch 2 to the end: whole epochs 2..E, validation included
            rec["mallocs_per_epoch"] = (after["device_malloc_calls"] - marks[1]) / (len(marks) - 1)
        rec["peak_bytes"] = after["peak_bytes_in_use"]
        rec["launches_per_step"] = probe["opt"].launches_per_step()
        rec["bytes_reserved"] = after["bytes_reserved"]
    return rec


# --------------------------------------------------------------------------------------------------
# PyTorch
# --------------------------------------------------------------------------------------------------


def _torch_forward(torch, name, p, x):
    if name == "logreg":
        return x @ p["W1"] + p["b1"]
    if name == "cnn":  # gpumat.models.cnn: NCHW, stride 1, no padding, 2x2 max pools
        f = torch.nn.functional
        h = f.max_pool2d(torch.relu(f.conv2d(x.reshape(-1, 1, 28, 28), p["W1"], p["b1"])), 2)
        h = f.max_pool2d(torch.relu(f.conv2d(h, p["W2"], p["b2"])), 2)
        return h.flatten(1) @ p["W3"] + p["b3"]
    h = torch.relu(x @ p["W1"] + p["b1"])
    h = torch.relu(h @ p["W2"] + p["b2"])
    return h @ p["W3"] + p["b3"]


def run_torch(torch, name, data, ctx_name, epochs, batch_size, lr, compile_loss=False):
    batch_size, spec = recipe(name, batch_size, lr)
    if ctx_name == "gpu":
        dev = torch.device("cuda", 0)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

        def sync():
            torch.cuda.synchronize(dev)
    else:
        dev = torch.device("cpu")

        def sync():
            pass

    model = build_model(name)  # the same initial values as gpumat's run
    params = {
        k: torch.tensor(v, device=dev, requires_grad=True) for k, v in model.initial_values.items()
    }
    if spec[0] == "sgd":
        opt = torch.optim.SGD(list(params.values()), lr=spec[1])
    else:
        opt = torch.optim.Adam(list(params.values()), lr=spec[1], betas=spec[2], eps=spec[3])

    def loss_fn(xb, yb):
        return torch.nn.functional.cross_entropy(_torch_forward(torch, name, params, xb), yb)

    if compile_loss:
        # CUDA graphs for the forward and the compiled backward on a GPU; on cpu the default mode.
        loss_fn = torch.compile(loss_fn, mode="reduce-overhead" if dev.type == "cuda" else None)
    (train_x, train_y), (valid_x, valid_y) = data[0], data[1]
    X = torch.from_numpy(np.ascontiguousarray(train_x, np.float32))  # noqa: N806
    Y = torch.from_numpy(np.asarray(train_y, np.int64))  # noqa: N806
    VX = torch.from_numpy(np.ascontiguousarray(valid_x, np.float32))  # noqa: N806
    n_batches = len(X) // batch_size
    if dev.type == "cuda":
        # Page-locked sources and non_blocking copies: PyTorch's way of not making the host wait
        # for the device at every batch, which gpumat's staged host-to-device copies also avoid.
        X, Y = X.pin_memory(), Y.pin_memory()  # noqa: N806
        sync()
        torch.cuda.reset_peak_memory_stats(dev)
        seg0 = torch.cuda.memory_stats(dev).get("segment.all.allocated", 0)
    seg_marks, times, losses, accs = [], [], [], []
    t_all = time.perf_counter()
    for _ in range(epochs):
        if dev.type == "cuda":
            seg_marks.append(torch.cuda.memory_stats(dev).get("segment.all.allocated", 0))
        sync()
        t0 = time.perf_counter()
        loss_sum = torch.zeros((), device=dev)
        for b in range(n_batches):
            xb = X[b * batch_size : (b + 1) * batch_size].to(dev, non_blocking=True)
            yb = Y[b * batch_size : (b + 1) * batch_size].to(dev, non_blocking=True)
            loss = loss_fn(xb, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += loss.detach()
        losses.append(loss_sum.item() / n_batches)  # .item() waits for the epoch's kernels
        times.append(time.perf_counter() - t0)
        with torch.no_grad():
            pred = []
            for s in range(0, len(VX), 1000):
                logits = _torch_forward(torch, name, params, VX[s : s + 1000].to(dev))
                pred.append(logits.argmax(dim=1).cpu().numpy())
        accs.append(float(np.mean(np.concatenate(pred) == valid_y)))
    rec = {
        "framework": "torch-compile" if compile_loss else "torch",
        "torch": torch.__version__,
        "model": name,
        "backend": ctx_name,
        "epochs": epochs,
        "epoch_time_s": times,
        "epoch_s": median_after_first(times),
        "loss": losses,
        "valid_accuracy": accs,
        "final_valid_accuracy": accs[-1] if accs else None,
        "wall_s": time.perf_counter() - t_all,
        "lr": spec[1],
        "optimizer": spec[0],
        "batch_size": batch_size,
        "steps_per_epoch": n_batches,
    }
    if dev.type == "cuda":
        seg_end = torch.cuda.memory_stats(dev).get("segment.all.allocated", 0)
        rec["mallocs_total"] = seg_end - seg0
        if len(seg_marks) >= 2:
            rec["mallocs_per_epoch"] = (seg_end - seg_marks[1]) / (len(seg_marks) - 1)
        rec["peak_bytes"] = torch.cuda.max_memory_allocated(dev)
        rec["bytes_reserved"] = torch.cuda.max_memory_reserved(dev)
    return rec


def run_torch_own_process(name, data, ctx_name, epochs, batch_size, lr, *, compile_loss, quick):
    """:func:`run_torch` in a fresh process (``_mnist_torch_process.py``), as users run PyTorch:
    there PyTorch loads its libgomp before gpumat does, so its OpenMP threads wait the way
    PyTorch's defaults (or the user's environment) say, not the way gpumat sets them for the
    libgomp it loads first in this process. The worker trains on the same images (``quick``: the
    same subset); ``data`` is unused. The record gains ``"process": "own"``.

    Raises:
        RuntimeError: the worker failed (its stderr in the message).
    """
    del data  # the worker loads the same images itself
    spec = {
        "name": name, "ctx": ctx_name, "epochs": epochs, "batch_size": batch_size, "lr": lr,
        "compile_loss": compile_loss, "quick": quick,
        "mlp_hidden": list(MLP_HIDDEN) if MLP_HIDDEN else None,
    }  # fmt: skip
    return {**run_worker("_mnist_torch_process.py", [json.dumps(spec)], "RUN "), "process": "own"}


def mnist_data(quick):
    """(train pair, valid pair) of the runs: the MNIST images, or with ``quick`` the first 5,000
    training and 1,000 validation images. Raises DatasetError when MNIST cannot be loaded."""
    train_set, valid_set, _test = load_mnist(progress=False)
    if quick:
        train_set = (train_set[0][:5000], train_set[1][:5000])
        valid_set = (valid_set[0][:1000], valid_set[1][:1000])
    return train_set, valid_set


# --------------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_ctx = "cpu,gpu" if gpumat.cuda_available() else "cpu"
    p.add_argument(
        "--ctx",
        default=default_ctx,
        help=f"comma-separated backends among numpy, cpu, gpu (default {default_ctx})",
    )
    p.add_argument("--models", default="logreg,mlp", help="comma-separated (default logreg,mlp)")
    p.add_argument("--quick", action="store_true", help="2 epochs on a 5,000-image subset (CI)")
    p.add_argument("--epochs", type=int, default=None, help="epochs per run (default 5, quick 2)")
    p.add_argument("--batch-size", type=int, default=None, help="default: the model's, else 1000")
    p.add_argument(
        "--lr",
        type=float,
        default=None,
        help="SGD's learning rate for every model (default: the model's own optimizer, else SGD "
        "at gpumat.train.DEFAULT_LR)",
    )
    p.add_argument(
        "--mlp-hidden",
        default=None,
        help="the MLP's two hidden widths, e.g. 16,16 (default 256,100); with a small batch the "
        "steps' arithmetic is negligible and steps/s measures the per-step host overhead",
    )
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch runs")
    p.add_argument(
        "--variants",
        default=None,
        help="comma-separated gpumat variants among "
        + ", ".join(GPUMAT_VARIANTS)
        + " (default: all; gpumat-nograph on gpu only)",
    )
    p.add_argument(
        "--torch-compile",
        action="store_true",
        help="also time torch.compile on cpu (always on gpu)",
    )
    p.add_argument(
        "--same-process-torch",
        action="store_true",
        help="run PyTorch in this process, after gpumat (default: a fresh process per PyTorch "
        "run, so that its threads keep PyTorch's own OpenMP settings)",
    )
    p.add_argument("--out", default=None, help="JSON file (or folder); default under results/")
    p.add_argument("--no-write", action="store_true", help="print only, write no files")
    add_busy_option(p)
    args = p.parse_args(argv)
    args.ctx = [c.strip() for c in args.ctx.split(",") if c.strip()]
    args.models = [m.strip() for m in args.models.split(",") if m.strip()]
    if args.mlp_hidden is not None:
        try:
            widths = tuple(int(w) for w in args.mlp_hidden.split(","))
        except ValueError:
            widths = ()
        if len(widths) != 2 or min(widths) < 1:
            p.error(f"--mlp-hidden takes two positive widths like 16,16, got {args.mlp_hidden!r}")
        args.mlp_hidden = widths
    if args.epochs is None:
        args.epochs = 2 if args.quick else 5
    for c in args.ctx:
        if c not in ("numpy", "cpu", "gpu"):
            p.error(f"unknown backend {c!r}: expected numpy, cpu or gpu")
    if args.variants is None:
        args.variants = list(GPUMAT_VARIANTS)
    else:
        args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        for v in args.variants:
            if v not in GPUMAT_VARIANTS:
                p.error(f"unknown variant {v!r}: expected one of {list(GPUMAT_VARIANTS)}")
    for m in args.models:
        if m not in models.BUILDERS:
            p.error(f"unknown model {m!r}: expected one of {sorted(models.BUILDERS)}")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    with busy_processes(args.busy):
        return run_all(args, argv)


def run_all(args, argv) -> int:
    """The runs of one invocation (main's, with --busy's background processes running)."""
    global MLP_HIDDEN
    MLP_HIDDEN = args.mlp_hidden
    if "gpu" in args.ctx and not gpumat.cuda_available():
        print("bench_mnist: --ctx gpu but no usable CUDA device", file=sys.stderr)
        return 2
    primary = "gpu" if "gpu" in args.ctx else "cpu"
    header = run_header("mnist", primary, args.quick, ["benchmarks/bench_mnist.py", *argv])
    header["devices"] = {c: device_info(c) for c in args.ctx if c in ("cpu", "gpu")}
    print(header_markdown(header, "gpumat MNIST training benchmark"), flush=True)

    try:
        train_set, valid_set = data = mnist_data(args.quick)
    except DatasetError as exc:
        print(f"bench_mnist: MNIST is not available: {exc}", file=sys.stderr)
        return 2

    torch = None
    notes = []
    if not args.no_torch:
        torch = optional_import("torch")
        if torch is None:
            notes.append("PyTorch is not installed: the torch rows are skipped")
        elif "gpu" in args.ctx and not torch.cuda.is_available():
            notes.append("torch sees no CUDA device: torch gpu rows skipped")
    threads = {k: os.environ[k] for k in THREAD_ENV_VARS if k in os.environ}
    if threads:
        notes.append("environment: " + ", ".join(f"{k}={v}" for k, v in threads.items()))
    if torch is not None:
        notes.append(
            "PyTorch runs in this process, after gpumat, sharing the libgomp gpumat loaded"
            if args.same_process_torch
            else "each PyTorch run in a fresh process of its own (PyTorch's own OpenMP settings)"
        )
    if args.busy:
        notes.append(busy_note(args.busy))
    for n in notes:
        print("note:", n, flush=True)

    rows: list[dict] = []
    path = None if args.no_write else resolve_out(args.out, "mnist", header)
    software = software_info()
    planned = 0

    def report(complete: bool) -> tuple[dict, str, list]:
        failed = [r for r in rows if "error" in r]
        summary = f"{len(rows)} runs, {len(failed)} raised\n"
        if not complete:
            summary += f"INCOMPLETE: {len(rows)} of {planned} runs done\n"
        sizes = f"train {len(train_set[0])} images, valid {len(valid_set[0])}"
        md = (
            header_markdown(header, "gpumat MNIST training benchmark")
            + "".join(f"- note: {n}\n" for n in notes)
            + f"- data: {sizes}; batch {args.batch_size or 'per model'}; epochs {args.epochs}; "
            + f"lr {args.lr or 'per model'}"
            + (f"; MLP hidden widths {args.mlp_hidden}" if args.mlp_hidden else "")
            + "\n\n"
            + mnist_table(rows)
            + "\n"
            + MNIST_LEGEND
            + "\n"
            + summary
        )
        data_out = {
            **header,
            "complete": complete,
            "software": software,
            "settings": {
                "backends": args.ctx,
                "models": args.models,
                "epochs": args.epochs,
                "batch_size": args.batch_size,
                "lr": args.lr,
                "variants": args.variants,
                "busy_processes": args.busy,
                "torch_process": "same" if args.same_process_torch else "own",
                "mlp_hidden": list(args.mlp_hidden) if args.mlp_hidden else None,
                "num_train": len(train_set[0]),
                "num_valid": len(valid_set[0]),
            },
            "notes": notes,
            "runs": rows,
            "summary": {"runs": len(rows), "failed": len(failed)},
        }
        return data_out, md, failed

    plan = []
    for name in args.models:
        for ctx_name in args.ctx:
            for variant in reversed(args.variants):  # the defaults last: the warmest machine
                if variant == "gpumat-nograph" and ctx_name != "gpu":
                    continue
                plan.append(
                    (name, ctx_name, variant, lambda *a, v=variant: run_gpumat(*a, variant=v))
                )
            if (
                torch is not None
                and name in TORCH_MODELS
                and ctx_name in ("cpu", "gpu")
                and (ctx_name == "cpu" or torch.cuda.is_available())
            ):
                for framework, compiled in (("torch", False), ("torch-compile", True)):
                    if compiled and not (ctx_name == "gpu" or args.torch_compile):
                        continue
                    if args.same_process_torch:
                        fn = lambda *a, c=compiled: run_torch(torch, *a, compile_loss=c)  # noqa: E731
                    else:
                        fn = lambda *a, c=compiled: run_torch_own_process(  # noqa: E731
                            *a, compile_loss=c, quick=args.quick
                        )
                    plan.append((name, ctx_name, framework, fn))
    planned = len(plan)
    for name, ctx_name, framework, fn in plan:
        print(f"{name} / {ctx_name} / {framework} ...", end=" ", file=sys.stderr, flush=True)
        try:
            rec = fn(name, data, ctx_name, args.epochs, args.batch_size, args.lr)
            print(
                f"{fmt_num(rec['epoch_s'])} s/epoch, valid acc {rec['final_valid_accuracy']}",
                file=sys.stderr,
                flush=True,
            )
        except Exception as exc:  # noqa: BLE001 (record, go on with the other runs)
            traceback.print_exc()
            rec = {"framework": framework, "model": name, "backend": ctx_name, "error": repr(exc)}
        rows.append(rec)
        if path is not None:  # a run stopped by a time limit still leaves what it measured
            write_results(path, *report(complete=False)[:2])

    data_out, md, failed = report(complete=True)
    print()
    print(mnist_table(rows))
    print(MNIST_LEGEND)
    if path is not None:
        jp, mp = write_results(path, data_out, md)
        print(f"wrote {jp} and {mp.name}")
    print(md.rsplit(MNIST_LEGEND, 1)[1].strip())
    for r in failed:
        print(f"FAILED {r['model']}/{r['backend']}/{r['framework']}: {r['error']}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
