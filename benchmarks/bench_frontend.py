#!/usr/bin/env python3
"""Benchmark the front end: training steps written with gpumat.nn against the same steps in
PyTorch, on the same device, in one run.

Usage::

    python3 benchmarks/bench_frontend.py                   # cpu
    python3 benchmarks/bench_frontend.py --ctx gpu          # CUDA device 0 (PyTorch on cuda)
    python3 benchmarks/bench_frontend.py --quick --out /tmp/  # CI smoke run (small sizes)

The step cases, each a full training step (``zero_grad``, forward, loss, ``backward``, optimizer
``step``) on fixed random batches, from the same initial weights in both libraries:

- ``mlp`` (batch 1000): 784-256-100-10 with ReLU, cross-entropy, SGD at lr 0.1; eager gpumat
  against eager PyTorch (the goal: at most 1.3x PyTorch's step time), and gpumat compiled.
- ``cnn`` (batch 1000): the PyTorch MNIST example's network (two 3x3 convolutions of 32 and 64
  channels, 2x2 max pooling, dropout 0.25, 9216-128, dropout 0.5, 128-10, log-softmax, NLL) with
  Adadelta at lr 1.0; eager gpumat against eager PyTorch, and gpumat compiled.
- ``mlp-64``, ``cnn-64``: the same two networks at batch 64, the PyTorch MNIST example's
  training batch (the goals as at batch 1000).
- ``tiny-mlp`` (batch 16): 784-16-16-10, SGD: a step's arithmetic is small (0.84 MFLOP), so
  steps/s measure what a step costs the host; gpumat compiled (``gpumat.compile``) against eager
  PyTorch (the goal: 5x its steps/s) and ``torch.compile`` of the forward and loss (the goal:
  faster), with gpumat eager for reference.

- ``gpt``: ``examples/gpt.py``'s model and training step at the example's size (batch 32 x
  context 64), gpumat eager and compiled against PyTorch eager and ``torch.compile`` (the
  goals on the host: eager at most PyTorch eager's step time, compiled faster than
  ``torch.compile``).

- ``ops``: the fixed cost of one eager op on small tensors ((16, 16), a bias of 16): ``add``,
  ``mul``, ``matmul``, ``relu``, ``sum``, ``linear`` (inputs without gradients: dispatch, checks,
  the output's allocation), and two chains with ``backward()`` (linear, relu, sum; cross-entropy)
  on inputs that require gradients; a row per op, ``step ms`` the time of one call (the goal:
  PyTorch's).

- ``mnist-net``: the whole program ``examples/mnist_net.py --epochs 1`` (eager, and with
  ``--compile``) beside its PyTorch twin ``examples/mnist_net_torch.py --epochs 1``, run in this
  process on the same 50,000 training images: seconds of training (one epoch, batches of 64,
  Adadelta, dropout) and the test accuracy after it (the goal: at least 0.98, as the twin).
  ``--quick`` runs them with ``--dry-run`` (one batch, then the test set).

Before timing, each step case checks that gpumat's and PyTorch's losses agree on the first batch in
eval mode (dropout off) from the same weights, and the compiled step's against the eager one.

Measured per row: ``step ms`` (the median over ``--repeat`` samples of ``--steps`` consecutive
steps each, after warm-up steps; the device is synchronized around each sample; the samples of a
case's frameworks are interleaved, so that other work on a shared machine slows them alike),
``steps/s``, ``x torch`` (eager PyTorch's step time over the row's: above 1, faster than eager
PyTorch), ``mallocs/step`` (gpumat: ``device_malloc_calls`` of its allocator during the timed
steps, per step: the compiled step's rule is 0), ``schedule`` (the compiled step's
``schedule_report``: ``compiled`` one native call per step, ``cuda-graph`` one CUDA graph launch).
For ``mnist-net``: ``train s`` (the epoch's training seconds as the program prints them, test
evaluation excluded), ``test acc`` and ``x torch`` (the twin's training seconds over the row's).
The 1-minute load average before and after the run is recorded (a shared machine's other work
slows every row alike, but adds noise). ``--busy K`` runs everything with K background processes
that each spin one core (a busy laptop, reproduced on demand; recorded as the note
``BUSY_PROCESSES=K``, so that make_table.py keeps such runs apart from idle ones). Output: a
table, a JSON file and its markdown in ``benchmarks/results/`` (``--out`` elsewhere); no speed
is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import (
    FRONTEND_LEGEND,
    REPO_ROOT,
    THREAD_ENV_VARS,
    add_busy_option,
    busy_note,
    busy_processes,
    device_info,
    frontend_table,
    header_markdown,
    optional_import,
    resolve_out,
    run_header,
    run_worker,
    software_info,
    time_interleaved,
    write_results,
)
from _own_process import case_batches, mlp, optimizer, torch_twin, training_step

import gpumat
import gpumat.nn as nn
import gpumat.nn.functional as F  # noqa: N812 (PyTorch's convention)

# The CNN is the example programs' own network (examples/mnist_net.py, mnist_net_torch.py).
sys.path.insert(0, str(REPO_ROOT / "examples"))
from mnist_net import Net as CNN  # noqa: E402 (an example program, on the path just set)

# --------------------------------------------------------------------------------------------------
# the cases (the models of both libraries: _own_process.py)
# --------------------------------------------------------------------------------------------------


CASES = {
    # name: (batch, input shape of one sample, MLP widths (None: the CNN), optimizer, loss)
    "mlp": (1000, (784,), (784, 256, 100, 10), "sgd", "cross_entropy"),
    "cnn": (1000, (1, 28, 28), None, "adadelta", "nll_loss"),
    "tiny-mlp": (16, (784,), (784, 16, 16, 10), "sgd", "cross_entropy"),
    "mlp-64": (64, (784,), (784, 256, 100, 10), "sgd", "cross_entropy"),
    "cnn-64": (64, (1, 28, 28), None, "adadelta", "nll_loss"),
}
QUICK_CASES = {
    "mlp": (100, (784,), (784, 256, 100, 10), "sgd", "cross_entropy"),
    "cnn": (16, (1, 28, 28), None, "adadelta", "nll_loss"),
    "tiny-mlp": (16, (784,), (784, 16, 16, 10), "sgd", "cross_entropy"),
    "mlp-64": (16, (784,), (784, 256, 100, 10), "sgd", "cross_entropy"),
    "cnn-64": (4, (1, 28, 28), None, "adadelta", "nll_loss"),
}


# --------------------------------------------------------------------------------------------------
# timing the step cases
# --------------------------------------------------------------------------------------------------


def step_samples(steps: int, args) -> tuple[int, int]:
    """(steps per sample, samples) of a case of ``steps`` steps a sample: ``--quick`` takes a
    tenth of the steps (at least 1) and 2 samples."""
    if args.quick:
        return max(1, steps // 10), 2
    return steps, args.repeat


def run_case(name, spec, ctx, torch, args) -> list[dict]:
    """One step case: gpumat eager and compiled, PyTorch eager (and torch.compile for the tiny
    MLP), from the same weights on the same batches, timed interleaved; a row per framework."""
    batch, sample_shape, widths, opt_kind, loss_name = spec
    data = case_batches({"seed": args.seed, "batch": batch, "sample_shape": sample_shape})
    gpumat.manual_seed(args.seed)
    build = (lambda: CNN()) if widths is None else (lambda: mlp(nn, widths))
    sync = lambda: gpumat.synchronize(ctx)  # noqa: E731
    probe = lambda: gpumat.memory_stats(ctx)["device_malloc_calls"]  # noqa: E731
    loss_fn = getattr(F, loss_name)
    batches = [(gpumat.tensor(x, device=ctx), gpumat.tensor(y, device=ctx)) for x, y in data]
    steps, repeat = step_samples(args.steps[name], args)
    warmup = 2

    def gpumat_step_for(model):
        opt = optimizer(gpumat, opt_kind, model.parameters())
        return training_step(opt, lambda x, y: loss_fn(model(x), y))

    reference = build()
    variants = []
    check = {}
    with gpumat.no_grad():
        reference.eval()
        check["gpumat"] = loss_fn(reference.to(ctx)(batches[0][0]), batches[0][1]).item()
        reference.train()
    for variant in ("gpumat-eager", "gpumat-compiled"):
        model = build().to(ctx)
        model.load_state_dict(reference.state_dict())
        step = gpumat_step_for(model)
        if variant == "gpumat-compiled":
            step = gpumat.compile(step)
        row = {"case": name, "batch": batch, "framework": variant}
        row["first_loss"] = step(*batches[0]).item()
        timed = {"row": row, "step": step, "batches": batches, "sync": sync, "probe": probe}
        variants.append(timed)
    if widths is not None:  # no dropout: the first steps' losses match between eager and compiled
        a, b = (v["row"]["first_loss"] for v in variants)
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), f"{name}: compiled {b} vs eager {a}"
    if torch is not None:
        tdev = "cuda" if ctx.device_type == "gpu" else "cpu"
        tbatches = [(torch.tensor(x, device=tdev), torch.tensor(y, device=tdev)) for x, y in data]
        tsync = (lambda: torch.cuda.synchronize()) if tdev == "cuda" else (lambda: None)
        tloss = getattr(torch.nn.functional, loss_name)
        state = {k: torch.tensor(v.numpy()) for k, v in reference.state_dict().items()}
        tmodel = torch_twin(torch, name, widths).to(tdev)
        tmodel.load_state_dict(state)
        tmodel.eval()
        with torch.no_grad():
            check["torch"] = float(tloss(tmodel(tbatches[0][0]), tbatches[0][1]))
        tmodel.train()
        assert abs(check["torch"] - check["gpumat"]) <= 1e-4 * max(1.0, abs(check["torch"])), check
        compiled = name == "tiny-mlp" and args.torch_compile
        for variant in ["torch"] + (["torch-compile"] if compiled else []):
            tm = torch_twin(torch, name, widths).to(tdev)
            tm.load_state_dict(state)
            opt = optimizer(torch, opt_kind, tm.parameters())

            def forward(x, y, tm=tm):
                return tloss(tm(x), y)

            if variant == "torch-compile":
                forward = torch.compile(forward)

            row = {"case": name, "batch": batch, "framework": variant}
            tstep = training_step(opt, forward)
            variants.append({"row": row, "step": tstep, "batches": tbatches, "sync": tsync})
    time_interleaved(variants, steps, repeat, warmup)
    compiled_step = variants[1]["step"]  # its schedule after the timed steps (the steady state)
    variants[1]["row"].update(
        schedule=compiled_step.schedule_report.mode,
        schedule_report=str(compiled_step.schedule_report),
        fusion_report=str(compiled_step.fusion_report),
    )
    rows = [v["row"] for v in variants]
    for r in rows:
        r["check_loss"] = check
    return rows


OWN_PROCESS_ROUNDS = 3


def own_process_rows(name, spec, args) -> list[dict]:
    """Case ``name``'s steps with each library in a fresh process of its own (``_own_process.py``):
    gpumat eager and compiled in one, eager PyTorch (no gpumat loaded) in the other, in
    ``OWN_PROCESS_ROUNDS`` rounds that alternate which starts first. A row per framework, its
    case ``"<name> (own process)"``, its step time the median of every round's samples."""
    batch, sample_shape, widths, opt_kind, loss_name = spec
    steps, repeat = step_samples(args.steps[name], args)
    payload = {
        "batch": batch, "sample_shape": list(sample_shape), "widths": widths,
        "optimizer": opt_kind, "loss": loss_name, "steps": steps, "repeat": repeat, "warmup": 2,
        "seed": args.seed,
    }  # fmt: skip
    return _run_own_processes(name, payload, after_torch=True)


def own_process_gpt_rows(args) -> list[dict]:
    """The ``gpt`` case with each library in a fresh process of its own, as
    :func:`own_process_rows`: gpumat eager and compiled in one, PyTorch eager (and with
    ``args.torch_compile`` ``torch.compile``) in the other, which loads PyTorch before gpumat
    (``examples/gpt_torch.py`` takes its config from ``gpt.py``), from
    the same initial weights (an ``.npz`` file the workers read) on the same batches; their first
    losses must agree to 1e-4 relative.

    Raises:
        RuntimeError: a worker failed, or the first losses differ.
    """
    import gpt  # an example program, on the path set at the top

    config, _, _, steps, repeat = gpt_setup(args)
    gpumat.manual_seed(args.seed)
    state = {k: v.detach().numpy() for k, v in gpt.GPT(config).state_dict().items()}
    with tempfile.TemporaryDirectory() as tmp:
        weights = str(Path(tmp) / "gpt_weights.npz")
        np.savez(weights, **state)
        payload = {"seed": args.seed, "quick": args.quick, "steps": steps, "repeat": repeat,
                   "weights": weights, "torch_compile": args.torch_compile}  # fmt: skip
        rows = _run_own_processes("gpt", payload)
    first = [r["first_loss"] for r in rows]
    if max(first) - min(first) > 1e-4 * max(first):
        raise RuntimeError(f"gpt (own process): first losses differ: {first}")
    return rows


def _run_own_processes(name, payload: dict, after_torch: bool = False) -> list[dict]:
    """``_own_process.py``'s workers for case ``name`` with ``payload``, gpumat's and (when
    installed) PyTorch's, and with ``after_torch`` gpumat's in a process that imported and used
    PyTorch first, in ``OWN_PROCESS_ROUNDS`` rounds that alternate which starts first; a row per
    framework with every round's samples (see :func:`own_process_rows`)."""
    payload = json.dumps(payload)
    libs = ["gpumat"]
    if optional_import("torch") is not None:
        libs += ["torch", "gpumat-after-torch"] if after_torch else ["torch"]
    merged: dict[str, dict] = {}
    for r in range(OWN_PROCESS_ROUNDS):
        for lib in libs if r % 2 == 0 else libs[::-1]:
            for row in run_worker("_own_process.py", [lib, name, payload], "ROWS "):
                kept = merged.setdefault(row["framework"], {**row, "samples_s": []})
                kept["samples_s"] += row["samples_s"]
    rows = []
    for row in merged.values():
        samples = row["samples_s"]
        row.update(
            case=f"{name} (own process)", step_s=statistics.median(samples),
            step_s_min=min(samples), step_s_max=max(samples), repeat=len(samples),
            processes=OWN_PROCESS_ROUNDS,
        )  # fmt: skip
        row.pop("mallocs_per_step", None)
        rows.append(row)
    return rows


def coexistence_note(rows) -> str | None:
    """How much PyTorch in the process slows gpumat: each case's gpumat-eager step time in this
    process (PyTorch imported and run), and in a fresh process that imported and used PyTorch
    first, over its time in a process of its own."""
    shared = {
        r["case"]: r["step_s"] for r in rows if r["framework"] == "gpumat-eager" and "step_s" in r
    }  # (a program row, mnist-net's, has train_s instead)
    parts = [
        f"{case} {shared[case] / own:.2f}x"
        for case in shared
        if (own := shared.get(f"{case} (own process)")) and not case.endswith("(own process)")
    ]
    first = {
        r["case"]: r["step_s"]
        for r in rows
        if r["framework"] == "gpumat-eager (PyTorch first)" and "step_s" in r
    }
    after = [
        f"{case.removesuffix(' (own process)')} {first[case] / own:.2f}x"
        for case in first
        if (own := shared.get(case))
    ]
    notes = []
    if parts:
        notes.append(
            "gpumat-eager's step time beside PyTorch (this process, PyTorch imported and run) "
            "over its time in a process of its own: " + ", ".join(parts)
        )
    if after:
        notes.append(
            "in a fresh process that imported and used PyTorch first (PyTorch's libgomp and "
            "OpenMP settings) over its time alone: " + ", ".join(after)
        )
    return "; ".join(notes) + " (the goal: at most 1.10x)" if notes else None


# Eager ops on small tensors, where what an op costs is its fixed cost (Python dispatch, argument
# checks, output allocation, autograd recording): name -> (calls per sample, whether its inputs
# require gradients, the call as a function of (library, functional module, x, w, b, target)).
OPS = {
    "add": (2000, False, lambda lib, F, x, w, b, t: x + w),
    "mul": (2000, False, lambda lib, F, x, w, b, t: x * w),
    "matmul": (2000, False, lambda lib, F, x, w, b, t: x @ w),
    "relu": (2000, False, lambda lib, F, x, w, b, t: F.relu(x)),
    "sum": (2000, False, lambda lib, F, x, w, b, t: x.sum()),
    "linear": (2000, False, lambda lib, F, x, w, b, t: F.linear(x, w, b)),
    "linear+relu+sum backward": (
        500, True, lambda lib, F, x, w, b, t: F.relu(F.linear(x, w, b)).sum().backward(),
    ),
    "cross_entropy backward": (
        500, True, lambda lib, F, x, w, b, t: F.cross_entropy(x, t).backward(),
    ),
}  # fmt: skip
OPS_SIDE = 16


def run_ops(ctx, torch, args) -> list[dict]:
    """Per-op fixed costs: each of OPS on (16, 16) float32 tensors (a bias of 16, 16 class
    targets), eager gpumat against eager PyTorch, timed interleaved; a row per op and framework,
    case ``"op <name>"``, batch 16, its step time the seconds of one call (the backward rows:
    the forward ops, then ``backward()``). The inputs require gradients only in the backward rows,
    so the forward rows time dispatch, checks and the output's allocation without autograd."""
    rng = np.random.default_rng(args.seed)
    host = {
        "x": rng.standard_normal((OPS_SIDE, OPS_SIDE)).astype(np.float32),
        "w": rng.standard_normal((OPS_SIDE, OPS_SIDE)).astype(np.float32),
        "b": rng.standard_normal(OPS_SIDE).astype(np.float32),
        "t": rng.integers(0, OPS_SIDE, OPS_SIDE),
    }
    sync = lambda: gpumat.synchronize(ctx)  # noqa: E731
    tdev = "cuda" if ctx.device_type == "gpu" else "cpu"
    tsync = (lambda: torch.cuda.synchronize()) if tdev == "cuda" else (lambda: None)
    rows = []
    for name, (calls, grad, call) in OPS.items():
        steps, repeat = step_samples(calls, args)

        def leaves(make, grad=grad):
            return tuple(make(host[k], grad) for k in ("x", "w", "b"))

        gx, gw, gb = leaves(lambda a, g: gpumat.tensor(a, device=ctx, requires_grad=g))
        gt = gpumat.tensor(host["t"], device=ctx)
        row = {"case": f"op {name}", "batch": OPS_SIDE, "framework": "gpumat-eager"}
        variants = [{
            "row": row, "batches": [()], "sync": sync,
            "step": lambda call=call, a=(gx, gw, gb, gt): call(gpumat, F, *a),
        }]  # fmt: skip
        if torch is not None:
            tx, tw, tb = leaves(lambda a, g: torch.tensor(a, device=tdev, requires_grad=g))
            tt = torch.tensor(host["t"], device=tdev)
            row = {"case": f"op {name}", "batch": OPS_SIDE, "framework": "torch"}
            variants.append({
                "row": row, "batches": [()], "sync": tsync,
                "step": lambda call=call, a=(tx, tw, tb, tt): call(torch, torch.nn.functional, *a),
            })  # fmt: skip
        time_interleaved(variants, steps, repeat, warmup=10)
        rows += [v["row"] for v in variants]
    return rows


def gpt_setup(args):
    """The ``gpt`` case's (config, data, label, steps, repeat): the example's size (4 layers of 128
    features, 4 heads, context 64, 65 characters; ``args.quick``: 1 layer of 32, 2 heads, context
    16) and four batches of (inputs, targets), 32 (quick: 4) sequences each, from ``args.seed``."""
    import gpt  # an example program, on the path set at the top

    quick = args.quick
    config = gpt.GPTConfig(block_size=16 if quick else 64, vocab_size=65, n_layer=1 if quick else 4,
                           n_head=2 if quick else 4, n_embd=32 if quick else 128)  # fmt: skip
    batch = 4 if quick else 32
    rng = np.random.default_rng(args.seed)
    data = [
        (
            rng.integers(0, 65, (batch, config.block_size)),
            rng.integers(0, 65, (batch, config.block_size)),
        )
        for _ in range(4)
    ]
    steps, repeat = (1, 2) if quick else (args.steps["gpt"], args.repeat)
    return config, data, f"{batch}x{config.block_size}", steps, repeat


def gpumat_gpt_variants(ctx, config, data, label, state) -> list[dict]:
    """``time_interleaved`` variants of gpumat's GPT step on ``ctx``, eager and compiled (the
    forward and backward, as ``gpt.py --compile``), each from the weights ``state`` (a state
    dict of gpumat tensors or numpy arrays), with the first step's loss in its row."""
    import gpt  # an example program, on the path set at the top

    sync = lambda: gpumat.synchronize(ctx)  # noqa: E731
    batches = [(gpumat.tensor(x, device=ctx), gpumat.tensor(y, device=ctx)) for x, y in data]
    state = {k: v if isinstance(v, gpumat.Tensor) else gpumat.tensor(v) for k, v in state.items()}
    variants = []
    for variant in ("gpumat-eager", "gpumat-compiled"):
        model = gpt.GPT(config).to(ctx)
        model.load_state_dict(state)
        opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99))

        def forward_backward(x, y, model=model):
            _, loss = model(x, y)
            loss.backward()
            return loss

        fb = gpumat.compile(forward_backward) if variant == "gpumat-compiled" else forward_backward

        def step(x, y, model=model, opt=opt, fb=fb):
            opt.zero_grad(set_to_none=True)
            loss = fb(x, y)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            return loss

        row = {"case": "gpt", "batch": label, "framework": variant}
        row["first_loss"] = step(*batches[0]).item()
        variants.append({"row": row, "step": step, "batches": batches, "sync": sync})
    return variants


def torch_gpt_variants(torch, device_type, config, data, label, state, frameworks) -> list[dict]:
    """The same for ``examples/gpt_torch.py`` on ``device_type`` (``"cpu"`` or ``"cuda"``):
    ``frameworks`` among ``"torch"`` (eager) and ``"torch-compile"`` (``torch.compile`` of the
    model); ``state``: numpy arrays by parameter name."""
    import gpt_torch  # needs torch

    tbatches = [
        (torch.tensor(x, device=device_type), torch.tensor(y, device=device_type)) for x, y in data
    ]
    tsync = (lambda: torch.cuda.synchronize()) if device_type == "cuda" else (lambda: None)
    variants = []
    for variant in frameworks:
        tm = gpt_torch.GPT(config).to(device_type)
        tm.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
        topt = tm.configure_optimizers(0.1, 1e-3, (0.9, 0.99))
        runner = torch.compile(tm) if variant == "torch-compile" else tm

        def tstep(x, y, tm=tm, topt=topt, runner=runner):
            topt.zero_grad(set_to_none=True)
            _, loss = runner(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(tm.parameters(), 1.0)
            topt.step()
            return loss

        row = {"case": "gpt", "batch": label, "framework": variant}
        row["first_loss"] = float(tstep(*tbatches[0]))
        variants.append({"row": row, "step": tstep, "batches": tbatches, "sync": tsync})
    return variants


def run_gpt(ctx, torch, args) -> list[dict]:
    """``examples/gpt.py``'s model and training step (forward, backward, clipping to norm 1, the
    AdamW step over two groups) at the example's size (:func:`gpt_setup`): gpumat eager and
    compiled, PyTorch eager and ``torch.compile`` of the model, from the same weights on the same
    batches, in this process."""
    import gpt  # an example program, on the path set at the top

    config, data, label, steps, repeat = gpt_setup(args)
    gpumat.manual_seed(args.seed)
    reference = gpt.GPT(config)
    variants = gpumat_gpt_variants(ctx, config, data, label, reference.state_dict())
    if torch is not None:
        state = {k: v.detach().numpy() for k, v in reference.state_dict().items()}
        frameworks = ["torch"] + (["torch-compile"] if args.torch_compile else [])
        device_type = "cuda" if ctx.device_type == "gpu" else "cpu"
        variants += torch_gpt_variants(torch, device_type, config, data, label, state, frameworks)
    first = [v["row"]["first_loss"] for v in variants]
    assert max(first) - min(first) <= 1e-4 * max(first), f"gpt: first losses differ: {first}"
    time_interleaved(variants, steps, repeat, warmup=1)
    return [v["row"] for v in variants]


def run_mnist_net(torch, args, own_process: bool = False) -> list[dict]:
    """``examples/mnist_net.py --epochs 1`` (eager and ``--compile``) and its PyTorch twin, each
    one run of the program's ``main``: in this process, or with ``own_process`` each in a fresh
    interpreter of its own (``_program_process.py``: as users run them, neither library beside
    the other); a row per run (case ``mnist-net`` or ``mnist-net (own process)``)."""
    import mnist_net  # an example program, on the path set at the top

    programs = [
        ("gpumat-eager", mnist_net.main, ["--epochs", "1"]),
        ("gpumat-compiled", mnist_net.main, ["--epochs", "1", "--compile"]),
    ]
    if torch is not None:
        import mnist_net_torch  # needs torch

        programs.append(("torch", mnist_net_torch.main, ["--epochs", "1"]))
    rows = []
    device = ["--device", "cuda"] if args.ctx == "gpu" else []
    for framework, program, argv in programs:
        argv = argv + device + (["--dry-run"] if args.quick else [])
        script = "mnist_net_torch.py" if framework == "torch" else "mnist_net.py"
        start = time.perf_counter()
        if own_process:
            result = run_worker("_program_process.py", [script, json.dumps(argv)], "RUN ")
        else:
            result = program(argv)
        epoch = result["epochs"][0]
        rows.append(
            {
                "case": "mnist-net (own process)" if own_process else "mnist-net",
                "batch": 64,
                "framework": framework,
                "command": " ".join(["python", f"examples/{script}", *argv]),
                "train_s": epoch["train_s"],
                "test_accuracy": epoch["accuracy"],
                "test_loss": epoch["test_loss"],
                "wall_s": time.perf_counter() - start,
                **({"libraries_loaded": result["libraries_loaded"]} if own_process else {}),
            }
        )
    return rows


def main(argv=None) -> int:
    """Parse the options, run the cases, print the table, write the ledger files."""
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ctx", default="cpu", choices=["cpu", "gpu"], help="device (default cpu)")
    p.add_argument(
        "--cases",
        default="mlp,cnn,mlp-64,cnn-64,tiny-mlp,gpt,mnist-net,ops",
        help="comma-separated cases",
    )
    p.add_argument("--repeat", type=int, default=5, help="timed samples per row (5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-torch-compile", dest="torch_compile", action="store_false",
                   help="skip the torch.compile row")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--out", default=None, help="JSON path or folder (default benchmarks/results)")
    p.add_argument(
        "--own-processes", action="store_true",
        help="also time the step cases (gpt included) with each library in a fresh process of "
        "its own",
    )  # fmt: skip
    add_busy_option(p)
    args = p.parse_args(argv)
    args.steps = {"mlp": 10, "cnn": 1, "tiny-mlp": 300, "mlp-64": 100, "cnn-64": 10, "gpt": 3}
    with busy_processes(args.busy):
        return run_all(p, args, argv)


def run_all(p, args, argv) -> int:
    """The cases of one run (main's, with --busy's background processes running)."""
    ctx = gpumat.gpu(0) if args.ctx == "gpu" else gpumat.cpu()
    torch = optional_import("torch")
    header = run_header("frontend", args.ctx, args.quick, ["benchmarks/bench_frontend.py", *argv])
    notes = []
    if torch is None:
        notes.append("PyTorch is not installed: the torch rows are skipped")
    else:
        n = torch.get_num_threads()
        notes.append(f"PyTorch {torch.__version__} with {n} thread{'s' if n != 1 else ''}")
    for var in THREAD_ENV_VARS:
        if os.environ.get(var):
            notes.append(f"environment: {var}={os.environ[var]}")
    if args.busy:
        notes.append(busy_note(args.busy))
    load_before = os.getloadavg()[0]
    cases = QUICK_CASES if args.quick else CASES
    rows = []
    names = [c.strip() for c in args.cases.split(",") if c.strip()]
    extra = ["gpt", "mnist-net", "ops"]
    unknown = sorted(set(names) - {*cases, *extra})
    if unknown:
        p.error(f"unknown cases {unknown}; known: {', '.join([*cases, *extra])}")
    for name in names:
        if name == "mnist-net":
            rows += run_mnist_net(torch, args)
        elif name == "ops":
            rows += run_ops(ctx, torch, args)
        elif name == "gpt":
            rows += run_gpt(ctx, torch, args)
        else:
            rows += run_case(name, cases[name], ctx, torch, args)
        mine = [r for r in rows if r["case"] == name or (name == "ops" and r["case"][:3] == "op ")]
        print(frontend_table(mine), flush=True)
    if args.own_processes:
        if "mnist-net" in names:
            own = run_mnist_net(torch, args, own_process=True)
            rows += own
            print(frontend_table(own), flush=True)
        for name in (n for n in names if n in cases or n == "gpt"):
            own = (
                own_process_gpt_rows(args)
                if name == "gpt"
                else own_process_rows(name, cases[name], args)
            )
            rows += own
            print(frontend_table(own), flush=True)
        note = coexistence_note(rows)
        if note:
            notes.append(note)
            print(note, flush=True)
    load_after = os.getloadavg()[0]
    data = {
        **header,
        "software": software_info(),
        "settings": {"cases": {k: list(map(str, v)) for k, v in cases.items()}, "run": names,
                     "repeat": args.repeat, "steps": args.steps, "seed": args.seed,
                     "busy_processes": args.busy, "own_processes": args.own_processes},
        "load_average_1min": {"before": load_before, "after": load_after},
        "device": device_info(args.ctx),
        "notes": notes,
        "runs": rows,
        "complete": True,
    }  # fmt: skip
    table = frontend_table(rows)
    md = header_markdown(header, "Front-end training steps") + "\n" + table + "\n" + FRONTEND_LEGEND
    path, _ = write_results(resolve_out(args.out, "frontend", header), data, md)
    print(table + "\n" + FRONTEND_LEGEND + f"\nload average {load_before:.2f} -> {load_after:.2f}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
