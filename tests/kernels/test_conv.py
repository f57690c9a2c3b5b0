"""Convolution: gpumat.ops.conv2d / conv1d and their gradients, add_channel_bias,
reduce_sum_channels, and the graph ops of gpumat.nn built on them.

Kernels are checked against an explicit im2col numpy reference in float64 (fresh random inputs,
NaN-poisoned outputs, float32 error bounds that grow with the length of each sum), over strides
1-3, padding 0-2, odd and non-square sizes, 1x1 and 7x7 filters, and with the im2col workspace
limited so the batch is processed in chunks (one image, two with a tail). Graph ops are checked
against float64 finite differences on the numpy backend, and on each device against the numpy
backend's analytic gradients.
"""

import os
import re

import numpy as np
import pytest
from helpers import EPS32, Out, assert_close, nan_array, new_rng, rand, reference
from nn_helpers import check_device_gradients, check_fd_gradients, numeric_grad, rand64

import gpumat
import gpumat.autodiff as ad
from gpumat import graph, nn, ops

# --------------------------------------------------------------------------------------------------
# float64 references: explicit im2col / col2im
# --------------------------------------------------------------------------------------------------


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def out_size(h, k, s, p):
    return (h + 2 * p - k) // s + 1


def im2col_ref(x, kh, kw, stride, pad):
    """col (C*KH*KW, N*OH*OW): row (c, i, j), column (n, oh, ow), zero padding."""
    n, c, h, w = x.shape
    (sh, sw), (ph, pw) = _pair(stride), _pair(pad)
    oh, ow = out_size(h, kh, sh, ph), out_size(w, kw, sw, pw)
    xp = np.zeros((n, c, h + 2 * ph, w + 2 * pw))
    xp[:, :, ph : ph + h, pw : pw + w] = x
    col = np.empty((c, kh, kw, n, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]
            col[:, i, j] = patch.transpose(1, 0, 2, 3)
    return col.reshape(c * kh * kw, n * oh * ow), (oh, ow)


def col2im_ref(col, x_shape, kh, kw, stride, pad):
    """The adjoint of im2col_ref: every column entry is added back to the input it was read from."""
    n, c, h, w = x_shape
    (sh, sw), (ph, pw) = _pair(stride), _pair(pad)
    oh, ow = out_size(h, kh, sh, ph), out_size(w, kw, sw, pw)
    col = col.reshape(c, kh, kw, n, oh, ow)
    xp = np.zeros((n, c, h + 2 * ph, w + 2 * pw))
    for i in range(kh):
        for j in range(kw):
            xp[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw] += col[
                :, i, j
            ].transpose(1, 0, 2, 3)
    return xp[:, :, ph : ph + h, pw : pw + w]


def conv_ref(x, w, stride=1, pad=0):
    f, _, kh, kw = w.shape
    col, (oh, ow) = im2col_ref(x, kh, kw, stride, pad)
    y = w.reshape(f, -1) @ col
    return y.reshape(f, x.shape[0], oh, ow).transpose(1, 0, 2, 3)


def conv_grad_input_ref(dy, w, x_shape, stride=1, pad=0):
    f, _, kh, kw = w.shape
    dcol = w.reshape(f, -1).T @ dy.transpose(1, 0, 2, 3).reshape(f, -1)
    return col2im_ref(dcol, x_shape, kh, kw, stride, pad)


def conv_grad_filter_ref(x, dy, w_shape, stride=1, pad=0):
    f, _, kh, kw = w_shape
    col, _ = im2col_ref(x, kh, kw, stride, pad)
    return (dy.transpose(1, 0, 2, 3).reshape(f, -1) @ col.T).reshape(w_shape)


def test_references_agree_with_gpumat_reference():
    # Two independent float64 implementations (im2col here, sliding windows + tensordot there),
    # equal to float64 rounding: relative to the largest element, as an element that cancels
    # to near zero carries the rounding of its terms.
    rng, _ = new_rng()
    x, w = rand64(rng, (2, 3, 9, 8)), rand64(rng, (4, 3, 3, 2))

    def agree(got, expected):
        atol = 1e-12 * np.max(np.abs(expected))
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=atol)

    for stride, pad in [((1, 1), (0, 0)), ((2, 3), (1, 1))]:
        y = conv_ref(x, w, stride, pad)
        agree(reference("conv2d", x, w, Out(y.shape), stride, pad), y)
        dy = rand64(rng, y.shape)
        agree(
            reference("conv2d_gradient_input", dy, w, Out(x.shape), stride, pad),
            conv_grad_input_ref(dy, w, x.shape, stride, pad),
        )
        agree(
            reference("conv2d_gradient_filter", x, dy, Out(w.shape), stride, pad),
            conv_grad_filter_ref(x, dy, w.shape, stride, pad),
        )


# --------------------------------------------------------------------------------------------------
# Kernels against the reference
# --------------------------------------------------------------------------------------------------

# (N, C, H, W, F, KH, KW, stride, padding)
CONV_CASES = [
    (2, 3, 7, 9, 4, 3, 3, 1, 0),  # odd sizes
    (3, 2, 9, 7, 5, 3, 3, 2, 1),
    (2, 4, 8, 8, 3, 1, 1, 1, 0),  # 1x1
    (3, 3, 9, 8, 3, 1, 1, 2, 0),  # 1x1, stride 2: skips rows and columns
    (2, 2, 13, 11, 3, 7, 7, 1, 2),  # 7x7
    (2, 2, 12, 12, 3, 7, 7, 2, 2),
    (1, 1, 5, 5, 1, 5, 5, 1, 0),  # one output pixel
    (3, 3, 10, 9, 2, 3, 5, (2, 1), (1, 2)),  # non-square kernel, stride and padding
    (5, 2, 6, 7, 3, 2, 2, 3, 2),  # padding > kernel / 2 is fine for a convolution
    (4, 3, 6, 6, 4, 3, 3, 1, 1),  # "same" padding
    (2, 2, 5, 3, 2, 3, 7, (1, 3), (1, 2)),  # filter as wide as the padded input
]


def _case_id(case):
    n, c, h, w, f, kh, kw, s, p = case
    return f"{n}x{c}x{h}x{w}-f{f}k{kh}x{kw}-s{s}-p{p}".replace(" ", "")


def _workspace_for(case, which):
    """A workspace limit giving chunks of all, one, or two images (the last chunk short)."""
    n, c, h, w, f, kh, kw, s, p = case
    (sh, sw), (ph, pw) = _pair(s), _pair(p)
    per_image = (c * kh * kw + f) * out_size(h, kh, sh, ph) * out_size(w, kw, sw, pw) * 4
    return {"all": 64 << 20, "one": 0, "two": 2 * per_image}[which]


@pytest.fixture
def workspace():
    """Restores the default conv workspace limit after a test that changes it."""
    old = ops.set_conv_workspace_limit(64 << 20)
    yield
    ops.set_conv_workspace_limit(old)


def _conv_arrays(case, rng):
    n, c, h, w, f, kh, kw, s, p = case
    x, wt = rand((n, c, h, w), rng), rand((f, c, kh, kw), rng)
    y_shape = conv_ref(x.astype(np.float64), wt.astype(np.float64), s, p).shape
    return x, wt, rand(y_shape, rng), s, p


def _check_against_reference(ctx, case, workspace_limit, label):
    """conv2d and both gradients of `case` on ctx, each within its float32 bound of float64."""
    rng, seed = new_rng()
    x, w, dy, s, p = _conv_arrays(case, rng)
    x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
    ops.set_conv_workspace_limit(workspace_limit)
    x_, w_, dy_ = (gpumat.array(a, ctx) for a in (x, w, dy))
    label = f"{_case_id(case)} {label} on {ctx} (seed={seed})"

    y = nan_array(dy.shape, ctx)
    ops.conv2d(x_, w_, y, s, p)
    ckk = w[0].size
    expected = conv_ref(x64, w64, s, p)
    bound = ckk * EPS32 * conv_ref(np.abs(x64), np.abs(w64), s, p)
    assert_close(y.asnumpy(), expected, rtol=1e-6, atol=1e-6, bound=bound, msg=f"conv2d {label}")

    dx = nan_array(x.shape, ctx)
    ops.conv2d_gradient_input(dy_, w_, dx, s, p)
    expected = conv_grad_input_ref(dy64, w64, x.shape, s, p)
    terms = w.shape[0] * w.shape[2] * w.shape[3]
    bound = terms * EPS32 * conv_grad_input_ref(np.abs(dy64), np.abs(w64), x.shape, s, p)
    assert_close(dx.asnumpy(), expected, rtol=1e-6, atol=1e-6, bound=bound, msg=f"dx {label}")

    dw = nan_array(w.shape, ctx)
    ops.conv2d_gradient_filter(x_, dy_, dw, s, p)
    expected = conv_grad_filter_ref(x64, dy64, w.shape, s, p)
    terms = dy.shape[0] * dy.shape[2] * dy.shape[3]
    bound = terms * EPS32 * conv_grad_filter_ref(np.abs(x64), np.abs(dy64), w.shape, s, p)
    assert_close(dw.asnumpy(), expected, rtol=1e-6, atol=1e-6, bound=bound, msg=f"dw {label}")

    for arr, host in ((x_, x), (w_, w), (dy_, dy)):
        np.testing.assert_array_equal(arr.asnumpy(), host, err_msg=f"an input changed: {label}")


@pytest.mark.parametrize("chunks", ["all", "one", "two"])
@pytest.mark.parametrize("case", CONV_CASES, ids=_case_id)
def test_conv2d_and_gradients_match_im2col_reference(ctx, case, chunks, workspace):
    _check_against_reference(ctx, case, _workspace_for(case, chunks), f"chunks={chunks}")


# The host runs a batch of at least as many images as CPUs online image by image (each thread
# builds one image's columns in its own scratch; the filter gradient sums fixed groups of images),
# smaller batches and tight workspace limits chunk by chunk: batches sized from this machine's
# CPUs, so both schedules run on any machine.
CPUS = os.sysconf("SC_NPROCESSORS_ONLN")
SCHEDULE_CASES = [
    (CPUS + 1, 3, 9, 8, 4, 3, 3, 1, 1),
    (CPUS + 3, 4, 12, 12, 5, 5, 5, 1, 0),  # the MNIST CNN's 5x5 filters
    (4 * CPUS + 5, 2, 10, 9, 3, 3, 5, (2, 1), (1, 2)),  # more images than filter-gradient groups
    (CPUS + 1, 2, 5, 3, 2, 3, 7, (1, 3), (1, 2)),
    (CPUS + 2, 3, 6, 13, 4, 2, 3, 1, 0),  # stride 1, no padding: rows of 11 outputs
    (CPUS + 1, 1, 3, 70, 2, 2, 66, 1, (0, 1)),  # a filter 66 columns wide, padded on one axis
]


@pytest.mark.parametrize("schedule", ["image-by-image", "chunked"])
@pytest.mark.parametrize("case", SCHEDULE_CASES, ids=_case_id)
def test_both_host_schedules_match_reference(ctx, case, schedule, workspace):
    _check_against_reference(ctx, case, 64 << 20 if schedule == "image-by-image" else 0, schedule)


def test_tvm_seed_case_matches_im2col_reference(ctx):
    # The dlsys course's conv test: X (100, 3, 28, 28), F (10, 3, 5, 5) -> (100, 10, 24, 24).
    rng, seed = new_rng()
    x, w = rand((100, 3, 28, 28), rng), rand((10, 3, 5, 5), rng)
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    y = nan_array((100, 10, 24, 24), ctx)
    ops.conv2d(gpumat.array(x, ctx), gpumat.array(w, ctx), y)
    expected = conv_ref(x64, w64)
    assert expected.shape == (100, 10, 24, 24)
    bound = 75 * EPS32 * conv_ref(np.abs(x64), np.abs(w64))
    assert_close(y.asnumpy(), expected, rtol=1e-6, atol=1e-6, bound=bound, msg=f"seed={seed}")


# (N, C, W, F, K, stride, padding)
CONV1D_CASES = [
    (2, 3, 11, 4, 3, 1, 0),
    (3, 2, 10, 5, 5, 2, 2),
    (2, 4, 7, 3, 1, 1, 0),
    (2, 2, 16, 3, 7, 3, 1),
]


@pytest.mark.parametrize("case", CONV1D_CASES, ids=lambda c: "-".join(map(str, c)))
def test_conv1d_and_gradients_match_reference(ctx, case):
    n, c, w, f, k, s, p = case
    rng, seed = new_rng()
    x, wt = rand((n, c, w), rng), rand((f, c, k), rng)
    x4, w4 = x[:, :, None, :].astype(np.float64), wt[:, :, None, :].astype(np.float64)
    y_ref = conv_ref(x4, w4, (1, s), (0, p))[:, :, 0, :]
    dy = rand(y_ref.shape, rng)
    dy4 = dy[:, :, None, :].astype(np.float64)
    label = f"conv1d {case} on {ctx} (seed={seed})"
    x_, w_, dy_ = (gpumat.array(a, ctx) for a in (x, wt, dy))

    y = nan_array(y_ref.shape, ctx)
    ops.conv1d(x_, w_, y, s, p)
    bound = c * k * EPS32 * conv_ref(np.abs(x4), np.abs(w4), (1, s), (0, p))[:, :, 0, :]
    assert_close(y.asnumpy(), y_ref, rtol=1e-6, atol=1e-6, bound=bound, msg=label)

    dx = nan_array(x.shape, ctx)
    ops.conv1d_gradient_input(dy_, w_, dx, s, p)
    ref = conv_grad_input_ref(dy4, w4, x4.shape, (1, s), (0, p))[:, :, 0, :]
    bound = f * k * EPS32 * conv_grad_input_ref(np.abs(dy4), np.abs(w4), x4.shape, (1, s), (0, p))
    assert_close(dx.asnumpy(), ref, rtol=1e-6, atol=1e-6, bound=bound[:, :, 0, :], msg=label)

    dw = nan_array(wt.shape, ctx)
    ops.conv1d_gradient_filter(x_, dy_, dw, s, p)
    ref = conv_grad_filter_ref(x4, dy4, w4.shape, (1, s), (0, p))[:, :, 0, :]
    bound = n * y_ref.shape[2] * EPS32 * np.abs(ref) + 1e-6
    assert_close(dw.asnumpy(), ref, rtol=1e-5, atol=1e-6, bound=bound, msg=label)


def test_conv_zero_size_batch_filters_and_channels(ctx):
    z = lambda *s: gpumat.array(np.zeros(s, np.float32), ctx)  # noqa: E731
    # N = 0: empty outputs, and the filter gradient (an empty sum over the batch) is zero.
    y = gpumat.empty((0, 4, 3, 3), ctx)
    ops.conv2d(z(0, 2, 5, 5), z(4, 2, 3, 3), y)
    dw = nan_array((4, 2, 3, 3), ctx)
    ops.conv2d_gradient_filter(z(0, 2, 5, 5), z(0, 4, 3, 3), dw)
    np.testing.assert_array_equal(dw.asnumpy(), 0.0)
    # F = 0: the input gradient is zero. C = 0: the output is zero.
    dx = nan_array((2, 3, 5, 5), ctx)
    ops.conv2d_gradient_input(z(2, 0, 3, 3), z(0, 3, 3, 3), dx)
    np.testing.assert_array_equal(dx.asnumpy(), 0.0)
    y = nan_array((2, 4, 3, 3), ctx)
    ops.conv2d(z(2, 0, 5, 5), z(4, 0, 3, 3), y)
    np.testing.assert_array_equal(y.asnumpy(), 0.0)


def test_reshape_copies_into_any_shape_of_the_same_size(ctx):
    x = rand((2, 3, 4))
    out = nan_array((4, 6), ctx)
    ops.reshape(gpumat.array(x, ctx), out)
    np.testing.assert_array_equal(out.asnumpy(), x.reshape(4, 6))
    with pytest.raises(ValueError, match=r"reshape: cannot reshape \(2, 3, 4\)"):
        ops.reshape(gpumat.array(x, ctx), nan_array((5, 5), ctx))


def test_workspace_limit_round_trips_and_rejects_negative(workspace):
    assert ops.set_conv_workspace_limit(1000) == 64 << 20
    assert ops.set_conv_workspace_limit(0) == 1000
    with pytest.raises(ValueError, match="set_conv_workspace_limit"):
        ops.set_conv_workspace_limit(-1)
    with pytest.raises(TypeError):
        ops.set_conv_workspace_limit(1.5)


# --------------------------------------------------------------------------------------------------
# Bias
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3, 5, 4, 6), (2, 7, 9), (4, 3), (2, 3, 1, 1)], ids=str)
def test_add_channel_bias_and_reduce_sum_channels(ctx, shape):
    rng, seed = new_rng()
    x, b = rand(shape, rng), rand((shape[1],), rng)
    view = (1, shape[1]) + (1,) * (len(shape) - 2)
    out = nan_array(shape, ctx)
    ops.add_channel_bias(gpumat.array(x, ctx), gpumat.array(b, ctx), out)
    expected = x.astype(np.float64) + b.astype(np.float64).reshape(view)
    assert_close(out.asnumpy(), expected, rtol=1e-6, atol=1e-7, msg=f"seed={seed}")
    # in place
    xa = gpumat.array(x, ctx)
    ops.add_channel_bias(xa, gpumat.array(b, ctx), xa)
    assert_close(xa.asnumpy(), expected, rtol=1e-6, atol=1e-7)

    s = nan_array((shape[1],), ctx)
    ops.reduce_sum_channels(gpumat.array(x, ctx), s)
    axes = (0,) + tuple(range(2, len(shape)))
    x64 = x.astype(np.float64)
    n = x.size // shape[1]
    bound = n * EPS32 * np.abs(x64).sum(axis=axes)
    assert_close(s.asnumpy(), x64.sum(axis=axes), bound=bound, msg=f"seed={seed}")


def test_reduce_sum_channels_of_empty_batch_is_zero(ctx):
    out = nan_array((3,), ctx)
    ops.reduce_sum_channels(gpumat.array(np.zeros((0, 3, 4), np.float32), ctx), out)
    np.testing.assert_array_equal(out.asnumpy(), 0.0)


# --------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------


def _a(ctx, *shape):
    return gpumat.array(np.ones(shape, np.float32), ctx)


BAD_CONV = [
    ("conv2d", "4-D", lambda c: ops.conv2d(_a(c, 3, 8, 8), _a(c, 2, 3, 3, 3), _a(c, 1, 2, 6, 6))),
    ("conv2d", "4-D", lambda c: ops.conv2d(_a(c, 1, 3, 8, 8), _a(c, 2, 3, 3), _a(c, 1, 2, 6, 6))),
    (
        "conv2d",
        "channel mismatch",
        lambda c: ops.conv2d(_a(c, 1, 3, 8, 8), _a(c, 2, 4, 3, 3), _a(c, 1, 2, 6, 6)),
    ),
    (
        "conv2d",
        "empty",
        lambda c: ops.conv2d(_a(c, 1, 1, 3, 3), _a(c, 1, 1, 5, 5), _a(c, 1, 1, 1, 1)),
    ),
    (
        "conv2d",
        "stride",
        lambda c: ops.conv2d(_a(c, 1, 1, 8, 8), _a(c, 1, 1, 3, 3), _a(c, 1, 1, 6, 6), stride=0),
    ),
    (
        "conv2d",
        "padding",
        lambda c: ops.conv2d(_a(c, 1, 1, 8, 8), _a(c, 1, 1, 3, 3), _a(c, 1, 1, 6, 6), padding=-1),
    ),
    (
        "conv2d",
        r"\(1, 2, 6, 6\)",
        lambda c: ops.conv2d(_a(c, 1, 3, 8, 8), _a(c, 2, 3, 3, 3), _a(c, 1, 2, 5, 6)),
    ),
    (
        "conv2d",
        "in place",
        lambda c: (lambda x: ops.conv2d(x, _a(c, 1, 1, 1, 1), x))(_a(c, 1, 1, 3, 3)),
    ),
    (
        "conv2d_gradient_input",
        "dy",
        lambda c: ops.conv2d_gradient_input(
            _a(c, 1, 2, 5, 5), _a(c, 2, 3, 3, 3), _a(c, 1, 3, 8, 8)
        ),
    ),
    (
        "conv2d_gradient_filter",
        "dy",
        lambda c: ops.conv2d_gradient_filter(
            _a(c, 1, 3, 8, 8), _a(c, 1, 2, 6, 5), _a(c, 2, 3, 3, 3)
        ),
    ),
    ("conv1d", "3-D", lambda c: ops.conv1d(_a(c, 1, 3, 8, 8), _a(c, 2, 3, 3), _a(c, 1, 2, 6))),
    ("conv1d", "empty", lambda c: ops.conv1d(_a(c, 1, 3, 2), _a(c, 2, 3, 3), _a(c, 1, 2, 1))),
    (
        "add_channel_bias",
        "bias",
        lambda c: ops.add_channel_bias(_a(c, 2, 3, 4), _a(c, 4), _a(c, 2, 3, 4)),
    ),
    ("add_channel_bias", "rank", lambda c: ops.add_channel_bias(_a(c, 3), _a(c, 3), _a(c, 3))),
    ("reduce_sum_channels", "(3,)", lambda c: ops.reduce_sum_channels(_a(c, 2, 3, 4), _a(c, 4))),
]


@pytest.mark.parametrize(
    "name,match,call", BAD_CONV, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD_CONV)]
)
def test_impossible_geometry_raises_value_error_naming_op(ctx, name, match, call):
    with pytest.raises(ValueError) as info:
        call(ctx)
    msg = str(info.value)
    assert msg.startswith(name + ":"), msg
    assert re.search(match, msg), msg


def test_conv_error_names_shapes_and_geometry(ctx):
    with pytest.raises(ValueError) as info:
        ops.conv2d(_a(ctx, 2, 3, 4, 4), _a(ctx, 8, 3, 5, 5), _a(ctx, 2, 8, 1, 1), stride=2)
    msg = str(info.value)
    assert "(2, 3, 4, 4)" in msg and "(8, 3, 5, 5)" in msg and "stride 2x2" in msg, msg


def test_non_integer_stride_raises_type_error(ctx):
    x, w, y = _a(ctx, 1, 1, 8, 8), _a(ctx, 1, 1, 3, 3), _a(ctx, 1, 1, 6, 6)
    for bad in (1.5, "1", (1, 2, 3), None):
        with pytest.raises(TypeError):
            ops.conv2d(x, w, y, stride=bad)
    with pytest.raises(TypeError):
        ops.conv1d(_a(ctx, 1, 1, 8), _a(ctx, 1, 1, 3), _a(ctx, 1, 1, 6), stride=(1, 1))


# --------------------------------------------------------------------------------------------------
# Graph ops: finite differences (numpy, float64) and devices vs numpy
# --------------------------------------------------------------------------------------------------

GRAPH_CONV = [
    ((2, 3, 6, 5), (4, 3, 3, 3), 1, 0),
    ((2, 2, 7, 7), (3, 2, 3, 2), 2, 1),
    ((1, 2, 5, 6), (2, 2, 1, 1), (1, 2), (0, 1)),
]


@pytest.mark.parametrize("xs,ws,stride,pad", GRAPH_CONV)
def test_conv2d_op_gradients_match_finite_differences(xs, ws, stride, pad):
    rng, _ = new_rng()
    check_fd_gradients(
        lambda x, w: graph.conv2d_op(x, w, stride=stride, padding=pad),
        [rand64(rng, xs), rand64(rng, ws)],
        rng,
    )


def test_conv1d_op_and_bias_gradients_match_finite_differences():
    rng, _ = new_rng()
    check_fd_gradients(
        lambda x, w, b: graph.add_channel_bias_op(graph.conv1d_op(x, w, stride=2, padding=1), b),
        [rand64(rng, (2, 3, 9)), rand64(rng, (4, 3, 3)), rand64(rng, (4,))],
        rng,
    )


def test_conv_gradient_ops_are_differentiable():
    # conv's gradients are linear in both arguments; their own gradients are convolutions too.
    # The shape-only inputs (x_like, w_like) are fed but never differentiated.
    rng, _ = new_rng()
    like_x, like_w = ad.Variable("x_like"), ad.Variable("w_like")
    xs, ws, ys = (2, 2, 6, 5), (3, 2, 3, 2), (2, 3, 3, 3)
    x_val, w_val = rand64(rng, xs), rand64(rng, ws)
    dy_v, w_v = ad.Variable("dy"), ad.Variable("w")
    out = graph.conv2d_gradient_input_op(dy_v, w_v, like_x, stride=2, padding=1)
    _fd_with_fixed(out, [dy_v, w_v], [rand64(rng, ys), w_val], {like_x: x_val}, rng)
    x_v = ad.Variable("x")
    out = graph.conv2d_gradient_filter_op(x_v, dy_v, like_w, stride=2, padding=1)
    _fd_with_fixed(out, [x_v, dy_v], [x_val, rand64(rng, ys)], {like_w: w_val}, rng)


def _fd_with_fixed(out, variables, values, fixed, rng):
    """Finite differences of sum(out * R) for `variables`, with the `fixed` feeds held constant."""
    feeds = {**dict(zip(variables, values, strict=True)), **fixed}
    forward = ad.Executor([out])
    r_val = rand64(rng, forward.run(feeds)[0].shape)
    r = ad.Variable("R")
    grads = ad.Executor(ad.gradients(out * r, variables)).run({**feeds, r: r_val})

    def f():
        return float(np.sum(forward.run(feeds)[0] * r_val))

    for g, v in zip(grads, values, strict=True):
        np.testing.assert_allclose(g, numeric_grad(f, v), rtol=1e-6, atol=1e-8)


def small_cnn(x, w1, b1, w2, b2, wf, y_):
    """conv -> bias -> relu -> max-pool -> conv -> relu -> avg-pool -> flatten -> dense -> CE."""
    h = ad.relu_op(graph.add_channel_bias_op(graph.conv2d_op(x, w1, padding=1), b1))
    h = graph.max_pool2d_op(h, 2)
    h = ad.relu_op(graph.add_channel_bias_op(graph.conv2d_op(h, w2, stride=1), b2))
    h = graph.avg_pool2d_op(h, 2, stride=1)
    logits = ad.matmul_op(graph.flatten_op(h), wf)
    return ad.softmaxcrossentropy_op(logits, y_)


def _cnn_inputs(rng):
    y_ = np.eye(5)[rng.integers(0, 5, size=3)]
    return [
        rand64(rng, (3, 2, 8, 8)),
        rand64(rng, (4, 2, 3, 3)),
        rand64(rng, (4,)),
        rand64(rng, (3, 4, 2, 2)),
        rand64(rng, (3,)),
        rand64(rng, (3 * 2 * 2, 5)),
        y_,
    ]


def test_small_cnn_gradients_match_finite_differences():
    rng, _ = new_rng()
    check_fd_gradients(small_cnn, _cnn_inputs(rng), rng, wrt=[0, 1, 2, 3, 4, 5])


def test_small_cnn_on_device_matches_numpy(ctx):
    rng, _ = new_rng()
    check_device_gradients(ctx, small_cnn, _cnn_inputs(rng), rng, wrt=[0, 1, 2, 3, 4, 5])


def test_conv_graph_on_device_matches_numpy(ctx):
    rng, _ = new_rng()
    check_device_gradients(
        ctx,
        lambda x, w, b: graph.reshape_op(
            graph.add_channel_bias_op(graph.conv2d_op(x, w, stride=(2, 1), padding=(1, 2)), b),
            (-1, 6),
        ),
        [rand64(rng, (4, 3, 9, 7)), rand64(rng, (6, 3, 3, 5)), rand64(rng, (6,))],
        rng,
    )
    check_device_gradients(
        ctx,
        lambda x, w: graph.conv1d_op(x, w, stride=2, padding=2),
        [rand64(rng, (3, 4, 17)), rand64(rng, (5, 4, 5))],
        rng,
    )


def test_reshape_and_flatten_ops():
    rng, _ = new_rng()
    check_fd_gradients(lambda x: graph.reshape_op(x, (3, -1)), [rand64(rng, (2, 3, 4))], rng)
    check_fd_gradients(graph.flatten_op, [rand64(rng, (2, 3, 4))], rng)
    x = ad.Variable("x")
    ex = ad.Executor([graph.flatten_op(x), graph.reshape_op(x, (4, 6)), graph.reshape_op(x, 24)])
    a, b, c = ex.run({x: np.arange(24.0).reshape(2, 3, 4)})
    assert a.shape == (2, 12) and b.shape == (4, 6) and c.shape == (24,)
    np.testing.assert_array_equal(c, np.arange(24.0))


GRAPH_ERRORS = [
    (lambda x, w: graph.conv2d_op(x, w), [(2, 3, 8, 8), (4, 2, 3, 3)], "channel mismatch"),
    (lambda x, w: graph.conv2d_op(x, w), [(2, 3, 8), (4, 3, 3, 3)], "4-D"),
    (lambda x, w: graph.conv2d_op(x, w), [(2, 3, 4, 4), (4, 3, 5, 5)], "empty"),
    (lambda x, w: graph.conv2d_op(x, w, stride=4), [(2, 3, 2, 8), (4, 3, 3, 3)], "empty"),
    (lambda x, w: graph.conv1d_op(x, w), [(2, 3, 8, 8), (4, 3, 3)], "3-D"),
    (lambda x, b: graph.add_channel_bias_op(x, b), [(2, 3, 8), (8,)], "bias"),
    (lambda x, w: graph.reshape_op(x, (5, -1)), [(2, 3), (1,)], "cannot reshape"),
    (lambda x, w: graph.reshape_op(x, (4, 2)), [(2, 3), (1,)], "cannot reshape"),
]


@pytest.mark.parametrize("build,shapes,match", GRAPH_ERRORS)
def test_graph_shape_inference_errors(build, shapes, match):
    a, b = ad.Variable("a"), ad.Variable("b")
    node = build(a, b)
    ex = ad.Executor([node])
    with pytest.raises(ValueError, match=match) as info:
        ex.run({a: np.ones(shapes[0]), b: np.ones(shapes[1])})
    assert node.op.name in str(info.value)


def test_graph_op_arguments_are_checked_when_building():
    x, w = ad.Variable("x"), ad.Variable("w")
    with pytest.raises(ValueError, match="stride"):
        graph.conv2d_op(x, w, stride=0)
    with pytest.raises(ValueError, match="padding"):
        graph.conv1d_op(x, w, padding=-1)
    with pytest.raises(TypeError):
        graph.conv2d_op(x, w, stride=1.0)
    with pytest.raises(TypeError):
        graph.conv1d_op(x, w, stride=(1, 2))
    with pytest.raises(ValueError):
        graph.reshape_op(x, (-1, -1))


def test_ops_are_reexported_from_autodiff():
    for name in ["conv2d_op", "conv1d_op", "max_pool2d_op", "avg_pool2d_op", "flatten_op"]:
        assert getattr(ad, name) is getattr(graph, name)
    for name in ["reshape_op", "mse_loss_op", "mae_loss_op", "add_channel_bias_op"]:
        assert getattr(ad, name) is getattr(graph, name)


def test_graph_ops_through_gpumat_nn_still_resolve_with_a_deprecation_warning():
    for name in ["conv2d_op", "max_pool2d_op", "reshape_op", "mae_loss_op"]:
        with pytest.warns(DeprecationWarning, match=f"gpumat.graph.{name}"):
            assert getattr(nn, name) is getattr(graph, name)
    with pytest.raises(AttributeError, match="no_such_op"):
        nn.no_such_op  # noqa: B018
    assert not any(name.endswith("_op") for name in nn.__all__)


# --------------------------------------------------------------------------------------------------
# The MNIST CNN builder
# --------------------------------------------------------------------------------------------------


def test_cnn_model_shapes_and_init():
    from gpumat import models

    m = models.cnn(seed=1)
    shapes = {k: v.shape for k, v in m.initial_values.items()}
    assert shapes == {
        "W1": (32, 1, 5, 5),
        "b1": (32,),
        "W2": (64, 32, 5, 5),
        "b2": (64,),
        "W3": (1024, 10),
        "b3": (10,),
    }
    assert m.num_parameters == 62_346 and m.input_shape == (1, 28, 28)
    assert abs(float(m.initial_values["W2"].std()) - np.sqrt(2 / 800)) < 0.002  # He init
    assert not m.initial_values["b1"].any()
    assert models.BUILDERS["cnn"] is models.cnn
    small = models.cnn(channels=(4, 6), kernel_size=3)  # 28 -> 26 -> 13 -> 11 -> 5
    assert small.initial_values["W3"].shape == (6 * 5 * 5, 10)
    with pytest.raises(ValueError, match="cnn"):
        models.cnn(kernel_size=12)


def test_cnn_loss_and_gradients_on_device_match_numpy(ctx):
    from gpumat import models

    m = models.cnn(channels=(4, 8))
    rng, _ = new_rng()
    x = rng.random((3, 1, 28, 28))
    y_ = np.eye(10)[rng.integers(0, 10, size=3)]
    params = {k: v.astype(np.float64) for k, v in m.initial_values.items()}
    feeds64 = {m.x: x, m.y_: y_, **{m.params[k]: v for k, v in params.items()}}
    feeds32 = {k: np.asarray(v, np.float32) for k, v in feeds64.items()}
    nodes = [m.loss, *m.grads]
    ref = ad.Executor(nodes).run({k: v.astype(np.float64) for k, v in feeds32.items()})
    got = ad.Executor(nodes, device=ctx).run(feeds32, convert_to_numpy_ret_vals=True)
    for name, g, r in zip(["loss", *m.params], got, ref, strict=True):
        atol = 1e-5 * max(float(np.abs(r).max()), 1e-30)
        np.testing.assert_allclose(g, r, rtol=2e-4, atol=atol, err_msg=name)
