"""Issue 35's kernels: prod and its gradient, cumsum (forward and reverse), the pow kernels
(tensor ** float, float ** tensor, tensor ** tensor) and their gradients, tril / triu. Each
kernel against float64 numpy on every device with the output poisoned by NaN, the graph ops'
gradients against float64 central differences and on every device, special values, and errors
naming the op."""

import numpy as np
import pytest
from helpers import assert_close, nan_array, new_rng, shape_id
from nn_helpers import check_device_gradients, check_fd_gradients

import gpumat
import gpumat.graph as ad
import gpumat.ops as ops

AXIS_SHAPES = [((7,), 0), ((5, 1031), 1), ((33, 6), 0), ((2, 3, 4, 5), 2), ((3, 0, 4), 2)]


def _moderate(shape, rng):
    """Values of magnitude 0.5 .. 1.5 with random signs: products stay well inside float32."""
    mag = rng.uniform(0.5, 1.5, size=shape)
    return (mag * rng.choice([-1.0, 1.0], size=shape)).astype(np.float32)


def _reduced(shape, axis):
    return shape[:axis] + shape[axis + 1 :]


@pytest.mark.parametrize("shape,axis", AXIS_SHAPES, ids=str)
def test_prod_matches_float64(ctx, shape, axis):
    rng, seed = new_rng()
    x = _moderate(shape, rng)
    out = nan_array(_reduced(shape, axis), ctx)
    ops.prod(gpumat.array(x, ctx), out, axis)
    n = shape[axis]
    assert_close(
        out.asnumpy(), np.prod(x.astype(np.float64), axis), rtol=n * 2**-23, atol=0, msg=seed
    )
    ref = np.empty(_reduced(shape, axis), np.float32)
    gpumat.reference.prod(x, ref, axis)
    assert_close(out.asnumpy(), ref, rtol=n * 2**-23, atol=0, msg=seed)


def test_prod_of_an_empty_axis_is_one(ctx):
    out = nan_array((3, 4), ctx)
    ops.prod(gpumat.empty((3, 0, 4), ctx), out, 1)
    np.testing.assert_array_equal(out.asnumpy(), np.ones((3, 4), np.float32))


@pytest.mark.parametrize("shape,axis", AXIS_SHAPES, ids=str)
def test_prod_gradient_matches_float64(ctx, shape, axis):
    rng, seed = new_rng()
    x = _moderate(shape, rng)
    # zeros: one in some slices, two in others (PyTorch's cases)
    flat = x.reshape(-1)
    if flat.size:
        flat[rng.choice(flat.size, size=max(1, flat.size // 5), replace=False)] = 0.0
    dy = rng.uniform(-1, 1, size=_reduced(shape, axis)).astype(np.float32)
    out = nan_array(shape, ctx)
    ops.prod_gradient(gpumat.array(x, ctx), gpumat.array(dy, ctx), out, axis)
    x64 = np.moveaxis(x.astype(np.float64), axis, -1)
    want = np.empty_like(x64)
    for j in range(x64.shape[-1]):
        others = np.delete(x64, j, axis=-1)
        want[..., j] = np.prod(others, axis=-1) * dy
    want = np.moveaxis(want, -1, axis)
    n = shape[axis]
    assert_close(out.asnumpy(), want, rtol=(n + 2) * 2**-23, atol=0, msg=seed)
    ref = np.empty(shape, np.float32)
    gpumat.reference.prod_gradient(x, dy, ref, axis)
    assert_close(out.asnumpy(), ref, rtol=(n + 2) * 2**-23, atol=0, msg=seed)


@pytest.mark.parametrize("shape,axis", AXIS_SHAPES, ids=str)
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum_matches_float64(ctx, shape, axis, reverse):
    rng, seed = new_rng()
    x = rng.uniform(-1, 1, size=shape).astype(np.float32)
    out = nan_array(shape, ctx)
    ops.cumsum(gpumat.array(x, ctx), out, axis, reverse)
    x64 = x.astype(np.float64)
    want = np.flip(np.cumsum(np.flip(x64, axis), axis), axis) if reverse else np.cumsum(x64, axis)
    # float64 accumulation, one rounding per element: numpy's float64 rounded to float32
    np.testing.assert_array_equal(out.asnumpy(), want.astype(np.float32), err_msg=str(seed))
    ref = np.empty(shape, np.float32)
    gpumat.reference.cumsum(x, ref, axis, reverse)
    np.testing.assert_array_equal(out.asnumpy(), ref)


def test_cumsum_in_place(ctx):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = gpumat.array(x, ctx)
    ops.cumsum(a, a, 1)
    np.testing.assert_array_equal(a.asnumpy(), np.cumsum(x, 1))


@pytest.mark.parametrize("shape", [(7,), (1, 1031), (3, 4, 5)], ids=shape_id)
def test_pow_kernels_match_float64(ctx, shape):
    rng, seed = new_rng()
    x = rng.uniform(0.1, 3.0, size=shape).astype(np.float32)
    e = rng.uniform(-2.5, 2.5, size=shape).astype(np.float32)
    dy = rng.uniform(-1, 1, size=shape).astype(np.float32)
    x64, e64, dy64 = (v.astype(np.float64) for v in (x, e, dy))
    tol = dict(rtol=8 * 2**-23, atol=0, msg=seed)  # powf: CUDA's 4 ulp bound, doubled
    cases = [
        (lambda o: ops.pow_scalar(gpumat.array(x, ctx), 1.7, o), x64 ** np.float32(1.7)),
        (lambda o: ops.scalar_pow(gpumat.array(e, ctx), 2.5, o), 2.5**e64),
        (lambda o: ops.pow(gpumat.array(x, ctx), gpumat.array(e, ctx), o), x64**e64),
        (
            lambda o: ops.pow_scalar_gradient(gpumat.array(x, ctx), gpumat.array(dy, ctx), -0.3, o),
            dy64 * (np.float32(-0.3) * x64 ** (np.float32(-0.3) - 1)),
        ),
        (
            lambda o: ops.scalar_pow_gradient(gpumat.array(e, ctx), gpumat.array(dy, ctx), 2.5, o),
            dy64 * 2.5**e64 * np.log(2.5),
        ),
    ]
    for run, want in cases:
        out = nan_array(shape, ctx)
        run(out)
        assert_close(out.asnumpy(), want, **tol)


def test_pow_special_values(ctx):
    x = np.array([-2.0, -2.0, 0.0, 0.0, np.nan, 1.0, np.inf, -0.5], np.float32)
    e = np.array([3.0, 0.5, -1.0, 0.0, 0.0, np.nan, -1.0, 2.0], np.float32)
    out = nan_array((8,), ctx)
    ops.pow(gpumat.array(x, ctx), gpumat.array(e, ctx), out)
    np.testing.assert_array_equal(out.asnumpy(), [-8.0, np.nan, np.inf, 1, 1, 1, 0, 0.25])
    # exponent 0: gradient 0 everywhere; base 0: no gradient where the exponent is >= 0
    g = nan_array((8,), ctx)
    ops.pow_scalar_gradient(gpumat.array(x, ctx), gpumat.array(np.ones(8, np.float32), ctx), 0, g)
    np.testing.assert_array_equal(g.asnumpy(), np.zeros(8, np.float32))
    xs = np.array([0.0, 1.0, -1.0], np.float32)
    g = nan_array((3,), ctx)
    ones = gpumat.array(np.ones(3, np.float32), ctx)
    ops.scalar_pow_gradient(gpumat.array(xs, ctx), ones, 0.0, g)
    np.testing.assert_array_equal(g.asnumpy(), [0.0, 0.0, -np.inf])


@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (6, 2), (2, 3, 7, 4)], ids=shape_id)
@pytest.mark.parametrize("diagonal", [-2, 0, 1, 9])
def test_tril_triu(ctx, shape, diagonal):
    rng, _ = new_rng()
    x = rng.uniform(-1, 1, size=shape).astype(np.float32)
    for name, want in (("tril", np.tril(x, diagonal)), ("triu", np.triu(x, diagonal))):
        out = nan_array(shape, ctx)
        getattr(ops, name)(gpumat.array(x, ctx), out, diagonal)
        np.testing.assert_array_equal(out.asnumpy(), want)
        a = gpumat.array(x, ctx)
        getattr(ops, name)(a, a, diagonal)  # in place
        np.testing.assert_array_equal(a.asnumpy(), want)


def test_errors_name_the_op(ctx):
    a = gpumat.empty((3, 4), ctx)
    with pytest.raises(ValueError, match=r"prod: .*\(3, 4\)"):
        ops.prod(a, gpumat.empty((5,), ctx), 0)
    with pytest.raises(ValueError, match=r"prod: .*axis 2.*\(3, 4\)"):
        ops.prod(a, gpumat.empty((3,), ctx), 2)
    with pytest.raises(ValueError, match=r"prod_gradient: .*\(3, 4\)"):
        ops.prod_gradient(a, gpumat.empty((7,), ctx), gpumat.empty((3, 4), ctx), 0)
    with pytest.raises(ValueError, match=r"cumsum: .*\(3, 4\).*\(4, 3\)"):
        ops.cumsum(a, gpumat.empty((4, 3), ctx), 0)
    with pytest.raises(ValueError, match=r"tril: .*\(4,\)"):
        ops.tril(gpumat.empty((4,), ctx), gpumat.empty((4,), ctx), 0)
    with pytest.raises(ValueError, match=r"pow_scalar: .*\(3, 4\).*\(4, 3\)"):
        ops.pow_scalar(a, 2.0, gpumat.empty((4, 3), ctx))
    with pytest.raises(TypeError):
        ops.cumsum(a, a, 0.5)
    with pytest.raises(TypeError):
        ops.triu(a, a, "1")


# ---------------------------------------------------------------- graph ops


@pytest.mark.parametrize("shape,axis", [((5,), 0), ((4, 3), 1), ((2, 3, 4), 0)], ids=str)
def test_graph_gradients_fd_float64(shape, axis):
    rng, _ = new_rng()
    x = rng.uniform(0.5, 1.5, size=shape) * rng.choice([-1, 1], size=shape)
    check_fd_gradients(lambda x: ad.reduce_prod_op(x, axis), [x], rng)
    check_fd_gradients(lambda x: ad.cumsum_op(x, axis), [x], rng)
    check_fd_gradients(lambda x: ad.cumsum_op(x, axis, True), [x], rng)
    pos = np.abs(x)
    check_fd_gradients(lambda x: ad.pow_scalar_op(x, 1.7), [pos], rng)
    check_fd_gradients(lambda x: ad.pow_scalar_op(x, -0.5), [pos], rng)
    check_fd_gradients(lambda x: ad.scalar_pow_op(x, 2.5), [x], rng)
    e = rng.uniform(-2, 2, size=shape)
    check_fd_gradients(lambda a, b: ad.pow_op(a, b), [pos, e], rng)
    if len(shape) >= 2:
        check_fd_gradients(lambda x: ad.tril_op(x, 0), [x], rng)
        check_fd_gradients(lambda x: ad.triu_op(x, -1), [x], rng)


def test_graph_gradients_on_devices(ctx):
    rng, _ = new_rng()
    x = rng.uniform(0.5, 1.5, size=(6, 5))
    e = rng.uniform(-2, 2, size=(6, 5))
    check_device_gradients(ctx, lambda x: ad.reduce_prod_op(x, 1), [x], rng)
    check_device_gradients(ctx, lambda x: ad.cumsum_op(x, 0), [x], rng)
    check_device_gradients(ctx, lambda x: ad.pow_scalar_op(x, 2.3), [x], rng)
    check_device_gradients(ctx, lambda x: ad.scalar_pow_op(x, 0.7), [e], rng)
    check_device_gradients(ctx, lambda a, b: ad.pow_op(a, b), [x, e], rng)
    check_device_gradients(ctx, lambda x: ad.triu_op(x, 1), [x], rng)


def test_graph_op_names_and_shape_errors():
    x = ad.Variable("x")
    assert ad.reduce_prod_op(x, 1).name == "ReduceProd(x,axis=1)"
    assert ad.cumsum_op(x, 0, True).name == "Cumsum(x,axis=0,reverse)"
    assert ad.tril_op(x, -1).name == "Tril(x,-1)"
    assert ad.pow_scalar_op(x, 0.5).name == "PowScalar(x,0.5)"
    ex = gpumat.Executor([ad.tril_op(x)])
    with pytest.raises(ValueError, match=r"tril_op.*\(5,\)"):
        ex.run(feed_dict={x: np.zeros(5, np.float32)})
