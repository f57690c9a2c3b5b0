"""Shared test helpers: random inputs, NaN-poisoned outputs, and one op-vs-numpy comparison.

``check_op`` is the one helper every kernel test goes through (after tinygrad's ``helper_test_op``
and CuPy's ``numpy_cupy_allclose``): it draws fresh random float32 inputs (never zeros), computes a
float64 numpy reference, runs the gpumat op into an output pre-filled with NaN (so an element the
kernel forgets to write fails the test), checks that the inputs were not modified, and compares with
a tolerance suited to float32. Reductions and matmul pass ``bound``: a per-element error bound that
grows with the length of the sum (see ``matmul_bound``, ``sum_bound``).

A failure message names the numpy seed, so a failing draw can be replayed with ``seed=...``.
"""

import numpy as np

import gpumat

EPS32 = float(np.finfo(np.float32).eps)  # 2**-23; unit roundoff u = EPS32 / 2


def shape_id(shape):
    """pytest id for a shape: (72, 73, 74) -> '72x73x74', () -> 'scalar'."""
    return "x".join(str(d) for d in shape) if len(shape) else "scalar"


def new_rng(seed=None):
    """A fresh numpy Generator and the seed that replays it (unseeded by default: fresh data)."""
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**63))
    return np.random.default_rng(seed), seed


class Out:
    """Stands for the output argument of a :mod:`gpumat.reference` kernel in :func:`reference`."""

    def __init__(self, shape, dtype=np.float64):
        self.shape, self.dtype = tuple(shape), dtype


def reference(name, *args, **kwargs):
    """Calls the numpy reference kernel ``gpumat.reference.<name>`` with fresh arrays where the
    arguments are :class:`Out`, and returns them (one array, or a tuple in argument order)."""
    outs = [np.empty(a.shape, a.dtype) if isinstance(a, Out) else None for a in args]
    getattr(gpumat.reference, name)(
        *[o if o is not None else a for a, o in zip(args, outs, strict=True)], **kwargs
    )
    filled = [o for o in outs if o is not None]
    return filled[0] if len(filled) == 1 else tuple(filled)


def rand(shape, rng=None, low=0.1, high=1.0):
    """float32 array with entries in [low, high) * random sign: never zero, never denormal."""
    if rng is None:
        rng, _ = new_rng()
    mag = rng.uniform(low, high, size=shape)
    sign = np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)
    return np.asarray(mag * sign, dtype=np.float32)


def nan_array(shape, ctx):
    """A gpumat array of `shape` on `ctx` filled with NaN: the poisoned output of a kernel test."""
    return gpumat.array(np.full(shape, np.nan, dtype=np.float32), ctx)


def assert_close(got, expected, rtol=1e-6, atol=1e-6, bound=0.0, msg=""):
    """Compare a float32 result with a (float64) reference, elementwise:

        |got - expected| <= atol + bound + rtol * |expected|

    `bound` may be an array (a per-element error bound). NaN must appear exactly where the
    reference has NaN; infinities must match exactly.
    """
    got = np.asarray(got)
    expected = np.asarray(expected, dtype=np.float64)
    prefix = f"{msg}: " if msg else ""
    assert got.dtype == np.float32, f"{prefix}dtype is {got.dtype}, expected float32"
    assert got.shape == expected.shape, f"{prefix}shape {got.shape} != expected {expected.shape}"
    g = got.astype(np.float64)
    nan_g, nan_e = np.isnan(g), np.isnan(expected)
    if not np.array_equal(nan_g, nan_e):
        extra = np.argwhere(nan_g & ~nan_e)
        missing = np.argwhere(nan_e & ~nan_g)
        raise AssertionError(
            f"{prefix}NaN pattern differs: {len(extra)} unexpected NaN (first at "
            f"{tuple(extra[0]) if len(extra) else None}), {len(missing)} NaN missing (first at "
            f"{tuple(missing[0]) if len(missing) else None}); shape {got.shape}"
        )
    inf_e = np.isinf(expected)
    if np.any(inf_e) or np.any(np.isinf(g)):
        assert np.array_equal(g[inf_e | np.isinf(g)], expected[inf_e | np.isinf(g)]), (
            f"{prefix}infinities differ from the reference"
        )
    ok = nan_e | inf_e
    tol = atol + np.broadcast_to(bound, expected.shape) + rtol * np.abs(expected)
    err = np.where(ok, 0.0, np.abs(g - expected))
    bad = err > tol
    if np.any(bad):
        excess = np.where(bad, err / np.maximum(tol, 1e-300), 0.0)
        worst = np.unravel_index(int(np.argmax(excess)), got.shape)
        raise AssertionError(
            f"{prefix}{int(bad.sum())} of {got.size} elements out of tolerance; worst at {worst}: "
            f"got {g[worst]!r}, expected {expected[worst]!r}, |err| {err[worst]:.3g} > tol "
            f"{tol[worst]:.3g} (rtol={rtol}, atol={atol}); max |err| {err.max():.3g}; "
            f"shape {got.shape}"
        )


def matmul_bound(a, b):
    """Worst-case float32 error of a @ b for any summation order: K * eps * (|a| @ |b|), which is
    twice the classical gamma_K = K*u/(1 - K*u) bound (Higham, Accuracy and Stability, 3.5)."""
    k = a.shape[1]
    return k * EPS32 * (np.abs(a) @ np.abs(b))


def sum_bound(x, axis):
    """Worst-case float32 error of a sum of n terms along `axis`: n * eps * sum |x|."""
    n = int(np.prod([x.shape[i] for i in np.atleast_1d(axis)], dtype=np.int64))
    return n * EPS32 * np.abs(x).sum(axis=axis)


def check_op(
    ctx,
    op,
    ref,
    inputs,
    out_shape,
    *,
    rtol=1e-6,
    atol=1e-6,
    bound=None,
    seed=None,
    low=0.1,
    high=1.0,
    name="",
):
    """Run `op` on gpumat and `ref` on numpy with the same inputs and compare.

    ctx        a gpumat.Device (the fixture).
    op         op(*device_inputs, out) -> None, e.g.
               ``lambda a, b, out: ops.matmul(a, b, out, False, True)``.
    ref        ref(*float64_inputs) -> float64 numpy array of shape `out_shape`.
    inputs     a list whose items are shapes (tuples: drawn with `rand`, fresh each call) or numpy
               arrays (used as given, converted to float32).
    bound      optional bound(*float64_inputs) -> per-element absolute error bound added to atol
               (matmul, reductions).
    Returns (got, expected, host_inputs) for extra checks.
    """
    rng, seed = new_rng(seed)
    host = [
        rand(x, rng, low, high) if isinstance(x, tuple) else np.asarray(x, dtype=np.float32)
        for x in inputs
    ]
    f64 = [h.astype(np.float64) for h in host]
    expected = np.asarray(ref(*f64), dtype=np.float64)
    assert expected.shape == tuple(out_shape), (
        f"reference gave {expected.shape}, out is {out_shape}"
    )
    dev = [gpumat.array(h, ctx) for h in host]
    out = nan_array(out_shape, ctx)
    op(*dev, out)
    got = out.asnumpy()
    label = f"{name or getattr(op, '__name__', 'op')} on {ctx} (seed={seed})"
    for i, (h, d) in enumerate(zip(host, dev, strict=True)):
        after = d.asnumpy()
        assert np.array_equal(after, h, equal_nan=True), f"{label}: input {i} was modified"
    b = 0.0 if bound is None else bound(*f64)
    assert_close(got, expected, rtol=rtol, atol=atol, bound=b, msg=label)
    return got, expected, host
