#!/usr/bin/env python3
"""Benchmark gpumat's fused attention against PyTorch's ``scaled_dot_product_attention``.

Usage::

    python3 benchmarks/bench_attention.py --ctx gpu          # CUDA device 0 (PyTorch on cuda)
    python3 benchmarks/bench_attention.py                    # cpu (the host kernels)
    python3 benchmarks/bench_attention.py --quick --out /tmp/  # CI smoke run (small sizes)

Cases are (B, H, T, D, causal): B sequences of T tokens, H heads of D features, self-attention
(L = S = T), float32. Per case, from fresh standard-normal q, k, v (two rotated input sets):

- ``gpumat fwd`` / ``fwd+bwd``: the fused kernels themselves, :func:`gpumat.ops.attention` and
  then :func:`gpumat.ops.attention_gradient` (FlashAttention-2's tiling; Dao 2023), into
  preallocated outputs;
- ``det. fwd+bwd``: the same with :func:`gpumat.use_deterministic_algorithms` on (on CUDA the
  gradient's two-kernel path, dq without float atomics; the host has one path);
- ``F fwd+bwd``: the same through the front end (``F.scaled_dot_product_attention`` and
  ``backward`` on tensors that require gradients): adds allocation and autograd;
- ``torch fwd`` / ``fwd+bwd``: ``torch.nn.functional.scaled_dot_product_attention`` with
  PyTorch's own choice of backend (named in ``torch backend``; on a GPU in float32 that is its
  memory-efficient kernel), the backward through autograd; TF32 is left off.

``x torch`` = PyTorch's time / gpumat's (above 1: gpumat faster; the issue's GPU goal is at least
1 / 1.5 = 0.67). ``TFLOP/s`` counts the matrix products of the standard algorithm, 4·B·H·T²·D
forward and 2.5 times that for the backward (FlashAttention-2's counting, its recomputation not
counted), halved when causal. Before timing, gpumat's output and gradients are checked against a
float64 reference (PyTorch's in float64, else ``gpumat.reference``'s kernels) on the same inputs
by :func:`_common.compare`; ``rel err`` is the largest of the four ``||x - ref|| / ||ref||``
over both gradient paths. A case that fails its check is not timed (its row keeps the first
mismatch's message).

Memory (``--memory``, on by default): for T in the memory list (B = 1, H = 4, D = 64, not
causal), the allocator's peak above what was in use before a forward and backward through the
front end (``peak_bytes_in_use``; the inputs not counted), fused against the composed path
(matmul, softmax, matmul: the (T, T) weights stored; forced by a float ``attn_mask`` of zeros,
allocated before the count starts), and PyTorch's ``torch.cuda.max_memory_allocated`` on a GPU.
The fused path's extra memory grows as O(T) (its outputs, the logsumexp and the gradients), the
composed one's as O(T²).

Timing: :func:`_common.time_calls` (median of ``--repeat`` samples, device synchronized around
each). Output: a table, a JSON file and its markdown in ``benchmarks/results/`` (``--out``
elsewhere); no speed is asserted anywhere.
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np
from _common import (
    compare,
    format_table,
    header_markdown,
    optional_import,
    resolve_out,
    run_header,
    software_info,
    time_calls,
    write_results,
)

import gpumat
from gpumat import nn, ops

F = nn.functional

#: (B, H, T, D, causal) per device; the GPT-2 small shape (12 heads of 64) at several contexts.
CASES = {
    "gpu": [
        (8, 12, 256, 64, True),
        (8, 12, 1024, 64, True),
        (8, 12, 1024, 64, False),
        (4, 12, 2048, 64, True),
        (1, 12, 8192, 64, True),
        (4, 8, 1024, 128, True),
    ],
    "cpu": [
        (32, 4, 64, 32, True),  # examples/gpt.py's size
        (4, 4, 256, 64, True),
        (1, 4, 1024, 64, True),
    ],
}
QUICK_CASES = [(2, 2, 64, 32, True), (1, 3, 40, 16, False)]
MEMORY_T = {"gpu": [256, 1024, 4096], "cpu": [256, 1024], "quick": [64, 256]}
TOL = 1e-4  # float32 against float64: far above rounding, far below a wrong row


def flops(b, h, t, d, causal, backward):
    """Matrix-product FLOPs of the standard algorithm (halved when causal)."""
    f = 4.0 * b * h * t * t * d * (3.5 if backward else 1.0)
    return f / 2 if causal else f


def reference(q, k, v, g, scale, causal, torch):
    """Output and dq, dk, dv of softmax(scale q k^T) v in float64 for upstream gradient g."""
    if torch is not None:
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        f64 = {"dtype": torch.float64, "device": dev}
        ts = [torch.tensor(x, **f64, requires_grad=True) for x in (q, k, v)]
        out = torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=causal, scale=scale)
        out.backward(torch.tensor(g, **f64))
        return [x.detach().cpu().numpy() for x in (out, *(t.grad for t in ts))]
    out = np.empty((*q.shape[:2], v.shape[2] + 1))  # gpumat's numpy reference kernels, float64
    gpumat.reference.attention(q, k, v, out, scale, causal)
    dout = np.zeros(out.shape)
    dout[..., :-1] = g  # no gradient into the logsumexp column
    grads = np.empty(q.size + k.size + v.size)
    gpumat.reference.attention_gradient(q, k, v, out, dout, grads, scale, causal)
    dq, dk, dv = np.split(grads, [q.size, q.size + k.size])
    return [out[..., :-1], dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)]


def torch_backend(torch, q, causal):
    """The name of the SDPA backend PyTorch picks for these inputs (best effort)."""
    try:
        choice = torch._fused_sdp_choice(q, q, q, None, 0.0, causal)
        return torch.nn.attention.SDPBackend(choice).name.lower()
    except Exception:  # noqa: BLE001 (a private API: its absence only loses the label)
        return "unknown"


def run_case(case, ctx, torch, args, rng):
    b, h, t, d, causal = case
    scale = 1.0 / math.sqrt(d)
    n = b * h
    row = {"B": b, "H": h, "T": t, "D": d, "causal": causal}
    sets = [[rng.standard_normal((n, t, d)).astype(np.float32) for _ in range(4)] for _ in range(2)]
    # the kernels: (n, t, d) inputs, out and dout (n, t, d + 1), dqkv flat
    dev = [[gpumat.array(x, ctx) for x in s] for s in sets]
    douts = []
    for s in sets:
        gp = np.zeros((n, t, d + 1), np.float32)
        gp[..., :d] = s[3]
        douts.append(gpumat.array(gp, ctx))
    q, k, v, g = sets[0]
    want = reference(q, k, v, g, scale, causal, torch)
    checks = []
    for deterministic in (True, False):  # both gradient paths; the default (fast) one stays set
        gpumat.use_deterministic_algorithms(deterministic)
        # poisoned, so that an unwritten element fails the check
        out = gpumat.array(np.full((n, t, d + 1), np.nan, np.float32), ctx)
        dqkv = gpumat.array(np.full((3 * n * t * d,), np.nan, np.float32), ctx)
        ops.attention(dev[0][0], dev[0][1], dev[0][2], out, scale, causal)
        ops.attention_gradient(dev[0][0], dev[0][1], dev[0][2], out, douts[0], dqkv, scale, causal)
        got = out.asnumpy()[..., :d]
        grads = dqkv.asnumpy().reshape(3, n, t, d)
        checks += [compare(x, w, TOL) for x, w in zip([got, *grads], want, strict=True)]
    row["rel_err"] = max(err for _, err, _ in checks)
    row["checked_against"] = "torch float64" if torch is not None else "gpumat.reference (float64)"
    if not all(ok for ok, _, _ in checks):
        row["status"] = "FAIL"
        row["message"] = next(msg for ok, _, msg in checks if not ok)
        return row
    row["status"] = "ok"
    sync = lambda: gpumat.synchronize(ctx)  # noqa: E731
    fwd = lambda i: ops.attention(dev[i][0], dev[i][1], dev[i][2], out, scale, causal)  # noqa: E731

    def fwd_bwd(i):
        ops.attention(dev[i][0], dev[i][1], dev[i][2], out, scale, causal)
        ops.attention_gradient(dev[i][0], dev[i][1], dev[i][2], out, douts[i], dqkv, scale, causal)

    def front_end_inputs(st):
        return [gpumat.tensor(x.reshape(b, h, t, d), device=ctx) for x in st]

    tensors = [front_end_inputs(st) for st in sets]
    for st in tensors:
        for x in st[:3]:
            x.requires_grad_(True)

    def front_end(i):
        tq, tk, tv, tg = tensors[i]
        tq.grad = tk.grad = tv.grad = None
        F.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).backward(tg)

    kw = {"repeat": args.repeat, "target_ms": 20.0}
    timings = {
        "gpumat_fwd": time_calls(fwd, 2, sync, **kw),
        "gpumat_fwd_bwd": time_calls(fwd_bwd, 2, sync, **kw),
        "gpumat_frontend_fwd_bwd": time_calls(front_end, 2, sync, **kw),
    }
    gpumat.use_deterministic_algorithms(True)
    try:
        timings["gpumat_fwd_bwd_deterministic"] = time_calls(fwd_bwd, 2, sync, **kw)
    finally:
        gpumat.use_deterministic_algorithms(False)
    if torch is not None:
        tdev = "cuda" if ctx.device_type == "gpu" else "cpu"
        tsync = torch.cuda.synchronize if tdev == "cuda" else (lambda: None)
        tt = [
            [
                torch.tensor(x.reshape(b, h, t, d), device=tdev).requires_grad_(j < 3)
                for j, x in enumerate(s)
            ]
            for s in sets
        ]
        sdpa = torch.nn.functional.scaled_dot_product_attention
        row["torch_backend"] = torch_backend(torch, tt[0][0], causal)

        def tfwd(i):
            with torch.no_grad():
                sdpa(tt[i][0], tt[i][1], tt[i][2], is_causal=causal)

        def tfwd_bwd(i):
            tq, tk, tv, tg = tt[i]
            tq.grad = tk.grad = tv.grad = None
            sdpa(tq, tk, tv, is_causal=causal).backward(tg)

        timings["torch_fwd"] = time_calls(tfwd, 2, tsync, **kw)
        timings["torch_fwd_bwd"] = time_calls(tfwd_bwd, 2, tsync, **kw)
    row["timings"] = timings
    row["tflops_fwd"] = flops(b, h, t, d, causal, False) / timings["gpumat_fwd"]["ms"] / 1e9
    row["tflops_fwd_bwd"] = flops(b, h, t, d, causal, True) / timings["gpumat_fwd_bwd"]["ms"] / 1e9
    return row


def run_memory(ctx, torch, ts, rng):
    """Peak bytes above the inputs for a front-end forward and backward, fused and composed."""
    rows = []
    b, h, d = 1, 4, 64
    for t in ts:
        q, k, v, g = (rng.standard_normal((b, h, t, d)).astype(np.float32) for _ in range(4))
        row = {"B": b, "H": h, "T": t, "D": d, "input_bytes": 4 * 4 * b * h * t * d}
        for path in ("fused", "composed"):
            tq, tk, tv = (gpumat.tensor(x, device=ctx, requires_grad=True) for x in (q, k, v))
            tg = gpumat.tensor(g, device=ctx)
            mask = gpumat.zeros(t, t, device=ctx) if path == "composed" else None
            gpumat.synchronize(ctx)
            base = gpumat.memory_stats(ctx)["bytes_in_use"]
            gpumat.reset_peak_memory_stats(ctx)
            F.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask).backward(tg)
            gpumat.synchronize(ctx)
            row[f"gpumat_{path}_bytes"] = gpumat.memory_stats(ctx)["peak_bytes_in_use"] - base
            del tq, tk, tv, tg, mask
        if torch is not None and ctx.device_type == "gpu":
            tq, tk, tv = (torch.tensor(x, device="cuda", requires_grad=True) for x in (q, k, v))
            tg = torch.tensor(g, device="cuda")
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            torch.nn.functional.scaled_dot_product_attention(tq, tk, tv).backward(tg)
            torch.cuda.synchronize()
            row["torch_bytes"] = torch.cuda.max_memory_allocated() - base
            row["torch_backend"] = torch_backend(torch, tq, False)
            del tq, tk, tv, tg
        rows.append(row)
    return rows


def case_table(rows):
    def ms(r, key):
        tm = r.get("timings", {}).get(key)
        return f"{tm['ms']:.3f}" if tm else "-"

    def ratio(r, ours, theirs):
        tm = r.get("timings", {})
        return f"{tm[theirs]['ms'] / tm[ours]['ms']:.2f}x" if ours in tm and theirs in tm else "-"

    body = []
    for r in rows:
        name = f"{r['B']}x{r['H']}x{r['T']}x{r['D']}{' causal' if r['causal'] else ''}"
        if r["status"] != "ok":
            body.append([name, *["-"] * 11, f"{r['status']} {r['rel_err']:.1e}", "-"])
            continue
        body.append([
            name, ms(r, "gpumat_fwd"), ms(r, "torch_fwd"), ratio(r, "gpumat_fwd", "torch_fwd"),
            ms(r, "gpumat_fwd_bwd"), ms(r, "torch_fwd_bwd"),
            ratio(r, "gpumat_fwd_bwd", "torch_fwd_bwd"), ms(r, "gpumat_fwd_bwd_deterministic"),
            ratio(r, "gpumat_fwd_bwd_deterministic", "torch_fwd_bwd"),
            ms(r, "gpumat_frontend_fwd_bwd"),
            f"{r['tflops_fwd']:.2f}", f"{r['tflops_fwd_bwd']:.2f}", f"{r['rel_err']:.1e}",
            r.get("torch_backend", "-"),
        ])  # fmt: skip
    return format_table(
        ["B x H x T x D", "gpumat fwd ms", "torch fwd ms", "x torch", "gpumat fwd+bwd ms",
         "torch fwd+bwd ms", "x torch", "det. fwd+bwd ms", "x torch", "F fwd+bwd ms",
         "fwd TFLOP/s", "fwd+bwd TFLOP/s", "rel err", "torch backend"],
        body,
    )  # fmt: skip


def memory_table(rows):
    mib = lambda x: f"{x / 2**20:.2f}" if x is not None else "-"  # noqa: E731
    return format_table(
        ["T", "inputs MiB", "gpumat fused MiB", "gpumat composed MiB", "torch MiB"],
        [
            [r["T"], mib(r["input_bytes"]), mib(r["gpumat_fused_bytes"]),
             mib(r["gpumat_composed_bytes"]), mib(r.get("torch_bytes"))]
            for r in rows
        ],
    )  # fmt: skip


LEGEND = (
    "Times: median ms per call. x torch: PyTorch's time / gpumat's (above 1: gpumat faster). "
    "det.: with gpumat.use_deterministic_algorithms(True) (on CUDA, dq in a second kernel "
    "instead of float atomics; the other columns use the default). "
    "F: the front end (allocation and autograd included). TFLOP/s: 4 B H T^2 D forward, 3.5 times "
    "that forward and backward, halved when causal. rel err: the largest of out, dq, dk, dv "
    "against float64. Memory: peak bytes above the inputs for one forward and backward "
    "(B = 1, H = 4, D = 64).\n"
)


def main(argv=None) -> int:
    """Parse the options, run the cases and the memory rows, print the tables, write the ledger."""
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ctx", default="cpu", choices=["cpu", "gpu"], help="device (default cpu)")
    p.add_argument("--repeat", type=int, default=7, help="timed samples per row (7)")
    p.add_argument("--no-memory", dest="memory", action="store_false", help="skip the memory rows")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    p.add_argument("--out", default=None, help="JSON path or folder (default benchmarks/results)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeat = min(args.repeat, 2)
    ctx = gpumat.gpu(0) if args.ctx == "gpu" else gpumat.cpu()
    torch = optional_import("torch")
    if torch is not None and args.ctx == "gpu":
        torch.backends.cuda.matmul.allow_tf32 = False
    header = run_header("attention", args.ctx, args.quick, ["benchmarks/bench_attention.py", *argv])
    rng = np.random.default_rng(args.seed)
    cases = QUICK_CASES if args.quick else CASES[args.ctx]
    rows = []
    for case in cases:
        rows.append(run_case(case, ctx, torch, args, rng))
        print(case_table(rows[-1:]), flush=True)
    memory = []
    if args.memory:
        memory = run_memory(ctx, torch, MEMORY_T["quick" if args.quick else args.ctx], rng)
    notes = [] if torch is not None else ["PyTorch is not installed: the torch columns are empty"]
    data = {
        **header,
        "software": software_info(),
        "settings": {"cases": cases, "repeat": args.repeat, "seed": args.seed, "tolerance": TOL,
                     "memory_T": [r["T"] for r in memory]},
        "notes": notes,
        "runs": rows,
        "memory": memory,
        "complete": True,
    }  # fmt: skip
    tables = case_table(rows) + ("\n" + memory_table(memory) if memory else "")
    md = header_markdown(header, "Fused attention") + "\n" + tables + "\n" + LEGEND
    path, _ = write_results(resolve_out(args.out, "attention", header), data, md)
    print(tables + "\n" + LEGEND + f"wrote {path}")
    return 1 if any(r["status"] != "ok" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
