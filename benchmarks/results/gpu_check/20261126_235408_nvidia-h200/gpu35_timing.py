"""Issue 35's new kernels timed on a GPU against torch (float32, TF32 off): the median of 5 rounds
of N calls between synchronizations, each result checked against float64 numpy first."""

import statistics
import time

import numpy as np
import torch

import gpumat
from gpumat import ops

torch.backends.cuda.matmul.allow_tf32 = False
d = gpumat.gpu(0)
rng = np.random.default_rng(0)
rows = []


def timed(fn, sync, n):
    for _ in range(5):
        fn()
    sync()
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        rounds.append((time.perf_counter() - t0) / n)
    return statistics.median(rounds)


def gsync():
    gpumat.cuda.synchronize()


def tsync():
    torch.cuda.synchronize()


def case(name, ours, theirs, check, n=50, nbytes=None):
    ours()
    err = check()
    t_ours = timed(ours, gsync, n)
    t_theirs = timed(theirs, tsync, n) if theirs else float("nan")
    bw = f"{nbytes / t_ours / 1e9:.0f} GB/s" if nbytes else ""
    rows.append((name, t_ours * 1e6, t_theirs * 1e6, t_theirs / t_ours, bw, err))
    print(
        f"| {name} | {t_ours * 1e6:.1f} | {t_theirs * 1e6:.1f} | {t_theirs / t_ours:.2f}x "
        f"| {bw} | {err:.1e} |",
        flush=True,
    )


def rel(got, want):
    want = np.asarray(want, np.float64)
    return float(np.linalg.norm(got.astype(np.float64) - want) / max(np.linalg.norm(want), 1e-30))


print("| case | gpumat us | torch us | torch/gpumat | gpumat rate | rel err |")
print("|---|---:|---:|---:|---:|---:|")
R, C = 8192, 8192
a = rng.standard_normal((R, C)).astype(np.float32)
row = rng.standard_normal((C,)).astype(np.float32)
col = rng.standard_normal((R, 1)).astype(np.float32)
da, drow, dcol, dout = (
    gpumat.array(a, d),
    gpumat.array(row, d),
    gpumat.array(col, d),
    gpumat.empty((R, C), d),
)
ta, trow, tcol = (torch.from_numpy(v).cuda() for v in (a, row, col))
tout = torch.empty((R, C), device="cuda")
nb = 4 * 2 * R * C
case(
    "add same shape 8192x8192",
    lambda: ops.add(da, da, dout),
    lambda: torch.add(ta, ta, out=tout),
    lambda: rel(dout.asnumpy(), a.astype(np.float64) * 2),
    nbytes=3 * 4 * R * C,
)
case(
    "broadcast add 8192x8192 + 8192",
    lambda: ops.broadcast_binary(da, drow, dout, "add"),
    lambda: torch.add(ta, trow, out=tout),
    lambda: rel(dout.asnumpy(), a.astype(np.float64) + row),
    nbytes=nb,
)
case(
    "broadcast add 8192x8192 + 8192x1",
    lambda: ops.broadcast_binary(da, dcol, dout, "add"),
    lambda: torch.add(ta, tcol, out=tout),
    lambda: rel(dout.asnumpy(), a.astype(np.float64) + col),
    nbytes=nb,
)
x3 = rng.standard_normal((64, 1, 4096)).astype(np.float32)
y3 = rng.standard_normal((1, 128, 4096)).astype(np.float32)
gx, gy, gz = gpumat.array(x3, d), gpumat.array(y3, d), gpumat.empty((64, 128, 4096), d)
tx, ty = torch.from_numpy(x3).cuda(), torch.from_numpy(y3).cuda()
tz = torch.empty((64, 128, 4096), device="cuda")
case(
    "broadcast mul 64x1x4096 * 1x128x4096",
    lambda: ops.broadcast_binary(gx, gy, gz, "mul"),
    lambda: torch.mul(tx, ty, out=tz),
    lambda: rel(gz.asnumpy(), x3.astype(np.float64) * y3),
    nbytes=4 * 64 * 128 * 4096,
)
dt = gpumat.empty((C, R), d)
ttout = torch.empty((C, R), device="cuda")
case(
    "transpose kernel 8192x8192",
    lambda: ops.transpose(da, dt),
    lambda: ttout.copy_(ta.T),
    lambda: rel(dt.asnumpy(), a.T),
    nbytes=nb,
)
case(
    "as_strided transpose 8192x8192",
    lambda: ops.as_strided(da, dt, (1, C), 0),
    lambda: ttout.copy_(ta.T),
    lambda: rel(dt.asnumpy(), a.T),
    nbytes=nb,
)
dsum, tsum = gpumat.empty((C,), d), torch.empty((C,), device="cuda")
case(
    "sum_to 8192x8192 -> 8192",
    lambda: ops.sum_to(da, dsum),
    lambda: torch.sum(ta, 0, out=tsum),
    lambda: rel(dsum.asnumpy(), a.astype(np.float64).sum(0)),
    nbytes=4 * R * C,
)
dsum1, tsum1 = gpumat.empty((R, 1), d), torch.empty((R, 1), device="cuda")
case(
    "sum_to 8192x8192 -> 8192x1",
    lambda: ops.sum_to(da, dsum1),
    lambda: torch.sum(ta, 1, keepdim=True, out=tsum1),
    lambda: rel(dsum1.asnumpy(), a.astype(np.float64).sum(1, keepdims=True)),
    nbytes=4 * R * C,
)
# embeddings: a (50257, 768) table, 8192 token ids
V, E, T = 50257, 768, 8192
w = rng.standard_normal((V, E)).astype(np.float32)
ids = rng.integers(0, V, T)
dw, dids = gpumat.array(w, d), gpumat.array(ids.astype(np.float32), d)
tw, tids = torch.from_numpy(w).cuda(), torch.from_numpy(ids).cuda()
demb, temb = gpumat.empty((T, E), d), torch.empty((T, E), device="cuda")
if hasattr(ops, "index_select"):
    case(
        "index_select 50257x768[8192]",
        lambda: ops.index_select(dw, 0, dids, demb),
        lambda: torch.index_select(tw, 0, tids, out=temb),
        lambda: rel(demb.asnumpy(), w[ids]),
        nbytes=2 * 4 * T * E,
    )
    g = rng.standard_normal((T, E)).astype(np.float32)
    dg, tg = gpumat.array(g, d), torch.from_numpy(g).cuda()
    dgrad, tgrad = gpumat.empty((V, E), d), torch.zeros((V, E), device="cuda")
    ref = np.zeros((V, E))
    np.add.at(ref, ids, g.astype(np.float64))

    def ours_add():
        ops.fill(dgrad, 0.0)
        ops.index_add(dgrad, 0, dids, dg)

    def torch_add():
        tgrad.zero_()
        tgrad.index_add_(0, tids, tg)

    case(
        "index_add (embedding grad, deterministic) 8192 rows into 50257x768",
        ours_add,
        torch_add,
        lambda: rel(dgrad.asnumpy(), ref),
        n=10,
    )
if hasattr(ops, "argsort"):
    L = rng.standard_normal((512, 4096)).astype(np.float32)
    dl, tl = gpumat.array(L, d), torch.from_numpy(L).cuda()
    di = gpumat.empty((512, 4096), d)
    case(
        "argsort 512 rows of 4096 (stable)",
        lambda: ops.argsort(dl, di, 1),
        lambda: torch.argsort(tl, dim=1, stable=True),
        lambda: float(np.any(di.asnumpy() != np.argsort(L, axis=1, kind="stable"))),
        n=5,
    )
    V2 = rng.standard_normal((64, 50257)).astype(np.float32)
    dv, tv = gpumat.array(V2, d), torch.from_numpy(V2).cuda()
    dk = gpumat.empty((64, 50), d)
    want = np.argsort(-V2, axis=1, kind="stable")[:, :50]
    case(
        "topk k=50 of 64 rows of 50257 (argsort's first k)",
        lambda: ops.argsort(dv, dk, 1, True),
        lambda: torch.topk(tv, 50, dim=1),
        lambda: float(np.any(dk.asnumpy() != want)),
        n=3,
    )
print("done", flush=True)
