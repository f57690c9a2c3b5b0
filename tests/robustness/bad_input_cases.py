"""Bad-input cases: hypothesis-generated calls of every public gpumat entry point.

Each case draws a valid call (shapes and parameters that fit the function), then replaces some
arguments with bad ones: an array that holds nothing (``PyGpuMatrix.__new__``), a wrong shape, a
zero-size or 0-d array, a view or the same array in two places, numpy data or a list where a
device array belongs, None, strings, bools, NaN, infinities, huge and negative numbers. A case
passes when the call

- raises one of :data:`ALLOWED` (for the front end :data:`FRONTEND_ALLOWED`, which adds
  PyTorch's RuntimeError for autograd misuse and FileNotFoundError for a missing checkpoint) with
  a message that says something (and leaves every array and tensor argument as it was), or
- returns, and every output equals a float64 numpy reference computed from the arguments as they
  were before the call; a call that gpumat accepts but the reference rejects fails.

A crash (a signal) cannot be caught in-process, so ``tests/robustness/test_bad_input.py`` runs
each batch in a child process (``python tests/robustness/bad_input_cases.py BATCH``) and fails when
the child dies by a signal. The child prints one JSON line: ``{"batch": ..., "cases": N,
"failures": [...]}``.

Structural edge cases have batches of their own: ``zeros_<device>:<ops batch>`` runs an ops batch
with every drawn dimension allowed to be 0 (so each axis of each argument is empty in some valid
call), on the cpu or the emulated device, and ``windows_<device>`` walks every convolution and
pooling op over a grid of kernel sizes, strides and paddings with each of N, C, H, W (and F) set to
0 in turn.

``GPUMAT_BAD_INPUT_EXAMPLES`` sets the examples per function (default 50) and
``GPUMAT_BAD_INPUT_RANDOM=1`` uses fresh random draws instead of the fixed (derandomized) ones.
"""

from __future__ import annotations

import copy as copy_module
import faulthandler
import json
import math
import numbers
import operator
import os
import sys
import traceback

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# tests/dlpack_helpers.py: hand-made DLPack capsules (this file runs as a script, from its folder)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dlpack_helpers  # noqa: E402

import gpumat  # noqa: E402
import gpumat.autodiff as ad  # noqa: E402
from gpumat import PyGpuMatrix, graph, ops
from gpumat.dlsys import autodiff as dlsys_ad
from gpumat.dlsys import ndarray as dlsys_nd

ALLOWED = (
    ValueError,
    TypeError,
    MemoryError,
    IndexError,
    OverflowError,
    NotImplementedError,
    gpumat.CudaError,
)
EXAMPLES = int(os.environ.get("GPUMAT_BAD_INPUT_EXAMPLES", "50"))
DERANDOMIZE = os.environ.get("GPUMAT_BAD_INPUT_RANDOM") != "1"
CTX = gpumat.cpu()  # the zeros_emu and windows_emu batches switch it to the emulated device
# Set by the zeros_* batches before any case is drawn: dimensions may then be 0.
ZERO_DIMS = False


class Invalid(Exception):
    """Raised by a reference: gpumat's documented rules reject these arguments."""


class Snap:
    """A device-array argument as it was before the call: float64 values and its storage root."""

    def __init__(self, arr: PyGpuMatrix, root: int):
        self.value = arr.asnumpy().astype(np.float64)
        self.root = root


# --------------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------------


class Arrays:
    """Makes device arrays for one case and remembers which share storage (views)."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.root_of: dict[int, int] = {}

    def new(self, shape, low=-1.0, high=1.0) -> PyGpuMatrix:
        a = gpumat.array(self.rng.uniform(low, high, size=shape).astype(np.float32), CTX)
        self.root_of[id(a)] = id(a)
        return a

    def of(self, values: np.ndarray) -> PyGpuMatrix:
        a = gpumat.array(np.asarray(values, dtype=np.float32), CTX)
        self.root_of[id(a)] = id(a)
        return a

    def view(self, base: PyGpuMatrix, shape) -> PyGpuMatrix:
        v = base.reshape(shape)
        self.root_of[id(v)] = self.root_of.get(id(base), id(base))
        return v

    def snap(self, value):
        if isinstance(value, PyGpuMatrix) and value.ctx is not None:
            return Snap(value, self.root_of.get(id(value), id(value)))
        return value


def _empty_matrix() -> PyGpuMatrix:
    return PyGpuMatrix.__new__(PyGpuMatrix)


BAD_SCALARS = [
    float("nan"),
    float("inf"),
    -float("inf"),
    0.0,
    -1.0,
    1e300,
    -1e300,
    2**70,
    True,
    np.float64(2.5),
    np.int64(3),
    "1.5",
    None,
    [1.0],
    1 + 2j,
    np.array([1.0, 2.0]),
]
BAD_INTS = [0, -1, -(2**63), 2**63, 2**70, 1.0, 2.5, True, None, "2", (1,), (1, 2, 3), np.int64(2)]


def bad_array_strategy(arrays: Arrays, like):
    """Bad values for a device-array slot whose valid value is ``like``."""
    shape = like.shape if isinstance(like, PyGpuMatrix) and like.ctx is not None else (2, 2)
    return st.sampled_from(
        [
            "empty",
            "none",
            "numpy",
            "list",
            "int",
            "str",
            "wrong_shape",
            "zero_size",
            "zero_d",
            "view",
            "transposed_shape",
        ]
    ).flatmap(lambda kind: st.just(_make_bad_array(arrays, kind, shape, like)))


def _make_bad_array(arrays: Arrays, kind: str, shape, like):
    if kind == "empty":
        return _empty_matrix()
    if kind == "none":
        return None
    if kind == "numpy":
        return np.zeros(shape, dtype=np.float32)
    if kind == "list":
        return np.zeros(shape).tolist()
    if kind == "int":
        return 3
    if kind == "str":
        return "array"
    if kind == "wrong_shape":
        return arrays.new(tuple(d + 1 for d in shape) or (2,))
    if kind == "zero_size":
        return arrays.new((0,) + tuple(shape[1:]))
    if kind == "zero_d":
        return arrays.new(())
    if kind == "view" and isinstance(like, PyGpuMatrix) and like.ctx is not None:
        return arrays.view(like, (like.size,))
    if kind == "transposed_shape":
        return arrays.new(tuple(reversed(shape)))
    return arrays.new(shape)


# --------------------------------------------------------------------------------------------
# Reference helpers
# --------------------------------------------------------------------------------------------


def _arr(x) -> np.ndarray:
    if not isinstance(x, Snap):
        raise Invalid("not a device array")
    return x.value


def _num(x) -> float:
    if isinstance(x, (str, bytes)) or x is None:
        raise Invalid("not a number")
    try:
        return float(np.float32(float(x)))
    except (TypeError, ValueError, OverflowError) as exc:
        raise Invalid("not a number") from exc


def _int(x) -> int:
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise Invalid("not an int")
    return int(x)


def _pair(x) -> tuple[int, int]:
    if isinstance(x, (tuple, list)):
        if len(x) != 2:
            raise Invalid("not a pair")
        return _int(x[0]), _int(x[1])
    v = _int(x)
    return v, v


def _same(*shapes):
    if len({tuple(s) for s in shapes}) != 1:
        raise Invalid("shapes differ")


def _no_alias(out, *inputs):
    for x in inputs:
        if isinstance(out, Snap) and isinstance(x, Snap) and out.root == x.root:
            if out.value.size == 0 or x.value.size == 0:
                continue  # empty arrays share no element: nothing can be overwritten
            raise Invalid("output aliases an input")


def _graph(build, *values, out_shape=None):
    """Evaluates ``build(*variables)`` on gpumat's numpy backend in float64: shape rules and
    values of the graph op that wraps the same kernel."""
    variables = [ad.Variable(f"v{i}") for i in range(len(values))]
    try:
        node = build(*variables)
        ex = gpumat.autodiff.Executor([node])
        (result,) = ex.run(dict(zip(variables, values, strict=True)))
    except (ValueError, TypeError) as exc:
        raise Invalid(str(exc)) from exc
    if out_shape is not None and tuple(result.shape) != tuple(out_shape):
        raise Invalid(f"out shape {out_shape} is not {result.shape}")
    return result


def _softmax(y):
    if y.size == 0:  # no rows, or rows of no classes: nothing to write
        return np.zeros(y.shape)
    z = y - y.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


# --------------------------------------------------------------------------------------------
# Functions under test: name -> (valid-call strategy builder, reference, output slots)
# --------------------------------------------------------------------------------------------

# A dimension: 1..4, or 0..4 in the zeros_* batches (deferred: those set ZERO_DIMS first).
small = st.deferred(lambda: st.integers(0 if ZERO_DIMS else 1, 4))


def _shape(draw, min_rank=1, max_rank=3):
    return tuple(draw(st.lists(small, min_size=min_rank, max_size=max_rank)))


def _extent(draw, kernel: int) -> int:
    """A spatial size for a window of ``kernel``: at least the kernel, or anything from 0 in the
    zeros_* batches (an output that would be empty must then be refused)."""
    return draw(st.integers(0, kernel + 3)) if ZERO_DIMS else kernel + draw(st.integers(0, 3))


def _out_size(size: int, kernel: int, stride: int, pad: int) -> int:
    span = size + 2 * pad - kernel
    return span // stride + 1 if span >= 0 else 0


def _valid_args(name, draw, arrays: Arrays):
    """A valid call of ``ops.NAME`` as a list of arguments."""
    new = arrays.new
    if name == "fill":
        return [new(_shape(draw)), draw(st.floats(-5, 5))]
    if name == "broadcast_to":
        s = _shape(draw, 1, 2)
        return [new(s), new((draw(small),) + s)]
    if name == "sum_to_size":
        s = _shape(draw, 1, 2)
        return [new((draw(small),) + s), new(s)]
    if name in ("add", "mul"):
        s = _shape(draw)
        return [new(s), new(s), new(s)]
    if name == "div":
        s = _shape(draw)
        return [new(s), new(s, 0.1, 1.0), new(s)]
    if name in ("exp", "log", "sqrt"):
        s = _shape(draw)
        return [new(s, 0.01, 5.0), new(s)]
    if name == "sqrt_gradient":
        s = _shape(draw)
        return [new(s, 0.1, 3.0), new(s), new(s)]
    if name == "eq":
        # Small integers, so that about a third of the pairs are equal.
        s = _shape(draw)
        ints = [arrays.rng.integers(-1, 2, size=s).astype(np.float32) for _ in range(2)]
        return [arrays.of(ints[0]), arrays.of(ints[1]), new(s)]
    if name in ("add_scalar", "mul_scalar"):
        s = _shape(draw)
        return [new(s), draw(st.floats(-5, 5)), new(s)]
    if name in ("abs", "sign", "sin", "cos", "erf", "logical_not", "log1p", "rsqrt"):
        s = _shape(draw)
        low = {"log1p": -0.9, "rsqrt": 0.01}.get(name, -4.0)
        return [new(s, low, 4.0), new(s)]
    if name == "rsqrt_gradient":
        s = _shape(draw)
        return [new(s, 0.1, 3.0), new(s), new(s)]
    if name in ("lt", "le", "gt", "ge", "logical_and", "logical_or"):
        # Small integers, so that about a third of the pairs are equal (and some are 0).
        s = _shape(draw)
        ints = [arrays.rng.integers(-1, 2, size=s).astype(np.float32) for _ in range(2)]
        return [arrays.of(ints[0]), arrays.of(ints[1]), new(s)]
    if name in ("minimum", "maximum"):
        s = _shape(draw)
        return [new(s), new(s), new(s)]
    if name == "where":
        s = _shape(draw)
        cond = arrays.rng.integers(0, 2, size=s).astype(np.float32)
        return [arrays.of(cond), new(s), new(s), new(s)]
    if name == "clamp":
        s = _shape(draw)
        return [new(s), draw(st.floats(-2, 0)), draw(st.floats(0, 2)), new(s)]
    if name == "clamp_gradient":
        s = _shape(draw)
        return [new(s), new(s), draw(st.floats(-1, 0)), draw(st.floats(0, 1)), new(s)]
    if name in ("gelu", "gelu_tanh", "silu"):
        s = _shape(draw)
        return [new(s, -6.0, 6.0), new(s)]
    if name in ("gelu_gradient", "gelu_tanh_gradient", "silu_gradient"):
        s = _shape(draw)
        return [new(s, -6.0, 6.0), new(s), new(s)]
    if name in ("leaky_relu", "elu"):
        s = _shape(draw)
        return [new(s, -4.0, 4.0), draw(st.floats(0.01, 2.0)), new(s)]
    if name in ("leaky_relu_gradient", "elu_gradient"):
        s = _shape(draw)
        return [new(s, -4.0, 4.0), new(s), draw(st.floats(0.01, 2.0)), new(s)]
    if name == "softplus":
        s = _shape(draw)
        return [new(s, -6.0, 6.0), draw(st.floats(0.5, 2.0)), draw(st.floats(1.0, 20.0)), new(s)]
    if name in ("softplus_gradient", "hardtanh_gradient"):
        s = _shape(draw)
        lo, hi = (0.5, 2.0) if name == "softplus_gradient" else (-2.0, -0.1)
        return [
            new(s, -4.0, 4.0),
            new(s),
            draw(st.floats(lo, hi)),
            draw(st.floats(1.0, 20.0)),
            new(s),
        ]
    if name in ("lstm_cell", "lstm_cell_gradient", "gru_cell", "gru_cell_gradient"):
        n, h = draw(small), draw(st.integers(1, 5))
        if name.startswith("lstm"):
            ins = [new((n, 4 * h)), new((n, h))]
            ins += [new((n, 2 * h)), new((n, 2 * h))] if name.endswith("gradient") else []
            return ins + [new((n, (5 if name.endswith("gradient") else 2) * h))]
        ins = [new((n, 3 * h)), new((n, 3 * h)), new((n, h))]
        ins += [new((n, h))] if name.endswith("gradient") else []
        return ins + [new((n, (7 if name.endswith("gradient") else 1) * h))]
    if name in ("adaptive_avg_pool2d", "adaptive_avg_pool2d_gradient"):
        n, c = draw(small), draw(small)
        x = (n, c, draw(st.integers(1, 7)), draw(st.integers(1, 7)))
        y = (n, c, draw(st.integers(1, 7)), draw(st.integers(1, 7)))
        return [new(x), new(y)] if name == "adaptive_avg_pool2d" else [new(y), new(x)]
    if name == "matmul":
        m, n, k = draw(small), draw(small), draw(small)
        ta, tb = draw(st.booleans()), draw(st.booleans())
        return [new((k, m) if ta else (m, k)), new((n, k) if tb else (k, n)), new((m, n)), ta, tb]
    if name == "bmm":
        # A batch of 1 on either operand repeats it; out's batch of 1 sums the products.
        bt, m, n, k = draw(small), draw(small), draw(small), draw(small)
        ba, bb = draw(st.sampled_from([(bt, bt), (1, bt), (bt, 1)]))
        bc = draw(st.sampled_from([bt, 1]))
        ta, tb = draw(st.booleans()), draw(st.booleans())
        a_shape = (ba, k, m) if ta else (ba, m, k)
        b_shape = (bb, n, k) if tb else (bb, k, n)
        return [new(a_shape), new(b_shape), new((bc, m, n)), ta, tb]
    if name in ("broadcast_binary", "broadcast_where", "sum_to"):
        # operands of the target's shape with some dims set to 1 and some leading dims dropped
        target = _shape(draw, 1, 4)

        def part():
            kept = draw(st.integers(0, len(target)))
            return tuple(d if draw(st.booleans()) else 1 for d in target[len(target) - kept :])

        if name == "sum_to":
            return [new(target), new(part())]
        if name == "broadcast_where":
            cond = arrays.rng.integers(0, 2, size=part()).astype(np.float32)
            return [arrays.of(cond), new(part()), new(part()), new(target)]
        op = draw(st.sampled_from(ops.BROADCAST_BINARY_OPS))
        return [new(part()), new(part(), 0.1, 1.0), new(target), op]
    if name in ("as_strided", "as_strided_scatter"):
        # a region of a 1-D array: sizes, strides (distinct addresses for the scatter) and an
        # offset that keeps every address inside
        size = _shape(draw, 0, 3)
        if name == "as_strided":
            stride = tuple(draw(st.integers(-3, 3)) for _ in size)
        else:
            stride, step = [], 1
            for d in reversed(size):
                stride.append(step * draw(st.sampled_from([1, -1])))
                step *= max(d, 1) + draw(st.integers(0, 1))
            stride = tuple(reversed(stride))
        low = sum(min(0, (n - 1) * t) for n, t in zip(size, stride, strict=True))
        high = sum(max(0, (n - 1) * t) for n, t in zip(size, stride, strict=True))
        offset = -low + draw(st.integers(0, 2))
        n = offset + high + 1 + draw(st.integers(0, 2))
        if name == "as_strided":
            return [new((n,)), new(size), stride, offset]
        return [new(size), new((n,)), stride, offset]
    if name in ("relu", "copy"):
        s = _shape(draw)
        return [new(s), new(s)]
    if name == "relu_gradient":
        s = _shape(draw)
        return [new(s), new(s), new(s)]
    if name == "cross_entropy":
        s = (draw(small), draw(small))
        return [new(s), new(s, 0.0, 1.0), new((1,))]
    if name == "transpose":
        r, c = draw(small), draw(small)
        return [new((r, c)), new((c, r))]
    if name == "one_hot":
        # Class numbers in range, out of range (-1, C) and halves (no class): zero rows there.
        n, c = draw(small), draw(small)
        idx = arrays.rng.integers(-2, 2 * c + 2, size=n).astype(np.float32) / 2
        return [arrays.of(idx), new((n, c))]
    if name in ("uniform", "normal"):
        return [new(_shape(draw)), -1.0, 2.0, draw(st.integers(0, 2**64 - 1))]
    if name == "randint":
        low = draw(st.integers(-(2**24), 2**24 - 1))
        high = draw(st.integers(low + 1, 2**24 + 1))
        return [new(_shape(draw)), low, high, draw(st.integers(0, 2**64 - 1))]
    if name == "axpy":
        s = _shape(draw)
        return [draw(st.floats(-3, 3)), new(s), new(s)]
    if name == "reshape":
        s = _shape(draw)
        return [new(s), new((int(np.prod(s)),))]
    if name in ("conv2d", "conv2d_gradient_input", "conv2d_gradient_filter"):
        n, c, f = draw(small), draw(small), draw(small)
        kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        stride, pad = draw(st.integers(1, 2)), draw(st.integers(0, 1))
        h, w = _extent(draw, kh), _extent(draw, kw)
        oh, ow = _out_size(h, kh, stride, pad), _out_size(w, kw, stride, pad)
        x, wt, y = (n, c, h, w), (f, c, kh, kw), (n, f, oh, ow)
        if name == "conv2d":
            return [new(x), new(wt), new(y), stride, pad]
        if name == "conv2d_gradient_input":
            return [new(y), new(wt), new(x), stride, pad]
        return [new(x), new(y), new(wt), stride, pad]
    if name in ("conv1d", "conv1d_gradient_input", "conv1d_gradient_filter"):
        n, c, f, k = draw(small), draw(small), draw(small), draw(st.integers(1, 3))
        stride, pad = draw(st.integers(1, 2)), draw(st.integers(0, 1))
        length = _extent(draw, k)
        ol = _out_size(length, k, stride, pad)
        x, wt, y = (n, c, length), (f, c, k), (n, f, ol)
        if name == "conv1d":
            return [new(x), new(wt), new(y), stride, pad]
        if name == "conv1d_gradient_input":
            return [new(y), new(wt), new(x), stride, pad]
        return [new(x), new(y), new(wt), stride, pad]
    if name == "add_channel_bias":
        s = (draw(small), draw(small), draw(small), draw(small))
        return [new(s), new((s[1],)), new(s)]
    if name == "reduce_sum_channels":
        s = (draw(small), draw(small), draw(small), draw(small))
        return [new(s), new((s[1],))]
    if name in ("max_pool2d", "avg_pool2d", "max_pool2d_gradient", "avg_pool2d_gradient"):
        n, c = draw(small), draw(small)
        k = draw(st.integers(1, 3))
        stride = draw(st.integers(1, 3))
        pad = draw(st.integers(0, (k - 1) // 2)) if k > 1 else 0
        h, w = _extent(draw, k), _extent(draw, k)
        oh, ow = _out_size(h, k, stride, pad), _out_size(w, k, stride, pad)
        x, y = (n, c, h, w), (n, c, oh, ow)
        if name in ("max_pool2d", "avg_pool2d"):
            return [new(x), new(y), k, stride, pad]
        if name == "max_pool2d_gradient":
            return [new(x), new(y), new(x), k, stride, pad]
        return [new(y), new(x), k, stride, pad]
    if name in ("mse_loss", "l1_loss"):
        s = _shape(draw)
        return [new(s), new(s), new((1,))]
    if name in ("mse_loss_gradient", "l1_loss_gradient"):
        s = _shape(draw)
        return [new(s), new(s), new((1,)), new(s)]
    if name == "adam_update":
        s = _shape(draw)
        return [new(s), new(s), new(s), new(s, 0.0, 1.0), 1e-2, 0.9, 0.999, 1e-8, draw(small)]
    if name == "matmul_bias":
        m, n, k = draw(small), draw(small), draw(small)
        ta, tb = draw(st.booleans()), draw(st.booleans())
        a = new((k, m) if ta else (m, k))
        return [
            a,
            new((n, k) if tb else (k, n)),
            new((n,)),
            new((m, n)),
            ta,
            tb,
            draw(st.booleans()),
        ]
    if name == "relu_bias_gradient":
        r, c = draw(small), draw(small)
        return [new((r, c)), new((r, c)), new((r, c)), new((c,))]
    if name == "cross_entropy_with_gradient":
        s = (draw(small), draw(small))
        return [new(s, -4.0, 4.0), new(s, 0.0, 1.0), new((1,)), new(s)]
    if name in ("softmax", "log_softmax"):
        s = _shape(draw)
        return [new(s, -5.0, 5.0), new(s), _axis_of(draw, s)]
    if name in ("attention", "attention_gradient"):
        b, lq, s_, e, ev = (draw(small) for _ in range(5))
        q, k, v = new((b, lq, e)), new((b, s_, e)), new((b, s_, ev))
        sc, causal = draw(st.floats(0.1, 2.0)), draw(st.booleans())
        if name == "attention":
            return [q, k, v, new((b, lq, ev + 1)), sc, causal]
        n = b * (lq * e + s_ * e + s_ * ev)
        return [q, k, v, new((b, lq, ev + 1)), new((b, lq, ev + 1)), new((n,)), sc, causal]
    if name in ("attention_strided", "attention_strided_gradient"):
        # a fused projection (b, t, width): q, k, v column blocks of h heads of d, `gap` unused
        # columns after each (the gradient's zeros there)
        b, t, d = draw(small), draw(small), draw(small)
        h, gap = draw(st.integers(1, 3)), draw(st.integers(0, 2))
        c = h * d
        width = 3 * (c + gap)
        qkv = new((b, t, width))
        geometry = [h, (t, t, d, d), (0, c + gap, 2 * (c + gap)), (t * width, d, width)]
        sc, causal = draw(st.floats(0.1, 2.0)), draw(st.booleans())
        if name == "attention_strided":
            return [qkv, new((b * h, t, d + 1)), *geometry, sc, causal]
        out, dout = new((b * h, t, d + 1)), new((b * h, t, d + 1))
        return [qkv, out, dout, new((b, t, width)), *geometry, sc, causal]
    if name in ("softmax_gradient", "log_softmax_gradient"):
        s = _shape(draw)
        y = new(s, 0.0, 1.0) if name == "softmax_gradient" else new(s, -4.0, 0.0)
        return [y, new(s), new(s), _axis_of(draw, s)]
    if name == "nll_loss":
        s = (draw(small), draw(small))
        return [new(s, -4.0, 0.0), new(s, 0.0, 1.0), new((1,))]
    if name == "nll_loss_gradient":
        s = (draw(small), draw(small))
        return [new(s, 0.0, 1.0), new((1,)), new(s)]
    if name in ("tanh", "sigmoid"):
        s = _shape(draw)
        return [new(s, -6.0, 6.0), new(s)]
    if name in ("tanh_gradient", "sigmoid_gradient"):
        s = _shape(draw)
        return [new(s), new(s), new(s)]
    if name == "dropout":
        s = _shape(draw)
        p = draw(st.sampled_from([0.0, 0.5, 1.0]) | st.floats(0.0, 1.0))
        return [new(s), new(s), p, draw(st.integers(0, 2**64 - 1))]
    if name in ("sum", "mean", "amax"):
        s = _shape(draw)
        axis = _axis_of(draw, s)
        return [new(s), new(_reduced(s, axis, draw(st.booleans()))), axis]
    if name == "argmax":
        # Small integers, so that slices often hold tied maxima (the first one wins).
        s = _shape(draw)
        axis = _axis_of(draw, s)
        x = arrays.rng.integers(-2, 3, size=s).astype(np.float32)
        return [arrays.of(x), new(_reduced(s, axis, draw(st.booleans()))), axis]
    if name == "argsort":
        # Small integers (ties: the stable order) with NaNs; the first k of n, k <= n.
        s = _shape(draw)
        axis = _axis_of(draw, s)
        x = arrays.rng.integers(-2, 3, size=s).astype(np.float32)
        x[arrays.rng.random(s) < 0.1] = np.nan
        a = axis % len(s)
        part = s[:a] + (draw(st.integers(0, s[a])),) + s[a + 1 :]
        return [arrays.of(x), new(part), axis, draw(st.booleans())]
    if name in ("gather", "gather_gradient"):
        # Indices in range, with some out of range and halves (NaN out, nothing back).
        s = _shape(draw)
        axis = _axis_of(draw, s)
        a = axis % len(s)
        part = s[:a] + (draw(small),) + s[a + 1 :]
        idx = arrays.rng.integers(-2, 2 * s[a] + 2, size=part).astype(np.float32) / 2
        if name == "gather":
            return [new(s), arrays.of(idx), new(part), axis]
        return [arrays.of(idx), new(part), new(s), axis]
    # prod, cumsum, the powers, tril / triu
    if name == "prod":
        s = _shape(draw)
        axis = _axis_of(draw, s)
        return [new(s, 0.5, 1.5), new(_reduced(s, axis, draw(st.booleans()))), axis]
    if name == "prod_gradient":
        s = _shape(draw)
        axis = _axis_of(draw, s)
        return [new(s, 0.5, 1.5), new(_reduced(s, axis, draw(st.booleans()))), new(s), axis]
    if name == "cumsum":
        s = _shape(draw)
        return [new(s), new(s), _axis_of(draw, s), draw(st.booleans())]
    if name in ("tril", "triu"):
        s = _shape(draw, 2, 4)
        return [new(s), new(s), draw(st.integers(-4, 4))]
    if name in ("pow_scalar", "scalar_pow"):
        s = _shape(draw)
        low = 0.1 if name == "pow_scalar" else -2.0
        return [new(s, low, 2.0), draw(st.floats(0.1, 2.5)), new(s)]
    if name in ("pow_scalar_gradient", "scalar_pow_gradient"):
        s = _shape(draw)
        return [new(s, 0.1, 2.0), new(s), draw(st.floats(0.1, 2.5)), new(s)]
    if name == "pow":
        s = _shape(draw)
        return [new(s, 0.1, 2.0), new(s, -2.0, 2.0), new(s)]
    if name == "broadcast_dim":
        s = _shape(draw)
        axis = _axis_of(draw, s)
        g = new(_reduced(s, axis, draw(st.booleans())))
        return [g, new(s), axis, draw(st.floats(-3, 3))]
    if name == "amax_gradient":
        # Small integers, so that slices often hold tied maxima; y is the true max.
        s = _shape(draw)
        axis = _axis_of(draw, s)
        x = arrays.rng.integers(-2, 3, size=s).astype(np.float32)
        r = _reduced(s, axis, draw(st.booleans()))
        y = x.max(axis=axis, initial=-np.inf).reshape(r) if x.size else np.zeros(r)
        return [arrays.of(x), arrays.of(y), new(r), new(s), axis]
    if name in ("index_select", "index_add", "index_copy"):
        # index: integers in [-n, n) with repeats (and n = 0: an empty index or none to name)
        s = _shape(draw, 1)
        axis = _axis_of(draw, s)
        n = s[axis]
        length = draw(st.integers(0, 6))
        idx = arrays.rng.integers(-n, n, size=length) if n else np.zeros(0)
        part = s[:axis] + (len(idx),) + s[axis + 1 :]
        if name == "index_select":
            return [new(s), axis, arrays.of(idx), new(part)]
        extra = [draw(st.floats(-3, 3))] if name == "index_add" else []
        return [new(s), axis, arrays.of(idx), new(part), *extra]
    if name.startswith("layer_norm"):
        # x (*lead, *norm); weight (norm); stats (rows, 2) = [mean, rstd > 0]
        lead, norm = _shape(draw, 0, 2), _shape(draw, 1, 2)
        x, rows = lead + norm, int(np.prod(lead))
        eps, rms = draw(st.floats(1e-2, 1.0)), draw(st.booleans())
        if name == "layer_norm":
            return [new(x), new(norm), new(norm), new(x), eps, rms]
        if name == "layer_norm_stats":
            return [new(x), new((rows, 2)), eps, rms]
        if name == "layer_norm_backward":
            return [new(x), new(norm), new(x), new(x), new(norm), new(norm), eps, rms]
        stats = new((rows, 2), 0.1, 2.0)
        if name == "layer_norm_gradient":
            return [new(x), stats, new(norm), new(x), new(x), rms]
        return [new(x), stats, new(x), new(norm)]
    if name.startswith("batch_norm"):
        # x (N, C, *inner); stats (C, 2) = [mean, var > 0]
        x = _shape(draw, 2, 4)
        c, eps = x[1], draw(st.floats(1e-3, 1.0))
        if name == "batch_norm_stats":
            return [new(x), new((c, 2))]
        stats = new((c, 2), 0.1, 2.0)
        if name == "batch_norm":
            return [new(x), stats, new((c,)), new((c,)), new(x), eps]
        if name == "batch_norm_gradient":
            return [new(x), stats, new((c,)), new(x), new(x), eps, draw(st.booleans())]
        return [new(x), stats, new(x), new((c,)), eps]
    raise KeyError(name)


def _axis_of(draw, shape) -> int:
    return draw(st.integers(-len(shape), len(shape) - 1))


def _reduced(shape, axis: int, keepdims: bool) -> tuple:
    a = axis % len(shape)
    return shape[:a] + ((1,) if keepdims else ()) + shape[a + 1 :]


def _ref_array_set(name, a):
    return {0: np.full(_arr(a[0]).shape, _num(a[1]))}


def _ref_broadcast_to(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    return {1: _graph(ad.broadcastto_op, x, out, out_shape=out.shape)}


def _ref_reduce_sum_axis_zero(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    return {1: _graph(ad.reducesumaxiszero_op, x, out, out_shape=out.shape)}


def _ref_add_mul(name, a):
    x, y, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _same(x.shape, y.shape, out.shape)
    return {2: x + y if name.endswith("add") else x * y}


def _ref_div(name, a):
    x, y, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _same(x.shape, y.shape, out.shape)
    return {2: x / y}


def _ref_eq(name, a):
    x, y, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _same(x.shape, y.shape, out.shape)
    return {2: (x == y).astype(np.float64)}


def _ref_exp(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _same(x.shape, out.shape)
    return {1: getattr(np, name)(x)}


def _ref_sqrt_gradient(name, a):
    y, dy, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _same(y.shape, dy.shape, out.shape)
    return {2: dy / (2 * y)}


def _ref_pointwise_unary(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _same(x.shape, out.shape)
    with np.errstate(all="ignore"):
        fns = {
            "abs": np.abs,
            "sign": lambda v: (v > 0).astype(np.float64) - (v < 0),  # 0 for NaN, as PyTorch
            "sin": np.sin,
            "cos": np.cos,
            "erf": np.vectorize(math.erf, otypes=[np.float64]),
            "log1p": np.log1p,
            "rsqrt": lambda v: 1 / np.sqrt(v),
            "logical_not": lambda v: (v == 0).astype(np.float64),
        }
        return {1: fns[name](x) if x.size else x}


def _ref_rsqrt_gradient(name, a):
    y, dy, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _same(y.shape, dy.shape, out.shape)
    return {2: -0.5 * dy * y**3}


def _ref_pointwise_binary(name, a):
    x, y, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _same(x.shape, y.shape, out.shape)
    fns = {
        "lt": operator.lt,
        "le": operator.le,
        "gt": operator.gt,
        "ge": operator.ge,
        "logical_and": lambda u, v: (u != 0) & (v != 0),
        "logical_or": lambda u, v: (u != 0) | (v != 0),
        "minimum": np.minimum,
        "maximum": np.maximum,
    }
    return {2: np.asarray(fns[name](x, y), np.float64)}


def _ref_where(name, a):
    c, x, y, out = (_arr(v) for v in a[:4])
    _same(c.shape, x.shape, y.shape, out.shape)
    return {3: np.where(c != 0, x, y)}


def _ref_clamp(name, a):
    x, lo, hi, out = _arr(a[0]), _num(a[1]), _num(a[2]), _arr(a[3])
    _same(x.shape, out.shape)
    low = np.where(x < lo, lo, x)  # torch.clamp: hi where lo > hi, NaN in x stays
    return {3: np.where(low > hi, hi, low)}


def _ref_clamp_gradient(name, a):
    x, dy, lo, hi, out = _arr(a[0]), _arr(a[1]), _num(a[2]), _num(a[3]), _arr(a[4])
    _same(x.shape, dy.shape, out.shape)
    return {4: np.where((x >= lo) & (x <= hi), dy, 0.0)}


def _ref_scalar(name, a):
    x, v, out = _arr(a[0]), _num(a[1]), _arr(a[2])
    _same(x.shape, out.shape)
    return {2: x + v if "add" in name else x * v}


def _ref_matmul(name, a):
    for flag in (a[3], a[4]):
        if not isinstance(flag, (bool, np.bool_)):
            raise Invalid("flag")
    x, y, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[0], a[1])
    if x.ndim != 2 or y.ndim != 2:
        raise Invalid("rank")
    xa, yb = (x.T if a[3] else x), (y.T if a[4] else y)
    if xa.shape[1] != yb.shape[0] or out.shape != (xa.shape[0], yb.shape[1]):
        raise Invalid("shapes")
    return {2: xa @ yb}


def _ref_relu(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _same(x.shape, out.shape)
    return {1: np.maximum(x, 0.0)}


def _ref_relu_gradient(name, a):
    x, g, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _same(x.shape, g.shape, out.shape)
    return {2: np.where(x > 0, g, 0.0)}


def _ref_cross_entropy(name, a):
    y, y_, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[0], a[1])
    return {2: _graph(ad.softmaxcrossentropy_op, y, y_, out_shape=out.shape)}


def _ref_one_hot(name, a):
    idx, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    if idx.ndim != 1 or out.ndim != 2 or out.shape[0] != idx.shape[0]:
        raise Invalid("shapes")
    return {1: (idx[:, None] == np.arange(out.shape[1])[None, :]).astype(np.float64)}


def _ref_transpose(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    if x.ndim != 2 or out.shape != x.T.shape:
        raise Invalid("shapes")
    return {1: x.T}


def _ref_axpy(name, a):
    alpha, x, y = _num(a[0]), _arr(a[1]), _arr(a[2])
    _same(x.shape, y.shape)
    return {2: y + alpha * x}


def _ref_copy(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _same(x.shape, out.shape)
    return {1: x}


def _ref_reshape(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    if x.size != out.size:
        raise Invalid("sizes")
    return {1: x.reshape(out.shape)}


def _ref_conv2d(name, a):
    x, w, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[0], a[1])
    op = graph.conv2d_op if name == "conv2d" else graph.conv1d_op
    s, p = (_pair(a[3]), _pair(a[4])) if name == "conv2d" else (_int(a[3]), _int(a[4]))
    return {2: _graph(lambda X, W: op(X, W, s, p), x, w, out_shape=out.shape)}


def _ref_conv2d_gradient_input(name, a):
    dy, w, dx = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[0], a[1])
    op = graph.conv2d_gradient_input_op if "2d" in name else graph.conv1d_gradient_input_op
    s, p = (_pair(a[3]), _pair(a[4])) if "2d" in name else (_int(a[3]), _int(a[4]))
    ref = _graph(lambda D, W, X: op(D, W, X, s, p), dy, w, dx, out_shape=dx.shape)
    return {2: ref}


def _ref_conv2d_gradient_filter(name, a):
    x, dy, dw = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[0], a[1])
    op = graph.conv2d_gradient_filter_op if "2d" in name else graph.conv1d_gradient_filter_op
    s, p = (_pair(a[3]), _pair(a[4])) if "2d" in name else (_int(a[3]), _int(a[4]))
    ref = _graph(lambda X, D, W: op(X, D, W, s, p), x, dy, dw, out_shape=dw.shape)
    return {2: ref}


def _ref_add_channel_bias(name, a):
    x, b, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _same(x.shape, out.shape)
    return {2: _graph(graph.add_channel_bias_op, x, b, out_shape=out.shape)}


def _ref_reduce_sum_channels(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    return {1: _graph(graph.reduce_sum_channels_op, x, out_shape=out.shape)}


def _ref_max_pool2d(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    k, s, p = _pair(a[2]), (None if a[3] is None else _pair(a[3])), _pair(a[4])
    op = graph.max_pool2d_op if name == "max_pool2d" else graph.avg_pool2d_op
    return {1: _graph(lambda X: op(X, k, s, p), x, out_shape=out.shape)}


def _ref_max_pool2d_gradient(name, a):
    x, dy, dx = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[0], a[1])
    k, s, p = _pair(a[3]), (None if a[4] is None else _pair(a[4])), _pair(a[5])
    op = graph.max_pool2d_gradient_op
    return {2: _graph(lambda X, D: op(X, D, k, s, p), x, dy, out_shape=dx.shape)}


def _ref_avg_pool2d_gradient(name, a):
    dy, dx = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    k, s, p = _pair(a[2]), (None if a[3] is None else _pair(a[3])), _pair(a[4])
    op = graph.avg_pool2d_gradient_op
    return {1: _graph(lambda D, X: op(D, X, k, s, p), dy, dx, out_shape=dx.shape)}


def _ref_activation(name, a):
    """The modern activations and their gradients: gpumat.reference's kernels in float64."""
    *ins, out = (_arr(v) if not isinstance(v, numbers.Real) else _num(v) for v in a)
    arrays = [v for v in ins if isinstance(v, np.ndarray)]
    _same(*(v.shape for v in arrays), out.shape)
    result = np.full(out.shape, np.nan)
    with np.errstate(all="ignore"):
        getattr(gpumat.reference, name)(*ins, result)
    return {len(a) - 1: result}


def _ref_adaptive_avg_pool2d(name, a):
    src, dst = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    if src.ndim != 4 or dst.ndim != 4:
        raise Invalid("not 4-D")
    if name == "adaptive_avg_pool2d":
        return {1: _graph(lambda X: graph.adaptive_avg_pool2d_op(X, dst.shape[2:]), src)}
    op = graph.adaptive_avg_pool2d_gradient_op
    size = src.shape[2:]
    return {1: _graph(lambda D, X: op(D, X, size), src, dst, out_shape=dst.shape)}


def _ref_rnn_cell(name, a):
    *ins, out = a
    _no_alias(out, *ins)
    op = getattr(graph, name + "_op")
    return {len(a) - 1: _graph(op, *(_arr(v) for v in ins), out_shape=_arr(out).shape)}


def _ref_mse_loss(name, a):
    p, t, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[0], a[1])
    op = graph.mse_loss_op if name == "mse_loss" else graph.mae_loss_op
    return {2: _graph(op, p, t, out_shape=out.shape)}


def _ref_mse_loss_gradient(name, a):
    # Elementwise: out may be pred, target or (for one element) dloss itself.
    p, t, d, out = _arr(a[0]), _arr(a[1]), _arr(a[2]), _arr(a[3])
    op = graph.mse_loss_gradient_op if name.startswith("mse") else graph.mae_loss_gradient_op
    return {3: _graph(op, p, t, d, out_shape=out.shape)}


def _ref_adam_update(name, a):
    param, g, m, v = (_arr(x) for x in a[:4])
    roots = {x.root for x in a[:4]}
    if len(roots) != 4 and param.size > 0:  # empty arrays share no element
        raise Invalid("aliased")
    _same(param.shape, g.shape, m.shape, v.shape)
    lr, b1, b2, eps, step = _num(a[4]), _num(a[5]), _num(a[6]), _num(a[7]), _int(a[8])
    if not (0 <= b1 < 1 and 0 <= b2 < 1) or not (0 <= lr < math.inf and 0 <= eps < math.inf):
        raise Invalid("hyperparameters")
    if step < 1:
        raise Invalid("step")
    m2 = b1 * m + (1 - b1) * g
    v2 = b2 * v + (1 - b2) * g * g
    mhat, vhat = m2 / (1 - b1**step), v2 / (1 - b2**step)
    return {0: param - lr * mhat / (np.sqrt(vhat) + eps), 2: m2, 3: v2}


def _broadcast_target(out, *inputs):
    """Invalid unless the inputs broadcast to out's shape (at most 8 dims) and out shares no
    memory with an input of another shape."""
    try:
        target = np.broadcast_shapes(*[_arr(x).shape for x in inputs])
    except ValueError as exc:
        raise Invalid("shapes do not broadcast") from exc
    if target != _arr(out).shape or len(target) > 8:
        raise Invalid("not the broadcast shape")
    for x in inputs:
        if _arr(x).shape != target:
            _no_alias(out, x)


def _ref_broadcast_binary(name, a):
    if not isinstance(a[3], str) or a[3] not in ops.BROADCAST_BINARY_OPS:
        raise Invalid("op")
    _broadcast_target(a[2], a[0], a[1])
    want = np.empty(_arr(a[2]).shape)
    gpumat.reference.broadcast_binary(_arr(a[0]), _arr(a[1]), want, a[3])
    return {2: want}


def _ref_broadcast_where(name, a):
    _broadcast_target(a[3], a[0], a[1], a[2])
    return {3: np.where(_arr(a[0]) != 0, _arr(a[1]), _arr(a[2]))}


def _ref_sum_to(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    lead = x.ndim - out.ndim
    if (
        lead < 0
        or x.ndim > 8
        or any(out.shape[d] not in (1, x.shape[lead + d]) for d in range(out.ndim))
    ):
        raise Invalid("shapes")
    out_ = np.empty(out.shape)
    gpumat.reference.sum_to(x, out_)
    return {1: out_}


def _region(size, stride, offset, limit, distinct):
    """The flat addresses of a strided region, or Invalid (outside [0, limit), repeated)."""
    if not isinstance(stride, (tuple, list)):
        raise Invalid("strides")
    stride = tuple(_int(t) for t in stride)
    offset = _int(offset)
    if len(stride) != len(size) or len(size) > 8:
        raise Invalid("stride count")
    if math.prod(size) == 0:
        return np.zeros(size, np.int64)
    idx = np.indices(size).reshape(len(size), -1) if size else np.zeros((0, 1), np.int64)
    flat = np.full(idx.shape[1], offset, dtype=object)
    for d in range(len(size)):
        flat = flat + idx[d].astype(object) * stride[d]
    if min(flat) < 0 or max(flat) >= limit:
        raise Invalid("outside")
    if distinct and len(set(flat.tolist())) != flat.size:
        raise Invalid("repeated addresses")
    return flat.astype(np.int64).reshape(size)


def _ref_as_strided(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    flat = _region(out.shape, a[2], a[3], x.size, False)
    return {1: x.reshape(-1)[flat] if out.size else np.zeros(out.shape)}


def _ref_as_strided_scatter(name, a):
    src, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    flat = _region(src.shape, a[2], a[3], out.size, True)
    result = out.astype(np.float64).reshape(-1).copy()
    if src.size:
        result[flat.reshape(-1)] = src.reshape(-1)
    return {1: result.reshape(out.shape)}


def _ref_bmm(name, a):
    for flag in (a[3], a[4]):
        if not isinstance(flag, (bool, np.bool_)):
            raise Invalid("flag")
    x, y, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[0], a[1])
    if x.ndim != 3 or y.ndim != 3 or out.ndim != 3:
        raise Invalid("rank")
    xa, yb = (x.swapaxes(1, 2) if a[3] else x), (y.swapaxes(1, 2) if a[4] else y)
    if xa.shape[2] != yb.shape[1] or out.shape[1:] != (xa.shape[1], yb.shape[2]):
        raise Invalid("shapes")
    batch = yb.shape[0] if xa.shape[0] == 1 else xa.shape[0]  # a batch of 1 repeats
    if yb.shape[0] not in (batch, 1):
        raise Invalid("batch sizes")
    batch = out.shape[0] if batch == 1 else batch
    if out.shape[0] not in (batch, 1):
        raise Invalid("out's batch")
    prod = np.matmul(xa, yb)
    if out.shape[0] == 1 and prod.shape[0] != 1:  # the products' sum
        return {2: prod.sum(axis=0, keepdims=True)}
    return {2: np.broadcast_to(prod, out.shape).copy()}


def _ref_matmul_bias(name, a):
    for flag in (a[4], a[5], a[6]):
        if not isinstance(flag, (bool, np.bool_)):
            raise Invalid("flag")
    x, y, bias, out = _arr(a[0]), _arr(a[1]), _arr(a[2]), _arr(a[3])
    _no_alias(a[3], a[0], a[1], a[2])
    if x.ndim != 2 or y.ndim != 2 or bias.ndim != 1:
        raise Invalid("rank")
    xa, yb = (x.T if a[4] else x), (y.T if a[5] else y)
    if xa.shape[1] != yb.shape[0] or out.shape != (xa.shape[0], yb.shape[1]):
        raise Invalid("shapes")
    if bias.shape != (yb.shape[1],):
        raise Invalid("bias shape")
    ref = xa @ yb + bias
    return {3: np.maximum(ref, 0.0) if a[6] else ref}


def _ref_relu_bias_gradient(name, a):
    y, dy, dz, db = _arr(a[0]), _arr(a[1]), _arr(a[2]), _arr(a[3])
    _no_alias(a[2], a[0])  # dz may be dy
    _no_alias(a[3], a[0], a[1], a[2])
    if y.ndim != 2:
        raise Invalid("rank")
    _same(y.shape, dy.shape, dz.shape)
    if db.shape != (y.shape[1],):
        raise Invalid("dbias shape")
    g = np.where(y > 0, dy, 0.0)
    return {2: g, 3: g.sum(axis=0)}


def _ref_cross_entropy_with_gradient(name, a):
    y, y_, loss, grad = _arr(a[0]), _arr(a[1]), _arr(a[2]), _arr(a[3])
    _no_alias(a[2], a[0], a[1], a[3])
    _no_alias(a[3], a[0], a[1])
    if y.ndim != 2 or min(y.shape) < 1 or loss.shape != (1,):
        raise Invalid("shapes")
    _same(y.shape, y_.shape, grad.shape)
    return {
        2: _graph(ad.softmaxcrossentropy_op, y, y_, out_shape=(1,)),
        3: (_softmax(y) - y_) / y.shape[0],
    }


def _ref_softmax(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    _same(x.shape, out.shape)
    axis = _check_axis(a[2], x.shape)
    if x.size == 0:
        return {1: np.zeros(x.shape)}
    ref = np.empty(x.shape)
    getattr(gpumat.reference, name)(x, ref, axis)
    return {1: ref}


def _check_scale_causal(sc, causal) -> None:
    """The attention ops' scale (a finite real, not a bool) and causal (a bool), or Invalid."""
    if not isinstance(causal, (bool, np.bool_)):
        raise Invalid("causal")
    if isinstance(sc, (bool, np.bool_)) or not isinstance(sc, numbers.Real):
        raise Invalid("scale")
    if not math.isfinite(sc):
        raise Invalid("scale")


def _ref_attention(name, a):
    grad = name == "attention_gradient"
    q, k, v, out = (_arr(x) for x in a[:4])
    outs = a[5:6] if grad else a[3:4]
    _no_alias(outs[0], *a[: 5 if grad else 3])
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise Invalid("shapes")
    b, lq, e = q.shape
    if k.shape[0] != b or v.shape[0] != b or k.shape[2] != e or v.shape[1] != k.shape[1]:
        raise Invalid("shapes")
    if max(e, v.shape[2]) > 128:
        raise Invalid("head dim")
    _same(out.shape, (b, lq, v.shape[2] + 1))
    sc, causal = a[-2], a[-1]
    _check_scale_causal(sc, causal)
    if not grad:
        ref = np.empty(out.shape)
        gpumat.reference.attention(q, k, v, ref, sc, causal)
        return {3: ref}
    dout, dqkv = _arr(a[4]), _arr(a[5])
    _same(dout.shape, out.shape)
    _same(dqkv.shape, (q.size + k.size + v.size,))
    ref = np.empty(dqkv.shape)
    gpumat.reference.attention_gradient(q, k, v, out, dout, ref, sc, causal)
    return {5: ref}


def _ref_attention_strided(name, a):
    grad = name == "attention_strided_gradient"
    n_arrays = 4 if grad else 2
    qkv, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[n_arrays - 1], *a[: n_arrays - 1])
    heads, lengths, offsets, strides, sc, causal = a[n_arrays:]
    heads = _int(heads)
    geometry = []
    for value, n in ((lengths, 4), (offsets, 3), (strides, 3)):
        if not isinstance(value, (tuple, list)) or len(value) != n:
            raise Invalid("lengths, offsets, strides")
        geometry.append(tuple(_int(x) for x in value))
    lengths, offsets, strides = geometry
    if heads < 1 or out.ndim != 3 or out.shape[0] % heads:
        raise Invalid("heads or out")
    batch = out.shape[0] // heads
    try:
        gpumat.reference.attention_strided_regions(
            name, qkv.size, batch, heads, lengths, offsets, strides
        )
    except ValueError:
        raise Invalid("region") from None
    lq, _, e, ev = lengths
    if max(e, ev) > 128:
        raise Invalid("head dim")
    _same(out.shape, (batch * heads, lq, ev + 1))
    _check_scale_causal(sc, causal)
    if not grad:
        ref = np.empty(out.shape)
        gpumat.reference.attention_strided(qkv, ref, heads, lengths, offsets, strides, sc, causal)
        return {1: ref}
    dout, dqkv = _arr(a[2]), _arr(a[3])
    _same(dout.shape, out.shape)
    _same(dqkv.shape, qkv.shape)
    if not gpumat.reference.attention_strided_written_once(batch, heads, lengths, offsets, strides):
        raise Invalid("regions that share elements")
    ref = np.empty(qkv.shape)
    gpumat.reference.attention_strided_gradient(
        qkv, out, dout, ref, heads, lengths, offsets, strides, sc, causal
    )
    return {3: ref}


def _ref_softmax_gradient(name, a):
    y, dy, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[0], a[1])
    _same(y.shape, dy.shape, out.shape)
    axis = _check_axis(a[3], y.shape)
    if name == "softmax_gradient":
        return {2: y * (dy - (y * dy).sum(axis=axis, keepdims=True))}
    return {2: dy - np.exp(y) * dy.sum(axis=axis, keepdims=True)}


def _ref_nll_loss(name, a):
    lp, t, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[0], a[1])
    if lp.ndim != 2 or out.shape != (1,) or min(lp.shape) < 1:
        raise Invalid("shapes")
    _same(lp.shape, t.shape)
    return {2: np.array([-np.sum(t * lp) / lp.shape[0]])}


def _ref_nll_loss_gradient(name, a):
    # Elementwise in target: out may be target itself, not dloss (read by every element).
    t, d, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[1])
    if t.ndim != 2 or d.shape != (1,) or min(t.shape) < 1:
        raise Invalid("shapes")
    _same(t.shape, out.shape)
    return {2: -d[0] * t / t.shape[0]}


def _ref_tanh(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _same(x.shape, out.shape)
    ref = np.empty(x.shape)
    getattr(gpumat.reference, name)(x, ref)
    return {1: ref}


def _ref_tanh_gradient(name, a):
    y, dy, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _same(y.shape, dy.shape, out.shape)
    return {2: dy * (1 - y * y) if name == "tanh_gradient" else dy * y * (1 - y)}


def _ref_dropout(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _same(x.shape, out.shape)
    p, seed = a[2], _int(a[3])
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= float(p) <= 1.0:
        raise Invalid("p")
    if not 0 <= seed < 2**64:
        raise Invalid("seed")
    # The kernel takes p as a float32: its mask and scale use p rounded so.
    ref = np.empty(x.shape, x.dtype)
    gpumat.reference.dropout(x, ref, float(np.float32(p)), seed)
    return {1: ref}


def _ref_reduce_sum(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    axis = _check_axis(a[2], x.shape)
    _reduced_like(out.shape, x.shape, axis)
    if out.size == 0:
        return {1: np.zeros(out.shape)}
    if x.shape[axis] == 0 and name != "sum":
        raise Invalid("empty axis")
    f = {"sum": np.sum, "mean": np.mean, "amax": np.max}[name]
    return {1: f(x, axis=axis).reshape(out.shape)}


def _ref_argmax(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    axis = _check_axis(a[2], x.shape)
    _reduced_like(out.shape, x.shape, axis)
    if out.size == 0:
        return {1: np.zeros(out.shape)}
    if x.shape[axis] == 0:
        raise Invalid("empty axis")
    return {1: np.argmax(x, axis=axis).reshape(out.shape).astype(np.float64)}


def _sort_part(part, full, axis: int, at_most: bool) -> None:
    """Invalid unless ``part`` is ``full`` but for its length along ``axis`` (at most full's)."""
    if len(part) != len(full) or part[:axis] + part[axis + 1 :] != full[:axis] + full[axis + 1 :]:
        raise Invalid("not the shape but along the axis")
    if at_most and part[axis] > full[axis]:
        raise Invalid("k > n")


def _ref_argsort(name, a):
    if not isinstance(a[3], (bool, np.bool_)):
        raise Invalid("flag")
    x, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    axis = _check_axis(a[2], x.shape)
    _sort_part(out.shape, x.shape, axis, True)
    want = np.full(x.shape, np.nan)
    gpumat.reference.argsort(x, want, axis, bool(a[3]))
    return {1: np.take(want, range(out.shape[axis]), axis=axis)}


def _ref_gather(name, a):
    x, idx, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[0], a[1])
    axis = _check_axis(a[3], x.shape)
    _sort_part(out.shape, x.shape, axis, False)
    _same(idx.shape, out.shape)
    want = np.empty(out.shape)
    gpumat.reference.gather(x, idx, want, axis)
    return {2: want}


def _ref_gather_gradient(name, a):
    idx, dy, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[0], a[1])
    axis = _check_axis(a[3], out.shape)
    _sort_part(dy.shape, out.shape, axis, False)
    _same(idx.shape, dy.shape)
    want = np.empty(out.shape)
    gpumat.reference.gather_gradient(idx, dy, want, axis)
    return {2: want}


def _ref_randint(name, a):
    out = _arr(a[0])
    low, high, seed = _int(a[1]), _int(a[2]), _int(a[3])
    if not low < high or low < -(2**24) or high - 1 > 2**24 or not 0 <= seed < 2**64:
        raise Invalid("range or seed")
    want = np.empty(out.shape)
    gpumat.reference.randint(want, low, high, seed)
    return {0: want}


# prod, cumsum, the powers, tril / triu
def _ref_prod(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    axis = _check_axis(a[2], x.shape)
    _reduced_like(out.shape, x.shape, axis)
    return {1: np.prod(x, axis=axis).reshape(out.shape)}


def _ref_prod_gradient(name, a):
    x, dy, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _no_alias(a[2], a[0], a[1])
    axis = _check_axis(a[3], x.shape)
    _reduced_like(dy.shape, x.shape, axis)
    _same(x.shape, out.shape)
    xm = np.moveaxis(x, axis, -1)
    want = np.empty_like(xm)
    for j in range(xm.shape[-1]):
        want[..., j] = np.prod(np.delete(xm, j, axis=-1), axis=-1) * dy.reshape(xm.shape[:-1])
    return {2: np.moveaxis(want, -1, axis)}


def _ref_cumsum(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _same(x.shape, out.shape)
    axis = _check_axis(a[2], x.shape)
    if not isinstance(a[3], (bool, np.bool_)):
        raise Invalid("reverse")
    if a[3]:
        return {1: np.flip(np.cumsum(np.flip(x, axis), axis), axis)}
    return {1: np.cumsum(x, axis)}


def _ref_triangle(name, a):
    x, out = _arr(a[0]), _arr(a[1])
    _same(x.shape, out.shape)
    if x.ndim < 2:
        raise Invalid("rank")
    k = _int(a[2])
    if not -(2**63) <= k < 2**63:
        raise Invalid("diagonal beyond int64")
    k = max(-x.shape[-2] - 1, min(k, x.shape[-1] + 1))  # the same mask; numpy's tri overflows
    return {1: np.tril(x, k) if name == "tril" else np.triu(x, k)}


def _ref_pow_scalar(name, a):
    x, c, out = _arr(a[0]), _num(a[1]), _arr(a[2])
    _same(x.shape, out.shape)
    return {2: np.power(x, c) if name == "pow_scalar" else np.power(c, x)}


def _ref_pow_scalar_gradient(name, a):
    x, dy, c, out = _arr(a[0]), _arr(a[1]), _num(a[2]), _arr(a[3])
    _same(x.shape, dy.shape, out.shape)
    if name == "pow_scalar_gradient":
        return {3: np.zeros(x.shape) if c == 0 else dy * (c * np.power(x, c - 1))}
    g = dy * (np.power(c, x) * np.log(c))
    return {3: np.where((c == 0) & (x >= 0), 0.0, g)}


def _ref_pow(name, a):
    x, y, out = _arr(a[0]), _arr(a[1]), _arr(a[2])
    _same(x.shape, y.shape, out.shape)
    return {2: np.power(x, y)}


def _ref_broadcast_axis(name, a):
    g, out = _arr(a[0]), _arr(a[1])
    _no_alias(a[1], a[0])
    axis = _check_axis(a[2], out.shape)
    _reduced_like(g.shape, out.shape, axis)
    scale = _num(a[3])
    dropped = out.shape[:axis] + out.shape[axis + 1 :]
    return {1: np.broadcast_to(np.expand_dims(g.reshape(dropped), axis) * scale, out.shape)}


def _ref_reduce_max_gradient(name, a):
    x, y, dy, out = _arr(a[0]), _arr(a[1]), _arr(a[2]), _arr(a[3])
    _no_alias(a[3], a[0], a[1], a[2])
    _same(x.shape, out.shape)
    _same(y.shape, dy.shape)
    axis = _check_axis(a[4], x.shape)
    _reduced_like(y.shape, x.shape, axis)
    # dy shared equally by the tied maxima (x == y) of each slice; 0 elsewhere.
    dropped = x.shape[:axis] + x.shape[axis + 1 :]
    yk = np.expand_dims(y.reshape(dropped), axis)
    dyk = np.expand_dims(dy.reshape(dropped), axis)
    tie = x == yk
    return {3: np.where(tie, dyk / np.maximum(tie.sum(axis=axis, keepdims=True), 1), 0.0)}


def _ref_index(name, a):
    """index_select (in, dim, index, out), index_add / index_copy (out, dim, index, src[, alpha]):
    numpy's twins (an index naming no row: NaN, or no write)."""
    if name == "index_select":
        x, idx, out = _arr(a[0]), _arr(a[2]), _arr(a[3])
        _no_alias(a[3], a[0], a[2])
        full, part, slot = x, out, 3
    else:
        full, idx, part = _arr(a[0]), _arr(a[2]), _arr(a[3])
        _no_alias(a[0], a[2], a[3])
        slot = 0
    axis = _check_axis(a[1], full.shape)
    if idx.ndim != 1:
        raise Invalid("index not 1-D")
    if part.shape != full.shape[:axis] + (idx.shape[0],) + full.shape[axis + 1 :]:
        raise Invalid("shapes")
    if name == "index_select":
        want = np.empty(part.shape)
        gpumat.reference.index_select(full, axis, idx, want)
    elif name == "index_add":
        want = full.copy()
        gpumat.reference.index_add(want, axis, idx, part, _num(a[4]))
    else:
        want = full.copy()
        gpumat.reference.index_copy(want, axis, idx, part)
    return {slot: want}


def _flag(x) -> bool:
    if not isinstance(x, (bool, np.bool_)):
        raise Invalid("not a bool")
    return bool(x)


def _trailing(shape, d: int) -> None:
    """Some suffix of shape multiplies to d >= 1 (the norm family's row check)."""
    if d < 1:
        raise Invalid("empty normalized size")
    found, tail = d == 1, 1
    for dim in reversed(shape):
        if found or tail <= 0 or tail >= d:
            break
        tail *= dim
        found = tail == d
    if not found:
        raise Invalid("no trailing dims of d values")


def _stats_shape(stats, n: int) -> None:
    if stats.shape != (n, 2):
        raise Invalid("stats shape")


def _ref_layer_norm(name, a):
    """layer_norm (x, w, b, out, eps, rms), layer_norm_stats (x, stats, eps, rms),
    layer_norm_gradient (x, stats, w, dy, dx, rms), layer_norm_weight_gradient (x, stats, dy,
    dweight), layer_norm_backward (x, w, dy, dx, dweight, dbias, eps, rms): gpumat.reference's
    twins after the checks of extensions/src/ops/norm.cpp."""
    ref = gpumat.reference
    if name == "layer_norm":
        x, w, b, out = (_arr(v) for v in a[:4])
        eps, rms = _num(a[4]), _flag(a[5])
        _same(x.shape, out.shape)
        _no_alias(a[3], a[0], a[1], a[2])
        _trailing(x.shape, w.size)
        if b.size != w.size:
            raise Invalid("bias size")
        want = np.empty(x.shape)
        ref.layer_norm(x, w, b, want, eps, rms)
        return {3: want}
    if name == "layer_norm_stats":
        x, stats = _arr(a[0]), _arr(a[1])
        eps, rms = _num(a[2]), _flag(a[3])
        _no_alias(a[1], a[0])
        if stats.ndim != 2 or stats.shape[1] != 2:
            raise Invalid("stats shape")
        rows = stats.shape[0]
        if (x.size != 0) if rows == 0 else (x.size % rows != 0):
            raise Invalid("rows")
        if rows:
            _trailing(x.shape, x.size // rows)
        want = np.empty(stats.shape)
        ref.layer_norm_stats(x, want, eps, rms)
        return {1: want}
    if name == "layer_norm_gradient":
        x, stats, w, dy, dx = (_arr(v) for v in a[:5])
        rms = _flag(a[5])
        _same(x.shape, dy.shape, dx.shape)
        _no_alias(a[4], *a[:4])
        _trailing(x.shape, w.size)
        _stats_shape(stats, x.size // w.size)
        want = np.empty(x.shape)
        ref.layer_norm_gradient(x, stats, w, dy, want, rms)
        return {4: want}
    if name == "layer_norm_backward":
        x, w, dy, dx, dw, db = (_arr(v) for v in a[:6])
        eps, rms = _num(a[6]), _flag(a[7])
        _same(x.shape, dy.shape, dx.shape)
        for k in (3, 4, 5):
            _no_alias(a[k], *a[:3])
        _no_alias(a[3], a[4], a[5])
        _no_alias(a[4], a[5])
        _trailing(x.shape, w.size)
        if dw.size != w.size or db.size != w.size:
            raise Invalid("dweight or dbias size")
        want = [np.empty(dx.shape), np.empty(dw.shape), np.empty(db.shape)]
        ref.layer_norm_backward(x, w, dy, *want, eps, rms)
        return {3: want[0], 4: want[1], 5: want[2]}
    x, stats, dy, dw = (_arr(v) for v in a[:4])
    _same(x.shape, dy.shape)
    _no_alias(a[3], *a[:3])
    _trailing(x.shape, dw.size)
    _stats_shape(stats, x.size // dw.size)
    want = np.empty(dw.shape)
    ref.layer_norm_weight_gradient(x, stats, dy, want)
    return {3: want}


def _ref_batch_norm(name, a):
    """batch_norm_stats (x, stats), batch_norm (x, stats, w, b, out, eps), batch_norm_gradient
    (x, stats, w, dy, dx, eps, training), batch_norm_weight_gradient (x, stats, dy, dweight,
    eps)."""
    ref = gpumat.reference
    x, stats = _arr(a[0]), _arr(a[1])
    if x.ndim < 2:
        raise Invalid("rank")
    c = x.shape[1]
    _stats_shape(stats, c)
    if name == "batch_norm_stats":
        _no_alias(a[1], a[0])
        want = np.empty(stats.shape)
        ref.batch_norm_stats(x, want)
        return {1: want}
    if name == "batch_norm":
        w, b, out, eps = _arr(a[2]), _arr(a[3]), _arr(a[4]), _num(a[5])
        _same(x.shape, out.shape)
        _no_alias(a[4], *a[:4])
        if w.size != c or b.size != c:
            raise Invalid("weight or bias size")
        want = np.empty(x.shape)
        ref.batch_norm(x, stats, w, b, want, eps)
        return {4: want}
    if name == "batch_norm_gradient":
        w, dy, dx, eps, training = _arr(a[2]), _arr(a[3]), _arr(a[4]), _num(a[5]), _flag(a[6])
        _same(x.shape, dy.shape, dx.shape)
        _no_alias(a[4], *a[:4])
        if w.size != c:
            raise Invalid("weight size")
        want = np.empty(x.shape)
        ref.batch_norm_gradient(x, stats, w, dy, want, eps, training)
        return {4: want}
    dy, dw, eps = _arr(a[2]), _arr(a[3]), _num(a[4])
    _same(x.shape, dy.shape)
    _no_alias(a[3], *a[:3])
    if dw.size != c:
        raise Invalid("dweight size")
    want = np.empty(dw.shape)
    ref.batch_norm_weight_gradient(x, stats, dy, want, eps)
    return {3: want}


_REFERENCES = {
    "fill": _ref_array_set,
    "broadcast_to": _ref_broadcast_to,
    "sum_to_size": _ref_reduce_sum_axis_zero,
    "add": _ref_add_mul,
    "mul": _ref_add_mul,
    "div": _ref_div,
    "eq": _ref_eq,
    "exp": _ref_exp,
    "log": _ref_exp,
    "sqrt": _ref_exp,
    "sqrt_gradient": _ref_sqrt_gradient,
    "abs": _ref_pointwise_unary,
    "sign": _ref_pointwise_unary,
    "sin": _ref_pointwise_unary,
    "cos": _ref_pointwise_unary,
    "erf": _ref_pointwise_unary,
    "log1p": _ref_pointwise_unary,
    "rsqrt": _ref_pointwise_unary,
    "rsqrt_gradient": _ref_rsqrt_gradient,
    "logical_not": _ref_pointwise_unary,
    "lt": _ref_pointwise_binary,
    "le": _ref_pointwise_binary,
    "gt": _ref_pointwise_binary,
    "ge": _ref_pointwise_binary,
    "logical_and": _ref_pointwise_binary,
    "logical_or": _ref_pointwise_binary,
    "minimum": _ref_pointwise_binary,
    "maximum": _ref_pointwise_binary,
    "where": _ref_where,
    "clamp": _ref_clamp,
    "clamp_gradient": _ref_clamp_gradient,
    "add_scalar": _ref_scalar,
    "mul_scalar": _ref_scalar,
    "matmul": _ref_matmul,
    "bmm": _ref_bmm,
    "broadcast_binary": _ref_broadcast_binary,
    "broadcast_where": _ref_broadcast_where,
    "sum_to": _ref_sum_to,
    "as_strided": _ref_as_strided,
    "as_strided_scatter": _ref_as_strided_scatter,
    "relu": _ref_relu,
    "relu_gradient": _ref_relu_gradient,
    "cross_entropy": _ref_cross_entropy,
    "one_hot": _ref_one_hot,
    "transpose": _ref_transpose,
    "axpy": _ref_axpy,
    "copy": _ref_copy,
    "reshape": _ref_reshape,
    "conv2d": _ref_conv2d,
    "conv1d": _ref_conv2d,
    "conv2d_gradient_input": _ref_conv2d_gradient_input,
    "conv1d_gradient_input": _ref_conv2d_gradient_input,
    "conv2d_gradient_filter": _ref_conv2d_gradient_filter,
    "conv1d_gradient_filter": _ref_conv2d_gradient_filter,
    "add_channel_bias": _ref_add_channel_bias,
    "reduce_sum_channels": _ref_reduce_sum_channels,
    "max_pool2d": _ref_max_pool2d,
    "avg_pool2d": _ref_max_pool2d,
    "max_pool2d_gradient": _ref_max_pool2d_gradient,
    "avg_pool2d_gradient": _ref_avg_pool2d_gradient,
    "lstm_cell": _ref_rnn_cell,
    "lstm_cell_gradient": _ref_rnn_cell,
    "gru_cell": _ref_rnn_cell,
    "gru_cell_gradient": _ref_rnn_cell,
    "adaptive_avg_pool2d": _ref_adaptive_avg_pool2d,
    "adaptive_avg_pool2d_gradient": _ref_adaptive_avg_pool2d,
    **{
        n: _ref_activation
        for n in ("gelu", "gelu_tanh", "silu", "softplus", "leaky_relu", "elu")
        + ("gelu_gradient", "gelu_tanh_gradient", "silu_gradient", "softplus_gradient")
        + ("leaky_relu_gradient", "elu_gradient", "hardtanh_gradient")
    },
    "mse_loss": _ref_mse_loss,
    "l1_loss": _ref_mse_loss,
    "mse_loss_gradient": _ref_mse_loss_gradient,
    "l1_loss_gradient": _ref_mse_loss_gradient,
    "adam_update": _ref_adam_update,
    "matmul_bias": _ref_matmul_bias,
    "relu_bias_gradient": _ref_relu_bias_gradient,
    "cross_entropy_with_gradient": _ref_cross_entropy_with_gradient,
    "attention": _ref_attention,
    "attention_gradient": _ref_attention,
    "attention_strided": _ref_attention_strided,
    "attention_strided_gradient": _ref_attention_strided,
    "softmax": _ref_softmax,
    "log_softmax": _ref_softmax,
    "softmax_gradient": _ref_softmax_gradient,
    "log_softmax_gradient": _ref_softmax_gradient,
    "nll_loss": _ref_nll_loss,
    "nll_loss_gradient": _ref_nll_loss_gradient,
    "tanh": _ref_tanh,
    "sigmoid": _ref_tanh,
    "tanh_gradient": _ref_tanh_gradient,
    "sigmoid_gradient": _ref_tanh_gradient,
    "dropout": _ref_dropout,
    "sum": _ref_reduce_sum,
    "mean": _ref_reduce_sum,
    "amax": _ref_reduce_sum,
    "argmax": _ref_argmax,
    "argsort": _ref_argsort,
    "gather": _ref_gather,
    "gather_gradient": _ref_gather_gradient,
    "randint": _ref_randint,
    # reductions, sorting, creation
    "prod": _ref_prod,
    "prod_gradient": _ref_prod_gradient,
    "cumsum": _ref_cumsum,
    "tril": _ref_triangle,
    "triu": _ref_triangle,
    "pow_scalar": _ref_pow_scalar,
    "scalar_pow": _ref_pow_scalar,
    "pow_scalar_gradient": _ref_pow_scalar_gradient,
    "scalar_pow_gradient": _ref_pow_scalar_gradient,
    "pow": _ref_pow,
    "broadcast_dim": _ref_broadcast_axis,
    "amax_gradient": _ref_reduce_max_gradient,
    "index_select": _ref_index,
    "layer_norm": _ref_layer_norm,
    "layer_norm_stats": _ref_layer_norm,
    "layer_norm_gradient": _ref_layer_norm,
    "layer_norm_weight_gradient": _ref_layer_norm,
    "layer_norm_backward": _ref_layer_norm,
    "batch_norm_stats": _ref_batch_norm,
    "batch_norm": _ref_batch_norm,
    "batch_norm_gradient": _ref_batch_norm,
    "batch_norm_weight_gradient": _ref_batch_norm,
    "index_add": _ref_index,
    "index_copy": _ref_index,
}


def _reference(name, a):
    """Expected outputs {slot: float64 array} of ``ops.NAME(*a)`` (a: snapshots), or Invalid;
    KeyError for an op with no reference (one function per op or group, in ``_REFERENCES``)."""
    return _REFERENCES[name](name, a)


def _check_axis(axis, shape) -> int:
    """``axis`` normalised to [0, ndim), or Invalid (also for a 0-d shape: it has no axis)."""
    axis = _int(axis)
    if not -len(shape) <= axis < len(shape):
        raise Invalid("axis out of range")
    return axis % len(shape)


def _reduced_like(shape, full, axis: int) -> None:
    """Invalid unless ``shape`` is ``full`` with ``axis`` dropped or kept with length 1."""
    if tuple(shape) not in (full[:axis] + full[axis + 1 :], full[:axis] + (1,) + full[axis + 1 :]):
        raise Invalid("not the reduced shape")


OP_NAMES = [n for n in ops.__all__ if n != "set_conv_workspace_limit"]


def _close(got: np.ndarray, expected: np.ndarray) -> bool:
    with np.errstate(over="ignore", invalid="ignore"):
        expected32 = expected.astype(np.float32).astype(np.float64)
    got = got.astype(np.float64)
    if got.shape != expected.shape:
        return False
    scale = np.nanmax(np.abs(expected32[np.isfinite(expected32)]), initial=1.0)
    return bool(np.allclose(got, expected32, rtol=1e-4, atol=1e-5 * scale, equal_nan=True))


def check_op_call(name: str, args: list, arrays: Arrays) -> str | None:
    """Runs ops.NAME(*args); returns a failure description or None."""
    snaps = [arrays.snap(x) for x in args]
    before = [(x, x.asnumpy()) for x in args if isinstance(x, PyGpuMatrix) and x.ctx is not None]
    fn = getattr(ops, name)
    try:
        with np.errstate(all="ignore"):
            fn(*args)
    except ALLOWED as exc:
        if len(str(exc)) < 10:
            return f"{name}: {type(exc).__name__} with a message that says nothing: {exc!r}"
        for x, val in before:
            if not np.array_equal(x.asnumpy(), val, equal_nan=True):
                return f"{name}: raised {type(exc).__name__} but changed an argument"
        return None
    except Exception as exc:  # noqa: BLE001 (the point: any other exception is a failure)
        return f"{name}: unexpected {type(exc).__name__}: {exc}"
    if name in ("uniform", "normal"):
        return _check_random(name, args, snaps)
    try:
        with np.errstate(all="ignore"):
            expected = _reference(name, snaps)
    except Invalid as exc:
        return f"{name}: accepted arguments its rules reject ({exc}): {_describe(args)}"
    for slot, exp in expected.items():
        got = args[slot].asnumpy()
        if not _close(got, exp):
            err = np.nanmax(np.abs(got - exp)) if got.shape == exp.shape else "shape"
            return f"{name}: output {slot} differs from the float64 reference ({err})"
    return None


def _check_random(name, args, snaps) -> str | None:
    out = args[0]
    try:
        _arr(snaps[0])
        p1, p2, seed = _num(args[1]), _num(args[2]), _int(args[3])
    except Invalid as exc:
        return f"{name}: accepted bad arguments ({exc})"
    if not (math.isfinite(p1) and math.isfinite(p2)):
        return f"{name}: accepted non-finite parameters {p1}, {p2}"
    vals = out.asnumpy()
    if name == "uniform" and vals.size and not (vals.min() >= p1 and vals.max() <= p2):
        return f"{name}: values outside [{p1}, {p2}]"
    if name == "normal" and p2 < 0:
        return f"{name}: accepted std < 0"
    if not np.all(np.isfinite(vals)):
        return f"{name}: non-finite values"
    again = gpumat.empty(out.shape, CTX)
    getattr(ops, name)(again, p1, p2, seed)
    if not np.array_equal(again.asnumpy(), vals):
        return f"{name}: the same seed gave different values"
    return None


def _describe(args) -> str:
    out = []
    for x in args:
        if isinstance(x, PyGpuMatrix):
            out.append(f"PyGpuMatrix{x.shape}" if x.ctx is not None else "PyGpuMatrix(empty)")
        else:
            out.append(repr(x)[:40])
    return "(" + ", ".join(out) + ")"


# --------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------

RESULTS = {"cases": 0, "failures": []}


def _record(failure):
    RESULTS["cases"] += 1
    if failure is not None and len(RESULTS["failures"]) < 20:
        RESULTS["failures"].append(failure)


def _settings(factor: int = 1):
    return settings(
        max_examples=EXAMPLES * factor,
        deadline=None,
        database=None,
        derandomize=DERANDOMIZE,
        suppress_health_check=list(HealthCheck),
    )


def _bad_call(data, arrays: Arrays, valid: list, slot_kinds: list) -> list:
    """Replaces a drawn subset of ``valid``'s arguments with bad values."""
    args = list(valid)
    n_bad = data.draw(st.integers(0, min(2, len(args))), label="n_bad")
    slots = data.draw(
        st.lists(st.integers(0, len(args) - 1), min_size=n_bad, max_size=n_bad), label="slots"
    )
    for slot in slots:
        kind = slot_kinds[slot]
        if kind == "array":
            choice = data.draw(
                st.one_of(
                    bad_array_strategy(arrays, args[slot]),
                    st.sampled_from([x for x in valid if isinstance(x, PyGpuMatrix)]),
                ),
                label=f"arg{slot}",
            )
        elif kind == "int":
            choice = data.draw(st.sampled_from(BAD_INTS), label=f"arg{slot}")
        elif kind == "bool":
            choice = data.draw(st.sampled_from([0, 1, "yes", None, np.bool_(True), 2.0]))
        else:
            choice = data.draw(st.sampled_from(BAD_SCALARS), label=f"arg{slot}")
        args[slot] = choice
    return args


def _slot_kinds(valid: list) -> list:
    kinds = []
    for x in valid:
        if isinstance(x, PyGpuMatrix):
            kinds.append("array")
        elif isinstance(x, bool):
            kinds.append("bool")
        elif isinstance(x, int):
            kinds.append("int")
        else:
            kinds.append("float")
    return kinds


def _op_case(name):
    @_settings()
    @given(data=st.data(), seed=st.integers(0, 2**32 - 1))
    def case(data, seed):
        arrays = Arrays(np.random.default_rng(seed))
        valid = _valid_args(name, data.draw, arrays)
        args = _bad_call(data, arrays, valid, _slot_kinds(valid))
        _record(check_op_call(name, args, arrays))

    return case


# The multi-tensor optimizer ops: their lists (name, written in place, value range of a valid
# element) and scalars (name, strategy for a valid value, bad values).
_MULTI_TENSOR = {
    "sgd_update": {
        "lists": [("params", True, (-1, 1)), ("grads", False, (-1, 1))],
        "scalars": [("lr", st.floats(0, 2), None)],
    },
    "momentum_sgd_update": {
        "lists": [
            ("params", True, (-1, 1)),
            ("grads", False, (-1, 1)),
            ("velocities", True, (-1, 1)),
        ],
        "scalars": [("lr", st.floats(0, 2), None), ("momentum", st.floats(0, 0.99), None)],
    },
    "adam_update_multi": {
        "lists": [
            ("params", True, (-1, 1)),
            ("grads", False, (-1, 1)),
            ("m", True, (-1, 1)),
            ("v", True, (0, 1)),  # a second moment is >= 0
        ],
        "scalars": [
            ("lr", st.floats(0, 2), None),
            ("beta1", st.floats(0, 0.99), None),
            ("beta2", st.floats(0, 0.999), None),
            ("eps", st.floats(1e-8, 1e-2), None),
            ("step", st.integers(1, 1000), BAD_INTS),
        ],
    },
    "adadelta_update_multi": {
        "lists": [
            ("params", True, (-1, 1)),
            ("grads", False, (-1, 1)),
            ("square_avgs", True, (0, 1)),  # averages of squares are >= 0
            ("acc_deltas", True, (0, 1)),
        ],
        "scalars": [
            ("lr", st.floats(0, 2), None),
            ("rho", st.floats(0, 1), None),
            ("eps", st.floats(1e-8, 1e-1), None),
        ],
    },
}


def _multi_tensor_case(name):
    """ops.<name>(lists..., scalars...) of a multi-tensor optimizer op: the lists themselves,
    their elements (bad arrays, an array on another device), a scalar made bad, or an array
    placed in two slots (aliasing)."""
    spec = _MULTI_TENSOR[name]

    @_settings()
    @given(data=st.data(), seed=st.integers(0, 2**32 - 1))
    def case(data, seed):
        arrays = Arrays(np.random.default_rng(seed))
        shapes = [_shape(data.draw) for _ in range(data.draw(st.integers(1, 4)))]
        lists = [[arrays.new(s, lo, hi) for s in shapes] for _, _, (lo, hi) in spec["lists"]]
        scalars = [data.draw(strategy) for _, strategy, _ in spec["scalars"]]
        args = [*lists, *scalars]
        what = data.draw(st.sampled_from(["none", "element", "device", "list", "scalar", "alias"]))
        if what in ("element", "device"):
            lst = data.draw(st.sampled_from(lists))
            i = data.draw(st.integers(0, len(lst) - 1))
            if what == "element":
                lst[i] = data.draw(bad_array_strategy(arrays, lst[i]))
            else:
                lst[i] = gpumat.array(lst[i].asnumpy(), gpumat.emu())
        elif what == "list":
            slot = data.draw(st.integers(0, len(lists) - 1))
            args[slot] = data.draw(
                st.sampled_from([None, 3, "p", lists[0][0], tuple(args[slot]), args[slot][:-1]])
            )
        elif what == "scalar":
            k = data.draw(st.integers(0, len(scalars) - 1))
            bad = spec["scalars"][k][2] or BAD_SCALARS + [None, "0.1", True]
            args[len(lists) + k] = data.draw(st.sampled_from(bad))
        elif what == "alias":
            dst, src = data.draw(st.sampled_from(lists)), data.draw(st.sampled_from(lists))
            dst[data.draw(st.integers(0, len(dst) - 1))] = data.draw(st.sampled_from(src))
        _record(check_multi_tensor_call(name, args, arrays))

    return case


def _multi_tensor_reference(name, old: list, scalars: list) -> list:
    """The float64 values of the written lists after one step (old: one value list per list)."""
    if name == "sgd_update":
        (lr,) = scalars
        return [[p - lr * g for p, g in zip(*old, strict=True)]]
    if name == "momentum_sgd_update":
        lr, mu = scalars
        vs = [mu * v + g for g, v in zip(old[1], old[2], strict=True)]
        return [[p - lr * v for p, v in zip(old[0], vs, strict=True)], vs]
    if name == "adadelta_update_multi":
        lr, rho, eps = scalars
        sqs = [rho * sq + (1 - rho) * g * g for g, sq in zip(old[1], old[2], strict=True)]
        ds = [
            np.sqrt(acc + eps) / np.sqrt(sq + eps) * g
            for g, sq, acc in zip(old[1], sqs, old[3], strict=True)
        ]
        accs = [rho * acc + (1 - rho) * d * d for acc, d in zip(old[3], ds, strict=True)]
        return [[p - lr * d for p, d in zip(old[0], ds, strict=True)], sqs, accs]
    lr, b1, b2, eps, t = scalars
    ms = [b1 * m + (1 - b1) * g for g, m in zip(old[1], old[2], strict=True)]
    vs = [b2 * v + (1 - b2) * g * g for g, v in zip(old[1], old[3], strict=True)]
    bc1, bc2 = 1 - b1**t, 1 - b2**t
    ps = [
        p - lr * (m / bc1) / (np.sqrt(v / bc2) + eps)
        for p, m, v in zip(old[0], ms, vs, strict=True)
    ]
    return [ps, ms, vs]


def _multi_tensor_scalar(name: str, what: str, value) -> float | int:
    """A scalar as the op must read it (float32-rounded); Invalid when the op must reject it."""
    if isinstance(value, bool):
        raise Invalid("a bool")
    if what == "step":
        t = _int(value)
        if not 1 <= t < 2**63:
            raise Invalid("step out of range")
        return t
    x = _num(value)
    if what == "rho":  # Adadelta's decay: [0, 1], both ends included
        if not 0 <= x <= 1:
            raise Invalid("rho out of range")
        return x
    if name == "adadelta_update_multi" and what == "eps" and not 0 < x < math.inf:
        raise Invalid("eps must be > 0")
    top = 1.0 if what in ("momentum", "beta1", "beta2") else math.inf
    if not 0 <= x < top:
        raise Invalid(f"{what} out of range")
    return x


def check_multi_tensor_call(name: str, args: list, arrays: Arrays) -> str | None:
    """Runs ops.<name>(*args) against a float64 reference; a failure description or None."""
    spec = _MULTI_TENSOR[name]
    n_lists = len(spec["lists"])
    flat = [x for a in args[:n_lists] if isinstance(a, (list, tuple)) for x in a]
    live = [x for x in flat if isinstance(x, PyGpuMatrix) and x.ctx is not None]
    before = {id(x): (x, x.asnumpy().astype(np.float64)) for x in live}
    try:
        with np.errstate(all="ignore"):
            getattr(ops, name)(*args)
    except ALLOWED as exc:
        if len(str(exc)) < 10:
            return f"{name}: {type(exc).__name__} with a message that says nothing"
        for x, val in before.values():
            if not np.array_equal(x.asnumpy(), val, equal_nan=True):
                return f"{name}: raised {type(exc).__name__} but changed an argument"
        return None
    except Exception as exc:  # noqa: BLE001
        return f"{name}: unexpected {type(exc).__name__}: {exc}"
    lists = args[:n_lists]
    if not all(isinstance(a, (list, tuple)) for a in lists) or len({len(a) for a in lists}) != 1:
        return f"{name}: accepted lists of different kinds or lengths"
    try:
        scalars = [
            _multi_tensor_scalar(name, what, value)
            for (what, _, _), value in zip(spec["scalars"], args[n_lists:], strict=True)
        ]
    except Invalid:
        return f"{name}: accepted scalars {args[n_lists:]!r}"
    params = lists[0]
    for k, lst in enumerate(lists):
        for x, p in zip(lst, params, strict=True):
            if id(x) not in before or x.shape != p.shape or x.ctx != params[0].ctx:
                return f"{name}: accepted a bad element in {spec['lists'][k][0]}"
    # Every written array's storage must be used nowhere else (read-only ones may repeat).
    uses: dict[int, int] = {}
    written: set[int] = set()
    for (_, writes, _), lst in zip(spec["lists"], lists, strict=True):
        for x in lst:
            if x.size:
                root = arrays.root_of.get(id(x), id(x))
                uses[root] = uses.get(root, 0) + 1
                if writes:
                    written.add(root)
    if any(uses[r] > 1 for r in written):
        return f"{name}: accepted an aliased written array"
    old = [[before[id(x)][1] for x in lst] for lst in lists]
    expected = _multi_tensor_reference(name, old, scalars)
    outs = [lst for (_, writes, _), lst in zip(spec["lists"], lists, strict=True) if writes]
    for lst, exp in zip(outs, expected, strict=True):
        for x, e in zip(lst, exp, strict=True):
            if not _close(x.asnumpy(), e):
                return f"{name}: an updated array differs from the float64 reference"
    return None


def _norm_clip_case(name):
    """ops.total_norm_multi(arrays, norm_type, out) / ops.clip_scale_multi(arrays, total_norm,
    max_norm): the list, its elements, the one-element array, the scalar made bad, or aliasing."""

    @_settings()
    @given(data=st.data(), seed=st.integers(0, 2**32 - 1))
    def case(data, seed):
        arrays = Arrays(np.random.default_rng(seed))
        xs = [arrays.new(_shape(data.draw), -1, 1) for _ in range(data.draw(st.integers(0, 4)))]
        one = arrays.new((1,), 0, 2)
        scalar = data.draw(
            st.sampled_from([1.0, 2.0, 0.5, math.inf] if "norm" in name else [0.3, 5.0])
        )
        what = data.draw(
            st.sampled_from(["none", "element", "device", "list", "scalar", "one", "alias"])
        )
        if what in ("element", "device") and xs:
            i = data.draw(st.integers(0, len(xs) - 1))
            if what == "element":
                xs[i] = data.draw(bad_array_strategy(arrays, xs[i]))
            else:
                xs[i] = gpumat.array(xs[i].asnumpy(), gpumat.emu())
        elif what == "list":
            xs = data.draw(st.sampled_from([None, 3, "p", one]))
        elif what == "scalar":
            scalar = data.draw(st.sampled_from(BAD_SCALARS + [None, "0.1", 0.0, -1.0]))
        elif what == "one":
            one = data.draw(bad_array_strategy(arrays, one))
        elif what == "alias" and xs:
            xs[data.draw(st.integers(0, len(xs) - 1))] = data.draw(st.sampled_from([one, *xs]))
        _record(check_norm_clip_call(name, xs, one, scalar, arrays))

    return case


def check_norm_clip_call(name, xs, one, scalar, arrays) -> str | None:
    """Runs ops.<name>(xs, ...) against float64; a failure description or None."""
    flat = [x for x in (xs if isinstance(xs, list) else []) + [one] if isinstance(x, PyGpuMatrix)]
    live = [x for x in flat if x.ctx is not None]
    before = {id(x): (x, x.asnumpy().astype(np.float64)) for x in live}
    args = (xs, scalar, one) if name == "total_norm_multi" else (xs, one, scalar)
    try:
        with np.errstate(all="ignore"):
            getattr(ops, name)(*args)
    except ALLOWED as exc:
        if len(str(exc)) < 10:
            return f"{name}: {type(exc).__name__} with a message that says nothing"
        for x, val in before.values():
            if not np.array_equal(x.asnumpy(), val, equal_nan=True):
                return f"{name}: raised {type(exc).__name__} but changed an argument"
        return None
    except Exception as exc:  # noqa: BLE001
        return f"{name}: unexpected {type(exc).__name__}: {exc}"
    if not isinstance(xs, list) or not all(id(x) in before for x in xs) or id(one) not in before:
        return f"{name}: accepted a bad list or array"
    if one.size != 1 or any(x.ctx != one.ctx for x in xs):
        return f"{name}: accepted a bad one-element array or a device mismatch"
    ok = isinstance(scalar, (int, float)) and not isinstance(scalar, bool)
    if not ok or not (scalar > 0 if name == "total_norm_multi" else 0 <= scalar < math.inf):
        return f"{name}: accepted scalar {scalar!r}"
    roots = [arrays.root_of.get(id(x), id(x)) for x in xs if x.size]
    one_root = arrays.root_of.get(id(one), id(one))
    # The output (or the norm read while scaling) is none of the arrays; written arrays differ.
    if one_root in roots or (name == "clip_scale_multi" and len(set(roots)) != len(roots)):
        return f"{name}: accepted an aliased array"
    vals = [before[id(x)][1] for x in xs]
    if name == "total_norm_multi":
        flat64 = np.abs(np.concatenate([v.ravel() for v in vals] + [np.zeros(0)]))
        if flat64.size == 0:
            exp = 0.0
        elif scalar == math.inf:
            exp = flat64.max()
        else:
            exp = (flat64**scalar).sum() ** (1 / scalar)
        return None if _close(one.asnumpy().reshape(1), np.array([exp])) else f"{name}: wrong norm"
    coef = min(1.0, scalar / (before[id(one)][1].reshape(-1)[0] + 1e-6))
    for x, v in zip(xs, vals, strict=True):
        if not _close(x.asnumpy(), v * coef):
            return f"{name}: a scaled array differs from the float64 reference"
    return None


def batch_ops(names):
    for name in names:
        if name in _MULTI_TENSOR:
            _multi_tensor_case(name)()
            continue
        if name in ("total_norm_multi", "clip_scale_multi"):
            _norm_clip_case(name)()
            continue
        _op_case(name)()


def _expect_error_or(fn, check=None, what=""):
    """Runs fn(); an ALLOWED exception with a message passes; a result passes when check(result)
    returns None (or there is no check)."""
    try:
        with np.errstate(all="ignore"):
            result = fn()
    except ALLOWED as exc:
        return None if len(str(exc)) >= 10 else f"{what}: {type(exc).__name__} says nothing"
    except Exception as exc:  # noqa: BLE001
        return f"{what}: unexpected {type(exc).__name__}: {exc}"
    return None if check is None else check(result)


ANY_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.lists(st.integers(-3, 5), max_size=4),
    st.tuples(st.integers(-3, 5), st.integers(-3, 5)),
    st.sampled_from(
        [
            np.float32(1.5),
            np.int64(2),
            1 + 2j,
            np.zeros((2, 3)),
            np.zeros((2, 3), dtype=complex),
            np.array(["a"]),
            np.array([object()]),
            np.zeros((0, 3)),
            np.float64("nan") * np.ones((2, 2)),
            gpumat.cpu(),
            "gpu",
            object(),
        ]
    ),
)


def batch_arrays():
    """gpumat.array / empty, PyGpuMatrix's constructor and methods, the dlsys contexts."""

    @_settings()
    @given(x=ANY_VALUES, ctx=st.sampled_from([None, gpumat.cpu(), "cpu", 0, dlsys_nd.cpu(0)]))
    def arrays_and_empty(x, ctx):
        def check_array(result):
            ref = np.asarray(x)
            if ref.dtype.kind not in "biuf":
                return f"gpumat.array accepted dtype {ref.dtype}"
            with np.errstate(over="ignore"):  # float64 beyond float32's range becomes inf
                ref32 = ref.astype(np.float32)
            if not np.array_equal(result.asnumpy(), ref32, equal_nan=True):
                return f"gpumat.array({x!r}) values differ"
            return None

        def check_empty(result):
            dims = (x,) if isinstance(x, (int, np.integer)) else tuple(x)
            if any(isinstance(d, bool) or int(d) < 0 for d in dims):
                return f"gpumat.empty accepted shape {x!r}"
            return None if result.shape == tuple(int(d) for d in dims) else "empty: wrong shape"

        _record(_expect_error_or(lambda: gpumat.array(x, ctx), check_array, "gpumat.array"))
        _record(_expect_error_or(lambda: gpumat.empty(x, ctx), check_empty, "gpumat.empty"))

    arrays_and_empty()

    @_settings()
    @given(host=ANY_VALUES, rows=ANY_VALUES, cols=ANY_VALUES, seed=st.integers(0, 2**32))
    def legacy_constructor(host, rows, cols, seed):
        rng = np.random.default_rng(seed)
        if type(rows) is int and type(cols) is int and 0 <= rows < 5 and 0 <= cols < 5:
            host = rng.uniform(-1, 1, (rows, cols)).astype(np.float32)

        def check(result):
            if not (isinstance(host, np.ndarray) and host.dtype.kind == "f"):
                return f"PyGpuMatrix accepted host {type(host).__name__}"
            if isinstance(rows, bool) or host.shape != (rows, cols):
                return f"PyGpuMatrix accepted rows={rows!r} cols={cols!r} for {host.shape}"
            return None if np.array_equal(result.asnumpy(), host) else "PyGpuMatrix: values differ"

        _record(_expect_error_or(lambda: PyGpuMatrix(host, rows, cols), check, "PyGpuMatrix()"))

    legacy_constructor()

    @_settings(factor=10)
    @given(
        data=st.data(),
        method=st.sampled_from(
            [
                "shape",
                "ndim",
                "size",
                "nbytes",
                "is_view",
                "repr",
                "len",
                "asnumpy",
                "numpy",
                "copyfrom",
                "copyto",
                "setitem",
                "reshape",
                "mul",
                "add",
                "multiply",
                "negate",
                "transpose",
                "relu",
                "randomInit",
                "loadFromDevice",
                "loadToDevice",
                "copy",
                "init_again",
            ]
        ),
        empty_self=st.booleans(),
        seed=st.integers(0, 2**32),
    )
    def methods(data, method, empty_self, seed):
        rng = np.random.default_rng(seed)
        arrays = Arrays(rng)
        r, c = data.draw(small), data.draw(small)
        host = rng.uniform(-1, 1, (r, c)).astype(np.float32)
        a = _empty_matrix() if empty_self else PyGpuMatrix(host, r, c)
        other = data.draw(
            st.one_of(
                ANY_VALUES,
                st.sampled_from(["empty", "same", "square", "wrong"]).map(
                    lambda k: {
                        "empty": _empty_matrix(),
                        "same": arrays.new((r, c)),
                        "square": arrays.new((c, r)),
                        "wrong": arrays.new((r + 1, c)),
                    }[k]
                ),
            )
        )
        _record(_method_case(a, method, other, data, host, r, c, empty_self))

    methods()

    @_settings()
    @given(dev=ANY_VALUES, kind=ANY_VALUES)
    def dlsys_contexts(dev, kind):
        def check_ctx(result):
            if isinstance(dev, bool) or not isinstance(dev, (int, np.integer)) or dev < 0:
                return f"DLContext accepted device_id {dev!r}"
            return None if result.device_type in (1, 2) else "DLContext: bad device_type"

        _record(_expect_error_or(lambda: dlsys_nd.DLContext(dev, kind), check_ctx, "DLContext"))
        _record(_expect_error_or(lambda: dlsys_nd.gpu(dev), None, "ndarray.gpu"))
        _record(_expect_error_or(lambda: dlsys_ad.broadcast_rule(dev, kind), None, "broadcast"))

    dlsys_contexts()

    @_settings()
    @given(nbytes=ANY_VALUES)
    def workspace_limit(nbytes):
        previous = ops.set_conv_workspace_limit(1 << 20)
        try:

            def check(result):
                if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Integral):
                    return f"set_conv_workspace_limit accepted {nbytes!r}"
                if nbytes < 0 or result != 1 << 20:
                    return f"set_conv_workspace_limit({nbytes!r}) returned {result!r}"
                return None

            fn = lambda: ops.set_conv_workspace_limit(nbytes)  # noqa: E731
            _record(_expect_error_or(fn, check, "set_conv_workspace_limit"))
        finally:
            ops.set_conv_workspace_limit(previous)

    workspace_limit()


def _method_case(a, method, other, data, host, r, c, empty_self):
    """One call of a PyGpuMatrix method with ``other`` as its argument where it takes one."""
    what = f"PyGpuMatrix.{method}({'empty' if empty_self else (r, c)}, {type(other).__name__})"
    a_np = None if empty_self else a.asnumpy().astype(np.float64)
    other_np = (
        other.asnumpy().astype(np.float64)
        if isinstance(other, PyGpuMatrix) and other.ctx is not None
        else None
    )

    def expect_shape(out, shape):
        if empty_self:
            return f"{what}: worked on an empty matrix"
        if not isinstance(out, PyGpuMatrix) or out.ctx is None or out.shape != shape:
            return f"{what}: accepted a bad output"
        return None

    def compare(got, exp):
        return None if _close(got, exp) else f"{what}: differs from the float64 reference"

    if method == "repr":
        text = repr(a)
        ok = ("empty" in text) if empty_self else ("shape" in text)
        return None if ok else f"{what}: repr says {text!r}"
    if method in ("shape", "ndim", "size", "nbytes", "is_view"):
        return _expect_error_or(
            lambda: getattr(a, method),
            lambda res: f"{what}: worked on an empty matrix" if empty_self else None,
            what,
        )
    if method == "len":
        return _expect_error_or(lambda: len(a), lambda n: None if n == r else f"{what}: {n}", what)
    if method in ("asnumpy", "numpy"):
        fn = a.asnumpy if method == "asnumpy" else (lambda: np.asarray(a))
        return _expect_error_or(fn, lambda res: compare(res, a_np), what)
    if method == "copy":
        return _expect_error_or(lambda: copy_module.copy(a), None, what)
    if method == "init_again":
        return _expect_error_or(lambda: a.__init__(host, r, c), None, what)
    if method == "reshape":
        return _expect_error_or(
            lambda: a.reshape(other),
            lambda res: (
                None
                if not empty_self and res.size == r * c and res.ctx is not None
                else f"{what}: bad reshape"
            ),
            what,
        )
    if method in ("copyfrom", "setitem"):

        def check(_):
            if empty_self:
                return f"{what}: worked on an empty matrix"
            if isinstance(other, PyGpuMatrix):
                exp = other_np
            elif method == "setitem" and isinstance(other, (int, float, np.number)):
                exp = np.full((r, c), float(np.float32(other)))
            else:
                exp = np.asarray(other, dtype=np.float64)
            if exp is None or exp.shape != (r, c):
                return f"{what}: accepted a value of another shape"
            return compare(a.asnumpy(), exp)

        fn = (
            (lambda: a.copyfrom(other))
            if method == "copyfrom"
            else (lambda: a.__setitem__(slice(None), other))
        )
        return _expect_error_or(fn, check, what)
    if method == "copyto":
        return _expect_error_or(
            lambda: a.copyto(other),
            lambda res: compare(res.asnumpy(), a_np) if not empty_self else f"{what}: worked",
            what,
        )
    if method == "mul":
        m, n, k = data.draw(ANY_VALUES | small), data.draw(ANY_VALUES | small), c
        B = other
        C = data.draw(st.sampled_from([other, _empty_matrix(), None]))
        if isinstance(m, int) and isinstance(n, int) and not isinstance(m, bool):
            if 0 < m < 5 and 0 < n < 5 and data.draw(st.booleans()):
                m = r
                B = PyGpuMatrix(np.random.default_rng(0).random((k, n), dtype=np.float32), k, n)
                C = PyGpuMatrix(np.zeros((m, n), dtype=np.float32), m, n)
        b_np = B.asnumpy().astype(np.float64) if isinstance(B, PyGpuMatrix) and B.ctx else None

        def check(_):
            if empty_self or b_np is None or (m, k) != (r, c) or b_np.shape != (k, n):
                return f"{what}: accepted M={m!r} N={n!r} K={k!r} with a bad buffer"
            return compare(C.loadFromDevice(), a_np @ b_np)

        return _expect_error_or(lambda: a.mul(m, n, k, B, C), check, what)
    if method in ("add", "multiply"):

        def check(_):
            if empty_self or other_np is None or other_np.shape != (r, c):
                return f"{what}: accepted a bad operand"
            exp = a_np + other_np if method == "add" else a_np * other_np
            return compare(other.asnumpy(), exp)

        return _expect_error_or(lambda: getattr(a, method)(other, other), check, what)
    if method in ("negate", "relu", "transpose"):
        shape = (c, r) if method == "transpose" else (r, c)

        def check(_):
            bad = expect_shape(other, shape)
            if bad:
                return bad
            exp = {"negate": -a_np, "relu": np.maximum(a_np, 0), "transpose": a_np.T}[method]
            return compare(other.asnumpy(), exp)

        return _expect_error_or(lambda: getattr(a, method)(other), check, what)
    if method == "randomInit":
        lo, hi = data.draw(ANY_VALUES), data.draw(ANY_VALUES)

        def check(_):
            if empty_self:
                return f"{what}: worked on an empty matrix"
            vals = a.asnumpy()
            if not np.all(np.isfinite(vals)):
                return f"{what}: non-finite values for low={lo!r}, high={hi!r}"
            if vals.min() < float(lo) or vals.max() > float(hi):
                return f"{what}: values outside [{lo}, {hi}]"
            return None

        return _expect_error_or(lambda: a.randomInit(lo, hi, other), check, what)
    if method in ("loadFromDevice", "loadToDevice"):

        def check(res):
            if empty_self:
                return f"{what}: worked on an empty matrix"
            return compare(host, a_np)

        return _expect_error_or(getattr(a, method), check, what)
    raise KeyError(method)


def batch_graph():
    """Graph op constructors, gradients and the Executor with bad arguments."""
    x, w = ad.Variable("x"), ad.Variable("w")
    builders = {
        "add_op": lambda u, v: ad.add_op(u, v),
        "mul_op": lambda u, v: ad.mul_op(u, v),
        "add_byconst_op": lambda u, v: ad.add_byconst_op(u, v),
        "mul_byconst_op": lambda u, v: ad.mul_byconst_op(u, v),
        "matmul_op": lambda u, v: ad.matmul_op(u, x, v, False),
        "bmm_op": lambda u, v: ad.bmm_op(u, x, v, False),
        "transpose_op": lambda u, v: ad.transpose_op(u),
        "zeroslike_op": lambda u, v: ad.zeroslike_op(u),
        "oneslike_op": lambda u, v: ad.oneslike_op(u),
        "reducesumaxiszero_op": lambda u, v: ad.reducesumaxiszero_op(u, v),
        "broadcastto_op": lambda u, v: ad.broadcastto_op(u, v),
        "relu_op": lambda u, v: ad.relu_op(u),
        "relu_gradient_op": lambda u, v: ad.relu_gradient_op(u, v),
        "softmax_op": lambda u, v: ad.softmax_op(u),
        "attention_op": lambda u, v: ad.attention_op(x, x, x, u, v),
        "softmaxcrossentropy_op": lambda u, v: ad.softmaxcrossentropy_op(u, v),
        "dlsys softmaxcrossentropy_op": lambda u, v: dlsys_ad.softmaxcrossentropy_op(u, v),
        "conv2d_op": lambda u, v: graph.conv2d_op(u, w, v),
        "conv1d_op": lambda u, v: graph.conv1d_op(u, w, 1, v),
        "max_pool2d_op": lambda u, v: graph.max_pool2d_op(u, v),
        "avg_pool2d_op": lambda u, v: graph.avg_pool2d_op(u, 2, v),
        "add_channel_bias_op": lambda u, v: graph.add_channel_bias_op(u, v),
        "reduce_sum_channels_op": lambda u, v: graph.reduce_sum_channels_op(u),
        "reshape_op": lambda u, v: graph.reshape_op(u, v),
        "flatten_op": lambda u, v: graph.flatten_op(u),
        "mse_loss_op": lambda u, v: graph.mse_loss_op(u, v),
        "mae_loss_op": lambda u, v: graph.mae_loss_op(u, v),
        "softmax_op axis": lambda u, v: ad.softmax_op(x, v),
        "log_softmax_op": lambda u, v: graph.log_softmax_op(u, v),
        "softmax_gradient_op": lambda u, v: graph.softmax_gradient_op(u, x, v),
        "log_softmax_gradient_op": lambda u, v: graph.log_softmax_gradient_op(u, x, v),
        "nll_loss_op": lambda u, v: graph.nll_loss_op(u, v),
        "nll_loss_gradient_op": lambda u, v: graph.nll_loss_gradient_op(u, v),
        "tanh_op": lambda u, v: graph.tanh_op(u),
        "sigmoid_op": lambda u, v: graph.sigmoid_op(u),
        "tanh_gradient_op": lambda u, v: graph.tanh_gradient_op(u, v),
        "sigmoid_gradient_op": lambda u, v: graph.sigmoid_gradient_op(u, v),
        "dropout_op": lambda u, v: graph.dropout_op(x, u, v),
        "reduce_sum_op": lambda u, v: graph.reduce_sum_op(x, u, v),
        "reduce_mean_op": lambda u, v: graph.reduce_mean_op(x, u, v),
        "reduce_max_op": lambda u, v: graph.reduce_max_op(x, u, v),
        "broadcast_axis_op": lambda u, v: graph.broadcast_axis_op(u, x, v),
        "reduce_max_gradient_op": lambda u, v: graph.reduce_max_gradient_op(u, x, w, v),
        "exp_op": lambda u, v: ad.exp_op(u),
        "log_op": lambda u, v: ad.log_op(u),
        "sqrt_op": lambda u, v: ad.sqrt_op(u),
        "sqrt_gradient_op": lambda u, v: ad.sqrt_gradient_op(u, v),
        "div_op": lambda u, v: ad.div_op(u, v),
        "eq_op": lambda u, v: ad.eq_op(u, v),
        "abs_op": lambda u, v: graph.abs_op(u),
        "sign_op": lambda u, v: graph.sign_op(u),
        "sin_op": lambda u, v: graph.sin_op(u),
        "cos_op": lambda u, v: graph.cos_op(u),
        "erf_op": lambda u, v: graph.erf_op(u),
        "log1p_op": lambda u, v: graph.log1p_op(u),
        "rsqrt_op": lambda u, v: graph.rsqrt_op(u),
        "rsqrt_gradient_op": lambda u, v: graph.rsqrt_gradient_op(u, v),
        "logical_not_op": lambda u, v: graph.logical_not_op(u),
        "lt_op": lambda u, v: graph.lt_op(u, v),
        "le_op": lambda u, v: graph.le_op(u, v),
        "gt_op": lambda u, v: graph.gt_op(u, v),
        "ge_op": lambda u, v: graph.ge_op(u, v),
        "logical_and_op": lambda u, v: graph.logical_and_op(u, v),
        "logical_or_op": lambda u, v: graph.logical_or_op(u, v),
        "minimum_op": lambda u, v: graph.minimum_op(u, v),
        "maximum_op": lambda u, v: graph.maximum_op(u, v),
        "where_op": lambda u, v: graph.where_op(x, u, v),
        "clamp_op": lambda u, v: graph.clamp_op(x, u, v),
        "clamp_gradient_op": lambda u, v: graph.clamp_gradient_op(x, w, u, v),
        "argmax_op": lambda u, v: ad.argmax_op(x, u, v),
        "argsort_op": lambda u, v: graph.argsort_op(x, u, v),
        "gather_op": lambda u, v: graph.gather_op(x, u, v),
        "gather_gradient_op": lambda u, v: graph.gather_gradient_op(u, x, w, v),
        "one_hot_op": lambda u, v: ad.one_hot_op(u, v),
        "index_select_op": lambda u, v: graph.index_select_op(x, u, v),
        "index_select_gradient_op": lambda u, v: graph.index_select_gradient_op(u, w, x, v),
        "index_add_op": lambda u, v: graph.index_add_op(x, u, w, v),
        "index_copy_op": lambda u, v: graph.index_copy_op(x, u, w, v),
        "layer_norm_op": lambda u, v: graph.layer_norm_op(x, u, w, v),
        "batch_norm_op": lambda u, v: graph.batch_norm_op(x, u, w, w, 1e-5, v),
        # reductions, sorting, creation
        "reduce_prod_op": lambda u, v: graph.reduce_prod_op(x, u, v),
        "prod_gradient_op": lambda u, v: graph.prod_gradient_op(u, w, v),
        "cumsum_op": lambda u, v: graph.cumsum_op(x, u, v),
        "tril_op": lambda u, v: graph.tril_op(u, v),
        "triu_op": lambda u, v: graph.triu_op(u, v),
        "pow_scalar_op": lambda u, v: graph.pow_scalar_op(u, v),
        "scalar_pow_op": lambda u, v: graph.scalar_pow_op(u, v),
        "pow_scalar_gradient_op": lambda u, v: graph.pow_scalar_gradient_op(x, u, v),
        "pow_op": lambda u, v: graph.pow_op(u, v),
        "gelu_op": lambda u, v: graph.gelu_op(u, v),
        "silu_op": lambda u, v: graph.silu_op(u),
        "softplus_op": lambda u, v: graph.softplus_op(x, u, v),
        "leaky_relu_op": lambda u, v: graph.leaky_relu_op(u, v),
        "elu_gradient_op": lambda u, v: graph.elu_gradient_op(x, u, v),
        "hardtanh_op": lambda u, v: graph.hardtanh_op(x, u, v),
        "adaptive_avg_pool2d_op": lambda u, v: graph.adaptive_avg_pool2d_op(u, v),
        "lstm_cell_op": lambda u, v: graph.lstm_cell_op(u, v),
        "gru_cell_op": lambda u, v: graph.gru_cell_op(x, u, v),
        "embedding_op": lambda u, v: graph.embedding_op(x, u, v),
        "constant_pad_op": lambda u, v: graph.constant_pad_op(u, v),
        "Executor training": lambda u, v: ad.Executor([x], training=v),
        "gradients": lambda u, v: ad.gradients(u, v),
        "Executor": lambda u, v: ad.Executor(u, device=v),
        "dlsys Executor": lambda u, v: dlsys_ad.Executor(u, device=v),
        "topo_sort_dfs": lambda u, v: dlsys_ad.topo_sort_dfs(u, set(), []),
        "sum_node_list": lambda u, v: dlsys_ad.sum_node_list(u),
    }
    nodes = st.sampled_from([x, w, x + w, ad.matmul_op(x, w)])
    values = st.one_of(ANY_VALUES, nodes, st.lists(nodes, max_size=2))

    @_settings(factor=16)
    @given(name=st.sampled_from(sorted(builders)), u=values, v=values)
    def graph_ops(name, u, v):
        def check(result):
            # Building succeeded: it must be because the arguments were fit for it.
            if name in ("Executor", "dlsys Executor"):
                ok = isinstance(u, list) and (v is None or isinstance(v, gpumat.Device))
                return None if ok else f"{name} accepted device={v!r}, nodes={u!r}"
            if name in ("gradients", "sum_node_list"):
                nodes_in = [u] if name == "gradients" else []
                nodes_in += list(v) if name == "gradients" else list(u)
                if not all(isinstance(n, ad.Node) for n in nodes_in) or not nodes_in:
                    return f"{name} accepted {u!r}, {v!r}"
                return None
            node_args = {
                "matmul_op": [u],
                "bmm_op": [u],
                "transpose_op": [u],
                "zeroslike_op": [u],
                "exp_op": [u],
                "log_op": [u],
                "sqrt_op": [u],
                "sqrt_gradient_op": [u, v],
                "div_op": [u, v],
                "eq_op": [u, v],
                **{f"{n}_op": [u] for n in ("abs", "sign", "sin", "cos", "erf", "log1p")},
                "rsqrt_op": [u],
                "logical_not_op": [u],
                **{
                    f"{n}_op": [u, v]
                    for n in ("rsqrt_gradient", "lt", "le", "gt", "ge", "logical_and")
                    + ("logical_or", "minimum", "maximum", "where")
                },
            }
            for arg in node_args.get(name, []):
                if not isinstance(arg, ad.Node):
                    return f"{name} accepted {type(arg).__name__}"
            if name in ("clamp_op", "clamp_gradient_op"):
                for bound in (u, v):
                    real = isinstance(bound, numbers.Real) and not isinstance(bound, bool)
                    if not real or math.isnan(bound):
                        return f"{name} accepted the bound {bound!r}"
            if name in ("matmul_op", "bmm_op") and not isinstance(v, (bool, np.bool_)):
                return f"{name} accepted trans_A={v!r}"
            # The layer ops' non-node parameters: an int axis, dropout's p in [0, 1] and seed
            # (None or an int in [0, 2**64)), a bool keepdims, a bool training mode.
            reductions = ("reduce_sum_op", "reduce_mean_op", "reduce_max_op", "argmax_op")
            axis_ops = reductions + (
                "softmax_op axis",
                "log_softmax_op",
                "softmax_gradient_op",
                "log_softmax_gradient_op",
                "broadcast_axis_op",
                "reduce_max_gradient_op",
            )
            if name in axis_ops:
                axis = u if name in reductions else v
                if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
                    return f"{name} accepted axis={axis!r}"
            if name in reductions:
                if not isinstance(v, (bool, np.bool_)):
                    return f"{name} accepted keepdims={v!r}"
            if name == "dropout_op":
                if isinstance(u, bool) or not isinstance(u, numbers.Real) or not 0 <= u <= 1:
                    return f"dropout_op accepted p={u!r}"
                if v is not None and (
                    isinstance(v, bool) or not isinstance(v, numbers.Integral) or not 0 <= v < 2**64
                ):
                    return f"dropout_op accepted seed={v!r}"
            if name == "one_hot_op":
                if not isinstance(u, ad.Node):
                    return f"one_hot_op accepted indices={u!r}"
                if (
                    isinstance(v, (bool, np.bool_))
                    or not isinstance(v, numbers.Integral)
                    or not 0 <= v <= 2**24
                ):
                    return f"one_hot_op accepted num_classes={v!r}"
            if name.startswith("index_"):  # a node, then an int axis
                if not isinstance(u, ad.Node):
                    return f"{name} accepted {type(u).__name__} as a node"
            if name == "argsort_op":
                if isinstance(u, bool) or not isinstance(u, numbers.Integral):
                    return f"argsort_op accepted axis={u!r}"
                if not isinstance(v, bool):
                    return f"argsort_op accepted descending={v!r}"
            if name in ("gather_op", "gather_gradient_op"):
                if not isinstance(u, ad.Node):
                    return f"{name} accepted a node argument {u!r}"
                if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                    return f"{name} accepted axis={v!r}"
            if name == "Executor training" and not isinstance(v, (bool, np.bool_)):
                return f"Executor accepted training={v!r}"
            # a node, then an int axis / diagonal, a bool flag or a real scalar
            if name == "reduce_prod_op":
                if isinstance(u, bool) or not isinstance(u, numbers.Integral):
                    return f"{name} accepted axis={u!r}"
                if not isinstance(v, (bool, np.bool_)):
                    return f"{name} accepted keepdims={v!r}"
            if name == "cumsum_op":
                if isinstance(u, bool) or not isinstance(u, numbers.Integral):
                    return f"{name} accepted axis={u!r}"
                if not isinstance(v, (bool, np.bool_)):
                    return f"{name} accepted reverse={v!r}"
            if name in ("prod_gradient_op", "tril_op", "triu_op"):
                if not isinstance(u, ad.Node):
                    return f"{name} accepted {type(u).__name__}"
                if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Integral):
                    return f"{name} accepted the int {v!r}"
            if name in ("gelu_op", "silu_op", "leaky_relu_op", "adaptive_avg_pool2d_op"):
                if not isinstance(u, ad.Node):
                    return f"{name} accepted {type(u).__name__}"
            if name == "gelu_op" and v not in ("none", "tanh"):
                return f"gelu_op accepted approximate={v!r}"
            if name in ("softplus_op", "hardtanh_op", "elu_gradient_op", "leaky_relu_op"):
                if name == "elu_gradient_op" and not isinstance(u, ad.Node):
                    return f"{name} accepted {type(u).__name__}"
                for c in [u, v] if name in ("softplus_op", "hardtanh_op") else [v]:
                    real = isinstance(c, numbers.Real) and not isinstance(c, (bool, np.bool_))
                    if not real or math.isnan(c):
                        return f"{name} accepted the scalar {c!r}"
                if name == "softplus_op" and (u == 0 or not math.isfinite(u)):
                    return f"softplus_op accepted beta={u!r}"
            if name == "adaptive_avg_pool2d_op" and not (
                isinstance(v, numbers.Integral)
                and not isinstance(v, bool)
                and v >= 1
                or isinstance(v, (tuple, list))
                and len(v) == 2
                and all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in v)
                and min(v) >= 1
            ):
                return f"adaptive_avg_pool2d_op accepted output_size={v!r}"
            if name == "embedding_op":
                if not isinstance(u, ad.Node):
                    return f"{name} accepted {type(u).__name__}"
                if v is not None and (
                    isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0
                ):
                    return f"embedding_op accepted padding_idx={v!r}"
            if name == "attention_op":
                real = isinstance(u, numbers.Real) and not isinstance(u, (bool, np.bool_))
                if not real or not math.isfinite(u) or not isinstance(v, (bool, np.bool_)):
                    return f"attention_op accepted scale={u!r}, causal={v!r}"
            if name == "constant_pad_op" and not isinstance(u, ad.Node):
                return f"{name} accepted {type(u).__name__}"
            if name in ("pow_scalar_op", "scalar_pow_op", "pow_scalar_gradient_op"):
                if not isinstance(u, ad.Node):
                    return f"{name} accepted {type(u).__name__}"
                if isinstance(v, (bool, np.bool_)) or not isinstance(v, numbers.Real):
                    return f"{name} accepted the scalar {v!r}"
            if name in ("layer_norm_op", "batch_norm_op") and not isinstance(u, ad.Node):
                return f"{name} accepted {type(u).__name__} as a node"
            if name == "layer_norm_op" and (isinstance(v, bool) or not isinstance(v, numbers.Real)):
                return f"layer_norm_op accepted eps={v!r}"
            if name == "batch_norm_op" and not isinstance(v, (bool, np.bool_)):
                return f"batch_norm_op accepted training={v!r}"
            if name == "pow_op" and not (isinstance(u, ad.Node) and isinstance(v, ad.Node)):
                return f"pow_op accepted {u!r}, {v!r}"
            return None

        _record(_expect_error_or(lambda: builders[name](u, v), check, name))

    graph_ops()

    @_settings()
    @given(
        feed_x=ANY_VALUES,
        feed_w=ANY_VALUES,
        ctx=st.sampled_from([None, gpumat.cpu(), dlsys_nd.cpu(0)]),
        key=st.sampled_from(["x", "w", "str", "missing"]),
    )
    def executor_runs(feed_x, feed_w, ctx, key):
        y = ad.matmul_op(x, w)
        ex = ad.Executor([y], device=ctx)
        feeds = {x: feed_x, w: feed_w}
        if key == "str":
            feeds["x"] = feed_x
        elif key == "missing":
            del feeds[w]

        def check(result):
            xv, wv = np.asarray(feed_x, dtype=np.float64), np.asarray(feed_w, dtype=np.float64)
            if key != "x" and key != "w":
                return f"Executor.run accepted feed keys {list(feeds)!r}"
            got = result[0] if ctx is None else result[0].asnumpy()
            return None if _close(np.asarray(got), xv @ wv) else "Executor.run differs"

        _record(_expect_error_or(lambda: ex.run(feeds), check, "Executor.run"))

    executor_runs()


def batch_optim():
    """gpumat.optim's optimizers and gpumat's top-level device functions with bad arguments."""
    from gpumat import optim

    @_settings(factor=6)
    @given(
        data=st.data(),
        kind=st.sampled_from(["SGD", "MomentumSGD", "Adam"]),
        lr=st.one_of(ANY_VALUES, st.floats(0.0, 1.0)),
        seed=st.integers(0, 2**32 - 1),
    )
    def optimizers(data, kind, lr, seed):
        arrays = Arrays(np.random.default_rng(seed))
        p, g = arrays.new((2, 3)), arrays.new((2, 3))
        params = data.draw(
            st.sampled_from(
                ["ok", "ok2", "empty_list", "junk", "int_numpy", "none", "str", "no_array"]
            )
        )
        params = {
            "ok": [p],
            "ok2": [p, arrays.new((4,))],
            "empty_list": [],
            "junk": [p, "x"],
            "int_numpy": [np.ones(3, dtype=int)],
            "none": None,
            "str": "p",
            "no_array": [_empty_matrix()],
        }[params]
        grads = data.draw(
            st.sampled_from(
                [[g], [g, g], [], [np.ones((2, 3))], [None], [_empty_matrix()], None, [p]]
                + [[arrays.new((3, 2))], [arrays.new((2, 3)), arrays.new((4,))]]
            )
        )
        p0 = p.asnumpy().astype(np.float64)
        g0 = g.asnumpy().astype(np.float64)
        built = {}

        def build():
            built["opt"] = getattr(optim, kind)(params, lr)
            return built["opt"]

        def check_build(opt):
            if not isinstance(params, list) or not all(
                isinstance(x, PyGpuMatrix) or (isinstance(x, np.ndarray) and x.dtype.kind == "f")
                for x in params
            ):
                return f"{kind} accepted params {params!r}"
            try:
                rate = float(lr)
            except (TypeError, ValueError):
                return f"{kind} accepted lr={lr!r}"
            return None if math.isfinite(rate) and rate >= 0 else f"{kind} accepted lr={lr!r}"

        _record(_expect_error_or(build, check_build, kind))
        if "opt" not in built:
            return
        opt = built["opt"]

        def check_step(_):
            if not (isinstance(grads, list) and len(grads) == len(params)):
                return f"{kind}.step accepted {len(grads or [])} gradients"
            if params and params[0] is p and grads[0] is not p:
                if not isinstance(grads[0], PyGpuMatrix) or grads[0].ctx is None:
                    return f"{kind}.step accepted a {type(grads[0]).__name__} gradient"
                g_used = grads[0].asnumpy().astype(np.float64) if grads[0] is not g else g0
                rate = float(np.float32(float(lr)))
                step = g_used if kind != "Adam" else g_used / (np.abs(g_used) + 1e-8)
                return None if _close(p.asnumpy(), p0 - rate * step) else f"{kind}: wrong step"
            return None

        _record(_expect_error_or(lambda: opt.step(grads), check_step, f"{kind}.step"))

    optimizers()

    @_settings()
    @given(ctx=ANY_VALUES)
    def device_functions(ctx):
        for fn in (
            gpumat.memory_stats,
            gpumat.reset_peak_memory_stats,
            gpumat.empty_cache,
            gpumat.synchronize,
        ):

            def check(_, fn=fn):
                ok = ctx is None or isinstance(ctx, gpumat.Device)
                return None if ok else f"{fn.__name__} accepted device={ctx!r}"

            _record(_expect_error_or(lambda fn=fn: fn(ctx), check, fn.__name__))

    device_functions()


# --------------------------------------------------------------------------------------------
# Interop: __dlpack__ / __dlpack_device__ / from_dlpack (the array API standard's arguments)
# --------------------------------------------------------------------------------------------

# DLPack's device types (dlpack.h v1.0); BufferError is the standard's error for a device or copy
# the producer cannot provide.
_DLPACK_DEVICE_TYPES = {1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
INTEROP_ALLOWED = (*ALLOWED, BufferError)


def _spec_int(x) -> int:
    """x as the standard's int (numpy integers and IntEnums count, bool does not)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (numbers.Integral, np.integer)):
        raise Invalid("not an int")
    return int(x)


def _spec_pair(x) -> tuple[int, int]:
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise Invalid("not a pair")
    return _spec_int(x[0]), _spec_int(x[1])


def _dlpack_reference(kwargs: dict, own: tuple[int, int]) -> dict:
    """What __dlpack__ must do with ``kwargs`` on an array on DLPack device ``own``.

    Returns {"versioned": bool, "copied": bool, "buffer_error": bool}; raises Invalid where the
    standard makes the call an error (TypeError / ValueError) and gpumat must refuse it.
    """
    version = kwargs.get("max_version")
    if version is not None:
        major, minor = _spec_pair(version)
        if major < 0 or minor < 0:
            raise Invalid("negative version")
    device = kwargs.get("dl_device")
    target = own
    if device is not None:
        target = _spec_pair(device)
        if target[0] not in _DLPACK_DEVICE_TYPES or not 0 <= target[1] < 2**31:
            raise Invalid("not a DLPack device")
    copy = kwargs.get("copy")
    if copy is not None and not isinstance(copy, (bool, np.bool_)):
        raise Invalid("copy not a bool")
    stream = kwargs.get("stream")
    if stream is not None:
        _spec_int(stream)
        if target[0] != 2:
            raise Invalid("a stream for a device without streams")
    if target != own and (copy is False or target != (1, 0)):
        return {"buffer_error": True}
    return {
        "buffer_error": False,
        "versioned": version is not None and _spec_int(version[0]) >= 1,
        "copied": bool(copy) or target != own,
    }


MAX_VERSIONS = st.one_of(
    st.none(),
    st.tuples(st.integers(-2, 3), st.integers(-2, 3)),
    st.lists(st.integers(-1, 2), max_size=4),
    st.lists(st.integers(0, 2), max_size=3).map(tuple),
    st.sampled_from([(np.int64(1), 0), (1, 0.0), (True, 0), (1, None), np.array([1, 0]), "10"]),
    ANY_VALUES,
)
DL_DEVICES = st.one_of(
    st.none(),
    st.tuples(st.integers(-1, 17), st.integers(-2, 2)),
    st.sampled_from([(1, 0), (2, 0), (1, 2**31), (1,), (1, 0, 0), (1.0, 0), "cpu", (True, 0)]),
    ANY_VALUES,
)
STREAMS = st.one_of(
    st.none(), st.integers(-3, 4), st.sampled_from([2**64, -(2**63), 1.0, "1", True]), ANY_VALUES
)
COPIES = st.one_of(st.none(), st.booleans(), st.sampled_from([np.bool_(True), 0, 1, "no"]))


def _capsule_values(capsule, versioned: bool, shape) -> np.ndarray | str:
    """The float64 values a consumer sees through ``capsule``, or why it is wrong."""
    want = "dltensor_versioned" if versioned else '"dltensor"'
    if want not in repr(capsule):
        return f"{repr(capsule)} is not a {want} capsule"
    out = gpumat.from_dlpack(capsule)
    if out.shape != tuple(shape):
        return f"shape {out.shape}, expected {tuple(shape)}"
    return out.asnumpy().astype(np.float64)


def batch_interop():
    """PyGpuMatrix.__dlpack__ / __dlpack_device__ and gpumat.from_dlpack with bad arguments.

    Each call runs on a random array (cpu or the emulated device; views, zero-size and 0-d arrays,
    and an array that holds nothing) with arguments drawn from valid values, near misses and
    arbitrary objects. It passes when gpumat raises one of INTEROP_ALLOWED (with a message) for
    what the standard makes an error, and otherwise returns a capsule of the kind asked for whose
    tensor has the array's values (and its own memory when a copy was asked for).
    """

    @_settings(factor=10)
    @given(
        data=st.data(),
        where=st.sampled_from(["cpu", "emu"]),
        kind=st.sampled_from(["plain", "view", "zero_size", "zero_d", "empty"]),
        max_version=MAX_VERSIONS,
        dl_device=DL_DEVICES,
        stream=STREAMS,
        copy=COPIES,
        seed=st.integers(0, 2**32),
    )
    def dlpack_export(data, where, kind, max_version, dl_device, stream, copy, seed):
        rng = np.random.default_rng(seed)
        ctx = gpumat.cpu() if where == "cpu" else gpumat.emu()
        shape = {"zero_size": (0, 3), "zero_d": ()}.get(kind, (data.draw(small), data.draw(small)))
        values = rng.uniform(-1, 1, shape).astype(np.float32)
        if kind == "empty":
            a = _empty_matrix()
        elif kind == "view":
            a = gpumat.array(values, ctx).reshape((values.size,))
        else:
            a = gpumat.array(values, ctx)
        kwargs = {
            k: v
            for k, v in dict(
                max_version=max_version, dl_device=dl_device, stream=stream, copy=copy
            ).items()
            if v is not None or data.draw(st.booleans(), label=f"pass {k}=None")
        }
        what = f"__dlpack__({kind} on {where}, {kwargs!r})"
        try:
            expected = None if kind == "empty" else _dlpack_reference(kwargs, (1, 0))
        except Invalid:
            expected = None

        def check(capsule):
            if expected is None:
                return f"{what} returned instead of raising"
            if expected["buffer_error"]:
                return f"{what} returned instead of raising BufferError"
            got = _capsule_values(capsule, expected["versioned"], a.shape)
            if isinstance(got, str):
                return f"{what}: {got}"
            if not np.array_equal(got, values.reshape(a.shape).astype(np.float64)):
                return f"{what}: the capsule's values differ from the array's"
            return None

        def call():
            return a.__dlpack__(**kwargs)

        failure = _expect_interop(call, check, what)
        if failure is None and expected is not None and not expected["buffer_error"]:
            # a copy must be one: writing through it leaves the array alone (non-empty arrays)
            if expected["copied"] and a.size:
                ops.fill(gpumat.from_dlpack(a.__dlpack__(**kwargs)), 7.0)
                if np.array_equal(a.asnumpy(), np.full(a.shape, 7.0, np.float32)):
                    failure = f"{what}: a copy shared the array's memory"
        _record(failure)
        if kind == "empty":
            _record(_expect_interop(a.__dlpack_device__, lambda r: f"returned {r!r}", what))
        else:
            dev = a.__dlpack_device__()
            _record(None if dev == (1, 0) else f"__dlpack_device__ on {where} gave {dev!r}")

    dlpack_export()

    @_settings(factor=4)
    @given(
        source=st.one_of(
            st.sampled_from(["numpy", "read_only", "gpumat", "capsule", "used_capsule"]),
            ANY_VALUES,
        ),
        copy=st.one_of(COPIES, ANY_VALUES),
        seed=st.integers(0, 2**32),
    )
    def from_dlpack(source, copy, seed):
        rng = np.random.default_rng(seed)
        values = rng.uniform(-1, 1, (3, 2)).astype(np.float32)
        x = source
        if isinstance(source, str) and source in ("numpy", "read_only"):
            x = values.copy()
            x.flags.writeable = source == "numpy"
        elif isinstance(source, str) and source == "gpumat":
            x = gpumat.array(values)
        elif isinstance(source, str) and source in ("capsule", "used_capsule"):
            x = values.copy().__dlpack__()
            if source == "used_capsule":
                gpumat.from_dlpack(x)
        accepted_source = isinstance(x, (np.ndarray, PyGpuMatrix)) or source == "capsule"
        copy_ok = copy is None or isinstance(copy, (bool, np.bool_))
        what = f"from_dlpack({type(x).__name__} {source!r}, copy={copy!r})"

        def check(result):
            if not (accepted_source and copy_ok):
                return f"{what} returned instead of raising"
            if source == "read_only" and copy is not None and not copy:
                return f"{what} returned a writable view of a read-only array"
            if not np.array_equal(result.asnumpy(), values):
                return f"{what}: values differ"
            return None

        _record(_expect_interop(lambda: gpumat.from_dlpack(x, copy=copy), check, what))

    from_dlpack()

    @_settings(factor=4)
    @given(
        name=st.sampled_from(sorted(dlpack_helpers.MALFORMED)),
        versioned=st.booleans(),
    )
    def malformed_capsules(name, versioned):
        what = f"from_dlpack(malformed capsule {name}, versioned={versioned})"
        _record(
            _expect_interop(
                lambda: dlpack_helpers.import_malformed(name, versioned),
                lambda result: f"{what} returned an array of shape {result[0].shape}",
                what,
            )
        )

    malformed_capsules()


def _expect_interop(fn, check, what):
    """_expect_error_or with BufferError allowed (the standard's error for interop)."""
    try:
        with np.errstate(all="ignore"):
            result = fn()
    except INTEROP_ALLOWED as exc:
        return None if len(str(exc)) >= 10 else f"{what}: {type(exc).__name__} says nothing"
    except Exception as exc:  # noqa: BLE001
        return f"{what}: unexpected {type(exc).__name__}: {exc}"
    return check(result)


# --------------------------------------------------------------------------------------------
# The front end: gpumat.Tensor, gpumat.nn, gpumat.optim over parameters, gpumat.data,
# gpumat.save / load, gpumat.compile
# --------------------------------------------------------------------------------------------

# Autograd misuse is PyTorch's RuntimeError (backward twice, a changed saved value, an in-place
# op on a leaf that requires a gradient); a missing checkpoint file is FileNotFoundError.
FRONTEND_ALLOWED = (*ALLOWED, RuntimeError, FileNotFoundError)

BAD_TENSOR_ARGS = [
    "tensor_int",
    "tensor_bool",
    "tensor_wrong_shape",
    "tensor_0d",
    "tensor_empty",
    "tensor_other_device",
    "numpy",
    "list",
    "none",
    "str",
    "nan",
    "module",
]


def _bad_tensor(kind: str, like):
    from gpumat import nn as gnn

    shape = like.shape
    if kind == "tensor_int":
        return gpumat.tensor(np.ones(shape, dtype=np.int64))
    if kind == "tensor_bool":
        return gpumat.tensor(np.ones(shape, dtype=bool))
    if kind == "tensor_wrong_shape":
        return gpumat.ones(*(tuple(d + 1 for d in shape) or (2,)))
    if kind == "tensor_0d":
        return gpumat.tensor(1.5)
    if kind == "tensor_empty":
        return gpumat.zeros(0, *shape[1:])
    if kind == "tensor_other_device":
        return gpumat.ones(*shape, device="emu")
    if kind == "numpy":
        return np.ones(shape, dtype=np.float32)
    if kind == "list":
        return np.ones(shape).tolist()
    if kind == "none":
        return None
    if kind == "str":
        return "tensor"
    if kind == "nan":
        return float("nan")
    return gnn.Linear(2, 2)


def _t_snap(values):
    return [
        (v, v.numpy() if not v.requires_grad else v.detach().numpy(), v._version)
        for v in values
        if isinstance(v, gpumat.Tensor) and v._data is not None
    ]


def _expect_frontend(fn, check, what, watch=()):
    """Runs fn(); an allowed exception with a message passes when the watched tensors kept their
    values; a result passes when check(result) returns None."""
    before = _t_snap(watch)
    try:
        with np.errstate(all="ignore"):
            result = fn()
    except FRONTEND_ALLOWED as exc:
        if len(str(exc)) < 10:
            return f"{what}: {type(exc).__name__} says nothing: {exc!r}"
        for t, values, version in before:
            if t._version != version or not np.array_equal(
                t.detach().numpy(), values, equal_nan=True
            ):
                return f"{what}: raised {type(exc).__name__} but changed a tensor"
        return None
    except Exception as exc:  # noqa: BLE001 (the point: any other exception is a failure)
        return f"{what}: unexpected {type(exc).__name__}: {exc}"
    return None if check is None else check(result)


def _values_close(got, expected) -> str | None:
    expected = np.asarray(expected, dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    return None if _close(got, expected) else f"got {got!r}, expected {expected!r}"


def _operand_kind(value):
    """Whether a tensor op takes ``value`` as its other operand (a tensor, array or number)."""
    if isinstance(value, gpumat.Tensor):
        return "tensor"
    if isinstance(value, (numbers.Real, np.ndarray, list, tuple)):
        return "value"
    return None


def _fresh(a):
    """A copy of a numpy array or a tensor, for an in-place op that must leave ``a`` as it is."""
    return a.copy() if isinstance(a, np.ndarray) else a.clone()


def batch_frontend():
    """The front end's entry points with bad arguments: every call raises a clear exception or
    agrees with numpy."""
    import gpumat.nn.functional as fn_
    from gpumat import nn as gnn
    from gpumat.data import DataLoader

    dtypes = [None, gpumat.float32, gpumat.int64, gpumat.bool, "float32", "long", float, int,
              bool, np.float64, np.int8, "complex", 3, object()]  # fmt: skip
    devices = [None, "cpu", gpumat.cpu(), "emu", "emu:0", "emu:7", "cuda", "cuda:x", "tpu", 3,
               "cpu:1", gpumat.emu(0)]  # fmt: skip

    @_settings(factor=2)
    @given(
        data=st.one_of(ANY_VALUES, st.lists(st.floats(-1e30, 1e30), max_size=4),
                       st.lists(st.lists(st.integers(-(2**30), 2**30), min_size=2, max_size=2),
                                max_size=3)),
        dtype=st.sampled_from(dtypes),
        device=st.sampled_from(devices),
        requires_grad=st.sampled_from([False, True, "yes", None, 1]),
    )  # fmt: skip
    def creation(data, dtype, device, requires_grad):
        def check(t):
            ref = np.asarray(data)
            if ref.dtype.kind not in "biuf":
                return f"tensor accepted {ref.dtype} data"
            dt = t.dtype
            if dt is gpumat.float32:
                want = ref.astype(np.float32)
            elif dt is gpumat.int64:
                if np.abs(ref.astype(np.float64)).max(initial=0) > 2**24:
                    return "tensor accepted int64 data beyond 2**24"
                want = np.trunc(ref.astype(np.float64))
            else:
                want = ref.astype(np.float64) != 0
            return _values_close(t.detach().numpy().astype(np.float64), want)

        _record(
            _expect_frontend(
                lambda: gpumat.tensor(
                    data, dtype=dtype, device=device, requires_grad=requires_grad
                ),
                check,
                "tensor",
            )  # fmt: skip
        )
        for maker in (gpumat.zeros, gpumat.ones, gpumat.rand, gpumat.randn):
            _record(
                _expect_frontend(
                    lambda maker=maker: maker(data, dtype=dtype, device=device),
                    None,
                    maker.__name__,
                )
            )
        _record(_expect_frontend(lambda: gpumat.arange(data, device=device), None, "arange"))
        _record(_expect_frontend(lambda: gpumat.manual_seed(data), None, "manual_seed"))

    creation()

    @_settings(factor=2)
    @given(
        other=st.one_of(ANY_VALUES, st.sampled_from(BAD_TENSOR_ARGS + ["ok", "row", "col"])),
        op=st.sampled_from(
            ["+", "-", "*", "/", "@", "==", "<", "<=", ">", ">=", "**", "r-", "r/"]
            + ["+=", "-=", "*=", "/="]
        ),
        seed=st.integers(0, 2**32 - 1),
    )
    def binary(other, op, seed):
        rng = np.random.default_rng(seed)
        xn = rng.uniform(0.5, 1.5, size=(2, 3)).astype(np.float32)
        x = gpumat.tensor(xn)
        if isinstance(other, str) and other in BAD_TENSOR_ARGS + ["ok", "row", "col"]:
            shapes = {"ok": (2, 3), "row": (3,), "col": (2, 1)}
            if other in shapes:
                other = gpumat.tensor(rng.uniform(0.5, 1.5, size=shapes[other]).astype(np.float32))
            else:
                other = _bad_tensor(other, x)
        fns = {
            "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
            "/": lambda a, b: a / b, "@": lambda a, b: a @ b, "==": lambda a, b: a == b,
            "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
            "**": lambda a, b: a**b, "r-": lambda a, b: b - a, "r/": lambda a, b: b / a,
            # augmented: in place on a copy (numpy's too), so x itself stays as drawn
            "+=": lambda a, b: operator.iadd(_fresh(a), b),
            "-=": lambda a, b: operator.isub(_fresh(a), b),
            "*=": lambda a, b: operator.imul(_fresh(a), b),
            "/=": lambda a, b: operator.itruediv(_fresh(a), b),
        }  # fmt: skip

        def check(result):
            if op == "==" and result is False and _operand_kind(other) is None:
                return None  # Python's identity fallback for objects a tensor does not compare
            if not isinstance(result, gpumat.Tensor):
                return f"x {op} {other!r} returned a {type(result).__name__}"
            on = other.detach().numpy() if isinstance(other, gpumat.Tensor) else other
            if isinstance(on, int) and not isinstance(on, bool) and abs(on) >= 2**63:
                on = float(on)  # a real number past int64: numpy would hold it as an object
            try:
                on = np.asarray(on)
                if on.dtype.kind not in "biuf":
                    return f"x {op} accepted a {on.dtype} operand"
                with np.errstate(all="ignore"):
                    want = fns[op](xn.astype(np.float64), on.astype(np.float64))
            except (TypeError, ValueError) as exc:
                return f"x {op} {other!r} accepted what numpy rejects ({exc})"
            return _values_close(result.numpy(), want)

        _record(_expect_frontend(lambda: fns[op](x, other), check, f"Tensor {op}", [x]))

    binary()

    # matmul / @ / bmm over ranks 0 to 4: mismatched inner dims, batch dims that do not broadcast,
    # 0-d operands and size-0 dims; numpy's np.matmul decides what is valid (bmm: 3-D, one batch).
    dim = st.integers(0, 3)

    @_settings(factor=2)
    @given(
        sa=st.lists(dim, max_size=4),
        sb=st.lists(dim, max_size=4),
        fn=st.sampled_from(["@", "matmul", "bmm"]),
        seed=st.integers(0, 2**32 - 1),
    )
    def matmul_shapes(sa, sb, fn, seed):
        rng = np.random.default_rng(seed)
        an = rng.uniform(0.5, 1.5, size=sa).astype(np.float32)
        bn = rng.uniform(0.5, 1.5, size=sb).astype(np.float32)
        a, b = gpumat.tensor(an), gpumat.tensor(bn)
        try:
            want = np.matmul(an.astype(np.float64), bn.astype(np.float64))
            if fn == "bmm" and (an.ndim != 3 or bn.ndim != 3 or sa[0] != sb[0]):
                want = None  # torch.bmm: 3-D, equal batches, no broadcasting
        except ValueError:
            want = None
        calls = {"@": lambda: a @ b, "matmul": lambda: gpumat.matmul(a, b), "bmm": lambda: a.bmm(b)}

        def check(result):
            if want is None:
                return f"{fn} accepted {tuple(sa)} @ {tuple(sb)}, which numpy rejects"
            return _values_close(result.numpy(), want)

        _record(_expect_frontend(calls[fn], check, f"{fn} {tuple(sa)} @ {tuple(sb)}", [a, b]))
        if want is not None:  # a valid product must not raise either
            try:
                calls[fn]()
            except FRONTEND_ALLOWED as exc:
                _record(f"{fn} {tuple(sa)} @ {tuple(sb)}: valid for numpy, raised {exc!r}")

    matmul_shapes()

    # broadcasting in any rank: numpy decides which pairs of shapes (rank 0 to 4, dims 0 to 3)
    # broadcast, and the values
    @_settings(factor=2)
    @given(
        sa=st.lists(dim, max_size=4),
        sb=st.lists(dim, max_size=4),
        op=st.sampled_from(["+", "-", "*", "/", "minimum", "maximum", "<", "==", "where"]),
        seed=st.integers(0, 2**32 - 1),
    )
    def broadcasts(sa, sb, op, seed):
        rng = np.random.default_rng(seed)
        an = rng.uniform(0.5, 1.5, size=sa).astype(np.float32)
        bn = rng.uniform(0.5, 1.5, size=sb).astype(np.float32)
        a, b = gpumat.tensor(an), gpumat.tensor(bn)
        fns = {
            "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
            "<": operator.lt, "==": operator.eq,
            "minimum": lambda u, v: np.minimum(u, v) if isinstance(u, np.ndarray) else u.minimum(v),
            "maximum": lambda u, v: np.maximum(u, v) if isinstance(u, np.ndarray) else u.maximum(v),
            "where": lambda u, v: np.where(u > v, u, v) if isinstance(u, np.ndarray)
            else gpumat.where(u > v, u, v),
        }  # fmt: skip
        try:
            want = fns[op](an.astype(np.float64), bn.astype(np.float64))
        except ValueError:
            want = None

        def check(result):
            if want is None:
                return f"{op} accepted {tuple(sa)} and {tuple(sb)}, which numpy rejects"
            return _values_close(result.numpy(), want)

        what = f"{op} {tuple(sa)} with {tuple(sb)}"
        _record(_expect_frontend(lambda: fns[op](a, b), check, what, [a, b]))
        if want is not None:
            try:
                fns[op](a, b)
            except FRONTEND_ALLOWED as exc:
                _record(f"{what}: valid for numpy, raised {exc!r}")

    broadcasts()

    # basic indexing and index assignment: keys of ints (in and out of range), slices (steps of
    # every sign), None, Ellipsis, and things that are no index; numpy decides (PyTorch refuses
    # steps <= 0, which numpy takes)
    part = st.one_of(
        st.integers(-4, 4),
        st.builds(slice, st.none() | st.integers(-5, 5), st.none() | st.integers(-5, 5),
                  st.none() | st.integers(-2, 3)),
        st.just(None),
        st.just(Ellipsis),
        st.sampled_from([1.5, "a", object(), float("nan")]),
    )  # fmt: skip

    @_settings(factor=3)
    @given(
        shape=st.lists(dim, max_size=3),
        key=st.lists(part, max_size=4),
        value=st.sampled_from(["number", "region", "row", "wrong", "none", "str"]),
        seed=st.integers(0, 2**32 - 1),
    )
    def basic_indexing(shape, key, value, seed):
        rng = np.random.default_rng(seed)
        xn = rng.uniform(-1, 1, size=shape).astype(np.float32)
        key = tuple(key)
        bad_step = any(isinstance(k, slice) and k.step is not None and k.step <= 0 for k in key)
        no_index = any(isinstance(k, (float, str)) or type(k) is object for k in key)
        try:
            want = None if bad_step or no_index else xn.astype(np.float64)[key]
        except IndexError:
            want = None

        def check(result):
            if want is None:
                return f"x{shape}[{key!r}] accepted a key numpy (or PyTorch) rejects"
            return _values_close(result.numpy(), want)

        x = gpumat.tensor(xn)
        _record(_expect_frontend(lambda: x[key], check, f"x{tuple(shape)}[{key!r}]", [x]))
        if want is None:
            region = ()
        else:
            region = np.shape(want)
        values = {
            "number": 2.5,
            "region": rng.uniform(-1, 1, size=region).astype(np.float32),
            "row": rng.uniform(-1, 1, size=region[-1:]).astype(np.float32),
            "wrong": np.ones(tuple(d + 1 for d in region) or (2,), np.float32),
            "none": None,
            "str": "v",
        }
        v = values[value]
        y = gpumat.tensor(xn)

        def assign():
            y[key] = gpumat.tensor(v) if isinstance(v, np.ndarray) else v
            return y

        def check_assign(result):
            if want is None or v is None or isinstance(v, str):
                return f"x[{key!r}] = {value} accepted what numpy (or PyTorch) rejects"
            expected = xn.astype(np.float64)
            try:
                expected[key] = v
            except ValueError:
                return f"x[{key!r}] = {value} accepted a value numpy cannot broadcast"
            return _values_close(result.numpy(), expected)

        _record(_expect_frontend(assign, check_assign, f"x[{key!r}] = {value}", [y]))

    basic_indexing()

    methods = ["reshape", "view", "sum", "mean", "max", "argmax", "softmax", "log_softmax",
               "flatten", "squeeze", "unsqueeze", "transpose", "to", "backward", "fill_", "add_",
               "mul_", "copy_", "requires_grad_", "eq", "item", "pow", "t"]  # fmt: skip
    # reductions, sorting, creation
    methods += ["min", "argmin", "amax", "amin", "prod", "var", "std", "norm", "logsumexp", "any"]
    methods += ["all", "cumsum", "tril", "triu", "square"]
    # views, splits, joins and copies (gpumat.tensor._views)
    methods += ["permute", "movedim", "expand", "narrow", "select", "split", "chunk", "unbind"]
    methods += ["flip", "roll", "repeat", "tile", "repeat_interleave", "unflatten"]

    @_settings(factor=3)
    @given(
        method=st.sampled_from(methods),
        a=st.one_of(ANY_VALUES, st.integers(-3, 3), st.sampled_from(BAD_TENSOR_ARGS)),
        b=st.one_of(ANY_VALUES, st.integers(-3, 3)),
        seed=st.integers(0, 2**32 - 1),
    )
    def tensor_methods(method, a, b, seed):
        rng = np.random.default_rng(seed)
        xn = rng.uniform(-1, 1, size=(2, 3, 4)).astype(np.float32)
        x = gpumat.tensor(xn)
        if isinstance(a, str) and a in BAD_TENSOR_ARGS:
            a = _bad_tensor(a, x)
        if method in (
            "reshape",
            "view",
            "softmax",
            "log_softmax",
            "squeeze",
            "unsqueeze",
            "to",
            "fill_",
            "add_",
            "mul_",
            "copy_",
            "requires_grad_",
            "eq",
            "pow",
        ):
            call = lambda: getattr(x, method)(a)  # noqa: E731
        elif method in ("sum", "mean", "max", "argmax"):
            call = lambda: getattr(x, method)(a, b)  # noqa: E731
        elif method in ("min", "argmin", "amax", "amin", "prod", "var", "std", "norm"):
            call = lambda: getattr(x, method)(a, b)  # noqa: E731
        elif method in ("logsumexp", "any", "all"):
            call = lambda: getattr(x, method)(a, b)  # noqa: E731
        elif method in ("cumsum", "tril", "triu"):
            call = lambda: getattr(x, method)(a)  # noqa: E731
        elif method in ("flatten", "transpose"):
            call = lambda: getattr(x, method)(a, b)  # noqa: E731
        elif method in ("permute", "flip", "repeat", "tile", "expand"):
            call = lambda: getattr(x, method)(a)  # noqa: E731
        elif method in ("movedim", "select", "split", "chunk", "roll", "unflatten"):
            call = lambda: getattr(x, method)(a, b)  # noqa: E731
        elif method == "narrow":
            call = lambda: x.narrow(b, a, 1)  # noqa: E731
        elif method == "unbind":
            call = lambda: x.unbind(a)  # noqa: E731
        elif method == "repeat_interleave":
            call = lambda: x.repeat_interleave(a, b)  # noqa: E731
        elif method == "backward":
            y = (gpumat.tensor(xn, requires_grad=True) * 2.0).sum(0)
            call = lambda: y.backward(a)  # noqa: E731
        else:
            call = lambda: getattr(x, method)()  # noqa: E731

        def check(result):
            x64 = xn.astype(np.float64)
            try:
                if method in ("reshape", "view"):
                    return _values_close(result.numpy(), x64.reshape(a))
                if method in ("sum", "mean"):
                    axis = tuple(a) if isinstance(a, list) else a
                    return _values_close(
                        result.numpy(), getattr(np, method)(x64, axis=axis, keepdims=bool(b))
                    )
                if method in ("amax", "amin", "prod"):
                    axis = tuple(a) if isinstance(a, list) else a
                    f = {"amax": np.max, "amin": np.min, "prod": np.prod}[method]
                    want = f(x64, axis=None if axis == () else axis, keepdims=bool(b))
                    return _values_close(result.numpy(), want)
                if method == "cumsum":
                    return _values_close(result.numpy(), np.cumsum(x64, axis=a))
                if method == "permute":
                    return _values_close(result.numpy(), np.transpose(x64, a))
                if method == "movedim":
                    return _values_close(result.numpy(), np.moveaxis(x64, a, b))
                if method == "flip":
                    return _values_close(result.numpy(), np.flip(x64, a))
                if method == "roll":
                    return _values_close(result.numpy(), np.roll(x64, a, b))
                if method == "tile":
                    return _values_close(result.numpy(), np.tile(x64, a))
                if method == "expand":
                    return _values_close(result.numpy(), np.broadcast_to(x64, a))
                if method == "select":
                    return _values_close(result.numpy(), np.take(x64, a, axis=b))
                if method == "repeat_interleave":
                    return _values_close(result.numpy(), np.repeat(x64, a, axis=b))
                if method == "softmax":
                    e = np.exp(x64 - x64.max(axis=a, keepdims=True))
                    return _values_close(result.numpy(), e / e.sum(axis=a, keepdims=True))
            except (TypeError, ValueError, np.exceptions.AxisError) as exc:
                return f"{method}({a!r}, {b!r}) accepted what numpy rejects ({exc})"
            return None

        # A call that raises leaves x as it was (in-place methods included).
        _record(_expect_frontend(call, check, f"Tensor.{method}", [x]))

    tensor_methods()

    @_settings(factor=3)
    @given(
        method=st.sampled_from(["fill_", "copy_", "zero_", "add_", "mul_", "load_state_dict"]),
        dtype=st.sampled_from(["int64", "bool"]),
        through=st.sampled_from(["self", "view", "detach", "data", "Parameter"]),
        value=st.one_of(
            ANY_VALUES,
            st.floats(-40, 40),
            st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=4, max_size=4),
            st.lists(st.integers(-(2**26), 2**26), min_size=4, max_size=4),
        ),
    )
    def integer_writes(method, dtype, through, value):
        """A write into an int64 or bool tensor through it or an alias: the storage holds what
        its dtype can (PyTorch's conversion: toward zero, != 0) and every alias's range bounds
        it; or a clear error that changed nothing."""
        y = gpumat.tensor([0, 3, 1, 2], dtype=dtype)
        aliases = [y, y.view(2, 2), y.detach(), y.data, gnn.Parameter(y, requires_grad=False)]
        target = {"self": y, "view": y.view(4), "detach": y.detach(), "data": y.data,
                  "Parameter": gnn.Parameter(y, requires_grad=False)}[through]  # fmt: skip

        def call():
            if method == "load_state_dict":
                m = gnn.Module()
                m.register_buffer("idx", target)
                return m.load_state_dict({"idx": value})
            return getattr(target, method)(*(() if method == "zero_" else (value,)))

        def check(_):
            got = y.float().numpy()
            try:
                if method == "zero_":
                    want = np.zeros(4)
                elif method == "fill_" and dtype == "bool":
                    want = np.full(4, float(bool(value)))  # NaN is True, as PyTorch's
                elif method == "fill_":
                    whole = isinstance(value, numbers.Integral)
                    want = np.full(4, float(int(value) if whole else math.trunc(float(value))))
                elif dtype == "bool":
                    want = np.asarray(value, dtype=np.float64).reshape(4) != 0
                else:
                    want = np.trunc(np.asarray(value, dtype=np.float64).reshape(4))
            except (TypeError, ValueError, OverflowError) as exc:
                return f"int {method}({value!r}) accepted what numpy rejects ({exc})"
            if method in ("add_", "mul_"):
                return f"{dtype} {method} accepted integer arithmetic"
            if not np.array_equal(got, want.astype(np.float64)):
                return f"{dtype} {method}({value!r}) through {through} stored {got}, not {want}"
            for a in aliases:
                lo, hi = a._range
                if got.min() < lo or got.max() > hi:
                    return f"{dtype} {method} through {through}: range {(lo, hi)} misses {got}"
            return None

        _record(_expect_frontend(call, check, f"{dtype} Tensor.{method}", [y]))

    integer_writes()

    @_settings(factor=3)
    @given(
        which=st.sampled_from(["linear", "conv2d", "max_pool2d", "avg_pool2d", "dropout",
                               "nll_loss", "cross_entropy", "mse_loss", "l1_loss", "one_hot",
                               "softmax", "gelu", "silu", "softplus", "leaky_relu", "elu",
                               "hardtanh", "relu6", "embedding", "adaptive_avg_pool2d", "pad"]),
        slot=st.integers(0, 3),
        bad=st.one_of(ANY_VALUES, st.integers(-3, 40), st.sampled_from(BAD_TENSOR_ARGS)),
        seed=st.integers(0, 2**32 - 1),
    )  # fmt: skip
    def functional(which, slot, bad, seed):
        rng = np.random.default_rng(seed)
        x4 = gpumat.tensor(rng.uniform(-1, 1, size=(2, 3, 6, 6)).astype(np.float32))
        x2 = gpumat.tensor(rng.uniform(-1, 1, size=(4, 5)).astype(np.float32))
        valid = {
            "linear": [x2, gpumat.ones(3, 5), gpumat.ones(3)],
            "conv2d": [x4, gpumat.ones(2, 3, 3, 3), gpumat.ones(2), 1],
            "max_pool2d": [x4, 2, None, 0],
            "avg_pool2d": [x4, 3, 1, 1],
            "dropout": [x2, 0.5, True],
            "nll_loss": [x2, gpumat.tensor([0, 4, 2, 1]), "mean"],
            "cross_entropy": [x2, gpumat.tensor([0, 4, 2, 1]), "sum"],
            "mse_loss": [x2, gpumat.zeros(4, 5), "none"],
            "l1_loss": [x2, gpumat.zeros(4, 5), "mean"],
            "one_hot": [gpumat.tensor([0, 2, 1]), 3],
            "softmax": [x2, 1],
            "gelu": [x2, "tanh"],
            "silu": [x2],
            "softplus": [x2, 2.0, 10.0],
            "leaky_relu": [x2, 0.1],
            "elu": [x2, 0.5],
            "hardtanh": [x2, -0.5, 0.5],
            "relu6": [x2],
            "embedding": [gpumat.tensor([[0, 3], [4, 4]]), x2, 1],
            "adaptive_avg_pool2d": [x4, (4, None)],
            "pad": [x4, (1, 2, 2, 0), "reflect"],
        }[which]
        args = list(valid)
        if slot < len(args):
            if isinstance(bad, str) and bad in BAD_TENSOR_ARGS:
                like = args[slot] if isinstance(args[slot], gpumat.Tensor) else x2
                bad = _bad_tensor(bad, like)
            args[slot] = bad
        tensors = [a for a in args if isinstance(a, gpumat.Tensor)]
        _record(_expect_frontend(lambda: getattr(fn_, which)(*args), None, f"F.{which}", tensors))

    functional()

    @_settings(factor=3)
    @given(
        which=st.sampled_from(["index_select", "index_add", "index_copy", "index_fill", "gather",
                               "scatter_add", "take_along_dim", "masked_select", "getitem",
                               "setitem"]),
        slot=st.integers(0, 3),
        bad=st.one_of(ANY_VALUES, st.integers(-6, 6), st.sampled_from(BAD_TENSOR_ARGS)),
        seed=st.integers(0, 2**32 - 1),
    )  # fmt: skip
    def index_methods(which, slot, bad, seed):
        """The index methods and advanced indexing with one argument made bad: a clear error
        (IndexError for an index out of range), or a result."""
        from gpumat.tensor._advanced_indexing import getitem, setitem

        rng = np.random.default_rng(seed)
        x2 = gpumat.tensor(rng.uniform(-1, 1, size=(4, 5)).astype(np.float32))
        idx = gpumat.tensor([3, 0, 3])
        valid = {
            "index_select": [0, idx],
            "index_add": [1, idx, gpumat.ones(4, 3)],
            "index_copy": [0, idx, gpumat.ones(3, 5)],
            "index_fill": [1, idx, 2.0],
            "gather": [1, gpumat.tensor([[0, 4], [1, 1]])],
            "scatter_add": [0, gpumat.tensor([[0, 3]]), gpumat.ones(2, 3)],
            "take_along_dim": [gpumat.tensor([[0, 4, 1]]), 1],
            "masked_select": [gpumat.tensor(rng.random((4, 5)) > 0.5)],
            "getitem": [([1, -1], slice(None))],
            "setitem": [([1, -1],), 3.0],
        }[which]
        args = list(valid)
        if slot < len(args):
            if isinstance(bad, str) and bad in BAD_TENSOR_ARGS:
                like = args[slot] if isinstance(args[slot], gpumat.Tensor) else x2
                bad = _bad_tensor(bad, like)
            args[slot] = bad
        tensors = [a for a in args if isinstance(a, gpumat.Tensor)]
        if which == "getitem":
            call = lambda: getitem(x2, args[0])  # noqa: E731
        elif which == "setitem":
            call = lambda: setitem(x2, *args)  # noqa: E731
            tensors = []  # x2 is the written tensor
        else:
            call = lambda: getattr(x2, which)(*args)  # noqa: E731
        _record(_expect_frontend(call, None, f"Tensor.{which}", tensors))

    index_methods()

    @_settings(factor=2)
    @given(
        which=st.sampled_from(["Linear", "Conv2d", "MaxPool2d", "AvgPool2d", "Dropout",
                               "Flatten", "Softmax", "LogSoftmax", "CrossEntropyLoss",
                               "Embedding", "AdaptiveAvgPool2d", "GELU", "Softplus", "LeakyReLU",
                               "ELU", "Hardtanh"]),
        a=st.one_of(st.sampled_from(BAD_INTS), st.integers(-2, 5)),
        b=st.one_of(st.sampled_from(BAD_INTS), st.integers(-2, 5)),
        c=st.one_of(st.sampled_from(BAD_INTS + ["same", "valid", "full"]), st.integers(-2, 3)),
    )  # fmt: skip
    def modules(which, a, b, c):
        cls = getattr(gnn, which)
        args = {
            "Linear": (a, b),
            "Conv2d": (a, b, c),
            "MaxPool2d": (a, b, c),
            "AvgPool2d": (a, b, c),
            "Dropout": (a,),
            "Flatten": (a, b),
            "Softmax": (a,),
            "LogSoftmax": (a,),
            "CrossEntropyLoss": (a,),
            "Embedding": (a, b, c),
            "AdaptiveAvgPool2d": (a,),
            "GELU": (a,),
            "Softplus": (a, b),
            "LeakyReLU": (a,),
            "ELU": (a,),
            "Hardtanh": (a, b),
        }[which]
        built = {}

        def build():
            built["m"] = cls(*args)
            return built["m"]

        _record(_expect_frontend(build, None, which))
        if "m" in built:
            x = (
                gpumat.ones(2, 3, 6, 6)
                if which in ("Conv2d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d")
                else gpumat.tensor([[0, 1], [2, 0]])
                if which == "Embedding"
                else (gpumat.ones(4, a if type(a) is int and 0 < a < 50 else 3))
            )
            inputs = (x, gpumat.tensor([0, 1, 0, 1])) if which == "CrossEntropyLoss" else (x,)
            _record(_expect_frontend(lambda: built["m"](*inputs), None, f"{which}()", [x]))

    modules()

    @_settings(factor=2)
    @given(
        kind=st.sampled_from(["SGD", "Adam", "Adadelta"]),
        lr=st.one_of(ANY_VALUES, st.floats(0.0, 1.0)),
        extra=st.one_of(ANY_VALUES, st.floats(0.0, 1.0)),
        seed=st.integers(0, 2**32 - 1),
    )
    def optimizers(kind, lr, extra, seed):
        from gpumat import optim

        rng = np.random.default_rng(seed)
        p = gnn.Parameter(gpumat.tensor(rng.uniform(-1, 1, size=(2, 3)).astype(np.float32)))
        key = {"SGD": "momentum", "Adam": "eps", "Adadelta": "rho"}[kind]
        built = {}

        def build():
            built["opt"] = getattr(optim, kind)([p], lr=lr, **{key: extra})
            return built["opt"]

        _record(_expect_frontend(build, None, kind))
        if "opt" not in built:
            return
        (p * p).sum().backward()
        p0 = p.detach().numpy().astype(np.float64)

        def check(_):
            if kind == "SGD":
                rate = float(np.float32(float(lr)))
                return _values_close(p.detach().numpy(), p0 - rate * 2 * p0)
            return None

        _record(_expect_frontend(lambda: built["opt"].step(), check, f"{kind}.step", [p]))

    optimizers()

    @_settings()
    @given(
        dataset=st.one_of(ANY_VALUES, st.just("ok")),
        batch_size=st.one_of(st.sampled_from(BAD_INTS), st.integers(-1, 4)),
        shuffle=st.sampled_from([False, True, 1, None, "yes"]),
        drop_last=st.sampled_from([False, True, 0, None]),
    )
    def loaders(dataset, batch_size, shuffle, drop_last):
        from gpumat.data import TensorDataset

        if isinstance(dataset, str) and dataset == "ok":
            dataset = TensorDataset(np.arange(5, dtype=np.float32), np.arange(5))

        def make():
            loader = DataLoader(dataset, batch_size=batch_size, shuffle=shuffle,
                                drop_last=drop_last)  # fmt: skip
            return [b for b in loader]

        _record(_expect_frontend(make, None, "DataLoader"))

    loaders()

    @_settings()
    @given(obj=st.one_of(ANY_VALUES, st.just("state_dict")), f=ANY_VALUES)
    def checkpoints(obj, f):
        import tempfile

        if isinstance(obj, str) and obj == "state_dict":
            obj = gnn.Linear(2, 2).state_dict()
        with tempfile.TemporaryDirectory() as tmp:
            target = os.path.join(tmp, "x.safetensors")
            # Only the temporary folder is written: a bad path stays a non-path value.
            path = target if isinstance(f, str) else f
            _record(_expect_frontend(lambda: gpumat.save(obj, path), None, "save"))
            _record(_expect_frontend(lambda: gpumat.load(path, map_location=f), None, "load"))

    checkpoints()

    @_settings()
    @given(arg=st.one_of(ANY_VALUES, st.sampled_from(BAD_TENSOR_ARGS)))
    def autograd_and_compile(arg):
        if isinstance(arg, str) and arg in BAD_TENSOR_ARGS:
            arg = _bad_tensor(arg, gpumat.ones(2, 3))
        w = gnn.Parameter(gpumat.ones(2, 3))
        y = (w * w).sum()
        y.backward()
        _record(_expect_frontend(lambda: y.backward(), None, "second backward", [w]))
        _record(_expect_frontend(lambda: (w * 2.0).backward(arg), None, "backward(gradient)"))
        _record(_expect_frontend(lambda: gpumat.compile(arg), None, "compile"))
        step = gpumat.compile(lambda t: t * w)
        _record(_expect_frontend(lambda: step(arg), None, "compiled step", [w]))
        _record(_expect_frontend(lambda: gnn.Linear(3, 2).load_state_dict(arg), None,
                                 "load_state_dict"))  # fmt: skip
        custom_functions(arg, w)

    autograd_and_compile()

    @_settings()
    @given(
        shape=st.lists(st.integers(0, 3), max_size=4),
        norm=st.one_of(ANY_VALUES, st.lists(st.integers(0, 3), min_size=1, max_size=2)),
        arg=st.one_of(ANY_VALUES, st.sampled_from(BAD_TENSOR_ARGS)),
        which=st.sampled_from(["layer_norm", "rms_norm", "batch_norm", "BatchNorm1d",
                               "BatchNorm2d", "LayerNorm"]),
        seed=st.integers(0, 2**32 - 1),
    )  # fmt: skip
    def normalisation(shape, norm, arg, which, seed):
        # The norm layers with any input shape, normalized shape, and one bad argument (weight,
        # eps, running statistics): a clear error, or float64 numpy's values.
        rng = np.random.default_rng(seed)
        x = gpumat.tensor(rng.uniform(-1, 1, size=shape).astype(np.float32))
        if isinstance(arg, str) and arg in BAD_TENSOR_ARGS:
            arg = _bad_tensor(arg, gpumat.ones(2, 3))
        xs = x.detach().numpy().astype(np.float64)

        def rows_ref(eps, rms, d):
            r = xs.reshape(-1, d)
            m = 0.0 if rms else r.mean(1, keepdims=True)
            return ((r - m) / np.sqrt(((r - m) ** 2).mean(1, keepdims=True) + eps)).reshape(shape)

        def check_rows(rms):
            def check(t):
                ns = (norm,) if isinstance(norm, int) else tuple(norm)
                if not ns or tuple(shape[len(shape) - len(ns) :]) != ns or len(ns) > len(shape):
                    return f"{which} accepted normalized_shape {norm!r} for {shape}"
                eps = 2.0**-23 if rms else 1e-5
                return _values_close(t.detach().numpy(), rows_ref(eps, rms, int(np.prod(ns))))

            return check

        if which in ("layer_norm", "rms_norm"):
            f = getattr(fn_, which)
            _record(_expect_frontend(lambda: f(x, norm), check_rows(which == "rms_norm"), which))
            _record(_expect_frontend(lambda: f(x, norm, arg), None, f"{which}(weight)"))
            _record(_expect_frontend(lambda: f(x, norm, None, arg), None, f"{which}(eps)"))
        elif which == "LayerNorm":
            _record(_expect_frontend(lambda: gnn.LayerNorm(norm)(x), check_rows(False), which))
        elif which == "batch_norm":
            rm = gpumat.zeros(3)
            _record(_expect_frontend(lambda: fn_.batch_norm(x, rm, arg, training=True), None,
                                     "batch_norm(running_var)", [rm]))  # fmt: skip
            _record(_expect_frontend(lambda: fn_.batch_norm(x, None, None, arg), None,
                                     "batch_norm(weight)"))  # fmt: skip
        else:
            m = getattr(gnn, which)(3)

            def check_bn(t):
                if len(shape) not in m._ranks or shape[1] != 3 or np.prod(shape) // 3 == 1:
                    return f"{which} accepted input {shape}"
                if not xs.size:
                    return None if tuple(t.shape) == tuple(shape) else "shape"
                axes = (0,) + tuple(range(2, len(shape)))
                c = xs - xs.mean(axes, keepdims=True)
                return _values_close(
                    t.detach().numpy(), c / np.sqrt((c**2).mean(axes, keepdims=True) + 1e-5)
                )

            _record(_expect_frontend(lambda: m(x), check_bn, which, list(m.buffers())))

    normalisation()


def custom_functions(arg, w) -> None:
    """A gpumat.autograd.Function given ``arg`` as an argument, as forward's result and as
    backward's: a clear exception (TypeError, PyTorch's RuntimeError) or a result."""
    from gpumat.autograd import Function

    class Scale(Function):
        @staticmethod
        def forward(ctx, x, k):
            ctx.k = k
            return x * k

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None

    class Returns(Function):
        @staticmethod
        def forward(ctx, x):
            return arg

        @staticmethod
        def backward(ctx, g):
            return g

    class GradIs(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, g):
            return arg

    for what, run in [
        ("Function.apply(w, arg)", lambda: Scale.apply(w, arg).sum().backward()),
        ("Function forward returns arg", lambda: Returns.apply(w)),
        ("Function backward returns arg", lambda: GradIs.apply(w).sum().backward()),
        ("compiled Function backward returns arg",
         lambda: gpumat.compile(lambda t: GradIs.apply(t).sum().backward())(w)),
    ]:  # fmt: skip
        _record(_expect_frontend(run, None, what, [w]))


BATCHES = {
    "ops_elementwise": lambda: batch_ops(
        [n for n in OP_NAMES if n.startswith(("relu", "fill"))]
        + ["add", "add_scalar", "mul", "mul_scalar", "div"]
        + ["axpy", "copy", "reshape", "exp", "log", "sqrt", "sqrt_gradient", "eq"]
    ),
    "ops_pointwise": lambda: batch_ops(
        ["abs", "sign", "sin", "cos", "erf", "log1p", "rsqrt", "rsqrt_gradient", "logical_not"]
        + ["lt", "le", "gt", "ge", "logical_and", "logical_or", "minimum", "maximum", "where"]
        + ["clamp", "clamp_gradient"]
    ),
    "ops_activations": lambda: batch_ops(
        ["gelu", "gelu_gradient", "gelu_tanh", "gelu_tanh_gradient", "silu", "silu_gradient"]
        + ["softplus", "softplus_gradient", "leaky_relu", "leaky_relu_gradient", "elu"]
        + ["elu_gradient", "hardtanh_gradient"]
    ),
    "ops_layout": lambda: batch_ops(
        [
            "broadcast_to",
            "sum_to_size",
            "matmul",
            "bmm",
            "transpose",
            "one_hot",
            "cross_entropy",
            "uniform",
            "normal",
            "attention",
            "attention_gradient",
            "attention_strided",
            "attention_strided_gradient",
        ]
    ),
    "ops_rnn": lambda: batch_ops(
        ["lstm_cell", "lstm_cell_gradient", "gru_cell", "gru_cell_gradient"]
    ),
    "ops_strided": lambda: batch_ops(
        ["broadcast_binary", "broadcast_where", "sum_to", "as_strided", "as_strided_scatter"]
    ),
    "ops_conv": lambda: batch_ops([n for n in OP_NAMES if n.startswith("conv")]),
    "ops_pool_loss": lambda: batch_ops(
        [
            n
            for n in OP_NAMES
            if "pool" in n
            or ("loss" in n and not n.startswith("nll"))
            or n in ("add_channel_bias", "reduce_sum_channels")
        ]
        + ["adam_update"]
    ),
    "ops_layers": lambda: batch_ops(
        [
            "softmax",
            "softmax_gradient",
            "log_softmax",
            "log_softmax_gradient",
            "nll_loss",
            "nll_loss_gradient",
            "tanh",
            "tanh_gradient",
            "sigmoid",
            "sigmoid_gradient",
            "dropout",
        ]
    ),
    "ops_reduce_axis": lambda: batch_ops(
        [
            "sum",
            "mean",
            "amax",
            "broadcast_dim",
            "amax_gradient",
            "argmax",
        ]
    ),
    "ops_sort": lambda: batch_ops(["argsort", "gather", "gather_gradient", "randint"]),
    "ops_issue35": lambda: batch_ops(
        ["prod", "prod_gradient", "cumsum", "tril", "triu", "pow_scalar", "pow_scalar_gradient"]
        + ["scalar_pow", "scalar_pow_gradient", "pow"]
    ),
    "ops_fused": lambda: batch_ops(
        [
            "matmul_bias",
            "relu_bias_gradient",
            "cross_entropy_with_gradient",
            "sgd_update",
            "momentum_sgd_update",
            "adam_update_multi",
            "adadelta_update_multi",
            "total_norm_multi",
            "clip_scale_multi",
        ]
    ),
    "ops_index": lambda: batch_ops(["index_select", "index_add", "index_copy"]),
    "ops_norm": lambda: batch_ops(
        ["layer_norm", "layer_norm_stats", "layer_norm_gradient", "layer_norm_weight_gradient"]
        + ["layer_norm_backward"]
        + ["batch_norm_stats", "batch_norm", "batch_norm_gradient", "batch_norm_weight_gradient"]
    ),
    "arrays": batch_arrays,
    "graph": batch_graph,
    "optim": batch_optim,
    "interop": batch_interop,
    "frontend": batch_frontend,
    # Not a batch of cases: the harness' own check that a crash is reported as a signal.
    "_crash": lambda: faulthandler._sigsegv(),
}


def covered_ops() -> set:
    """The gpumat.ops functions the batches call (the test checks none is left out)."""
    names = set()
    for key in [b for b in BATCHES if b.startswith("ops_")]:
        src = BATCHES[key]
        names |= set(_batch_names(src))
    return names


def _batch_names(fn) -> list:
    calls = []
    original = globals()["batch_ops"]
    globals()["batch_ops"] = calls.extend
    try:
        fn()
    finally:
        globals()["batch_ops"] = original
    return calls


# The windowed ops and how to build a call of each from (x shape, window) -> args or None.
WINDOW_GRID = [
    (k, stride, pad) for k in (1, 2, 3) for stride in (1, 2, 3) for pad in range(0, k // 2 + 1)
]
BASE_NCHW = (2, 3, 4, 5)


def _windowed_calls(name: str, dims: tuple, k: int, stride: int, pad: int, arrays: Arrays):
    """A call of a conv or pool op with x of ``dims`` (N, C, H, W) and F = C + 1 filters, every
    output shaped by the documented formula (0 where the window does not fit)."""
    n, c, h, w = dims[:4]
    f = dims[4] if len(dims) > 4 else c + 1
    oh, ow = _out_size(h, k, stride, pad), _out_size(w, k, stride, pad)
    new = arrays.new
    if name.startswith("conv2d"):
        x, wt, y = (n, c, h, w), (f, c, k, k), (n, f, oh, ow)
        return {
            "conv2d": [new(x), new(wt), new(y), stride, pad],
            "conv2d_gradient_input": [new(y), new(wt), new(x), stride, pad],
            "conv2d_gradient_filter": [new(x), new(y), new(wt), stride, pad],
        }[name]
    if name.startswith("conv1d"):
        x, wt, y = (n, c, w), (f, c, k), (n, f, ow)
        return {
            "conv1d": [new(x), new(wt), new(y), stride, pad],
            "conv1d_gradient_input": [new(y), new(wt), new(x), stride, pad],
            "conv1d_gradient_filter": [new(x), new(y), new(wt), stride, pad],
        }[name]
    x, y = (n, c, h, w), (n, c, oh, ow)
    return {
        "max_pool2d": [new(x), new(y), k, stride, pad],
        "avg_pool2d": [new(x), new(y), k, stride, pad],
        "max_pool2d_gradient": [new(x), new(y), new(x), k, stride, pad],
        "avg_pool2d_gradient": [new(y), new(x), k, stride, pad],
    }[name]


WINDOWED = [
    n
    for n in OP_NAMES
    if (n.startswith(("conv1d", "conv2d")) or "pool" in n) and not n.startswith("adaptive")
]  # adaptive pooling has no (kernel, stride, padding): its own batch


def batch_windows():
    """Every conv/pool op x every (kernel, stride, padding) of the grid x each of N, C, H, W, F
    set to 0 in turn (and none): a clear error or the reference's values, never a crash."""
    arrays = Arrays(np.random.default_rng(0))
    for name in WINDOWED:
        for k, stride, pad in WINDOW_GRID:
            for zero in (None, 0, 1, 2, 3, 4):
                dims = list(BASE_NCHW) + [BASE_NCHW[1] + 1]
                if zero is not None:
                    dims[zero] = 0
                if name.startswith("conv1d") and zero == 2:
                    continue  # conv1d has no H
                args = _windowed_calls(name, tuple(dims), k, stride, pad, arrays)
                _record(check_op_call(name, args, arrays))


def _use_device(device: str) -> None:
    global CTX
    CTX = {"cpu": gpumat.cpu(), "emu": gpumat.emu(0)}[device]


for _device in ("cpu", "emu"):
    for _ops_batch in [b for b in list(BATCHES) if b.startswith("ops_")]:

        def _zero_batch(device=_device, inner=BATCHES[_ops_batch]):
            global ZERO_DIMS
            ZERO_DIMS = True
            _use_device(device)
            inner()

        BATCHES[f"zeros_{_device}:{_ops_batch}"] = _zero_batch

    def _windows_batch(device=_device):
        _use_device(device)
        batch_windows()

    BATCHES[f"windows_{_device}"] = _windows_batch


def main(batch: str) -> int:
    faulthandler.enable()
    try:
        BATCHES[batch]()
    except Exception:  # noqa: BLE001 (reported, then the exit code says it)
        RESULTS["failures"].append("batch raised:\n" + traceback.format_exc()[-2000:])
    print(json.dumps({"batch": batch, **RESULTS}))
    return 1 if RESULTS["failures"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
