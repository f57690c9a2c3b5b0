#!/usr/bin/env python3
"""Benchmark every gpumat kernel: validate against float64 numpy, then time; compare with ceilings.

Usage::

    python3 benchmarks/bench_ops.py --ctx gpu                 # full run on CUDA device 0
    python3 benchmarks/bench_ops.py --ctx cpu --quick --out /tmp/ops.json   # CI smoke run

Cases come in four groups: ``seed`` (the dlsys course's test sizes, e.g. 500x700 @ 700x1000; the
group keeps the name it has in the ledger's files), ``mnist`` (the shapes of one MNIST training
step at batch 1000 of the 784-256-100-10 MLP and of logistic regression, the transposed gradient
products included), ``gpt`` (the products of one step of ``examples/gpt.py`` as
``bench_frontend.py`` runs it) and ``large`` (4096^3 matrix products, 64M-element elementwise
ops, 8192x8192 transposes, 65536x1024 softmax). A case keeps the name it has in the ledger's files
(``array_set``, ``reduce_sum_axis_zero``, ...) when the op it runs was renamed (``fill``,
``sum_to_size``), so runs compare across the ledger. ``--quick`` runs the mnist group and a
shrunk large group (1M elements, 256^3) with few repeats.

For each case, in the style of llm.c's ``dev/cuda`` benchmarks:

1. **Validate** (``validate_result``): fresh random float32 inputs (never zeros), the output
   poisoned with NaN before the call, the result compared with a float64 numpy reference by the
   relative error ``||out - ref|| / ||ref||`` (2-norm). Tolerances: 1e-6 for ops that round once
   per element, 5e-5 for sums (matmul, reductions, softmax, cross-entropy): float32 lands far
   below, while a TF32 matrix product (about 3e-4) fails. Random fills are checked by their
   range, mean and standard deviation. A case that fails is not timed, and the script exits 1.
   The reference library's result is validated the same way (this is what proves the cuBLAS
   ceiling ran in FP32, not TF32).
2. **Time** (``_common.time_calls``): median over ``--repeat`` samples of the time per call, after
   warm-up, rotating over several input/output sets (enough to span 256 MiB, at most 16) so
   repeated calls do not measure the cache. Small (MNIST-sized) cases fit in cache anyway: their
   times are dominated by the launch and call overhead, which is what training sees.

Units: times in milliseconds (ms) per call. Memory-bound ops report GB/s = bytes / time / 1e9,
counting the bytes the op must read plus the bytes it must write once (float32: 4 bytes per
element; e.g. add of n elements moves 12n bytes). Matrix products report GFLOP/s = 2*M*N*K / time
/ 1e9.

Ceilings, measured in the same run on the same device:

- ``copy``: device-to-device copy bandwidth (GB/s, bytes read + written) of a 256 MiB buffer: the
  fastest of the reference library's copy (torch ``Tensor.copy_``, CuPy ``copyto``, or
  ``numpy.copyto`` on cpu) and gpumat's own ``ops.copy``. Memory-bound cases report their GB/s as
  a percentage of it.
- ``sgemm``: FP32 matrix product, 4096^3, of the reference library (cuBLAS through torch with
  ``torch.backends.cuda.matmul.allow_tf32 = False``, or CuPy; numpy's BLAS on cpu). Matmul cases
  report their GFLOP/s as a percentage of it.

Each case is also timed with the reference library at the same shape: ``ref ms`` and ``x ref``
(reference time / our time: above 1 means gpumat is faster).

Output: a table on stdout and, with ``--out FILE`` (default ``benchmarks/results/<date>_<time>_ops_
<backend>_<device>.json``), a JSON file plus the same table as markdown (``.md`` beside it); see
``benchmarks/results/README.md``. No speed is asserted anywhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import traceback

import numpy as np
from _common import (
    OPS_LEGEND,
    compare,
    fmt_num,
    header_markdown,
    ops_table,
    optional_import,
    resolve_out,
    run_header,
    software_info,
    time_calls,
    write_results,
)

import gpumat
from gpumat import ops

TOL_POINTWISE = 1e-6  # one float32 rounding per element: relative error <= 2**-24
TOL_SUM = 5e-5  # float32 sums of up to ~64K terms; a TF32 matmul (~3e-4) fails
MiB = 1 << 20


# --------------------------------------------------------------------------------------------------
# ops: what each computes (gpumat, float64 numpy), how much work it is, how its inputs look
# --------------------------------------------------------------------------------------------------


def _strip_leading_ones(shape):
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return tuple(shape[i:])


def _op_pair(x, transposed):
    return x.T if transposed else x


def _np_softmax(x):
    z = x - x.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _np_sce(logits, labels):
    m = logits.max(axis=1, keepdims=True)
    lse = m + np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
    return np.array([np.mean(-(labels * (logits - lse)).sum(axis=1))])


def _adadelta_param64(g, param, sq, acc, p):
    """The parameter after one Adadelta step (Zeiler 2012, Algorithm 1, PyTorch's lr factor)."""
    sq = p["rho"] * sq + (1 - p["rho"]) * g * g
    return param - p["lr"] * np.sqrt(acc + p["eps"]) / np.sqrt(sq + p["eps"]) * g


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One kernel. ``ours(ins, out, p)`` runs gpumat; ``ref64(ins, p)`` is the float64 result.

    ``inputs`` says how to draw each input: "signed" (magnitudes in [0.1, 1), random signs),
    "positive" (in [0.1, 1)), "coarse" (integers -2..2: many equal pairs), "labels" (class
    numbers 0 .. params["classes"] - 1), "logits" (signed, times 3), "onehot" (one 1 per row).
    ``inplace``: the output is input 1
    (axpy). ``work(in_shapes, out_shape, p)`` gives ("bytes", n) or ("flops", n).
    """

    ours: object
    ref64: object
    work: object
    tol: float | None
    inputs: tuple = ("signed",)
    inplace: bool = False
    random: str | None = None  # "uniform" / "normal": validated by statistics


def _n(shape):
    return int(np.prod(shape, dtype=np.int64))


def _bytes(factor_in, factor_out):
    # factor_* = how many arrays of the input / output size are read / written
    return lambda ins, out, p: ("bytes", 4 * (factor_in * _n(ins[0]) + factor_out * _n(out)))


OPS = {
    "fill": OpSpec(
        ours=lambda ins, out, p: ops.fill(out, p["value"]),
        ref64=lambda ins, p: np.full(p["shape"], p["value"]),
        work=lambda ins, out, p: ("bytes", 4 * _n(out)),
        tol=TOL_POINTWISE,
        inputs=(),
    ),
    "copy": OpSpec(
        ours=lambda ins, out, p: ops.copy(ins[0], out),
        ref64=lambda ins, p: ins[0],
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
    ),
    "add": OpSpec(
        ours=lambda ins, out, p: ops.add(ins[0], ins[1], out),
        ref64=lambda ins, p: ins[0] + ins[1],
        work=_bytes(2, 1),
        tol=TOL_POINTWISE,
        inputs=("signed", "signed"),
    ),
    "multiply": OpSpec(
        ours=lambda ins, out, p: ops.mul(ins[0], ins[1], out),
        ref64=lambda ins, p: ins[0] * ins[1],
        work=_bytes(2, 1),
        tol=TOL_POINTWISE,
        inputs=("signed", "signed"),
    ),
    "add_const": OpSpec(
        ours=lambda ins, out, p: ops.add_scalar(ins[0], p["value"], out),
        ref64=lambda ins, p: ins[0] + p["value"],
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
    ),
    "multiply_const": OpSpec(
        ours=lambda ins, out, p: ops.mul_scalar(ins[0], p["value"], out),
        ref64=lambda ins, p: ins[0] * p["value"],
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
    ),
    "relu": OpSpec(
        ours=lambda ins, out, p: ops.relu(ins[0], out),
        ref64=lambda ins, p: np.maximum(ins[0], 0.0),
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
    ),
    "relu_gradient": OpSpec(
        ours=lambda ins, out, p: ops.relu_gradient(ins[0], ins[1], out),
        ref64=lambda ins, p: np.where(ins[0] > 0, ins[1], 0.0),
        work=_bytes(2, 1),
        tol=TOL_POINTWISE,
        inputs=("signed", "signed"),
    ),
    "axpy": OpSpec(  # y += alpha * x; the output is y (input 1)
        ours=lambda ins, out, p: ops.axpy(p["alpha"], ins[0], ins[1]),
        ref64=lambda ins, p: ins[1] + p["alpha"] * ins[0],
        work=lambda ins, out, p: ("bytes", 4 * 3 * _n(ins[0])),
        tol=TOL_POINTWISE,
        inputs=("signed", "signed"),
        inplace=True,
    ),
    "exp": OpSpec(
        ours=lambda ins, out, p: ops.exp(ins[0], out),
        ref64=lambda ins, p: np.exp(ins[0]),
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
    ),
    "tanh": OpSpec(
        ours=lambda ins, out, p: ops.tanh(ins[0], out),
        ref64=lambda ins, p: np.tanh(ins[0]),
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
    ),
    "sigmoid": OpSpec(
        ours=lambda ins, out, p: ops.sigmoid(ins[0], out),
        ref64=lambda ins, p: 1.0 / (1.0 + np.exp(-ins[0])),
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
    ),
    "log": OpSpec(
        ours=lambda ins, out, p: ops.log(ins[0], out),
        ref64=lambda ins, p: np.log(ins[0]),
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
        inputs=("positive",),
    ),
    "divide": OpSpec(
        ours=lambda ins, out, p: ops.div(ins[0], ins[1], out),
        ref64=lambda ins, p: ins[0] / ins[1],
        work=_bytes(2, 1),
        tol=TOL_POINTWISE,
        inputs=("signed", "signed"),
    ),
    "eq": OpSpec(
        ours=lambda ins, out, p: ops.eq(ins[0], ins[1], out),
        ref64=lambda ins, p: (ins[0] == ins[1]).astype(np.float64),
        work=_bytes(2, 1),
        tol=TOL_POINTWISE,
        inputs=("coarse", "coarse"),
    ),
    "one_hot": OpSpec(
        ours=lambda ins, out, p: ops.one_hot(ins[0], out),
        ref64=lambda ins, p: (ins[0][:, None] == np.arange(p["classes"])[None, :]).astype(
            np.float64
        ),
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
        inputs=("labels",),
    ),
    # One tensor's Adadelta step in place: inputs (grad, param, square_avg, acc_delta), the
    # output is the param (input 1); reads 4 arrays and writes 3.
    "adadelta": OpSpec(
        ours=lambda ins, out, p: ops.adadelta_update_multi(
            [ins[1]], [ins[0]], [ins[2]], [ins[3]], p["lr"], p["rho"], p["eps"]
        ),
        ref64=lambda ins, p: _adadelta_param64(*ins, p),
        work=lambda ins, out, p: ("bytes", 4 * 7 * _n(ins[0])),
        tol=TOL_POINTWISE,
        inputs=("signed", "signed", "positive", "positive"),
        inplace=True,
    ),
    "transpose": OpSpec(
        ours=lambda ins, out, p: ops.transpose(ins[0], out),
        ref64=lambda ins, p: ins[0].T,
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
    ),
    "broadcast_to": OpSpec(
        ours=lambda ins, out, p: ops.broadcast_to(ins[0], out),
        ref64=lambda ins, p: np.broadcast_to(
            ins[0].reshape(_strip_leading_ones(ins[0].shape)), p["shape"]
        ),
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
    ),
    "sum_to_size": OpSpec(
        ours=lambda ins, out, p: ops.sum_to_size(ins[0], out),
        ref64=lambda ins, p: ins[0].reshape(-1, _n(p["shape"])).sum(axis=0).reshape(p["shape"]),
        work=_bytes(1, 1),
        tol=TOL_SUM,
    ),
    # numpy's broadcasting, the repeated operand read in place: (rows, cols) + (cols,) or
    # (rows, 1); the same bytes as a same-shape add's, less the repeated operand's
    "broadcast_add": OpSpec(
        ours=lambda ins, out, p: ops.broadcast_binary(ins[0], ins[1], out, "add"),
        ref64=lambda ins, p: ins[0] + ins[1],
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
        inputs=("signed", "signed"),
    ),
    # a 2-D transpose by the strided copy (the copy behind permute / transpose views)
    "as_strided": OpSpec(
        ours=lambda ins, out, p: ops.as_strided(ins[0], out, p["stride"], 0),
        ref64=lambda ins, p: ins[0].T,
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
    ),
    # the gradient of a broadcast: (rows, cols) summed to (cols,)
    "sum_to": OpSpec(
        ours=lambda ins, out, p: ops.sum_to(ins[0], out),
        ref64=lambda ins, p: ins[0].sum(axis=0),
        work=_bytes(1, 1),
        tol=TOL_SUM,
    ),
    "argmax": OpSpec(
        ours=lambda ins, out, p: ops.argmax(ins[0], out, p["axis"]),
        ref64=lambda ins, p: np.argmax(ins[0], axis=p["axis"]).astype(np.float64),
        work=_bytes(1, 1),
        tol=TOL_POINTWISE,
    ),
    "matmul": OpSpec(
        ours=lambda ins, out, p: ops.matmul(ins[0], ins[1], out, p["ta"], p["tb"]),
        ref64=lambda ins, p: _op_pair(ins[0], p["ta"]) @ _op_pair(ins[1], p["tb"]),
        work=lambda ins, out, p: ("flops", 2 * p["m"] * p["n"] * p["k"]),
        tol=TOL_SUM,
        inputs=("signed", "signed"),
    ),
    "bmm": OpSpec(
        ours=lambda ins, out, p: ops.bmm(ins[0], ins[1], out),
        ref64=lambda ins, p: np.matmul(ins[0], ins[1]),
        work=lambda ins, out, p: ("flops", 2 * p["batch"] * p["m"] * p["n"] * p["k"]),
        tol=TOL_SUM,
        inputs=("signed", "signed"),
    ),
    "softmax": OpSpec(
        ours=lambda ins, out, p: ops.softmax(ins[0], out),
        ref64=lambda ins, p: _np_softmax(ins[0]),
        work=_bytes(1, 1),
        tol=TOL_SUM,
        inputs=("logits",),
    ),
    "cross_entropy": OpSpec(
        ours=lambda ins, out, p: ops.cross_entropy(ins[0], ins[1], out),
        ref64=lambda ins, p: _np_sce(ins[0], ins[1]),
        work=lambda ins, out, p: ("bytes", 4 * (2 * _n(ins[0]) + 1)),
        tol=TOL_SUM,
        inputs=("logits", "onehot"),
    ),
    "uniform": OpSpec(
        ours=lambda ins, out, p: ops.uniform(out, 0.0, 1.0, seed=p.get("seed", 1)),
        ref64=None,
        work=lambda ins, out, p: ("bytes", 4 * _n(out)),
        tol=None,
        inputs=(),
        random="uniform",
    ),
    "normal": OpSpec(
        ours=lambda ins, out, p: ops.normal(out, 0.0, 1.0, seed=p.get("seed", 1)),
        ref64=None,
        work=lambda ins, out, p: ("bytes", 4 * _n(out)),
        tol=None,
        inputs=(),
        random="normal",
    ),
}


# bench_ops op key -> the gpumat.ops function it times
OP_FUNCTION = {
    "fill": "fill",
    "copy": "copy",
    "add": "add",
    "multiply": "mul",
    "add_const": "add_scalar",
    "multiply_const": "mul_scalar",
    "relu": "relu",
    "relu_gradient": "relu_gradient",
    "axpy": "axpy",
    "exp": "exp",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "log": "log",
    "divide": "div",
    "eq": "eq",
    "one_hot": "one_hot",
    "adadelta": "adadelta_update_multi",
    "transpose": "transpose",
    "broadcast_to": "broadcast_to",
    "sum_to_size": "sum_to_size",
    "broadcast_add": "broadcast_binary",
    "as_strided": "as_strided",
    "sum_to": "sum_to",
    "argmax": "argmax",
    "matmul": "matmul",
    "bmm": "bmm",
    "softmax": "softmax",
    "cross_entropy": "cross_entropy",
    "uniform": "uniform",
    "normal": "normal",
}


def unbenchmarked_ops() -> list[str]:
    """Functions of gpumat.ops that no case times (printed as a note, so new kernels get cases)."""
    return sorted(set(ops.__all__) - set(OP_FUNCTION.values()))


@dataclasses.dataclass
class Case:
    name: str
    group: str
    op: str
    in_shapes: list
    out_shape: tuple
    params: dict
    label: str


def _shape_str(shape):
    return "x".join(str(d) for d in shape)


def _unary(name, group, op, shape, **params):
    return Case(name, group, op, [shape], shape, {"shape": shape, **params}, _shape_str(shape))


def _binary(name, group, op, shape, **params):
    return Case(
        name, group, op, [shape, shape], shape, {"shape": shape, **params}, _shape_str(shape)
    )


def _matmul(group, m, n, k, ta=False, tb=False, note=""):
    a = (k, m) if ta else (m, k)
    b = (n, k) if tb else (k, n)
    flag = ("T" if ta else "N") + ("T" if tb else "N")
    label = f"{_shape_str(a)}{'.T' if ta else ''} @ {_shape_str(b)}{'.T' if tb else ''}"
    name = f"matmul_{flag}_{m}x{n}x{k}" + (f"_{note}" if note else "")
    params = {"ta": ta, "tb": tb, "m": m, "n": n, "k": k, "shape": (m, n)}
    return Case(name, group, "matmul", [a, b], (m, n), params, label)


def _bmm(group, batch, m, n, k):
    """(batch, m, k) @ (batch, k, n): one batched product (an attention block's shapes)."""
    a, b = (batch, m, k), (batch, k, n)
    params = {"batch": batch, "m": m, "n": n, "k": k, "shape": (batch, m, n)}
    label = f"{_shape_str(a)} @ {_shape_str(b)}"
    return Case(f"bmm_{batch}x{m}x{n}x{k}", group, "bmm", [a, b], (batch, m, n), params, label)


def _special(name, group, op, in_shape, out_shape, **params):
    label = f"{_shape_str(in_shape)} -> {_shape_str(out_shape)}"
    return Case(name, group, op, [in_shape], out_shape, {"shape": out_shape, **params}, label)


def _set(name, group, shape, value):
    return Case(name, group, "fill", [], shape, {"shape": shape, "value": value}, _shape_str(shape))


def _sce(name, group, shape):
    return Case(
        name,
        group,
        "cross_entropy",
        [shape, shape],
        (1,),
        {"shape": (1,)},
        _shape_str(shape),
    )


def _one_hot(name, group, rows, classes):
    label = f"{rows} -> {rows}x{classes}"
    params = {"shape": (rows, classes), "classes": classes}
    return Case(name, group, "one_hot", [(rows,)], (rows, classes), params, label)


def _adadelta(name, group, shape):
    params = {"shape": shape, "lr": 1.0, "rho": 0.9, "eps": 1e-6}
    return Case(name, group, "adadelta", [shape] * 4, shape, params, _shape_str(shape))


def _random(name, group, op, shape):
    return Case(name, group, op, [], shape, {"shape": shape, "seed": 7}, _shape_str(shape))


def build_cases(quick: bool) -> list[Case]:
    """The case list. Batch 1000; MLP 784-256-100-10 (x @ W1, relu, @ W2, relu, @ W3) and logistic
    regression 784-10; the backward products are dW = X.T @ dY (TN) and dX = dY @ W.T (NT)."""
    cases: list[Case] = []
    if not quick:
        s = "seed"  # the dlsys course's test sizes (the ledger's group name)
        cases += [
            _set("array_set", s, (500, 200), 0.25),
            _special("broadcast_to", s, "broadcast_to", (200, 300), (130, 200, 300)),
            _special("reduce_sum_axis_zero", s, "sum_to_size", (500, 200, 100), (200, 100)),
            _binary("add", s, "add", (500, 200)),
            _unary("add_const", s, "add_const", (500, 200), value=0.5),
            _binary("multiply", s, "multiply", (500, 200)),
            _unary("multiply_const", s, "multiply_const", (500, 200), value=-1.5),
            *[_matmul(s, 500, 1000, 700, ta, tb) for ta in (False, True) for tb in (False, True)],
            _unary("relu", s, "relu", (2000, 2500)),
            _binary("relu_gradient", s, "relu_gradient", (2000, 2500)),
            _unary("softmax", s, "softmax", (500, 1000)),
            _sce("softmax_cross_entropy", s, (500, 1000)),
        ]
    g = "mnist"
    b = 1000
    cases += [
        _matmul(g, b, 256, 784, note="mlp_fwd1"),
        _matmul(g, b, 100, 256, note="mlp_fwd2"),
        _matmul(g, b, 10, 100, note="mlp_fwd3"),
        _matmul(g, b, 10, 784, note="logreg_fwd"),
        _matmul(g, 784, 256, b, ta=True, note="dW1"),
        _matmul(g, 256, 100, b, ta=True, note="dW2"),
        _matmul(g, 100, 10, b, ta=True, note="dW3"),
        _matmul(g, 784, 10, b, ta=True, note="logreg_dW"),
        _matmul(g, b, 256, 100, tb=True, note="dH1"),
        _matmul(g, b, 100, 10, tb=True, note="dH2"),
        _special("broadcast_bias", g, "broadcast_to", (256,), (b, 256)),
        _special("reduce_bias_grad", g, "sum_to_size", (b, 256), (256,)),
        _unary("relu", g, "relu", (b, 256)),
        _binary("relu_gradient", g, "relu_gradient", (b, 256)),
        _unary("softmax", g, "softmax", (b, 10)),
        _sce("softmax_cross_entropy", g, (b, 10)),
        _special("argmax_predictions", g, "argmax", (b, 10), (b,), axis=1),
        _one_hot("one_hot_labels", g, b, 10),
        _adadelta("adadelta_W1", g, (784, 256)),
        Case(
            "sgd_axpy_W1",
            g,
            "axpy",
            [(784, 256), (784, 256)],
            (784, 256),
            {"alpha": -0.01},
            "784x256",
        ),
    ]
    if not quick:
        # examples/gpt.py's products at bench_frontend.py's size (2048 tokens of 128 features):
        # each linear layer's forward (x @ W.T), input gradient (dy @ W) and weight gradient
        # (dy.T @ x), for the q/k/v (384), projection (128), MLP (512 and back) and head (65)
        g = "gpt"
        t = 2048
        for n, k in ((384, 128), (128, 128), (512, 128), (128, 512), (65, 128)):
            cases += [
                _matmul(g, t, n, k, tb=True, note="gpt_fwd"),
                _matmul(g, t, k, n, note="gpt_dx"),
                _matmul(g, n, k, t, ta=True, note="gpt_dW"),
            ]
        # its logits' softmax and loss (65 characters), and the pointwise functions of
        # recurrent and gated layers at its MLP's width (LSTM / GRU gates, SiLU)
        cases += [
            _unary("softmax", g, "softmax", (t, 65)),
            _sce("softmax_cross_entropy", g, (t, 65)),
            _unary("exp", g, "exp", (t, 512)),
            _unary("tanh", g, "tanh", (t, 512)),
            _unary("sigmoid", g, "sigmoid", (t, 512)),
        ]
    g = "large"
    rows, cols = (1024, 1024) if quick else (8192, 8192)  # 1M or 64M elements
    big = (rows, cols)
    mm = 256 if quick else 4096
    soft = (1024, 1024) if quick else (65536, 1024)
    cases += [
        _unary("copy", g, "copy", big),
        _set("array_set", g, big, 0.25),
        _binary("add", g, "add", big),
        _binary("multiply", g, "multiply", big),
        _unary("add_const", g, "add_const", big, value=0.5),
        _unary("multiply_const", g, "multiply_const", big, value=-1.5),
        _unary("relu", g, "relu", big),
        _binary("relu_gradient", g, "relu_gradient", big),
        Case("axpy", g, "axpy", [big, big], big, {"alpha": -0.01}, _shape_str(big)),
        _adadelta("adadelta", g, big),
        _unary("exp", g, "exp", big),
        _unary("tanh", g, "tanh", big),
        _unary("sigmoid", g, "sigmoid", big),
        _unary("log", g, "log", big),
        _binary("divide", g, "divide", big),
        _binary("eq", g, "eq", big),
        _unary("transpose", g, "transpose", big),
        _special("broadcast_to", g, "broadcast_to", (cols,), big),
        Case(
            "broadcast_add_row",
            g,
            "broadcast_add",
            [big, (cols,)],
            big,
            {"shape": big},
            f"{_shape_str(big)} + {cols}",
        ),
        Case(
            "broadcast_add_column",
            g,
            "broadcast_add",
            [big, (rows, 1)],
            big,
            {"shape": big},
            f"{_shape_str(big)} + {rows}x1",
        ),
        _special("transpose_strided", g, "as_strided", big, big[::-1], stride=(1, cols)),
        _special("sum_to_rows", g, "sum_to", big, (cols,)),
        _special("reduce_sum_axis_zero", g, "sum_to_size", big, (cols,)),
        _special("argmax_rows", g, "argmax", big, (rows,), axis=1),
        _special("argmax_columns", g, "argmax", big, (cols,), axis=0),
        _one_hot("one_hot", g, rows, cols),
        _unary("softmax", g, "softmax", soft),
        _sce("softmax_cross_entropy", g, soft),
        _random("random_uniform", g, "uniform", big),
        _random("random_normal", g, "normal", big),
        *[_matmul(g, mm, mm, mm, ta, tb) for ta in (False, True) for tb in (False, True)],
        _bmm(g, 64, 128, 128, 64),  # (64, 128, 64) @ (64, 64, 128), also in --quick
    ]
    for c in cases:
        if c.op == "transpose":
            c.out_shape = c.in_shapes[0][::-1]
            c.params["shape"] = c.out_shape
    return cases


# --------------------------------------------------------------------------------------------------
# reference libraries: numpy on cpu; torch (preferred) or CuPy on gpu
# --------------------------------------------------------------------------------------------------


class NumpyLike:
    """numpy or CuPy: the same calls, with ``out=`` wherever the library offers it."""

    def __init__(self, xp, name):
        self.xp = xp
        self.name = name
        self.version = xp.__version__
        self.is_gpu = xp is not np
        self._rng = np.random.default_rng(0) if xp is np else xp.random.default_rng(0)

    def sync(self):
        if self.is_gpu:
            self.xp.cuda.Device().synchronize()

    def asarray(self, a):
        return self.xp.asarray(a)

    def to_numpy(self, a):
        return self.xp.asnumpy(a) if self.is_gpu else np.asarray(a)

    def random(self, shape, low, high):
        u = self._rng.random(shape, dtype=np.float32)
        return u * np.float32(high - low) + np.float32(low)

    def empty(self, shape):
        return self.xp.empty(shape, dtype=np.float32)

    def op(self, name):
        xp = self.xp
        table = {
            "fill": lambda ins, out, p: out.fill(p["value"]),
            "copy": lambda ins, out, p: xp.copyto(out, ins[0]),
            "add": lambda ins, out, p: xp.add(ins[0], ins[1], out=out),
            "multiply": lambda ins, out, p: xp.multiply(ins[0], ins[1], out=out),
            "add_const": lambda ins, out, p: xp.add(ins[0], np.float32(p["value"]), out=out),
            "multiply_const": lambda ins, out, p: xp.multiply(
                ins[0], np.float32(p["value"]), out=out
            ),
            "relu": lambda ins, out, p: xp.maximum(ins[0], np.float32(0), out=out),
            "relu_gradient": lambda ins, out, p: xp.multiply(ins[1], ins[0] > 0, out=out),
            "axpy": self._axpy,
            "adadelta": self._adadelta,
            "exp": lambda ins, out, p: xp.exp(ins[0], out=out),
            "tanh": lambda ins, out, p: xp.tanh(ins[0], out=out),
            "sigmoid": self._sigmoid,
            "log": lambda ins, out, p: xp.log(ins[0], out=out),
            "divide": lambda ins, out, p: xp.divide(ins[0], ins[1], out=out),
            "eq": lambda ins, out, p: xp.equal(ins[0], ins[1], out=out, casting="unsafe"),
            "one_hot": lambda ins, out, p: xp.equal(
                ins[0][:, None], xp.arange(p["classes"])[None, :], out=out, casting="unsafe"
            ),
            "transpose": lambda ins, out, p: xp.copyto(out, ins[0].T),
            "broadcast_to": lambda ins, out, p: xp.copyto(
                out, ins[0].reshape(_strip_leading_ones(ins[0].shape))
            ),
            "sum_to_size": lambda ins, out, p: xp.sum(
                ins[0].reshape(-1, out.size), axis=0, out=out.reshape(-1)
            ),
            "broadcast_add": lambda ins, out, p: xp.add(ins[0], ins[1], out=out),
            "as_strided": lambda ins, out, p: xp.copyto(out, ins[0].T),
            "sum_to": lambda ins, out, p: xp.sum(ins[0], axis=0, out=out),
            "argmax": lambda ins, out, p: out.__setitem__(
                Ellipsis, xp.argmax(ins[0], axis=p["axis"])
            ),
            "matmul": lambda ins, out, p: xp.matmul(
                _op_pair(ins[0], p["ta"]), _op_pair(ins[1], p["tb"]), out=out
            ),
            "bmm": lambda ins, out, p: xp.matmul(ins[0], ins[1], out=out),
            "softmax": self._softmax,
            "cross_entropy": self._sce,
            "uniform": lambda ins, out, p: self._rng.random(out.shape, dtype=np.float32, out=out),
            "normal": lambda ins, out, p: self._rng.standard_normal(
                out.shape, dtype=np.float32, out=out
            ),
        }
        return table.get(name)

    def _axpy(self, ins, out, p):
        ins[1] += np.float32(p["alpha"]) * ins[0]

    def _adadelta(self, ins, out, p):
        xp = self.xp
        g, param, sq, acc = ins
        sq *= np.float32(p["rho"])
        sq += np.float32(1 - p["rho"]) * g * g
        d = xp.sqrt(acc + np.float32(p["eps"])) / xp.sqrt(sq + np.float32(p["eps"])) * g
        acc *= np.float32(p["rho"])
        acc += np.float32(1 - p["rho"]) * d * d
        param -= np.float32(p["lr"]) * d

    def _sigmoid(self, ins, out, p):  # numpy has none: 1 / (1 + e^-x), in place in out
        xp = self.xp
        xp.negative(ins[0], out=out)
        xp.exp(out, out=out)
        out += 1
        xp.reciprocal(out, out=out)

    def _softmax(self, ins, out, p):
        xp = self.xp
        xp.subtract(ins[0], ins[0].max(axis=1, keepdims=True), out=out)
        xp.exp(out, out=out)
        out /= out.sum(axis=1, keepdims=True)

    def _sce(self, ins, out, p):
        xp = self.xp
        x, y = ins
        m = x.max(axis=1, keepdims=True)
        lse = m + xp.log(xp.exp(x - m).sum(axis=1, keepdims=True))
        out[...] = -(y * (x - lse)).sum(axis=1).mean()


class Torch:
    """PyTorch on CUDA, FP32 everywhere (TF32 off), kernels on torch's current stream."""

    def __init__(self, torch):
        self.torch = torch
        self.name = "torch"
        self.version = torch.__version__
        self.is_gpu = True
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        self.device = torch.device("cuda", 0)
        self._gen = torch.Generator(device=self.device)
        self._gen.manual_seed(0)

    def sync(self):
        self.torch.cuda.synchronize(self.device)

    def asarray(self, a):
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def to_numpy(self, a):
        return a.detach().cpu().numpy()

    def random(self, shape, low, high):
        t = self.torch.empty(shape, dtype=self.torch.float32, device=self.device)
        return t.uniform_(low, high, generator=self._gen)

    def empty(self, shape):
        return self.torch.empty(shape, dtype=self.torch.float32, device=self.device)

    def op(self, name):
        torch = self.torch
        table = {
            "fill": lambda ins, out, p: out.fill_(p["value"]),
            "copy": lambda ins, out, p: out.copy_(ins[0]),
            "add": lambda ins, out, p: torch.add(ins[0], ins[1], out=out),
            "multiply": lambda ins, out, p: torch.mul(ins[0], ins[1], out=out),
            "add_const": lambda ins, out, p: torch.add(ins[0], p["value"], out=out),
            "multiply_const": lambda ins, out, p: torch.mul(ins[0], p["value"], out=out),
            "relu": lambda ins, out, p: torch.clamp(ins[0], min=0.0, out=out),
            # what torch's own relu backward runs
            "relu_gradient": lambda ins, out, p: torch.ops.aten.threshold_backward(
                ins[1], ins[0], 0.0
            ),
            "axpy": lambda ins, out, p: ins[1].add_(ins[0], alpha=p["alpha"]),
            "adadelta": self._adadelta,
            "exp": lambda ins, out, p: torch.exp(ins[0], out=out),
            "tanh": lambda ins, out, p: torch.tanh(ins[0], out=out),
            "sigmoid": lambda ins, out, p: torch.sigmoid(ins[0], out=out),
            "log": lambda ins, out, p: torch.log(ins[0], out=out),
            "divide": lambda ins, out, p: torch.div(ins[0], ins[1], out=out),
            "eq": lambda ins, out, p: torch.eq(ins[0], ins[1], out=out),
            # torch's one_hot takes int64 labels (the conversion is part of the timed call)
            "one_hot": lambda ins, out, p: torch.nn.functional.one_hot(ins[0].long(), p["classes"]),
            "transpose": lambda ins, out, p: out.copy_(ins[0].T),
            "broadcast_to": lambda ins, out, p: out.copy_(
                ins[0].reshape(_strip_leading_ones(tuple(ins[0].shape)))
            ),
            "sum_to_size": lambda ins, out, p: torch.sum(
                ins[0].reshape(-1, out.numel()), dim=0, out=out.view(-1)
            ),
            "broadcast_add": lambda ins, out, p: torch.add(ins[0], ins[1], out=out),
            "as_strided": lambda ins, out, p: out.copy_(ins[0].T),
            "sum_to": lambda ins, out, p: torch.sum(ins[0], dim=0, out=out),
            "argmax": lambda ins, out, p: torch.argmax(ins[0], dim=p["axis"]),
            "matmul": lambda ins, out, p: torch.matmul(
                _op_pair(ins[0], p["ta"]), _op_pair(ins[1], p["tb"]), out=out
            ),
            "bmm": lambda ins, out, p: torch.bmm(ins[0], ins[1], out=out),
            "softmax": lambda ins, out, p: torch.softmax(ins[0], dim=1),
            "cross_entropy": lambda ins, out, p: torch.nn.functional.cross_entropy(
                ins[0], ins[1]
            ).reshape(1),
            "uniform": lambda ins, out, p: out.uniform_(0.0, 1.0, generator=self._gen),
            "normal": lambda ins, out, p: out.normal_(0.0, 1.0, generator=self._gen),
        }
        return table.get(name)

    @staticmethod
    def _adadelta(ins, out, p):
        """torch.optim.Adadelta's single-tensor step (torch/optim/adadelta.py), on the tensors."""
        g, param, sq, acc = ins
        rho, eps = p["rho"], p["eps"]
        sq.mul_(rho).addcmul_(g, g, value=1 - rho)
        delta = acc.add(eps).sqrt_().div_(sq.add(eps).sqrt_()).mul_(g)
        acc.mul_(rho).addcmul_(delta, delta, value=1 - rho)
        param.add_(delta, alpha=-p["lr"])


def pick_reference(ctx_name: str, wanted: str):
    """The reference library: numpy on cpu; torch, else CuPy, on gpu (None if neither)."""
    if ctx_name == "cpu":
        return NumpyLike(np, "numpy")
    if wanted in ("auto", "torch"):
        torch = optional_import("torch")
        if torch is not None and torch.cuda.is_available():
            return Torch(torch)
        if wanted == "torch":
            return None
    if wanted in ("auto", "cupy"):
        cupy = optional_import("cupy")
        if cupy is not None:
            try:
                if cupy.cuda.runtime.getDeviceCount() > 0:
                    return NumpyLike(cupy, "cupy")
            except Exception:  # noqa: BLE001 (no usable device: no reference)
                pass
    return None


# --------------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------------


# The range of each kind of input in the timed sets (uniform, drawn on the device; the timed
# kernels' work does not depend on the values, so "coarse" and "labels" inputs need not be
# integers there; every case has at least 10 classes).
INPUT_RANGES = {
    "signed": (-1.0, 1.0),
    "positive": (0.1, 1.0),
    "coarse": (-2.0, 2.0),
    "labels": (0.0, 10.0),
    "logits": (-3.0, 3.0),
    "onehot": (0.0, 1.0),
}


def draw_inputs(spec: OpSpec, shapes, rng, params=None) -> list[np.ndarray]:
    """Fresh float32 inputs: magnitudes in [0.1, 1) with random signs (never zero) or positive,
    logits times 3, or one-hot rows. Drawn in float32, so 64M-element inputs take a fraction of a
    second."""
    out = []
    for j, kind in enumerate(spec.inputs):
        shape = shapes[j]
        if kind == "coarse":
            out.append(rng.integers(-2, 3, size=shape).astype(np.float32))
            continue
        if kind == "labels":
            out.append(rng.integers(0, params["classes"], size=shape).astype(np.float32))
            continue
        if kind == "onehot":
            rows, cols = shape
            a = np.zeros(shape, np.float32)
            a[np.arange(rows), rng.integers(0, cols, size=rows)] = 1.0
        else:
            a = rng.random(shape, dtype=np.float32)
            a *= np.float32(0.9)
            a += np.float32(0.1)
            if kind != "positive":
                a[rng.random(shape, dtype=np.float32) < 0.5] *= np.float32(-1.0)
            if kind == "logits":
                a *= np.float32(3.0)
        out.append(a)
    return out


def check_random(got: np.ndarray, kind: str) -> tuple[bool, str]:
    got = np.asarray(got, dtype=np.float64).ravel()
    n = got.size
    if not np.all(np.isfinite(got)):
        return False, f"{int((~np.isfinite(got)).sum())} elements not finite (unwritten?)"
    mean, std = float(got.mean()), float(got.std())
    if kind == "uniform":
        exp_mean, exp_std = 0.5, math.sqrt(1 / 12)
        if got.min() < 0.0 or got.max() >= 1.0:
            return False, f"values outside [0, 1): min {got.min()}, max {got.max()}"
    else:
        exp_mean, exp_std = 0.0, 1.0
    # six standard errors, plus float32 slack
    tol_mean = 6 * exp_std / math.sqrt(n) + 1e-6
    tol_std = 6 * exp_std / math.sqrt(2 * n) + 1e-6
    if abs(mean - exp_mean) > tol_mean or abs(std - exp_std) > tol_std:
        return False, f"mean {mean:.6g} (want {exp_mean}), std {std:.6g} (want {exp_std:.6g})"
    return True, f"mean {mean:.5f}, std {std:.5f}"


# --------------------------------------------------------------------------------------------------
# running one case
# --------------------------------------------------------------------------------------------------


class Runner:
    def __init__(self, ctx, lib, args):
        self.ctx = ctx
        self.lib = lib
        self.args = args
        self.rng = np.random.default_rng(args.seed)
        self.rotation_bytes = (16 if args.quick else 256) * MiB
        self.max_sets = 4 if args.quick else 16
        self.timing = dict(
            repeat=args.repeat,
            warmup=1 if args.quick else 3,
            target_ms=1.0 if args.quick else 5.0,
        )

    def sync(self):
        gpumat.synchronize(self.ctx)

    def n_sets(self, case: Case) -> int:
        set_bytes = 4 * (sum(_n(s) for s in case.in_shapes) + _n(case.out_shape))
        if set_bytes >= self.rotation_bytes:
            return 1
        return int(min(self.max_sets, max(2, math.ceil(self.rotation_bytes / set_bytes))))

    # -- gpumat -----------------------------------------------------------------------------------

    def _ours_sets(self, case, spec, n):
        sets = []
        for s in range(n):
            ins = []
            for j, kind in enumerate(spec.inputs):
                shape = case.in_shapes[j]
                a = gpumat.empty(shape, self.ctx)
                low, high = INPUT_RANGES[kind]
                ops.uniform(a, low, high, seed=1000 * s + j + 1)
                ins.append(a)
            out = ins[1] if spec.inplace else gpumat.empty(case.out_shape, self.ctx)
            sets.append((ins, out))
        return sets

    def validate_ours(self, case, spec, ins_np, ref):
        ins = [gpumat.array(a, self.ctx) for a in ins_np]
        if spec.inplace:
            out = ins[1]
        else:
            out = gpumat.array(np.full(case.out_shape, np.nan, np.float32), self.ctx)
        spec.ours(ins, out, case.params)
        got = out.asnumpy()
        if spec.random:
            ok, msg = check_random(got, spec.random)
            return ok, None, msg
        return compare(got, ref, spec.tol)

    # -- reference library ------------------------------------------------------------------------

    def _lib_sets(self, case, spec, n):
        lib = self.lib
        sets = []
        for _ in range(n):
            ins = []
            for j, kind in enumerate(spec.inputs):
                shape = case.in_shapes[j]
                low, high = INPUT_RANGES[kind]
                ins.append(lib.random(shape, low, high))
            out = ins[1] if spec.inplace else lib.empty(case.out_shape)
            sets.append((ins, out))
        return sets

    def validate_lib(self, case, spec, fn, ins_np, ref):
        lib = self.lib
        ins = [lib.asarray(a) for a in ins_np]
        if spec.inplace:
            out = ins[1]
        else:
            out = lib.empty(case.out_shape)
            out[...] = float("nan")
        res = fn(ins, out, case.params)
        got = lib.to_numpy(out if res is None or spec.inplace or res is out else res)
        if spec.random:
            ok, msg = check_random(got, spec.random)
            return ok, None, msg
        return compare(got, ref, spec.tol)

    # -- the case ---------------------------------------------------------------------------------

    def run(self, case: Case, ceilings: dict) -> dict:
        spec = OPS[case.op]
        kind, amount = spec.work(case.in_shapes, case.out_shape, case.params)
        rec = {
            "name": case.name,
            "group": case.group,
            "op": case.op,
            "shape": case.label,
            "in_shapes": [list(s) for s in case.in_shapes],
            "out_shape": list(case.out_shape),
            "params": {k: v for k, v in case.params.items() if k != "shape"},
            "work": {kind: amount},
            "tol": spec.tol,
        }
        ins_np = draw_inputs(spec, case.in_shapes, self.rng, case.params)
        ref = None
        if spec.ref64 is not None:
            ref = np.asarray(
                spec.ref64([a.astype(np.float64) for a in ins_np], case.params), np.float64
            ).reshape(case.out_shape)
        ok, err, msg = self.validate_ours(case, spec, ins_np, ref)
        rec.update(valid=ok, rel_err=err, message=msg)
        if not ok:
            rec["status"] = "FAIL"
            return rec
        n = self.n_sets(case)
        sets = self._ours_sets(case, spec, n)
        t = time_calls(lambda i: spec.ours(*sets[i], case.params), n, self.sync, **self.timing)
        sets = None  # free before the reference's sets
        rec["ours"] = self._rates(t, kind, amount, ceilings)

        fn = self.lib.op(case.op) if self.lib is not None else None
        if fn is not None and not self.args.no_ref:
            try:
                lok, lerr, lmsg = self.validate_lib(case, spec, fn, ins_np, ref)
                lib_rec = {"lib": self.lib.name, "valid": lok, "rel_err": lerr, "message": lmsg}
                if lok:
                    lsets = self._lib_sets(case, spec, n)
                    lt = time_calls(
                        lambda i: fn(*lsets[i], case.params), n, self.lib.sync, **self.timing
                    )
                    lsets = None
                    lib_rec.update(self._rates(lt, kind, amount, ceilings))
                    lib_rec["speed_vs_ours"] = lt["ms"] / rec["ours"]["ms"]
            except Exception as exc:  # noqa: BLE001 (the reference is optional: note and go on)
                lib_rec = {"lib": self.lib.name, "valid": False, "message": f"error: {exc!r}"}
            rec["ref"] = lib_rec
        rec["status"] = "ok"
        return rec

    @staticmethod
    def _rates(t: dict, kind: str, amount: int, ceilings: dict) -> dict:
        sec = t["ms"] / 1e3
        rec = dict(t)
        if kind == "bytes":
            rec["gbps"] = amount / sec / 1e9
            if ceilings.get("copy_gbps"):
                rec["pct_of_ceiling"] = 100 * rec["gbps"] / ceilings["copy_gbps"]
        else:
            rec["gflops"] = amount / sec / 1e9
            if ceilings.get("sgemm_gflops"):
                rec["pct_of_ceiling"] = 100 * rec["gflops"] / ceilings["sgemm_gflops"]
        return rec


# --------------------------------------------------------------------------------------------------
# ceilings
# --------------------------------------------------------------------------------------------------


def measure_ceilings(runner: Runner, quick: bool, c: dict) -> dict:
    """Copy bandwidth and FP32 SGEMM rate, each validated first (see the module docstring), into
    ``c`` (so that what was measured before an error is kept)."""
    lib = runner.lib
    n_copy = (4 if quick else 64) * MiB  # elements: 16 MiB or 256 MiB buffers
    mm = 256 if quick else 4096
    c.update(copy_bytes=2 * 4 * n_copy, sgemm_shape=[mm, mm, mm])

    # gpumat's own copy
    src = gpumat.empty((n_copy,), runner.ctx)
    ops.uniform(src, -1.0, 1.0, seed=3)
    dst = gpumat.empty((n_copy,), runner.ctx)
    ops.copy(src, dst)
    if not np.array_equal(dst.asnumpy(), src.asnumpy()):
        raise RuntimeError("ceiling: gpumat copy does not copy")
    t = time_calls(lambda i: ops.copy(src, dst), 1, runner.sync, **runner.timing)
    c["copy_gbps_gpumat"] = c["copy_bytes"] / (t["ms"] / 1e3) / 1e9
    src = dst = None

    c["copy_gbps"] = c["copy_gbps_gpumat"]
    c["copy_source"] = "gpumat ops.copy"
    if lib is not None:
        c["reference"] = f"{lib.name} {lib.version}"
        a = lib.random((n_copy,), -1.0, 1.0)
        b = lib.empty((n_copy,))
        copy = lib.op("copy")
        copy([a], b, {})
        if not np.array_equal(lib.to_numpy(a), lib.to_numpy(b)):
            raise RuntimeError(f"ceiling: {lib.name} copy does not copy")
        t = time_calls(lambda i: copy([a], b, {}), 1, lib.sync, **runner.timing)
        c["copy_gbps_ref"] = c["copy_bytes"] / (t["ms"] / 1e3) / 1e9
        if c["copy_gbps_ref"] > c["copy_gbps"]:
            c["copy_gbps"], c["copy_source"] = c["copy_gbps_ref"], f"{lib.name} copy"
        a = b = None

        # SGEMM, FP32: validate on fresh data against float64, then time on rotated sets
        rng = runner.rng
        a64 = rng.uniform(-1, 1, (mm, mm))
        b64 = rng.uniform(-1, 1, (mm, mm))
        a32, b32 = a64.astype(np.float32), b64.astype(np.float32)
        ref = a32.astype(np.float64) @ b32.astype(np.float64)
        matmul = lib.op("matmul")
        p = {"ta": False, "tb": False}
        out = lib.empty((mm, mm))
        matmul([lib.asarray(a32), lib.asarray(b32)], out, p)
        ok, err, msg = compare(lib.to_numpy(out), ref, TOL_SUM)
        c["sgemm_rel_err"] = err
        if not ok:
            raise RuntimeError(f"ceiling: {lib.name} SGEMM fails validation (TF32?): {msg}")
        sets = [
            (
                [lib.random((mm, mm), -1.0, 1.0), lib.random((mm, mm), -1.0, 1.0)],
                lib.empty((mm, mm)),
            )
            for _ in range(2)
        ]
        t = time_calls(lambda i: matmul(*sets[i], p), 2, lib.sync, **runner.timing)
        c["sgemm_gflops"] = 2 * mm**3 / (t["ms"] / 1e3) / 1e9
        c["sgemm_source"] = f"{lib.name} matmul FP32" + (
            " (cuBLAS, TF32 off)" if lib.name == "torch" else ""
        )
        sets = out = None
    return c


# --------------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------------


def ceilings_text(c: dict) -> str:
    if "copy_gbps" not in c:
        return f"ceilings: not measured ({c.get('error', 'unknown error')})\n"
    lines = [
        f"copy ceiling: {fmt_num(c.get('copy_gbps'))} GB/s ({c.get('copy_source')}; "
        f"{c['copy_bytes'] / 1e9:.3g} GB read+written; gpumat copy "
        f"{fmt_num(c.get('copy_gbps_gpumat'))} GB/s, reference copy "
        f"{fmt_num(c.get('copy_gbps_ref'))} GB/s)",
    ]
    if c.get("sgemm_gflops"):
        mm = c["sgemm_shape"][0]
        lines.append(
            f"sgemm ceiling: {fmt_num(c['sgemm_gflops'])} GFLOP/s ({c['sgemm_source']}, "
            f"{mm}^3, rel err {c['sgemm_rel_err']:.1e})"
        )
    else:
        lines.append("sgemm ceiling: none (no reference library)")
    if "error" in c:
        lines.append(f"ceiling error: {c['error']}")
    return "\n".join(lines) + "\n"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--ctx",
        choices=["cpu", "gpu"],
        default="gpu" if gpumat.cuda_available() else "cpu",
        help="backend (default: gpu when available)",
    )
    p.add_argument("--quick", action="store_true", help="small sizes, few repeats (CI smoke run)")
    p.add_argument(
        "--repeat", type=int, default=None, help="timed samples per case (default 20, quick 3)"
    )
    p.add_argument(
        "--only",
        default=None,
        help="run only cases whose name contains one of these (comma-separated) or in that group",
    )
    p.add_argument(
        "--ref",
        choices=["auto", "torch", "cupy", "none"],
        default="auto",
        help="reference library on gpu (cpu: numpy)",
    )
    p.add_argument("--no-ref", action="store_true", help="skip the per-case reference timings")
    p.add_argument("--seed", type=int, default=None, help="numpy seed of the validation inputs")
    p.add_argument(
        "--out",
        default=None,
        help="JSON file (or folder) to write; default benchmarks/results/<date>_..._ops_...json",
    )
    p.add_argument("--no-write", action="store_true", help="print only, write no files")
    args = p.parse_args(argv)
    if args.repeat is None:
        args.repeat = 3 if args.quick else 20
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.ctx == "gpu" and not gpumat.cuda_available():
        print(
            f"bench_ops: --ctx gpu but no usable CUDA device (build_info: {gpumat.build_info()})",
            file=sys.stderr,
        )
        return 2
    ctx = gpumat.gpu(0) if args.ctx == "gpu" else gpumat.cpu()
    lib = None if args.ref == "none" else pick_reference(args.ctx, args.ref)
    header = run_header("ops", args.ctx, args.quick, ["benchmarks/bench_ops.py", *argv])
    runner = Runner(ctx, lib, args)
    print(header_markdown(header, "gpumat kernel benchmark"), flush=True)
    if lib is None:
        print(
            "note: no reference library (torch or cupy) on this machine: no SGEMM ceiling, "
            "no per-case reference",
            flush=True,
        )

    missing = unbenchmarked_ops()
    if missing:
        print(f"note: gpumat.ops functions with no case here yet: {', '.join(missing)}", flush=True)
    ceilings: dict = {}
    try:
        measure_ceilings(runner, args.quick, ceilings)
    except Exception as exc:  # noqa: BLE001 (record it; the cases still run, without some ratios)
        traceback.print_exc()
        ceilings["error"] = repr(exc)
    print(ceilings_text(ceilings), flush=True)

    cases = build_cases(args.quick)
    if args.only:
        wanted = args.only.split(",")
        cases = [c for c in cases if any(w in c.name or w == c.group for w in wanted)]
    path = None if args.no_write else resolve_out(args.out, "ops", header)
    settings = {
        "ctx": args.ctx,
        "repeat": args.repeat,
        "rotation_bytes": runner.rotation_bytes,
        "max_sets": runner.max_sets,
        **runner.timing,
        "timer": "host perf_counter between device synchronizations",
        "reference": None if lib is None else f"{lib.name} {lib.version}",
        "tf32": False,
    }
    software = software_info()
    results: list[dict] = []

    def report(complete: bool) -> tuple[dict, str, list]:
        failed = [r for r in results if r["status"] != "ok"]
        if "error" in ceilings:
            failed = [
                {"group": "ceiling", "name": "ceilings", "message": ceilings["error"]},
                *failed,
            ]
        summary = f"{len(results)} cases, {len(failed)} failed validation or raised\n"
        if not complete:
            summary += f"INCOMPLETE: {len(results)} of {len(cases)} cases ran\n"
        md = (
            header_markdown(header, "gpumat kernel benchmark")
            + "\n"
            + ceilings_text(ceilings)
            + "\n"
            + ops_table(results)
            + "\n"
            + OPS_LEGEND
            + "\n"
            + summary
        )
        blas = os.environ.get("GPUMAT_BLAS")
        data = {
            **header,
            # the host BLAS when chosen (make_table.py keeps such runs as their own kind)
            "notes": [f"environment: GPUMAT_BLAS={blas}"] if blas else [],
            "complete": complete,
            "software": software,
            "settings": settings,
            "ceilings": ceilings,
            "cases": results,
            "summary": {
                "cases": len(results),
                "failed": len(failed),
                "unbenchmarked_ops": missing,
            },
        }
        return data, md, failed

    for i, case in enumerate(cases, 1):
        print(
            f"[{i}/{len(cases)}] {case.group}/{case.name} {case.label} ...",
            end=" ",
            file=sys.stderr,
            flush=True,
        )
        try:
            rec = runner.run(case, ceilings)
        except Exception as exc:  # noqa: BLE001 (record, go on with the other cases)
            traceback.print_exc()
            rec = {
                "name": case.name,
                "group": case.group,
                "op": case.op,
                "shape": case.label,
                "status": "error",
                "message": repr(exc),
            }
        results.append(rec)
        msg = rec.get("message") or ""
        print(
            rec["status"] + (f": {msg}" if rec["status"] != "ok" and msg else ""),
            file=sys.stderr,
            flush=True,
        )
        if args.ctx == "gpu":
            gpumat.empty_cache(ctx)  # give the previous case's sets back before the next
        if path is not None:  # a run stopped by a time limit still leaves what it measured
            write_results(path, *report(complete=False)[:2])

    data, md, failed = report(complete=True)
    print()
    print(ops_table(results))
    print(OPS_LEGEND)
    if path is not None:
        jp, mp = write_results(path, data, md)
        print(f"wrote {jp} and {mp.name}")
    print(md.rsplit(OPS_LEGEND, 1)[1].strip())
    for r in failed:
        print(f"FAILED {r['group']}/{r['name']}: {r.get('message')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
