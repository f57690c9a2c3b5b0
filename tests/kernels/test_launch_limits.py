"""Kernels at every size: shapes past the CUDA launch limits, long reductions, and the
range checks on window parameters, on every device.

Grid limits. A GPU caps grid.y at 65,535, so kernels that put row tiles on grid.y (transpose,
matmul) loop over tiles blockIdx.y + i * gridDim.y; on a GPU that loop runs only past 65,535 tiles
(2.1M rows for transpose, 4.2M for matmul: arrays too big for the emulated device, which runs each
CUDA thread as a fiber). Instead the tests lower the emulated device's grid.y limit with
GPUMAT_EMU_MAX_GRID_Y (read by the emulator at every launch and reported to the launchers by
cudaDeviceGetAttribute): with a limit of 2 or 3, a few hundred rows already need the loop, and a
launch that ignored the limit fails as it would on a GPU. The cpu device ignores the variable and
serves as the reference that every device must match. extensions/tests/test_emu.cpp checks the
hook itself (the reported limit, a launch over it refused).

Reductions. sum_to_size and reduce_sum_channels accumulate in float64 on every device,
in blocks of rows then across blocks; the relative error against a float64 reference is then the
final float32 rounding (<= 2^-24 ~ 6e-8) whatever the length, and the bound asserted here (1e-6)
does not grow with N. The former CUDA kernel (16 float32 running sums per column) gave 1.4e-6 at
10^6 rows and 2.8e-5 at 10^7 (uniform(0.1, 1), one column).
"""

import numpy as np
import pytest
from conftest import GPU_SKIP_REASON, HAS_GPU
from helpers import assert_close, matmul_bound, nan_array, new_rng, rand

import gpumat
import gpumat.autodiff as ad
import gpumat.ops as ops

# The lowered grid.y limits: 1 (every tile by one row of blocks) and 3 (a remainder in the loop).
# None keeps the GPU's 65,535.
GRID_Y_LIMITS = [None, 1, 3]


@pytest.fixture(params=GRID_Y_LIMITS, ids=lambda v: f"grid_y_{v or 65535}")
def grid_y(request, monkeypatch):
    """Lowers the emulated device's grid.y limit for one test (os.environ reaches the emulator's
    getenv); the cpu device ignores it."""
    if request.param is None:
        monkeypatch.delenv("GPUMAT_EMU_MAX_GRID_Y", raising=False)
    else:
        monkeypatch.setenv("GPUMAT_EMU_MAX_GRID_Y", str(request.param))
    return request.param


@pytest.mark.parametrize("shape", [(32 * 9 + 5, 7), (300, 33), (1, 1000), (1000, 1)])
def test_transpose_more_row_tiles_than_grid_y(ctx, grid_y, shape):
    x = rand(shape)
    out = nan_array(shape[::-1], ctx)
    ops.transpose(gpumat.array(x, ctx), out)
    np.testing.assert_array_equal(out.asnumpy(), x.T)


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("m,n,k", [(64 * 5 + 1, 10, 10), (200, 70, 33)])
def test_matmul_more_row_tiles_than_grid_y(ctx, grid_y, m, n, k, trans_a, trans_b):
    rng, _ = new_rng()
    a, b = rand((m, k), rng), rand((k, n), rng)
    a_in = a.T.copy() if trans_a else a
    b_in = b.T.copy() if trans_b else b
    out = nan_array((m, n), ctx)
    ops.matmul(gpumat.array(a_in, ctx), gpumat.array(b_in, ctx), out, trans_a, trans_b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert_close(out.asnumpy(), a64 @ b64, bound=matmul_bound(a64, b64))


def test_softmax_backward_long_batch(ctx, monkeypatch):
    """The softmax gradient transposes the (N, C) batch: with grid.y lowered to 1 the 63 row tiles
    of N = 2,000 take the loop that a GPU takes past N = 2.1M."""
    monkeypatch.setenv("GPUMAT_EMU_MAX_GRID_Y", "1")
    rng, _ = new_rng()
    n, c = 2000, 10
    y, g = rand((n, c), rng, high=3.0), rand((n, c), rng)
    yv, gv = ad.Variable("y"), ad.Variable("g")
    s = ad.softmax_op(yv)
    (grad,) = ad.gradients(s * gv, [yv])  # output gradient: ones
    (got,) = ad.Executor([grad], device=ctx).run({yv: y, gv: g}, convert_to_numpy_ret_vals=True)
    y64, g64 = y.astype(np.float64), g.astype(np.float64)
    z = np.exp(y64 - y64.max(axis=1, keepdims=True))
    p = z / z.sum(axis=1, keepdims=True)
    expected = p * g64 - p * (p * g64).sum(axis=1, keepdims=True)
    assert_close(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_GPU, reason=str(GPU_SKIP_REASON))
def test_shapes_past_65535_row_tiles_on_a_gpu():
    """The shapes above at full size, on a real GPU (grid.y really 65,535): a transpose of
    2.2M rows (68,750 tiles), a (5M, 10) @ (10, 10) matmul (78,125 tiles), and the softmax backward
    of a 2.2M-row batch."""
    ctx = gpumat.gpu(0)
    rng, _ = new_rng()
    x = rand((2_200_000, 10), rng)
    out = nan_array((10, 2_200_000), ctx)
    ops.transpose(gpumat.array(x, ctx), out)
    np.testing.assert_array_equal(out.asnumpy(), x.T)
    a, b = rand((5_000_000, 10), rng), rand((10, 10), rng)
    c = nan_array((5_000_000, 10), ctx)
    ops.matmul(gpumat.array(a, ctx), gpumat.array(b, ctx), c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert_close(c.asnumpy(), a64 @ b64, bound=matmul_bound(a64, b64))
    y, g = rand((2_200_000, 10), rng, high=3.0), rand((2_200_000, 10), rng)
    yv, gv = ad.Variable("y"), ad.Variable("g")
    (grad,) = ad.gradients(ad.softmax_op(yv) * gv, [yv])
    (got,) = ad.Executor([grad], device=ctx).run({yv: y, gv: g}, convert_to_numpy_ret_vals=True)
    y64, g64 = y.astype(np.float64), g.astype(np.float64)
    z = np.exp(y64 - y64.max(axis=1, keepdims=True))
    p = z / z.sum(axis=1, keepdims=True)
    assert_close(got, p * g64 - p * (p * g64).sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def _rel_err(got, expected):
    return np.abs(got.astype(np.float64) - expected) / np.abs(expected)


@pytest.mark.parametrize("rows,cols", [(1_000_000, 1), (10_000_000, 1), (400_000, 3), (20_000, 40)])
def test_long_column_sums_are_float64_accurate(ctx, rows, cols):
    rng, seed = new_rng()
    x = rng.uniform(0.1, 1.0, size=(rows, cols)).astype(np.float32)
    out = nan_array((cols,), ctx)
    xd = gpumat.array(x, ctx)
    ops.sum_to_size(xd, out)
    got = out.asnumpy()
    err = _rel_err(got, x.astype(np.float64).sum(axis=0))
    assert err.max() <= 1e-6, f"relative error {err.max():.3g} (seed {seed})"
    # Deterministic: a fixed order of additions, so the same bits every run.
    again = nan_array((cols,), ctx)
    ops.sum_to_size(xd, again)
    np.testing.assert_array_equal(again.asnumpy(), got)


@pytest.mark.parametrize("shape", [(400_000, 2, 1), (2_000, 3, 500), (5, 2, 200_000)])
def test_long_channel_sums_are_float64_accurate(ctx, shape):
    rng, seed = new_rng()
    x = rng.uniform(0.1, 1.0, size=shape).astype(np.float32)
    out = nan_array((shape[1],), ctx)
    xd = gpumat.array(x, ctx)
    ops.reduce_sum_channels(xd, out)
    got = out.asnumpy()
    err = _rel_err(got, x.astype(np.float64).sum(axis=(0, 2)))
    assert err.max() <= 1e-6, f"relative error {err.max():.3g} (seed {seed})"
    again = nan_array((shape[1],), ctx)
    ops.reduce_sum_channels(xd, again)
    np.testing.assert_array_equal(again.asnumpy(), got)


@pytest.mark.parametrize("shape", [(5000, 1), (3001, 3), (2500, 40), (50, 2, 100)])
def test_reductions_with_lowered_grid_y(ctx, grid_y, shape):
    """The number of row chunks is capped by grid.y: 1 chunk (no second pass) up to many."""
    x = rand(shape)
    x64 = x.astype(np.float64)
    if len(shape) == 2:
        out = nan_array((shape[1],), ctx)
        ops.sum_to_size(gpumat.array(x, ctx), out)
        expected = x64.sum(axis=0)
    else:
        out = nan_array((shape[1],), ctx)
        ops.reduce_sum_channels(gpumat.array(x, ctx), out)
        expected = x64.sum(axis=(0, 2))
    # float64 accumulation: only the final rounding, relative to the sum of magnitudes
    # (the signed terms may cancel).
    bound = 2.0**-24 * np.abs(x64).sum(axis=0 if len(shape) == 2 else (0, 2))
    assert_close(out.asnumpy(), expected, rtol=0, atol=0, bound=2 * bound + 1e-30)


# ------------------------------------------------------------------------ window parameter ranges

HUGE = [2**31, 2**32, 2**40, 2**62, 2**64]


def _conv_arrays(ctx):
    x = gpumat.array(rand((1, 2, 5, 5)), ctx)
    w = gpumat.array(rand((3, 2, 3, 3)), ctx)
    y = gpumat.array(rand((1, 3, 1, 1)), ctx)
    return x, w, y


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize("which", ["stride", "padding"])
@pytest.mark.parametrize(
    "op", ["conv2d", "conv2d_gradient_input", "conv2d_gradient_filter", "conv1d"]
)
def test_huge_conv_stride_or_padding_is_a_value_error(ctx, op, which, value):
    x, w, y = _conv_arrays(ctx)
    before = [a.asnumpy() for a in (x, w, y)]
    kwargs = {"stride": value} if which == "stride" else {"padding": value}
    with pytest.raises(ValueError, match=which if value < 2**63 else "out of range"):
        if op == "conv2d":
            ops.conv2d(x, w, y, **kwargs)
        elif op == "conv2d_gradient_input":
            ops.conv2d_gradient_input(y, w, x, **kwargs)
        elif op == "conv2d_gradient_filter":
            ops.conv2d_gradient_filter(x, y, w, **kwargs)
        else:
            x1 = gpumat.array(rand((1, 2, 5)), ctx)
            w1 = gpumat.array(rand((3, 2, 3)), ctx)
            ops.conv1d(x1, w1, gpumat.array(rand((1, 3, 1)), ctx), **kwargs)
    for a, b in zip((x, w, y), before, strict=True):
        np.testing.assert_array_equal(a.asnumpy(), b)


def test_largest_conv_stride_still_works(ctx):
    """Stride 2^31 - 1 is in range: one output per axis, the 64-bit index path on CUDA."""
    x, w = rand((1, 2, 5, 5)), rand((3, 2, 3, 3))
    y = nan_array((1, 3, 1, 1), ctx)
    ops.conv2d(gpumat.array(x, ctx), gpumat.array(w, ctx), y, stride=2**31 - 1)
    expected = np.einsum("ncij,fcij->nf", x[:, :, :3, :3].astype(np.float64), w.astype(np.float64))
    assert_close(y.asnumpy().reshape(1, 3), expected, rtol=1e-5)


@pytest.mark.parametrize("value", [2**31, 2**40])
@pytest.mark.parametrize("which", ["stride", "kernel_size"])
def test_huge_pool_window_is_a_value_error(ctx, which, value):
    x = gpumat.array(rand((1, 2, 6, 6)), ctx)
    y = gpumat.array(rand((1, 2, 1, 1)), ctx)
    args = {"kernel_size": 6, "stride": value} if which == "stride" else {"kernel_size": value}
    with pytest.raises(ValueError):
        ops.max_pool2d(x, y, **args)
