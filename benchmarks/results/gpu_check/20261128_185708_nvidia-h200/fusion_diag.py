"""Diagnose test_fused_training_steps_match_unfused[gpu] (failed once under pytest -n 8 on an H200).
Per seed: both executors on the SAME parameters each step (gradients compared with each other and
with a float64 numpy reference), updated with float64-free SGD from the unfused gradients; then the
test's own scheme (two separate 5-step trajectories) and its final difference. Prints one line per
seed and a summary. Usage: python3 fusion_diag.py DEVICE SEED0 NSEEDS"""

import sys
import time

import numpy as np

import gpumat
from gpumat import models
from gpumat.optim import SGD
from gpumat.runtime import Executor

kind, seed0, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ctx = {"cpu": gpumat.cpu, "emu": lambda: gpumat.emu(0), "gpu": lambda: gpumat.gpu(0)}[kind]()


def feed_of(m, rng, batch=40):
    x = rng.uniform(0, 1, size=(batch, 784)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[rng.integers(0, 10, batch)]
    return {m.x: x, m.y_: y}


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(1.0, np.abs(b).max()))


repeats_differ = []
worst_step = 0.0
worst_ref = 0.0
finals = []
t0 = time.time()
for seed in range(seed0, seed0 + n):
    rng = np.random.default_rng(seed)
    m = models.mlp(hidden=(32, 16))
    feed = feed_of(m, rng)
    evals = [m.loss, *m.grads]
    ref_ex = Executor(evals, fusion=False)
    exs = {fuse: Executor(evals, device=ctx, fusion=fuse) for fuse in (False, True)}
    params = [np.asarray(v, np.float32) for v in m.initial_values.values()]
    step_diffs, ref_diffs = [], []
    for step in range(5):
        f = dict(feed)
        f.update(zip(m.params.values(), [gpumat.array(p, ctx) for p in params], strict=True))
        got = {}
        for fuse, ex in exs.items():
            _, *g = ex.run(f)
            got[fuse] = [gi.asnumpy() for gi in g]
            _, *g2 = ex.run(f)  # the same run again: the same bits?
            if any(
                not np.array_equal(a, gi.asnumpy()) for a, gi in zip(got[fuse], g2, strict=True)
            ):
                repeats_differ.append((seed, step, fuse))
        f64 = {k: np.asarray(v, np.float64) for k, v in feed.items()}
        f64.update(zip(m.params.values(), [p.astype(np.float64) for p in params], strict=True))
        _, *r = ref_ex.run(f64)
        step_diffs.append(max(rel(a, b) for a, b in zip(got[True], got[False], strict=True)))
        ref_diffs.append(max(rel(a, b) for fuse in got for a, b in zip(got[fuse], r, strict=True)))
        params = [p - np.float32(0.5) * g for p, g in zip(params, got[False], strict=True)]
    # the test's scheme: two trajectories
    final = {}
    for fuse in (False, True):
        ex = Executor(evals, device=ctx, fusion=fuse)
        ps = [gpumat.array(np.asarray(v, np.float32), ctx) for v in m.initial_values.values()]
        opt = SGD(ps, lr=0.5)
        f = dict(feed)
        for _ in range(5):
            f.update(zip(m.params.values(), ps, strict=True))
            _, *grads = ex.run(f)
            opt.step(grads)
        final[fuse] = [p.asnumpy() for p in ps]
    fd = max(rel(a, b) for a, b in zip(final[True], final[False], strict=True))
    finals.append(fd)
    worst_step, worst_ref = max(worst_step, max(step_diffs)), max(worst_ref, max(ref_diffs))
    if fd > 1e-5 or max(step_diffs) > 1e-5:
        print(
            f"seed {seed}: per-step fused-unfused {[f'{d:.1e}' for d in step_diffs]} vs f64 "
            f"{[f'{d:.1e}' for d in ref_diffs]} two-trajectory final {fd:.1e}",
            flush=True,
        )
print(
    f"{kind} seeds {seed0}..{seed0 + n - 1}: worst per-step fused-unfused {worst_step:.2e}, "
    f"worst vs float64 {worst_ref:.2e}, two-trajectory final > 1e-5 in "
    f"{sum(d > 1e-5 for d in finals)}/{n} (max {max(finals):.2e}), repeated runs with other bits "
    f"{len(repeats_differ)} {repeats_differ[:4]}, "
    f"{time.time() - t0:.0f} s",
    flush=True,
)
