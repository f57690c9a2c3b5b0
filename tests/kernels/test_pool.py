"""Pooling: gpumat.ops.max_pool2d / avg_pool2d and their gradients, and the graph ops of gpumat.nn.

Kernels against a float64 loop-over-windows reference with NaN-poisoned outputs: non-overlapping
and overlapping windows, odd sizes (the last row or column dropped), padding, non-square kernels.
Ties: the first maximum in row-major window order wins, so each window's gradient reaches exactly
one element; padding never wins; NaN propagates. Graph ops against finite differences (numpy,
float64) and each device against the numpy backend.
"""

import numpy as np
import pytest
from helpers import assert_close, nan_array, new_rng, rand
from nn_helpers import check_device_gradients, check_fd_gradients, numeric_grad, rand64

import gpumat
import gpumat.autodiff as ad
from gpumat import graph, ops
from gpumat.runtime import Executor

# --------------------------------------------------------------------------------------------------
# float64 reference: an explicit loop over windows
# --------------------------------------------------------------------------------------------------


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _windows(shape, kernel, stride, pad):
    """Yields (oh, ow, row slice, column slice) of the valid part of every window."""
    _, _, h, w = shape
    (kh, kw), (sh, sw), (ph, pw) = _pair(kernel), _pair(stride), _pair(pad)
    oh_n, ow_n = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    for oh in range(oh_n):
        for ow in range(ow_n):
            r0, c0 = oh * sh - ph, ow * sw - pw
            rows = slice(max(r0, 0), min(r0 + kh, h))
            cols = slice(max(c0, 0), min(c0 + kw, w))
            yield oh, ow, rows, cols


def _out_shape(shape, kernel, stride, pad):
    n, c, h, w = shape
    (kh, kw), (sh, sw), (ph, pw) = _pair(kernel), _pair(stride), _pair(pad)
    return (n, c, (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1)


def max_pool_ref(x, kernel, stride, pad, dy=None):
    """(y, dx): window maxima and, given dy, the gradient routed to each window's first maximum."""
    y = np.empty(_out_shape(x.shape, kernel, stride, pad))
    dx = np.zeros(x.shape)
    for oh, ow, rows, cols in _windows(x.shape, kernel, stride, pad):
        sub = x[:, :, rows, cols]
        flat = sub.reshape(sub.shape[0], sub.shape[1], -1)
        a = np.argmax(flat, axis=-1)  # first maximum; the first NaN if there is one
        y[:, :, oh, ow] = np.take_along_axis(flat, a[..., None], axis=-1)[..., 0]
        if dy is not None:
            width = cols.stop - cols.start
            for n in range(x.shape[0]):
                for c in range(x.shape[1]):
                    i, j = divmod(int(a[n, c]), width)
                    dx[n, c, rows.start + i, cols.start + j] += dy[n, c, oh, ow]
    return y, dx


def avg_pool_ref(x, kernel, stride, pad, dy=None):
    kh, kw = _pair(kernel)
    y = np.empty(_out_shape(x.shape, kernel, stride, pad))
    dx = np.zeros(x.shape)
    for oh, ow, rows, cols in _windows(x.shape, kernel, stride, pad):
        y[:, :, oh, ow] = x[:, :, rows, cols].sum(axis=(2, 3)) / (kh * kw)
        if dy is not None:
            dx[:, :, rows, cols] += dy[:, :, oh, ow][:, :, None, None] / (kh * kw)
    return y, dx


# (N, C, H, W, kernel, stride, padding)
POOL_CASES = [
    (2, 3, 8, 8, 2, 2, 0),
    (2, 3, 7, 9, 2, 2, 0),  # odd: the last row and column are dropped
    (2, 2, 9, 9, 3, 1, 1),  # overlapping windows
    (2, 2, 10, 11, 3, 2, 1),
    (1, 3, 5, 7, (2, 3), (1, 2), (1, 1)),  # non-square
    (2, 2, 6, 6, 1, 1, 0),  # identity
    (3, 2, 7, 7, 7, 7, 3),  # one window per plane, mostly padding
    (2, 1, 4, 4, 4, 1, 2),  # every element in many windows
]


def _pool_id(case):
    return "-".join(str(v).replace(" ", "") for v in case)


@pytest.mark.parametrize("case", POOL_CASES, ids=_pool_id)
def test_max_pool2d_and_gradient_match_reference(ctx, case):
    n, c, h, w, k, s, p = case
    rng, seed = new_rng()
    x = rand((n, c, h, w), rng)
    y_shape = _out_shape(x.shape, k, s, p)
    dy = rand(y_shape, rng)
    y_ref, dx_ref = max_pool_ref(x.astype(np.float64), k, s, p, dy.astype(np.float64))
    x_, dy_ = gpumat.array(x, ctx), gpumat.array(dy, ctx)
    label = f"max_pool2d {case} on {ctx} (seed={seed})"
    y = nan_array(y_shape, ctx)
    ops.max_pool2d(x_, y, k, s, p)
    assert_close(y.asnumpy(), y_ref, rtol=0, atol=0, msg=label)
    dx = nan_array(x.shape, ctx)
    ops.max_pool2d_gradient(x_, dy_, dx, k, s, p)
    assert_close(dx.asnumpy(), dx_ref, rtol=1e-6, atol=1e-6, msg=label)
    np.testing.assert_array_equal(x_.asnumpy(), x)


@pytest.mark.parametrize("case", POOL_CASES, ids=_pool_id)
def test_avg_pool2d_and_gradient_match_reference(ctx, case):
    n, c, h, w, k, s, p = case
    rng, seed = new_rng()
    x = rand((n, c, h, w), rng)
    y_shape = _out_shape(x.shape, k, s, p)
    dy = rand(y_shape, rng)
    y_ref, dx_ref = avg_pool_ref(x.astype(np.float64), k, s, p, dy.astype(np.float64))
    label = f"avg_pool2d {case} on {ctx} (seed={seed})"
    y = nan_array(y_shape, ctx)
    ops.avg_pool2d(gpumat.array(x, ctx), y, k, s, p)
    assert_close(y.asnumpy(), y_ref, rtol=1e-5, atol=1e-6, msg=label)
    dx = nan_array(x.shape, ctx)
    ops.avg_pool2d_gradient(gpumat.array(dy, ctx), dx, k, s, p)
    assert_close(dx.asnumpy(), dx_ref, rtol=1e-5, atol=1e-6, msg=label)


def test_stride_defaults_to_kernel_size(ctx):
    x = rand((1, 2, 6, 6))
    a, b = nan_array((1, 2, 3, 3), ctx), nan_array((1, 2, 3, 3), ctx)
    ops.max_pool2d(gpumat.array(x, ctx), a, 2)
    ops.max_pool2d(gpumat.array(x, ctx), b, 2, 2, 0)
    np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


# --------------------------------------------------------------------------------------------------
# Ties, padding, NaN
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", POOL_CASES, ids=_pool_id)
def test_max_pool2d_ties_follow_first_maximum(ctx, case):
    # Values from {-1, 0, 1}: most windows hold several maxima.
    n, c, h, w, k, s, p = case
    rng, seed = new_rng()
    x = rng.integers(-1, 2, size=(n, c, h, w)).astype(np.float32)
    dy = rand(_out_shape(x.shape, k, s, p), rng)
    y_ref, dx_ref = max_pool_ref(x.astype(np.float64), k, s, p, dy.astype(np.float64))
    y = nan_array(y_ref.shape, ctx)
    ops.max_pool2d(gpumat.array(x, ctx), y, k, s, p)
    assert_close(y.asnumpy(), y_ref, rtol=0, atol=0, msg=f"seed={seed}")
    dx = nan_array(x.shape, ctx)
    ops.max_pool2d_gradient(gpumat.array(x, ctx), gpumat.array(dy, ctx), dx, k, s, p)
    assert_close(dx.asnumpy(), dx_ref, rtol=1e-6, atol=1e-6, msg=f"ties, seed={seed}")


def _max_pool_2x2_exact(x, dy):
    """2x2, stride 2 max pooling and its gradient, bit for bit: the window's first maximum in
    row-major order, a NaN beating numbers and the first NaN winning; dx = 0 + dy at the argmax
    (so -0.0 becomes +0.0, as a scatter-add into zeros gives) and +0.0 elsewhere."""
    n, c, h, w = x.shape
    oh, ow = h // 2, w // 2
    win = x[:, :, : 2 * oh, : 2 * ow].reshape(n, c, oh, 2, ow, 2).transpose(0, 1, 2, 4, 3, 5)
    win = win.reshape(n, c, oh, ow, 4)
    best, at = win[..., 0].copy(), np.zeros((n, c, oh, ow), np.int64)
    for i in range(1, 4):
        v = win[..., i]
        take = (v > best) | (np.isnan(v) & ~np.isnan(best))
        best, at = np.where(take, v, best), np.where(take, i, at)
    d = np.zeros((n, c, oh, ow, 4), np.float32)
    np.put_along_axis(d, at[..., None], (np.float32(0.0) + dy)[..., None], axis=-1)
    dx = np.zeros(x.shape, np.float32)
    dx[:, :, : 2 * oh, : 2 * ow] = (
        d.reshape(n, c, oh, ow, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, 2 * oh, 2 * ow)
    )
    return best, dx


@pytest.mark.parametrize("shape", [(3, 5, 8, 10), (2, 3, 7, 9), (1, 2, 2, 2), (2, 70, 6, 150)])
def test_max_pool2d_2x2_is_bit_exact_with_ties_nan_inf_and_negative_zero(ctx, shape):
    # The host runs 2x2, stride 2, unpadded pooling in its own branch-free code: the same rules
    # as every other window, to the bit (NaN payloads, -0.0 gradients), at even and odd sizes
    # and rows longer than its 64-window blocks.
    rng, seed = new_rng()
    x = rng.integers(-2, 3, size=shape).astype(np.float32)  # many ties
    special = rng.random(shape)
    x[special < 0.05] = np.nan
    x[(special >= 0.05) & (special < 0.08)] = np.inf
    x[(special >= 0.08) & (special < 0.11)] = -np.inf
    x.view(np.uint32)[special < 0.02] |= 0x1234  # NaNs with payloads: the first NaN must win
    out_shape = (shape[0], shape[1], shape[2] // 2, shape[3] // 2)
    dy = rand(out_shape, rng)
    dy[rng.random(out_shape) < 0.2] = -0.0
    y_ref, dx_ref = _max_pool_2x2_exact(x, dy)
    y = nan_array(out_shape, ctx)
    ops.max_pool2d(gpumat.array(x, ctx), y, 2)
    np.testing.assert_array_equal(
        y.asnumpy().view(np.uint32), y_ref.view(np.uint32), f"seed={seed}"
    )
    dx = nan_array(shape, ctx)
    ops.max_pool2d_gradient(gpumat.array(x, ctx), gpumat.array(dy, ctx), dx, 2)
    np.testing.assert_array_equal(
        dx.asnumpy().view(np.uint32), dx_ref.view(np.uint32), f"seed={seed}"
    )


def test_max_pool2d_gradient_of_constant_input_goes_to_first_element(ctx):
    # Every window is all ties: its gradient must reach exactly one element, the window's first.
    x = np.full((2, 3, 6, 8), 0.5, np.float32)
    dx = nan_array(x.shape, ctx)
    ops.max_pool2d_gradient(
        gpumat.array(x, ctx), gpumat.array(np.ones((2, 3, 3, 4), np.float32), ctx), dx, 2
    )
    expected = np.zeros(x.shape, np.float32)
    expected[:, :, ::2, ::2] = 1.0
    np.testing.assert_array_equal(dx.asnumpy(), expected)
    # with padding 1 the first element of the first window is the padded input's (0, 0)
    dx = nan_array((1, 1, 3, 3), ctx)
    ops.max_pool2d_gradient(
        gpumat.array(np.zeros((1, 1, 3, 3), np.float32), ctx),
        gpumat.array(np.ones((1, 1, 2, 2), np.float32), ctx),
        dx,
        2,
        2,
        1,
    )
    np.testing.assert_array_equal(dx.asnumpy()[0, 0], [[1, 1, 0], [1, 1, 0], [0, 0, 0]])


def test_max_pool2d_padding_never_wins(ctx):
    x = -np.abs(rand((1, 2, 5, 5))) - 1.0  # every value < -1; padding would give 0 or -inf
    y = nan_array((1, 2, 3, 3), ctx)
    ops.max_pool2d(gpumat.array(x, ctx), y, 3, 2, 1)
    ref, _ = max_pool_ref(x.astype(np.float64), 3, 2, 1)
    assert_close(y.asnumpy(), ref, rtol=0, atol=0)
    assert np.all(y.asnumpy() < -1.0)


def test_max_pool2d_nan_propagates(ctx):
    x = rand((1, 1, 4, 4))
    x[0, 0, 0, 1] = np.nan
    x[0, 0, 3, 3] = np.nan
    y = nan_array((1, 1, 2, 2), ctx)
    ops.max_pool2d(gpumat.array(x, ctx), y, 2)
    got = y.asnumpy()[0, 0]
    assert np.isnan(got[0, 0]) and np.isnan(got[1, 1]), got
    assert np.isfinite(got[0, 1]) and np.isfinite(got[1, 0]), got
    dx = nan_array(x.shape, ctx)
    ops.max_pool2d_gradient(
        gpumat.array(x, ctx), gpumat.array(np.ones((1, 1, 2, 2), np.float32), ctx), dx, 2
    )
    d = dx.asnumpy()[0, 0]
    assert d[0, 1] == 1.0 and d[3, 3] == 1.0 and d.sum() == 4.0, d


# --------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------


def _a(ctx, *shape):
    return gpumat.array(np.ones(shape, np.float32), ctx)


BAD_POOL = [
    ("max_pool2d", "4-D", lambda c: ops.max_pool2d(_a(c, 2, 8, 8), _a(c, 2, 4, 4), 2)),
    (
        "max_pool2d",
        "padding",
        lambda c: ops.max_pool2d(_a(c, 1, 1, 8, 8), _a(c, 1, 1, 5, 5), 2, 2, 2),
    ),
    (
        "avg_pool2d",
        "padding",
        lambda c: ops.avg_pool2d(_a(c, 1, 1, 8, 8), _a(c, 1, 1, 9, 9), 2, 1, -1),
    ),
    ("max_pool2d", "empty", lambda c: ops.max_pool2d(_a(c, 1, 1, 2, 2), _a(c, 1, 1, 1, 1), 3)),
    ("max_pool2d", "stride", lambda c: ops.max_pool2d(_a(c, 1, 1, 4, 4), _a(c, 1, 1, 3, 3), 2, 0)),
    ("avg_pool2d", "kernel", lambda c: ops.avg_pool2d(_a(c, 1, 1, 4, 4), _a(c, 1, 1, 4, 4), 0)),
    (
        "max_pool2d",
        r"\(1, 1, 4, 4\)",
        lambda c: ops.max_pool2d(_a(c, 1, 1, 8, 8), _a(c, 1, 1, 4, 3), 2),
    ),
    (
        "max_pool2d_gradient",
        "dy",
        lambda c: ops.max_pool2d_gradient(
            _a(c, 1, 1, 8, 8), _a(c, 1, 1, 3, 4), _a(c, 1, 1, 8, 8), 2
        ),
    ),
    (
        "max_pool2d_gradient",
        "differ",
        lambda c: ops.max_pool2d_gradient(
            _a(c, 1, 1, 8, 8), _a(c, 1, 1, 4, 4), _a(c, 1, 1, 8, 7), 2
        ),
    ),
    (
        "avg_pool2d_gradient",
        "dy",
        lambda c: ops.avg_pool2d_gradient(_a(c, 1, 2, 4, 4), _a(c, 1, 1, 8, 8), 2),
    ),
    (
        "max_pool2d",
        "in place",
        lambda c: (lambda x: ops.max_pool2d(x, x, 1))(_a(c, 1, 1, 3, 3)),
    ),
]


@pytest.mark.parametrize(
    "name,match,call", BAD_POOL, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD_POOL)]
)
def test_impossible_pool_geometry_raises_value_error(ctx, name, match, call):
    import re

    with pytest.raises(ValueError) as info:
        call(ctx)
    msg = str(info.value)
    assert msg.startswith(name + ":") and re.search(match, msg), msg


def test_pool_non_integer_arguments_raise_type_error(ctx):
    x, y = _a(ctx, 1, 1, 4, 4), _a(ctx, 1, 1, 2, 2)
    for bad in (2.0, "2", None, (2, 2, 2)):
        with pytest.raises(TypeError):
            ops.max_pool2d(x, y, bad)


# --------------------------------------------------------------------------------------------------
# Graph ops
# --------------------------------------------------------------------------------------------------

GRAPH_POOL = [
    ((2, 3, 6, 6), 2, None, 0),
    ((2, 2, 7, 6), 3, 2, 1),
    ((1, 2, 5, 7), (2, 3), (1, 2), 1),
]


@pytest.mark.parametrize("shape,k,s,p", GRAPH_POOL)
def test_pool_op_gradients_match_finite_differences(shape, k, s, p):
    rng, _ = new_rng()
    # distinct values: no ties, so max pooling is differentiable at the point
    x = rng.permutation(np.prod(shape)).reshape(shape) / np.prod(shape) + 0.01
    check_fd_gradients(lambda a: graph.max_pool2d_op(a, k, s, p), [x.astype(np.float64)], rng)
    check_fd_gradients(lambda a: graph.avg_pool2d_op(a, k, s, p), [rand64(rng, shape)], rng)


@pytest.mark.parametrize("shape,k,s,p", GRAPH_POOL)
def test_pool_ops_on_device_match_numpy(ctx, shape, k, s, p):
    rng, _ = new_rng()
    x = rng.permutation(np.prod(shape)).reshape(shape) / np.prod(shape) + 0.01
    check_device_gradients(ctx, lambda a: graph.max_pool2d_op(a, k, s, p), [x], rng)
    check_device_gradients(
        ctx, lambda a: graph.avg_pool2d_op(a, k, s, p), [rand64(rng, shape)], rng
    )


def test_avg_pool_gradient_op_is_differentiable():
    rng, _ = new_rng()
    x_like, dy = ad.Variable("x_like"), ad.Variable("dy")
    out = graph.avg_pool2d_gradient_op(dy, x_like, 3, 2, 1)
    feeds = {x_like: np.zeros((2, 2, 7, 6)), dy: rand64(rng, (2, 2, 4, 3))}
    forward = ad.Executor([out])
    r = ad.Variable("R")
    r_val = rand64(rng, (2, 2, 7, 6))
    (g,) = ad.Executor(ad.gradients(out * r, [dy])).run({**feeds, r: r_val})
    expected = numeric_grad(lambda: float(np.sum(forward.run(feeds)[0] * r_val)), feeds[dy])
    np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-9)


def test_max_pool_second_derivative_is_not_implemented():
    x = ad.Variable("x")
    (g,) = ad.gradients(graph.max_pool2d_op(x, 2), [x])
    with pytest.raises(NotImplementedError, match="max_pool2d_gradient_op"):
        ad.gradients(g * g, [x])


GRAPH_POOL_ERRORS = [
    (lambda x: graph.max_pool2d_op(x, 2), (2, 8, 8), "4-D"),
    (lambda x: graph.avg_pool2d_op(x, 5), (1, 1, 4, 4), "empty"),
    (lambda x: graph.max_pool2d_op(x, 3, 3), (1, 1, 2, 9), "empty"),
]


@pytest.mark.parametrize("build,shape,match", GRAPH_POOL_ERRORS)
def test_pool_shape_inference_errors(build, shape, match):
    x = ad.Variable("x")
    node = build(x)
    with pytest.raises(ValueError, match=match) as info:
        ad.Executor([node]).run({x: np.ones(shape)})
    assert node.op.name in str(info.value) and str(shape) in str(info.value)


def test_pool_op_arguments_are_checked_when_building():
    x = ad.Variable("x")
    with pytest.raises(ValueError, match="padding"):
        graph.max_pool2d_op(x, 2, padding=2)
    with pytest.raises(ValueError, match="stride"):
        graph.avg_pool2d_op(x, 2, stride=0)
    with pytest.raises(TypeError):
        graph.max_pool2d_op(x, 2.5)
    node = graph.max_pool2d_op(x, (2, 3))
    assert node.stride == (2, 3) and node.padding == (0, 0)


@pytest.mark.parametrize("x_shape", [(1, 1, 0, 0), (2, 2, 1, 0), (2, 3, 0, 5)])
def test_max_pooling_an_empty_plane_with_padding_is_refused(ctx, x_shape):
    """With H or W = 0 and padding, every window holds only padding: its max is undefined. The
    kernels once indexed the empty plane (a crash); every level now refuses it with ValueError."""
    n, c, h, w = x_shape
    k, stride, pad = 2, 2, 1
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    x = gpumat.array(np.zeros(x_shape, np.float32), ctx)
    y = nan_array((n, c, oh, ow), ctx)
    with pytest.raises(ValueError, match="empty spatial dimension"):
        ops.max_pool2d(x, y, k, stride, pad)
    with pytest.raises(ValueError, match="empty spatial dimension"):
        ops.max_pool2d_gradient(x, y, gpumat.empty(x_shape, ctx), k, stride, pad)
    node = graph.max_pool2d_op(ad.Variable("x"), k, stride, pad)
    with pytest.raises(ValueError, match="empty spatial dimension"):
        Executor([node], device=None).run({node.inputs[0]: np.zeros(x_shape)})
    # Average pooling is defined there (padding counts as zeros): a plane of zeros.
    ops.avg_pool2d(x, y, k, stride, pad)
    np.testing.assert_array_equal(y.asnumpy(), np.zeros((n, c, oh, ow), np.float32))
