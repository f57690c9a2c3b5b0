"""Every kernel in gpumat.ops against a float64 numpy reference, on every available device.

Inputs are fresh random float32 (never zero) for each call, outputs are poisoned with NaN before
the call (see helpers.check_op). Shapes are the awkward ones (1x1, 1xN, Nx1, 513x257, 1025x3,
72x73x74) plus one large case per kernel; hypothesis covers random shapes. Bad inputs (wrong
shapes, types, devices, aliasing) have tests of their own at the end.
"""

import numpy as np
import pytest
from conftest import GPU_SKIP_REASON, HAS_GPU
from helpers import (
    EPS32,
    Out,
    assert_close,
    check_op,
    matmul_bound,
    nan_array,
    new_rng,
    rand,
    reference,
    shape_id,
    sum_bound,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from nn_helpers import check_device_gradients, check_fd_gradients, rand64

import gpumat
import gpumat.autodiff as ad
import gpumat.ops as ops
from gpumat.dlsys import gpu_op

N = 1031  # a prime: no tile or vector width divides it
ODD_SHAPES = [(1, 1), (1, N), (N, 1), (513, 257), (1025, 3), (72, 73, 74)]
ELEMENTWISE_SHAPES = [(7,), *ODD_SHAPES, (2, 3, 4, 5)]
LARGE = (2000, 3000)
PROPERTY = settings(max_examples=30, deadline=None)

ALL_OPS = [
    "fill",
    "broadcast_to",
    "sum_to_size",
    "add",
    "mul",
    "add_scalar",
    "mul_scalar",
    "matmul",
    "relu",
    "relu_gradient",
    "softmax",
    "cross_entropy",
    "transpose",
    "uniform",
    "normal",
    "axpy",
    "copy",
]


def test_every_op_is_exported():
    import gpumat.gpu_op as course_gpu_op

    for name in ALL_OPS:
        assert callable(getattr(ops, name)), name
    # the dlsys course's gpu_op names, each a call of the gpumat.ops function it names
    for name in gpu_op._COURSE:
        assert callable(getattr(course_gpu_op, name)), name
        assert getattr(course_gpu_op, name) is getattr(gpu_op, name), name
    assert set(ops.__all__) <= set(gpu_op.__all__)


# --------------------------------------------------------------------------------------------------
# numpy references (float64)
# --------------------------------------------------------------------------------------------------


def np_softmax(x):
    z = x - x.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def np_logsumexp(x):
    m = x.max(axis=1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=1, keepdims=True)))[:, 0]


def np_softmax_cross_entropy(logits, labels):
    log_p = logits - np_logsumexp(logits)[:, None]
    # NOTE: labels * log_p with labels == 0 and log_p == -inf would be NaN; the stable form keeps
    # log_p finite for finite logits, so 0 * log_p is 0 as it should be.
    return np.array([np.mean(-(labels * log_p).sum(axis=1))])


def sce_bound(logits, labels):
    n, c = logits.shape
    lse = np_logsumexp(logits)
    scale = np.mean((np.abs(labels) * (np.abs(logits) + np.abs(lse)[:, None])).sum(axis=1))
    return np.array([4 * (n + c + 4) * EPS32 * scale])


def softmax_rtol(cols):
    return 1e-5 + cols * EPS32 / 2  # the row sum of `cols` terms, plus a few ulps for exp


# --------------------------------------------------------------------------------------------------
# fill, copy
# --------------------------------------------------------------------------------------------------


def _with_large(values, large_value):
    """(shape, value) pairs: every odd shape with every value, and the large shape once."""
    cases = [(s, v) for s in ELEMENTWISE_SHAPES for v in values] + [(LARGE, large_value)]
    return cases, [f"{shape_id(s)}-{v}" for s, v in cases]


_SET_CASES, _SET_IDS = _with_large([0.0, -2.5, 1e30, 0.1], 0.1)


@pytest.mark.parametrize("shape,value", _SET_CASES, ids=_SET_IDS)
def test_array_set(ctx, shape, value):
    a = nan_array(shape, ctx)
    ops.fill(a, value)
    np.testing.assert_array_equal(a.asnumpy(), np.full(shape, value, dtype=np.float32))


def test_array_set_special_values(ctx):
    a = gpumat.array(rand((5, 7)), ctx)
    ops.fill(a, float("nan"))
    assert np.all(np.isnan(a.asnumpy()))
    ops.fill(a, float("-inf"))
    assert np.all(a.asnumpy() == -np.inf)
    ops.fill(a, np.float64(3))  # numpy scalars and ints are accepted
    ops.fill(a, 3)
    assert np.all(a.asnumpy() == 3)


@pytest.mark.parametrize("shape", [*ELEMENTWISE_SHAPES, LARGE], ids=shape_id)
def test_copy(ctx, shape):
    check_op(ctx, ops.copy, lambda x: x, [shape], shape, rtol=0, atol=0)


def test_copy_onto_itself(ctx):
    x = rand((33, 17))
    a = gpumat.array(x, ctx)
    try:
        ops.copy(a, a)
    except ValueError:
        pass  # refusing is acceptable; corrupting is not
    np.testing.assert_array_equal(a.asnumpy(), x)


# --------------------------------------------------------------------------------------------------
# Elementwise
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [*ELEMENTWISE_SHAPES, LARGE], ids=shape_id)
def test_elementwise_add(ctx, shape):
    check_op(ctx, ops.add, np.add, [shape, shape], shape)


@pytest.mark.parametrize("shape", [*ELEMENTWISE_SHAPES, LARGE], ids=shape_id)
def test_elementwise_multiply(ctx, shape):
    check_op(ctx, ops.mul, np.multiply, [shape, shape], shape)


@pytest.mark.parametrize("shape", ELEMENTWISE_SHAPES, ids=shape_id)
@pytest.mark.parametrize("val", [0.3, -2.5, 0.0, 1000.0], ids=str)
def test_elementwise_add_by_const(ctx, shape, val):
    check_op(
        ctx,
        lambda x, out: ops.add_scalar(x, val, out),
        lambda x: x + val,
        [shape],
        shape,
        name="add_scalar",
    )


@pytest.mark.parametrize("shape", ELEMENTWISE_SHAPES, ids=shape_id)
@pytest.mark.parametrize("val", [0.3, -2.5, 0.0, 1000.0], ids=str)
def test_elementwise_multiply_by_const(ctx, shape, val):
    check_op(
        ctx,
        lambda x, out: ops.mul_scalar(x, val, out),
        lambda x: x * val,
        [shape],
        shape,
        name="mul_scalar",
    )


def test_const_ops_large(ctx):
    check_op(
        ctx,
        lambda x, o: ops.add_scalar(x, 1.5, o),
        lambda x: x + 1.5,
        [LARGE],
        LARGE,
    )
    check_op(
        ctx,
        lambda x, o: ops.mul_scalar(x, -3, o),
        lambda x: -3 * x,
        [LARGE],
        LARGE,
    )


def test_const_ops_accept_numpy_scalars_and_ints(ctx):
    x = rand((4, 5))
    a, out = gpumat.array(x, ctx), nan_array((4, 5), ctx)
    ops.add_scalar(a, np.float32(2), out)
    assert_close(out.asnumpy(), x.astype(np.float64) + 2)
    ops.mul_scalar(a, 3, out)
    assert_close(out.asnumpy(), x.astype(np.float64) * 3)
    ops.mul_scalar(a, np.int64(-2), out)
    assert_close(out.asnumpy(), x.astype(np.float64) * -2)


@pytest.mark.parametrize("shape", [(1, 1), (513, 257), (72, 73, 74)], ids=shape_id)
def test_elementwise_in_place(ctx, shape):
    """Elementwise ops may write into one of their inputs."""
    x, y = rand(shape), rand(shape)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    cases = [
        (lambda a, b: ops.add(a, b, a), lambda: xd + yd, "a"),
        (lambda a, b: ops.add(a, b, b), lambda: xd + yd, "b"),
        (lambda a, b: ops.add(a, a, a), lambda: 2 * xd, "a"),
        (lambda a, b: ops.mul(a, b, a), lambda: xd * yd, "a"),
        (lambda a, b: ops.mul(a, b, b), lambda: xd * yd, "b"),
        (lambda a, b: ops.mul(b, b, b), lambda: yd * yd, "b"),
        (lambda a, b: ops.add_scalar(a, 0.5, a), lambda: xd + 0.5, "a"),
        (lambda a, b: ops.mul_scalar(a, -3.0, a), lambda: xd * -3, "a"),
        (lambda a, b: ops.relu(a, a), lambda: np.maximum(xd, 0), "a"),
        (lambda a, b: ops.relu_gradient(a, b, b), lambda: np.where(xd > 0, yd, 0), "b"),
        (lambda a, b: ops.relu_gradient(a, b, a), lambda: np.where(xd > 0, yd, 0), "a"),
        (lambda a, b: ops.axpy(2.0, a, a), lambda: 3 * xd, "a"),
    ]
    for i, (run, ref, which) in enumerate(cases):
        a, b = gpumat.array(x, ctx), gpumat.array(y, ctx)
        run(a, b)
        got = (a if which == "a" else b).asnumpy()
        assert_close(got, ref(), msg=f"in-place case {i}")


# --------------------------------------------------------------------------------------------------
# relu, relu_gradient
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [*ELEMENTWISE_SHAPES, LARGE], ids=shape_id)
def test_relu(ctx, shape):
    check_op(ctx, ops.relu, lambda x: np.maximum(x, 0), [shape], shape, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [*ELEMENTWISE_SHAPES, LARGE], ids=shape_id)
def test_relu_gradient(ctx, shape):
    check_op(
        ctx,
        ops.relu_gradient,
        lambda x, g: np.where(x > 0, g, 0),
        [shape, shape],
        shape,
        rtol=0,
        atol=0,
    )


def test_relu_gradient_at_zero_is_zero(ctx):
    # NOTE: the derivative of relu at exactly 0 is taken as 0 (and at -0.0 too).
    x = np.array([[0.0, -0.0, 1e-30, -1e-30, 2.0, -2.0]], dtype=np.float32)
    g = np.array([[5.0, 6.0, 7.0, 8.0, 9.0, 10.0]], dtype=np.float32)
    out = nan_array(x.shape, ctx)
    ops.relu_gradient(gpumat.array(x, ctx), gpumat.array(g, ctx), out)
    np.testing.assert_array_equal(out.asnumpy(), np.float32([[0.0, 0.0, 7.0, 0.0, 9.0, 0.0]]))
    r = nan_array(x.shape, ctx)
    ops.relu(gpumat.array(x, ctx), r)
    np.testing.assert_array_equal(r.asnumpy(), np.float32([[0.0, 0.0, 1e-30, 0.0, 2.0, 0.0]]))


# --------------------------------------------------------------------------------------------------
# broadcast_to, sum_to_size
# --------------------------------------------------------------------------------------------------

BROADCAST_CASES = [
    ((200, 300), (130, 200, 300)),
    ((1, 10), (7, 10)),
    ((10,), (7, 10)),
    ((1, 1), (1, 1)),
    ((1,), (N, 1)),
    ((N,), (3, N)),
    ((257,), (513, 257)),
    ((3,), (1025, 3)),
    ((73, 74), (72, 73, 74)),
    ((74,), (72, 73, 74)),
    ((1, 73, 74), (72, 73, 74)),
    ((1, 1, 10), (7, 10)),  # leading 1s are dropped before matching
    ((5, 6), (5, 6)),  # nothing to repeat: a copy
    ((4, 5), (2, 3, 4, 5)),
]


@pytest.mark.parametrize("in_shape,out_shape", BROADCAST_CASES, ids=lambda s: shape_id(s))
def test_broadcast_to(ctx, in_shape, out_shape):
    def ref(x):
        return np.broadcast_to(x.reshape(_strip_leading_ones(x.shape)), out_shape)

    check_op(ctx, ops.broadcast_to, ref, [in_shape], out_shape, rtol=0, atol=0)


def _strip_leading_ones(shape):
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return tuple(shape[i:])


REDUCE_CASES = [
    ((500, 200, 100), (200, 100)),
    ((4, 5, 6), (6,)),
    ((4, 5, 6), (5, 6)),
    ((1, N), (N,)),
    ((N, 1), (1,)),
    ((513, 257), (257,)),
    ((1025, 3), (3,)),
    ((72, 73, 74), (74,)),
    ((72, 73, 74), (73, 74)),
    ((100000, 2), (2,)),  # a long reduction
    ((2, 100000), (100000,)),
    ((5, 6), (5, 6)),  # nothing to reduce: a copy
    ((1, 1), (1, 1)),
]


def _reduce_ref(out_shape):
    size = int(np.prod(out_shape))
    return lambda x: x.reshape(-1, size).sum(axis=0).reshape(out_shape)


def _reduce_bound(out_shape):
    size = int(np.prod(out_shape))
    return lambda x: sum_bound(x.reshape(-1, size), 0).reshape(out_shape)


@pytest.mark.parametrize("in_shape,out_shape", REDUCE_CASES, ids=lambda s: shape_id(s))
def test_reduce_sum_axis_zero(ctx, in_shape, out_shape):
    check_op(
        ctx,
        ops.sum_to_size,
        _reduce_ref(out_shape),
        [in_shape],
        out_shape,
        rtol=EPS32,
        atol=0,
        bound=_reduce_bound(out_shape),
    )


def test_reduce_sum_exact_counts(ctx):
    # sums of ones are exact in float32 up to 2**24: catches dropped or double-counted rows
    for rows, cols in [(1, 1), (3, 1), (513, 257), (1025, 3), (70000, 3), (3, 70000)]:
        out = nan_array((cols,), ctx)
        ops.sum_to_size(gpumat.array(np.ones((rows, cols)), ctx), out)
        np.testing.assert_array_equal(
            out.asnumpy(), np.full(cols, rows, np.float32), err_msg=f"{rows}x{cols}"
        )


# --------------------------------------------------------------------------------------------------
# matmul
# --------------------------------------------------------------------------------------------------

MATMUL_CASES = [  # (M, N, K)
    (1, 1, 1),
    (1, 257, 513),
    (513, 1, 257),
    (513, 257, 129),
    (1025, 3, 7),
    (72, 73, 74),
    (65, 33, 1),
    (3, 5, N),
    (64, 64, 64),
]
TRANSPOSES = [(False, False), (True, False), (False, True), (True, True)]


def _matmul_case(ctx, m, n, k, ta, tb):
    a_shape = (k, m) if ta else (m, k)
    b_shape = (n, k) if tb else (k, n)

    def op_(a, b):
        return (a.T if ta else a), (b.T if tb else b)

    check_op(
        ctx,
        lambda a, b, c: ops.matmul(a, b, c, ta, tb),
        lambda a, b: np.matmul(*op_(a, b)),
        [a_shape, b_shape],
        (m, n),
        rtol=EPS32,
        atol=0,
        bound=lambda a, b: matmul_bound(*op_(a, b)),
        name=f"matmul(M={m}, N={n}, K={k}, trans_A={ta}, trans_B={tb})",
    )


@pytest.mark.parametrize("ta,tb", TRANSPOSES, ids=["NN", "TN", "NT", "TT"])
@pytest.mark.parametrize("mnk", MATMUL_CASES, ids=lambda s: "M{}_N{}_K{}".format(*s))
def test_matrix_multiply(ctx, mnk, ta, tb):
    _matmul_case(ctx, *mnk, ta, tb)


@pytest.mark.parametrize("ta,tb", TRANSPOSES, ids=["NN", "TN", "NT", "TT"])
def test_matrix_multiply_large(ctx, ta, tb):
    _matmul_case(ctx, 500, 1000, 700, ta, tb)


def test_matrix_multiply_mnist_shape(ctx):
    _matmul_case(ctx, 1000, 256, 784, False, False)


def test_matrix_multiply_trans_flags_are_bools_not_ints(ctx):
    # A truthy int, string or array would pick a transpose silently: bools only.
    a, b = rand((4, 3)), rand((5, 4))
    c = nan_array((3, 5), ctx)
    with pytest.raises(TypeError, match="trans_a must be a bool, got 1"):
        ops.matmul(gpumat.array(a, ctx), gpumat.array(b, ctx), c, 1, True)
    ops.matmul(gpumat.array(a, ctx), gpumat.array(b, ctx), c, np.bool_(True), True)
    assert_close(c.asnumpy(), a.T.astype(np.float64) @ b.T.astype(np.float64), rtol=1e-5)


@pytest.mark.parametrize("ta,tb", TRANSPOSES, ids=["NN", "TN", "NT", "TT"])
def test_matrix_multiply_k_zero_gives_zeros(ctx, ta, tb):
    m, n = 5, 7
    a = gpumat.array(np.zeros((0, m) if ta else (m, 0), np.float32), ctx)
    b = gpumat.array(np.zeros((n, 0) if tb else (0, n), np.float32), ctx)
    c = nan_array((m, n), ctx)
    ops.matmul(a, b, c, ta, tb)
    np.testing.assert_array_equal(c.asnumpy(), np.zeros((m, n), np.float32))


@pytest.mark.parametrize("m,n,k", [(0, 5, 3), (4, 0, 3), (0, 0, 0), (0, 0, 3)], ids=str)
def test_matrix_multiply_empty_output(ctx, m, n, k):
    a = gpumat.array(np.zeros((m, k), np.float32), ctx)
    b = gpumat.array(np.zeros((k, n), np.float32), ctx)
    c = gpumat.empty((m, n), ctx)
    ops.matmul(a, b, c)
    assert c.asnumpy().shape == (m, n)


@PROPERTY
@given(
    m=st.integers(1, 70),
    n=st.integers(1, 70),
    k=st.integers(1, 70),
    ta=st.booleans(),
    tb=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_matrix_multiply_property(ctx, m, n, k, ta, tb, seed):
    rng, _ = new_rng(seed)
    a = rand((k, m) if ta else (m, k), rng)
    b = rand((n, k) if tb else (k, n), rng)
    a64 = a.T.astype(np.float64) if ta else a.astype(np.float64)
    b64 = b.T.astype(np.float64) if tb else b.astype(np.float64)
    c = nan_array((m, n), ctx)
    ops.matmul(gpumat.array(a, ctx), gpumat.array(b, ctx), c, ta, tb)
    assert_close(
        c.asnumpy(), a64 @ b64, rtol=EPS32, atol=0, bound=matmul_bound(a64, b64), msg=f"seed={seed}"
    )


# --------------------------------------------------------------------------------------------------
# softmax, cross_entropy
# --------------------------------------------------------------------------------------------------

SOFTMAX_SHAPES = [
    (1, 1),
    (1, N),
    (N, 1),
    (513, 257),
    (1025, 3),
    (64, 10),
    (300, 32),  # the widest rows a thread handles alone, and the narrowest a block handles
    (300, 33),
    (3, 5000),
    (2, 100000),
    (1000, 1000),
]


@pytest.mark.parametrize("shape", SOFTMAX_SHAPES, ids=shape_id)
def test_softmax(ctx, shape):
    got, _, _ = check_op(
        ctx, ops.softmax, np_softmax, [shape], shape, rtol=softmax_rtol(shape[1]), atol=1e-7
    )
    np.testing.assert_allclose(
        got.astype(np.float64).sum(axis=1), 1.0, rtol=0, atol=softmax_rtol(shape[1]) * 2
    )


@pytest.mark.parametrize("scale", [3.0, 20.0], ids=lambda s: f"scale{s:g}")
def test_softmax_spread_inputs(ctx, scale):
    # inputs in [-scale, scale]: outputs span many orders of magnitude
    check_op(
        ctx,
        ops.softmax,
        np_softmax,
        [(37, 129)],
        (37, 129),
        rtol=softmax_rtol(129) + 1e-5,
        atol=1e-7,
        low=0.1 * scale,
        high=scale,
    )


def test_host_softmax_keeps_small_probabilities_accurate():
    # Logits spread over +-40: x - max, rounded to float before the exponential, would be off by up
    # to 4e-6 relative in the smallest probabilities; the host kernel corrects that rounding
    # (TwoSum), so every probability above 1e-30 stays within float32's accuracy of float64.
    rng, seed = new_rng()
    x = rng.uniform(-40, 40, size=(23, 517)).astype(np.float32)
    out = nan_array(x.shape, gpumat.cpu())
    ops.softmax(gpumat.array(x, gpumat.cpu()), out)
    got, ref = out.asnumpy().astype(np.float64), np_softmax(x.astype(np.float64))
    big = ref > 1e-30
    worst = np.max(np.abs(got[big] - ref[big]) / ref[big])
    assert worst < 1e-6, f"relative error {worst:.2e} (seed={seed})"


def test_softmax_is_numerically_stable(ctx):
    rng, seed = new_rng()
    x = (rng.choice([-1000.0, 1000.0], size=(16, 33)) + rng.uniform(-1, 1, size=(16, 33))).astype(
        np.float32
    )
    x[3] = 1000.0  # a constant row: uniform output
    x[4] = -1000.0
    x[5, :] = -1000.0
    x[5, 7] = 1000.0  # one winner: a one-hot output
    x[6] = np.float32(88.0) + np.arange(
        33, dtype=np.float32
    )  # exp overflows float32 without the max shift
    out = nan_array(x.shape, ctx)
    ops.softmax(gpumat.array(x, ctx), out)
    got = out.asnumpy()
    assert np.all(np.isfinite(got)), f"non-finite softmax output (seed={seed})"
    assert_close(got, np_softmax(x.astype(np.float64)), rtol=1e-4, atol=1e-6, msg=f"seed={seed}")
    np.testing.assert_allclose(got[3], 1 / 33, rtol=1e-5)
    np.testing.assert_allclose(got[5], np.eye(33)[7], atol=1e-30)


@PROPERTY
@given(rows=st.integers(1, 40), cols=st.integers(1, 300), seed=st.integers(0, 2**32 - 1))
def test_softmax_property(ctx, rows, cols, seed):
    rng, _ = new_rng(seed)
    x = rand((rows, cols), rng, 0.1, 5.0)
    out = nan_array((rows, cols), ctx)
    ops.softmax(gpumat.array(x, ctx), out)
    got = out.asnumpy()
    assert_close(
        got,
        np_softmax(x.astype(np.float64)),
        rtol=softmax_rtol(cols),
        atol=1e-7,
        msg=f"seed={seed}",
    )


SCE_SHAPES = [
    (1, 1),
    (1, N),
    (N, 1),
    (513, 257),
    (1025, 3),
    (1000, 10),
    (300, 32),  # a thread per row up to 32 values, a block per row past
    (300, 33),
    (3, 5000),
    (2, 100000),
]


def _one_hot(shape, rng):
    n, c = shape
    labels = np.zeros((n, c), dtype=np.float32)
    labels[np.arange(n), rng.integers(0, c, size=n)] = 1.0
    return labels


@pytest.mark.parametrize("shape", SCE_SHAPES, ids=shape_id)
def test_softmax_cross_entropy_one_hot(ctx, shape):
    rng, _ = new_rng()
    labels = _one_hot(shape, rng)
    check_op(
        ctx,
        ops.cross_entropy,
        np_softmax_cross_entropy,
        [rand(shape, rng, 0.1, 4.0), labels],
        (1,),
        rtol=1e-6,
        atol=1e-6,
        bound=sce_bound,
    )


@pytest.mark.parametrize("shape", [(1, 1), (513, 257), (1025, 3), (64, 10)], ids=shape_id)
@pytest.mark.parametrize("kind", ["distribution", "arbitrary"])
def test_softmax_cross_entropy_soft_labels(ctx, shape, kind):
    rng, _ = new_rng()
    labels = rng.uniform(0.0, 1.0, size=shape)
    if kind == "distribution":
        labels /= labels.sum(axis=1, keepdims=True)
    else:
        labels = rand(shape, rng, 0.1, 3.0)  # any sign: the formula is linear in the labels
    check_op(
        ctx,
        ops.cross_entropy,
        np_softmax_cross_entropy,
        [shape, labels.astype(np.float32)],
        (1,),
        rtol=1e-6,
        atol=1e-6,
        bound=sce_bound,
    )


def test_softmax_cross_entropy_is_numerically_stable(ctx):
    logits = np.array(
        [[1000.0, -1000.0], [-1000.0, 1000.0], [1000.0, 1000.0], [-1000.0, -1000.0]], np.float32
    )
    cases = [
        (
            np.array([[1, 0], [0, 1], [1, 0], [0, 1]], np.float32),
            np.log(2) / 2,
        ),  # right answers: 0 loss
        (np.array([[0, 1], [1, 0], [1, 0], [0, 1]], np.float32), (2000 + 2000 + 2 * np.log(2)) / 4),
    ]
    for labels, expected in cases:
        out = nan_array((1,), ctx)
        ops.cross_entropy(gpumat.array(logits, ctx), gpumat.array(labels, ctx), out)
        got = out.asnumpy()
        assert np.all(np.isfinite(got)), f"non-finite loss {got} for labels {labels.tolist()}"
        assert_close(got, np.array([expected]), rtol=1e-5, atol=1e-5)


def test_softmax_cross_entropy_is_a_mean_over_rows(ctx):
    row = rand((1, 10))
    lab = np.eye(10, dtype=np.float32)[[3]]
    one, many = nan_array((1,), ctx), nan_array((1,), ctx)
    ops.cross_entropy(gpumat.array(row, ctx), gpumat.array(lab, ctx), one)
    ops.cross_entropy(
        gpumat.array(np.repeat(row, 50, 0), ctx), gpumat.array(np.repeat(lab, 50, 0), ctx), many
    )
    assert_close(many.asnumpy(), one.asnumpy().astype(np.float64), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------------
# transpose
# --------------------------------------------------------------------------------------------------

TRANSPOSE_SHAPES = [
    (1, 1),
    (1, N),
    (N, 1),
    (513, 257),
    (1025, 3),
    (72, 73),
    (32, 32),
    (33, 31),
    (1500, 2000),
]


@pytest.mark.parametrize("shape", TRANSPOSE_SHAPES, ids=shape_id)
def test_transpose(ctx, shape):
    check_op(ctx, ops.transpose, lambda x: x.T, [shape], shape[::-1], rtol=0, atol=0)


@PROPERTY
@given(r=st.integers(1, 100), c=st.integers(1, 100), seed=st.integers(0, 2**32 - 1))
def test_transpose_property(ctx, r, c, seed):
    x = rand((r, c), new_rng(seed)[0])
    t, tt = nan_array((c, r), ctx), nan_array((r, c), ctx)
    ops.transpose(gpumat.array(x, ctx), t)
    ops.transpose(t, tt)
    np.testing.assert_array_equal(t.asnumpy(), x.T)
    np.testing.assert_array_equal(tt.asnumpy(), x)


# --------------------------------------------------------------------------------------------------
# axpy
# --------------------------------------------------------------------------------------------------


_AXPY_CASES, _AXPY_IDS = _with_large([0.5, -2.0, 0.0, 0.3], 0.3)


@pytest.mark.parametrize("shape,alpha", _AXPY_CASES, ids=_AXPY_IDS)
def test_axpy(ctx, shape, alpha):
    x, y = rand(shape), rand(shape)
    xd, yd = gpumat.array(x, ctx), gpumat.array(y, ctx)
    ops.axpy(alpha, xd, yd)
    assert_close(
        yd.asnumpy(), y.astype(np.float64) + alpha * x.astype(np.float64), rtol=1e-6, atol=1e-6
    )
    np.testing.assert_array_equal(xd.asnumpy(), x)


# --------------------------------------------------------------------------------------------------
# uniform, normal
# --------------------------------------------------------------------------------------------------


def _fresh_seed():
    return int(new_rng()[1] % (2**63))


def _lag_corr(v, lag):
    a, b = v[:-lag] - v.mean(), v[lag:] - v.mean()
    return float((a * b).mean() / v.var())


def test_random_uniform_statistics(ctx):
    low, high, seed = -2.0, 3.0, _fresh_seed()
    out = nan_array((1000, 1000), ctx)
    ops.uniform(out, low, high, seed)
    v = out.asnumpy().astype(np.float64).ravel()
    n = v.size
    msg = f"seed={seed}"
    assert np.all(np.isfinite(v)), msg
    assert v.min() >= low and v.max() < high, f"{msg}: range [{v.min()}, {v.max()}]"
    assert v.min() < low + 1e-3 and v.max() > high - 1e-3, msg
    sd = (high - low) / np.sqrt(12)
    assert abs(v.mean() - (low + high) / 2) < 6 * sd / np.sqrt(n), f"{msg}: mean {v.mean()}"
    assert abs(v.std() / sd - 1) < 6 * np.sqrt(0.8 / (4 * n)), f"{msg}: std {v.std()} vs {sd}"
    counts, _ = np.histogram(v, bins=20, range=(low, high))
    expected = n / 20
    assert np.all(np.abs(counts - expected) < 6 * np.sqrt(expected)), f"{msg}: histogram {counts}"
    for lag in (1, 2, 1000, 4096):  # neighbours, rows, and a power of two (block-sized repeats)
        assert abs(_lag_corr(v, lag)) < 6 / np.sqrt(n), (
            f"{msg}: lag-{lag} correlation {_lag_corr(v, lag)}"
        )
    assert len(np.unique(v)) > 0.9 * n, f"{msg}: too many repeated values"


def test_random_normal_statistics(ctx):
    mean, std, seed = 1.5, 2.0, _fresh_seed()
    out = nan_array((1000, 1000), ctx)
    ops.normal(out, mean, std, seed)
    v = out.asnumpy().astype(np.float64).ravel()
    n = v.size
    msg = f"seed={seed}"
    assert np.all(np.isfinite(v)), msg
    assert abs(v.mean() - mean) < 6 * std / np.sqrt(n), f"{msg}: mean {v.mean()}"
    assert abs(v.std() - std) < 6 * std / np.sqrt(2 * n), f"{msg}: std {v.std()}"
    z = (v - mean) / std
    within1 = np.mean(np.abs(z) < 1)
    assert abs(within1 - 0.682689) < 6 * np.sqrt(0.68 * 0.32 / n), f"{msg}: P(|z|<1) = {within1}"
    beyond3 = np.mean(np.abs(z) > 3)
    assert abs(beyond3 - 0.0026998) < 6 * np.sqrt(0.0027 / n), f"{msg}: P(|z|>3) = {beyond3}"
    # z is standardised by the true mean and std, so var(mean z**3) = E z**6 / n = 15 / n and
    # var(mean z**4) = (E z**8 - (E z**4)**2) / n = 96 / n (not 6 / n and 24 / n, the variances of
    # the skewness and kurtosis estimators that standardise by the sample's own moments)
    skew, kurt = np.mean(z**3), np.mean(z**4)
    assert abs(skew) < 6 * np.sqrt(15 / n) and abs(kurt - 3) < 6 * np.sqrt(96 / n), (
        f"{msg}: skew {skew} kurt {kurt}"
    )
    for lag in (1, 2, 1000, 4096):
        assert abs(_lag_corr(v, lag)) < 6 / np.sqrt(n), (
            f"{msg}: lag-{lag} correlation {_lag_corr(v, lag)}"
        )


@pytest.mark.parametrize("fill", ["uniform", "normal"])
@pytest.mark.parametrize(
    "shape", [(1,), (1, 1), (7,), (1001,), (513, 257), (72, 73, 74)], ids=shape_id
)
def test_random_deterministic_per_seed(ctx, fill, shape):
    op = ops.uniform if fill == "uniform" else ops.normal
    args = (-1.0, 1.0) if fill == "uniform" else (0.0, 1.0)
    seed = _fresh_seed()
    a, b, c = nan_array(shape, ctx), nan_array(shape, ctx), nan_array(shape, ctx)
    op(a, *args, seed)
    op(b, *args, seed)
    op(c, *args, seed + 1)
    va, vb, vc = a.asnumpy(), b.asnumpy(), c.asnumpy()
    assert np.all(np.isfinite(va)), f"seed={seed}: unwritten or non-finite elements"
    np.testing.assert_array_equal(va, vb, err_msg=f"seed={seed}: same seed, different values")
    if va.size >= 7:
        assert np.mean(va == vc) < 0.5, (
            f"seed={seed}: seeds {seed} and {seed + 1} give the same values"
        )
    else:
        assert not np.array_equal(va, vc) or va.size == 1


@pytest.mark.parametrize("seed", [0, 1, 2**32, 2**63 - 1, 2**64 - 1], ids=str)
def test_random_extreme_seeds(ctx, seed):
    out = nan_array((101,), ctx)
    ops.uniform(out, 0.0, 1.0, seed)
    v = out.asnumpy()
    assert np.all((v >= 0) & (v < 1))
    ops.normal(out, 0.0, 1.0, seed)
    assert np.all(np.isfinite(out.asnumpy()))


def test_random_degenerate_parameters(ctx):
    out = nan_array((50,), ctx)
    ops.uniform(out, 2.5, 2.5, 1)
    np.testing.assert_array_equal(out.asnumpy(), np.full(50, 2.5, np.float32))
    ops.normal(out, -1.5, 0.0, 1)
    np.testing.assert_array_equal(out.asnumpy(), np.full(50, -1.5, np.float32))


def test_random_bad_parameters(ctx):
    out = nan_array((50,), ctx)
    with pytest.raises(ValueError):
        ops.uniform(out, 1.0, 0.0, 1)  # low > high
    with pytest.raises(ValueError):
        ops.normal(out, 0.0, -1.0, 1)  # negative std


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1,), (1001,), (513, 257)], ids=shape_id)
def test_random_same_on_cpu_and_gpu(gpu_ctx, shape):
    seed = _fresh_seed()
    for op, args, tol in [
        (ops.uniform, (-2.0, 3.0), 1e-6),
        (ops.normal, (1.0, 2.0), 1e-5),
    ]:
        c, g = nan_array(shape, gpumat.cpu()), nan_array(shape, gpu_ctx)
        op(c, *args, seed)
        op(g, *args, seed)
        # same counter-based stream; the last ulps may differ (FMA contraction, device libm)
        np.testing.assert_allclose(
            g.asnumpy(), c.asnumpy(), rtol=tol, atol=tol, err_msg=f"{op.__name__} seed={seed}"
        )


# --------------------------------------------------------------------------------------------------
# Property tests over shapes: broadcast/reduce round trips, elementwise on any shape
# --------------------------------------------------------------------------------------------------

small_shape = st.lists(st.integers(1, 7), min_size=1, max_size=3).map(tuple)
lead_shape = st.lists(st.integers(1, 5), min_size=0, max_size=2).map(tuple)


@PROPERTY
@given(base=small_shape, lead=lead_shape, seed=st.integers(0, 2**32 - 1))
def test_broadcast_reduce_round_trip(ctx, base, lead, seed):
    x = rand(base, new_rng(seed)[0])
    full = lead + base
    b = nan_array(full, ctx)
    ops.broadcast_to(gpumat.array(x, ctx), b)
    np.testing.assert_array_equal(b.asnumpy(), np.broadcast_to(x, full))
    r = nan_array(base, ctx)
    ops.sum_to_size(b, r)
    reps = int(np.prod(lead))
    expected = x.astype(np.float64) * reps
    assert_close(r.asnumpy(), expected, rtol=EPS32, atol=0, bound=reps * EPS32 * np.abs(expected))


@PROPERTY
@given(
    shape=st.lists(st.integers(0, 9), min_size=0, max_size=4).map(tuple),
    seed=st.integers(0, 2**32 - 1),
)
def test_elementwise_any_shape(ctx, shape, seed):
    rng, _ = new_rng(seed)
    x, y = rand(shape, rng), rand(shape, rng)
    xd, yd = x.astype(np.float64), y.astype(np.float64)
    a, b = gpumat.array(x, ctx), gpumat.array(y, ctx)
    for op, ref in [
        (ops.add, xd + yd),
        (ops.mul, xd * yd),
        (lambda a, b, o: ops.relu_gradient(a, b, o), np.where(xd > 0, yd, 0)),
    ]:
        out = nan_array(shape, ctx)
        op(a, b, out)
        assert_close(out.asnumpy(), ref)
    out = nan_array(shape, ctx)
    ops.relu(a, out)
    assert_close(out.asnumpy(), np.maximum(xd, 0))


@PROPERTY
@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple),
    cut=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_reduce_any_suffix(ctx, shape, cut, seed):
    cut = min(cut, len(shape))
    out_shape = shape[cut:]
    x = rand(shape, new_rng(seed)[0]).astype(np.float32)
    x64 = x.astype(np.float64)
    out = nan_array(out_shape, ctx)
    ops.sum_to_size(gpumat.array(x, ctx), out)
    axes = tuple(range(cut))
    assert_close(out.asnumpy(), x64.sum(axis=axes), rtol=EPS32, atol=0, bound=sum_bound(x64, axes))


# --------------------------------------------------------------------------------------------------
# NaN passes through
# --------------------------------------------------------------------------------------------------


def _with_nans(shape, rng, frac=0.02):
    x = rand(shape, rng)
    mask = rng.random(shape) < frac
    mask.flat[0] = True
    x[mask] = np.nan
    return x


NAN_CASES = {
    "add": (ops.add, np.add, 2),
    "multiply": (ops.mul, np.multiply, 2),
    "add_by_const": (
        lambda x, o: ops.add_scalar(x, 2.0, o),
        lambda x: x + 2,
        1,
    ),
    "multiply_by_const": (
        lambda x, o: ops.mul_scalar(x, 2.0, o),
        lambda x: x * 2,
        1,
    ),
    "relu": (ops.relu, lambda x: np.maximum(x, 0), 1),  # numpy's relu, np.maximum, propagates NaN
    # out = grad where in > 0, else 0; a NaN *input* gives NaN (the native layer's convention,
    # documented in src/*/elementwise: a NaN from the forward pass is not zeroed in the backward)
    "relu_gradient": (
        ops.relu_gradient,
        lambda x, g: np.where(np.isnan(x), np.nan, np.where(x > 0, g, 0)),
        2,
    ),
    "copy": (ops.copy, lambda x: x, 1),
    "exp": (ops.exp, np.exp, 1),
    "log": (ops.log, lambda x: np.log(np.where(x < 0, np.nan, x)), 1),  # NaN for x < 0 too
    "divide": (ops.div, np.divide, 2),
    "eq": (ops.eq, lambda a, b: (a == b).astype(np.float64), 2),  # NaN equals nothing: 0
    "transpose": (ops.transpose, lambda x: x.T, 1),
    "softmax": (ops.softmax, np_softmax, 1),
}


@pytest.mark.parametrize("name", list(NAN_CASES))
def test_nan_passes_through(ctx, name):
    op, ref, arity = NAN_CASES[name]
    rng, seed = new_rng()
    shape = (37, 129)
    inputs = [_with_nans(shape, rng) for _ in range(arity)]
    out_shape = shape[::-1] if name == "transpose" else shape
    tol = softmax_rtol(129) if name == "softmax" else 1e-6
    check_op(ctx, op, ref, inputs, out_shape, rtol=tol, atol=1e-6, seed=seed, name=name)


def test_nan_passes_through_matmul_reduce_broadcast_sce_axpy(ctx):
    rng, seed = new_rng()
    a, b = _with_nans((37, 29), rng, 0.01), _with_nans((29, 41), rng, 0.01)
    check_op(
        ctx,
        lambda a, b, c: ops.matmul(a, b, c),
        np.matmul,
        [a, b],
        (37, 41),
        rtol=1e-5,
        atol=1e-5,
        name="matmul",
    )
    x = _with_nans((37, 29), rng)
    check_op(ctx, ops.sum_to_size, lambda x: x.sum(0), [x], (29,), rtol=1e-5, atol=1e-5)
    v = _with_nans((29,), rng, 0.1)
    check_op(
        ctx, ops.broadcast_to, lambda v: np.broadcast_to(v, (37, 29)), [v], (37, 29), rtol=0, atol=0
    )
    logits = rand((8, 5), rng)
    logits[2, 3] = np.nan
    out = nan_array((1,), ctx)
    ops.cross_entropy(gpumat.array(logits, ctx), gpumat.array(_one_hot((8, 5), rng), ctx), out)
    assert np.isnan(out.asnumpy()[0]), f"NaN logits gave a finite loss {out.asnumpy()}"
    y = gpumat.array(rand((10,), rng), ctx)
    xn = _with_nans((10,), rng, 0.0)  # NaN at [0]
    ops.axpy(0.5, gpumat.array(xn, ctx), y)
    got = y.asnumpy()
    assert np.isnan(got[0]) and np.all(np.isfinite(got[1:]))


# --------------------------------------------------------------------------------------------------
# Zero-size arrays
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0,), (0, 5), (5, 0), (2, 0, 3)], ids=shape_id)
def test_zero_size_elementwise(ctx, shape):
    z = lambda: gpumat.array(np.zeros(shape, np.float32), ctx)  # noqa: E731
    a, b, out = z(), z(), z()
    ops.fill(out, 1.0)
    ops.add(a, b, out)
    ops.mul(a, b, out)
    ops.add_scalar(a, 1.0, out)
    ops.mul_scalar(a, 2.0, out)
    ops.relu(a, out)
    ops.relu_gradient(a, b, out)
    ops.copy(a, out)
    ops.axpy(2.0, a, out)
    ops.uniform(out, 0.0, 1.0, 1)
    ops.normal(out, 0.0, 1.0, 1)
    assert out.asnumpy().shape == shape


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0)], ids=shape_id)
def test_zero_size_transpose_and_softmax(ctx, shape):
    a = gpumat.array(np.zeros(shape, np.float32), ctx)
    t = gpumat.empty(shape[::-1], ctx)
    ops.transpose(a, t)
    assert t.asnumpy().shape == shape[::-1]
    s = gpumat.empty(shape, ctx)
    ops.softmax(a, s)
    assert s.asnumpy().shape == shape


def test_zero_size_reduce_gives_zeros(ctx):
    # the sum over an empty axis is 0 (numpy: np.zeros((0, 5)).sum(0) == zeros(5))
    out = nan_array((5,), ctx)
    ops.sum_to_size(gpumat.array(np.zeros((0, 5), np.float32), ctx), out)
    np.testing.assert_array_equal(out.asnumpy(), np.zeros(5, np.float32))
    out3 = nan_array((4, 5), ctx)
    ops.sum_to_size(gpumat.array(np.zeros((0, 4, 5), np.float32), ctx), out3)
    np.testing.assert_array_equal(out3.asnumpy(), np.zeros((4, 5), np.float32))
    e = gpumat.empty((0,), ctx)
    ops.sum_to_size(gpumat.array(np.zeros((3, 0), np.float32), ctx), e)


def test_zero_size_broadcast(ctx):
    # numpy: np.broadcast_to(np.ones(5), (0, 5)) and np.broadcast_to(np.ones(0), (3, 0)) are valid
    out = gpumat.empty((0, 5), ctx)
    ops.broadcast_to(gpumat.array(rand((5,)), ctx), out)
    assert out.shape == (0, 5)
    out2 = gpumat.empty((3, 0), ctx)
    ops.broadcast_to(gpumat.array(np.zeros((0,), np.float32), ctx), out2)
    assert out2.shape == (3, 0)


@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (0, 0)], ids=shape_id)
def test_softmax_cross_entropy_empty_raises(ctx, shape):
    z = gpumat.array(np.zeros(shape, np.float32), ctx)
    out = nan_array((1,), ctx)
    with pytest.raises(ValueError, match="cross_entropy"):
        ops.cross_entropy(z, gpumat.array(np.zeros(shape, np.float32), ctx), out)


# --------------------------------------------------------------------------------------------------
# Bad input: wrong shapes, wrong types, mixed devices, aliasing
# --------------------------------------------------------------------------------------------------


def _arr(ctx, *shape):
    return gpumat.array(rand(shape), ctx)


BAD_SHAPES = [  # (op name, call(ctx))
    ("broadcast_to", lambda c: ops.broadcast_to(_arr(c, 3), _arr(c, 7, 4))),
    ("broadcast_to", lambda c: ops.broadcast_to(_arr(c, 2, 10), _arr(c, 7, 10))),
    ("broadcast_to", lambda c: ops.broadcast_to(_arr(c, 3, 1), _arr(c, 3, 4))),
    ("broadcast_to", lambda c: ops.broadcast_to(_arr(c, 7, 10), _arr(c, 10))),
    ("broadcast_to", lambda c: ops.broadcast_to(_arr(c, 4, 5), _arr(c, 5, 4))),
    ("sum_to_size", lambda c: ops.sum_to_size(_arr(c, 4, 5, 6), _arr(c, 5))),
    ("sum_to_size", lambda c: ops.sum_to_size(_arr(c, 4, 5, 6), _arr(c, 4, 5))),
    ("sum_to_size", lambda c: ops.sum_to_size(_arr(c, 5, 6), _arr(c, 3, 5, 6))),
    ("sum_to_size", lambda c: ops.sum_to_size(_arr(c, 4, 5, 6), _arr(c, 7))),
    ("sum_to_size", lambda c: ops.sum_to_size(_arr(c, 4, 6), _arr(c, 24))),
    (
        "add",
        lambda c: ops.add(_arr(c, 3, 4), _arr(c, 4, 3), _arr(c, 3, 4)),
    ),
    (
        "add",
        lambda c: ops.add(_arr(c, 3, 4), _arr(c, 3, 4), _arr(c, 12)),
    ),
    (
        "add",
        lambda c: ops.add(_arr(c, 3, 4), _arr(c, 3, 4), _arr(c, 3, 5)),
    ),
    (
        "add",
        lambda c: ops.add(_arr(c, 4), _arr(c, 3, 4), _arr(c, 3, 4)),
    ),
    (
        "mul",
        lambda c: ops.mul(_arr(c, 3, 4), _arr(c, 3, 5), _arr(c, 3, 4)),
    ),
    (
        "mul",
        lambda c: ops.mul(_arr(c, 3, 4), _arr(c, 3, 4), _arr(c, 4, 3)),
    ),
    (
        "add_scalar",
        lambda c: ops.add_scalar(_arr(c, 3, 4), 1.0, _arr(c, 4, 3)),
    ),
    (
        "mul_scalar",
        lambda c: ops.mul_scalar(_arr(c, 3, 4), 1.0, _arr(c, 3, 5)),
    ),
    (
        "matmul",
        lambda c: ops.matmul(_arr(c, 3, 4), _arr(c, 5, 6), _arr(c, 3, 6)),
    ),
    (
        "matmul",
        lambda c: ops.matmul(_arr(c, 3, 4), _arr(c, 4, 6), _arr(c, 3, 6), True, False),
    ),
    (
        "matmul",
        lambda c: ops.matmul(_arr(c, 3, 4), _arr(c, 6, 5), _arr(c, 3, 6), False, True),
    ),
    (
        "matmul",
        lambda c: ops.matmul(_arr(c, 3, 4), _arr(c, 4, 6), _arr(c, 3, 5)),
    ),
    (
        "matmul",
        lambda c: ops.matmul(_arr(c, 3, 4), _arr(c, 4, 6), _arr(c, 6, 3)),
    ),
    (
        "matmul",
        lambda c: ops.matmul(_arr(c, 3, 4), _arr(c, 4, 6), _arr(c, 18)),
    ),
    (
        "matmul",
        lambda c: ops.matmul(_arr(c, 4), _arr(c, 4, 6), _arr(c, 1, 6)),
    ),
    (
        "matmul",
        lambda c: ops.matmul(_arr(c, 2, 3, 4), _arr(c, 4, 6), _arr(c, 3, 6)),
    ),
    (
        "matmul",
        lambda c: ops.matmul(_arr(c, 3, 4), _arr(c, 1, 4, 6), _arr(c, 3, 6)),
    ),
    ("relu", lambda c: ops.relu(_arr(c, 3, 4), _arr(c, 4, 3))),
    ("relu", lambda c: ops.relu(_arr(c, 3, 4), _arr(c, 12))),
    ("relu_gradient", lambda c: ops.relu_gradient(_arr(c, 3, 4), _arr(c, 3, 5), _arr(c, 3, 4))),
    ("relu_gradient", lambda c: ops.relu_gradient(_arr(c, 3, 4), _arr(c, 3, 4), _arr(c, 3, 5))),
    ("softmax", lambda c: ops.softmax(_arr(c, 3, 4), _arr(c, 4, 3))),
    (
        "cross_entropy",
        lambda c: ops.cross_entropy(_arr(c, 3, 4), _arr(c, 3, 5), _arr(c, 1)),
    ),
    (
        "cross_entropy",
        lambda c: ops.cross_entropy(_arr(c, 3, 4), _arr(c, 3, 4), _arr(c, 2)),
    ),
    (
        "cross_entropy",
        lambda c: ops.cross_entropy(_arr(c, 3, 4), _arr(c, 3, 4), _arr(c, 1, 1)),
    ),
    (
        "cross_entropy",
        lambda c: ops.cross_entropy(_arr(c, 3, 4), _arr(c, 3, 4), _arr(c, 3)),
    ),
    (
        "cross_entropy",
        lambda c: ops.cross_entropy(_arr(c, 12), _arr(c, 12), _arr(c, 1)),
    ),
    (
        "cross_entropy",
        lambda c: ops.cross_entropy(_arr(c, 2, 3, 4), _arr(c, 2, 3, 4), _arr(c, 1)),
    ),
    ("transpose", lambda c: ops.transpose(_arr(c, 3, 4), _arr(c, 3, 4))),
    ("transpose", lambda c: ops.transpose(_arr(c, 3, 4), _arr(c, 12))),
    ("transpose", lambda c: ops.transpose(_arr(c, 2, 3, 4), _arr(c, 4, 3, 2))),
    ("transpose", lambda c: ops.transpose(_arr(c, 5), _arr(c, 5))),
    ("axpy", lambda c: ops.axpy(1.0, _arr(c, 3, 4), _arr(c, 4, 3))),
    ("axpy", lambda c: ops.axpy(1.0, _arr(c, 3, 4), _arr(c, 3, 5))),
    ("copy", lambda c: ops.copy(_arr(c, 3, 4), _arr(c, 3, 5))),
    ("copy", lambda c: ops.copy(_arr(c, 3, 4), _arr(c, 13))),
]


@pytest.mark.parametrize(
    "name,call", BAD_SHAPES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BAD_SHAPES)]
)
def test_wrong_shapes_raise_value_error_naming_the_op(ctx, name, call):
    with pytest.raises(ValueError) as info:
        call(ctx)
    assert name in str(info.value), f"message does not name {name!r}: {info.value}"


def test_matmul_error_message_names_shapes(ctx):
    a, b, c = (
        gpumat.empty((1000, 784), ctx),
        gpumat.empty((785, 256), ctx),
        gpumat.empty((1000, 256), ctx),
    )
    with pytest.raises(ValueError) as info:
        ops.matmul(a, b, c)
    msg = str(info.value)
    assert "matmul" in msg and "(1000, 784)" in msg and "(785, 256)" in msg, msg


def test_elementwise_error_message_names_shapes(ctx):
    with pytest.raises(ValueError) as info:
        ops.add(gpumat.empty((3, 4), ctx), gpumat.empty((4, 3), ctx), gpumat.empty((3, 4), ctx))
    assert "(3, 4)" in str(info.value) and "(4, 3)" in str(info.value), str(info.value)


def test_failed_op_leaves_output_untouched(ctx):
    x = rand((3, 4))
    out = gpumat.array(x, ctx)
    with pytest.raises(ValueError):
        ops.matmul(_arr(ctx, 3, 5), _arr(ctx, 4, 4), out)
    np.testing.assert_array_equal(out.asnumpy(), x)


def _valid_calls(ctx):
    """name -> (function, args) for one valid call of every op; array arguments are PyGpuMatrix."""
    a = lambda *s: gpumat.array(rand(s), ctx)  # noqa: E731
    return {
        "fill": (ops.fill, [a(3, 4), 1.5]),
        "broadcast_to": (ops.broadcast_to, [a(4), a(3, 4)]),
        "sum_to_size": (ops.sum_to_size, [a(3, 4), a(4)]),
        "add": (ops.add, [a(3, 4), a(3, 4), a(3, 4)]),
        "mul": (
            ops.mul,
            [a(3, 4), a(3, 4), a(3, 4)],
        ),
        "add_scalar": (
            ops.add_scalar,
            [a(3, 4), 2.0, a(3, 4)],
        ),
        "mul_scalar": (
            ops.mul_scalar,
            [a(3, 4), 2.0, a(3, 4)],
        ),
        "matmul": (ops.matmul, [a(3, 4), a(4, 5), a(3, 5), False, False]),
        "relu": (ops.relu, [a(3, 4), a(3, 4)]),
        "relu_gradient": (ops.relu_gradient, [a(3, 4), a(3, 4), a(3, 4)]),
        "softmax": (ops.softmax, [a(3, 4), a(3, 4)]),
        "cross_entropy": (ops.cross_entropy, [a(3, 4), a(3, 4), a(1)]),
        "transpose": (ops.transpose, [a(3, 4), a(4, 3)]),
        "uniform": (ops.uniform, [a(3, 4), 0.0, 1.0, 7]),
        "normal": (ops.normal, [a(3, 4), 0.0, 1.0, 7]),
        "axpy": (ops.axpy, [0.5, a(3, 4), a(3, 4)]),
        "copy": (ops.copy, [a(3, 4), a(3, 4)]),
    }


def test_valid_calls_table_covers_every_op(ctx):
    calls = _valid_calls(ctx)
    assert sorted(calls) == sorted(ALL_OPS)
    for fn, args in calls.values():
        fn(*args)  # the reference calls themselves are valid


def _array_positions(args):
    return [i for i, x in enumerate(args) if isinstance(x, gpumat._core.PyGpuMatrix)]


def _scalar_positions(name, args):
    skip = (False, True)  # matmul's trans flags take any truthy value
    return [
        i
        for i, x in enumerate(args)
        if isinstance(x, (int, float)) and not any(x is s for s in skip)
    ]


@pytest.mark.parametrize("name", ALL_OPS)
@pytest.mark.parametrize(
    "bad", [None, "array", "list", 3.0], ids=["None", "numpy", "list", "float"]
)
def test_non_array_argument_raises_type_error(ctx, name, bad):
    fn, args = _valid_calls(ctx)[name]
    for i in _array_positions(args):
        if bad == "array":
            replacement = args[i].asnumpy()
        elif bad == "list":
            replacement = args[i].asnumpy().tolist()
        else:
            replacement = bad
        call_args = list(args)
        call_args[i] = replacement
        with pytest.raises(TypeError):
            fn(*call_args)


@pytest.mark.parametrize("name", ALL_OPS)
def test_non_number_scalar_raises_type_error(ctx, name):
    fn, args = _valid_calls(ctx)[name]
    for i in _scalar_positions(name, args):
        for bad in (None, "abc", [1.0]):
            call_args = list(args)
            call_args[i] = bad
            with pytest.raises(TypeError):
                fn(*call_args)


def test_wrong_number_of_arguments_raises_type_error(ctx):
    # (uniform / normal give low, high, seed defaults, so only "none" and "too many"
    # are wrong for every op)
    calls = _valid_calls(ctx)
    for fn, args in calls.values():
        with pytest.raises(TypeError):
            fn()
        with pytest.raises(TypeError):
            fn(*args, args[-1])
    with pytest.raises(TypeError):
        ops.matmul(*calls["matmul"][1][:2])  # no output


@pytest.mark.gpu
@pytest.mark.parametrize("name", ALL_OPS)
def test_mixed_devices_raise_value_error(gpu_ctx, name):
    cpu_fn, cpu_args = _valid_calls(gpumat.cpu())[name]
    positions = _array_positions(cpu_args)
    if len(positions) < 2:
        pytest.skip(f"{name} takes one array")
    for i in positions:
        args = list(cpu_args)
        args[i] = gpumat.array(args[i].asnumpy(), gpu_ctx)
        with pytest.raises(ValueError):
            cpu_fn(*args)


ALIASING = {  # ops whose output must not be one of their inputs
    "matmul": lambda a: ops.matmul(a, a, a),
    "matrix_multiply_A": lambda a: ops.matmul(a, _like(a), a, True, False),
    "matrix_multiply_B": lambda a: ops.matmul(_like(a), a, a, False, True),
    "softmax": lambda a: ops.softmax(a, a),
    "transpose": lambda a: ops.transpose(a, a),
    "broadcast_to": lambda a: ops.broadcast_to(a, a),
    "sum_to_size": lambda a: ops.sum_to_size(a, a),
}


def _like(a):
    return gpumat.array(rand(a.shape), a.ctx)


@pytest.mark.parametrize("name", list(ALIASING))
def test_aliased_output_raises_value_error(ctx, name):
    x = rand((6, 6))
    a = gpumat.array(x, ctx)
    with pytest.raises(ValueError):
        ALIASING[name](a)
    np.testing.assert_array_equal(a.asnumpy(), x)


def test_softmax_cross_entropy_output_is_an_input_raises(ctx):
    # a (1, 1) problem's logits are never the (1,) output array, but passing an input as `out` must
    # be refused (wrong shape or aliasing, either way ValueError)
    a = gpumat.array(rand((1, 1)), ctx)
    lab = gpumat.array(np.ones((1, 1), np.float32), ctx)
    with pytest.raises(ValueError):
        ops.cross_entropy(a, lab, a)
    with pytest.raises(ValueError):
        ops.cross_entropy(a, lab, lab)
    v = gpumat.array(rand((1,)), ctx)
    with pytest.raises(ValueError):
        ops.cross_entropy(v, v, v)


# --------------------------------------------------------------------------------------------------
# Overlapping views: two DLPack imports of overlapping slices of one buffer
# --------------------------------------------------------------------------------------------------


def _overlapping(n_rows: int, cols: int, shift: int):
    """Two cpu arrays (n_rows, cols) over one numpy buffer, the second ``shift`` elements after the
    first (imported through DLPack, so gpumat sees two arrays at different addresses), and that
    buffer."""
    buf = rand((n_rows * cols + shift,))
    a = gpumat.from_dlpack(buf[: n_rows * cols].reshape(n_rows, cols))
    b = gpumat.from_dlpack(buf[shift : shift + n_rows * cols].reshape(n_rows, cols))
    return a, b, buf


OVERLAP_REFUSED = {  # ops that cannot work in place: any shared memory is refused
    "transpose": lambda a, b: ops.transpose(a, b),
    "matmul": lambda a, b: ops.matmul(a, _like(a), b),
    "softmax": lambda a, b: ops.softmax(a, b),
    "softmax dim 0": lambda a, b: ops.softmax(a, b, 0),
    "max_pool2d": lambda a, b: ops.max_pool2d(a.reshape(1, 1, 6, 6), b.reshape(1, 1, 6, 6), 1),
    # elementwise ops may write in place, but not into a shifted view of their input
    "add": lambda a, b: ops.add(a, a, b),
    "mul_scalar": lambda a, b: ops.mul_scalar(a, 2.0, b),
    "relu": lambda a, b: ops.relu(a, b),
    "axpy": lambda a, b: ops.axpy(2.0, a, b),
    "copy": lambda a, b: ops.copy(a, b),
    "tanh": lambda a, b: ops.tanh(a, b),
}


@pytest.mark.parametrize("name", list(OVERLAP_REFUSED))
@pytest.mark.parametrize("shift", [1, 5, 35])
def test_an_output_partially_overlapping_an_input_is_refused(name, shift):
    a, b, buf = _overlapping(6, 6, shift)
    before = buf.copy()
    with pytest.raises(ValueError, match="overlap|shares memory"):
        OVERLAP_REFUSED[name](a, b)
    np.testing.assert_array_equal(buf, before)  # refused before anything ran


def test_elementwise_ops_still_run_in_place_and_on_disjoint_views():
    a, b, buf = _overlapping(6, 6, 36)  # b starts where a ends: disjoint
    x = a.asnumpy().astype(np.float64)
    ops.add(a, a, b)
    np.testing.assert_allclose(b.asnumpy(), 2 * x, rtol=1e-6)
    ops.add(a, a, a)  # exactly in place
    np.testing.assert_allclose(a.asnumpy(), 2 * x, rtol=1e-6)


# exp, log, div (the front end's elementwise kernels) and their graph ops
# --------------------------------------------------------------------------------------------------

# Every device rounds exp / log within 2 ulp (CUDA's expf, logf; the host's C library) and divides
# exactly rounded: the tolerances are 4 and 1 ulp of float32, relative.
ULP = EPS32  # 2**-23, the spacing of float32 numbers in [1, 2)


def _positive(shape, rng, lo=-30.0, hi=30.0):
    """float32 exp(u), u uniform in [lo, hi): positive numbers over 26 binades, never 1."""
    return np.exp(rng.uniform(lo, hi, size=shape)).astype(np.float32)


@pytest.mark.parametrize("shape", [*ELEMENTWISE_SHAPES, LARGE], ids=shape_id)
def test_exp(ctx, shape):
    # |x| in [0.1, 85): exp(x) spans 3e-37 .. 8e36, all normal float32 numbers
    check_op(ctx, ops.exp, np.exp, [shape], shape, rtol=4 * ULP, atol=0, high=85.0, name="exp")


@pytest.mark.parametrize("shape", [*ELEMENTWISE_SHAPES, LARGE], ids=shape_id)
def test_log(ctx, shape):
    rng, _ = new_rng()
    check_op(ctx, ops.log, np.log, [_positive(shape, rng)], shape, rtol=4 * ULP, atol=0, name="log")


@pytest.mark.parametrize("shape", [*ELEMENTWISE_SHAPES, LARGE], ids=shape_id)
def test_elementwise_divide(ctx, shape):
    check_op(ctx, ops.div, np.divide, [shape, shape], shape, rtol=ULP, atol=0)


def _tied(shape, rng):
    """Two float32 arrays equal at about half the positions (a random mask), else different."""
    a = rand(shape, rng)
    other = rand(shape, rng, low=1.0, high=2.0)  # |other| >= 1 > |a|: never equal to a
    return a, np.where(rng.random(shape) < 0.5, a, other).astype(np.float32)


@pytest.mark.parametrize("shape", [*ELEMENTWISE_SHAPES, LARGE], ids=shape_id)
def test_eq(ctx, shape):
    rng, _ = new_rng()
    a, b = _tied(shape, rng)
    got, expected, _ = check_op(
        ctx, ops.eq, lambda x, y: (x == y).astype(np.float64), [a, b], shape, rtol=0, atol=0
    )
    assert 0 < expected.sum() < expected.size or expected.size < 8  # both outcomes occur


def test_eq_special_values(ctx):
    a = np.array([np.nan, np.nan, 1.0, -0.0, np.inf, -np.inf, np.inf, 3.0, 1e-45], np.float32)
    b = np.array([np.nan, 1.0, np.nan, 0.0, np.inf, np.inf, 3.4e38, 3.0, 0.0], np.float32)
    out = nan_array(a.shape, ctx)
    ops.eq(gpumat.array(a, ctx), gpumat.array(b, ctx), out)
    # NaN equals nothing, -0 == +0, inf == inf; the smallest denormal is not 0 (no flush to zero)
    np.testing.assert_array_equal(out.asnumpy(), [0, 0, 0, 1, 1, 0, 0, 1, 0])
    x = gpumat.array(a, ctx)
    ops.eq(x, x, x)  # in place, one array for all three: 1 except where a is NaN
    np.testing.assert_array_equal(x.asnumpy(), [0, 0, 1, 1, 1, 1, 1, 1, 1])


def test_exp_overflows_to_inf_and_underflows_to_zero(ctx):
    x = np.array(
        [88.0, 88.8, 89.0, 1e30, np.inf, -88.0, -100.0, -103.0, -110.0, -1e30, -np.inf]
        + [0.0, -0.0, 1.0, np.nan],
        np.float32,
    )
    out = nan_array(x.shape, ctx)
    ops.exp(gpumat.array(x, ctx), out)
    got = out.asnumpy()
    assert np.all(np.isinf(got[1:5]) & (got[1:5] > 0)), got  # float32's max is exp(88.72...)
    assert np.all(got[8:11] == 0), got  # below e^-103.97 (half the smallest denormal)
    assert got[11] == 1 and got[12] == 1 and np.isnan(got[14]), got
    # the finite ones (denormals included: exp(-100) = 3.7e-44) to 2 ulp or 2 denormal steps
    with np.errstate(over="ignore"):
        expected = np.exp(x.astype(np.float64)).astype(np.float32).astype(np.float64)
    finite = [0, 5, 6, 7, 13]
    assert_close(got[finite], expected[finite], rtol=4 * ULP, atol=3e-45)
    assert 0 < got[6] < 1.2e-38, "exp(-100) is a denormal, not flushed to zero"


def test_log_special_values(ctx):
    x = np.array([0.0, -0.0, -1.0, -1e-30, -np.inf, np.inf, np.nan, 1.0, 1e-45, 3.4e38], np.float32)
    out = nan_array(x.shape, ctx)
    ops.log(gpumat.array(x, ctx), out)
    got = out.asnumpy()
    assert got[0] == -np.inf and got[1] == -np.inf, got
    assert np.all(np.isnan(got[2:5])) and np.isnan(got[6]), got
    assert got[5] == np.inf and got[7] == 0.0, got
    # the smallest denormal and the largest float: log(1.4e-45) = -103.28, log(3.4e38) = 88.72
    assert_close(got[8:], np.log(x[8:].astype(np.float64)), rtol=4 * ULP, atol=0)


def test_divide_ieee_special_values(ctx):
    a = np.array(
        [1.0, -1.0, 1.0, 0.0, np.inf, np.nan, 1.0, 1.0, 1e30, 1e-30, -0.0, 3.0], np.float32
    )
    b = np.array(
        [0.0, 0.0, -0.0, 0.0, np.inf, 1.0, np.nan, np.inf, 1e-30, 1e30, 5.0, -np.inf], np.float32
    )
    out = nan_array(a.shape, ctx)
    ops.div(gpumat.array(a, ctx), gpumat.array(b, ctx), out)
    got = out.asnumpy()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        expected = a / b  # float32 IEEE division, as the kernels
    np.testing.assert_array_equal(got, expected)
    assert list(got[:3]) == [np.inf, -np.inf, -np.inf]  # x / 0 takes the signs of x and the zero
    assert np.isnan(got[3]) and np.isnan(got[4])  # 0 / 0, inf / inf
    assert got[8] == np.inf and got[9] == 0  # overflow, underflow
    assert np.signbit(got[10]) and np.signbit(got[11])  # -0 / 5 = -0, 3 / -inf = -0


@pytest.mark.parametrize("shape", [(1, 1), (513, 257)], ids=shape_id)
def test_exp_log_divide_in_place(ctx, shape):
    rng, _ = new_rng()
    x, y = _positive(shape, rng, -3, 3), rand(shape, rng)
    y[::2] = x[::2]  # equal rows, for eq
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    cases = [
        (lambda a, b: ops.exp(b, b), np.exp(y64), "b"),
        (lambda a, b: ops.log(a, a), np.log(x64), "a"),
        (lambda a, b: ops.div(a, b, a), x64 / y64, "a"),
        (lambda a, b: ops.div(a, b, b), x64 / y64, "b"),
        (lambda a, b: ops.div(b, b, b), np.ones(shape), "b"),
        (lambda a, b: ops.eq(a, b, a), (x64 == y64).astype(np.float64), "a"),
        (lambda a, b: ops.eq(a, b, b), (x64 == y64).astype(np.float64), "b"),
    ]
    for i, (run, expected, which) in enumerate(cases):
        a, b = gpumat.array(x, ctx), gpumat.array(y, ctx)
        run(a, b)
        assert_close(
            (a if which == "a" else b).asnumpy(),
            expected,
            rtol=4 * ULP,
            atol=0,
            msg=f"in-place case {i}",
        )


FRONTEND_BAD_SHAPES = [  # (op name, call(ctx))
    ("exp", lambda c: ops.exp(_arr(c, 3, 4), _arr(c, 4, 3))),
    ("exp", lambda c: ops.exp(_arr(c, 3, 4), _arr(c, 12))),
    ("log", lambda c: ops.log(_arr(c, 3, 4), _arr(c, 3, 5))),
    (
        "div",
        lambda c: ops.div(_arr(c, 3, 4), _arr(c, 4, 3), _arr(c, 3, 4)),
    ),
    (
        "div",
        lambda c: ops.div(_arr(c, 3, 4), _arr(c, 3, 4), _arr(c, 12)),
    ),
    ("eq", lambda c: ops.eq(_arr(c, 3, 4), _arr(c, 4, 3), _arr(c, 3, 4))),
    ("eq", lambda c: ops.eq(_arr(c, 3, 4), _arr(c, 3, 4), _arr(c, 1, 3, 4))),
]


@pytest.mark.parametrize(
    "name,call",
    FRONTEND_BAD_SHAPES,
    ids=[f"{n}-{i}" for i, (n, _) in enumerate(FRONTEND_BAD_SHAPES)],
)
def test_frontend_kernels_wrong_shapes_name_the_op_and_shapes(ctx, name, call):
    with pytest.raises(ValueError, match=name) as info:
        call(ctx)
    assert "(3, 4)" in str(info.value), str(info.value)


FRONTEND_CALLS = {  # name -> call(*arrays) and the arrays' shapes
    "exp": (ops.exp, [(3, 4), (3, 4)]),
    "log": (ops.log, [(3, 4), (3, 4)]),
    "div": (ops.div, [(3, 4), (3, 4), (3, 4)]),
    "eq": (ops.eq, [(3, 4), (3, 4), (3, 4)]),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(FRONTEND_CALLS))
def test_frontend_kernels_mixed_devices_raise(gpu_ctx, name):
    fn, shapes = FRONTEND_CALLS[name]
    for i in range(len(shapes)):
        args = [
            gpumat.array(rand(s), gpu_ctx if j == i else gpumat.cpu()) for j, s in enumerate(shapes)
        ]
        before = [a.asnumpy() for a in args]
        with pytest.raises(ValueError, match=f"{name}: arrays are on different devices"):
            fn(*args)
        for a, b in zip(args, before, strict=True):
            np.testing.assert_array_equal(a.asnumpy(), b)


@pytest.mark.parametrize("name", list(FRONTEND_CALLS))
def test_frontend_kernels_reject_non_arrays(ctx, name):
    fn, shapes = FRONTEND_CALLS[name]
    for i in range(len(shapes)):
        for bad in (None, rand(shapes[i]), 3.0):
            args = [gpumat.array(rand(s), ctx) for s in shapes]
            args[i] = bad
            with pytest.raises(TypeError):
                fn(*args)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_GPU, reason=str(GPU_SKIP_REASON))
def test_elementwise_kernels_past_one_cuda_grid():
    """launch_map's grid is capped at 65,535 * 16 blocks of 256 threads (common.cuh grid_for):
    268,431,360 elements. Past that the grid-stride loop takes a second lap, which only a GPU
    has the memory and speed to reach (the emulator runs each thread as a fiber)."""
    ctx = gpumat.gpu(0)
    n = 65535 * 16 * 256 + 1031
    rng, seed = new_rng()
    x = rand((n,), rng, high=80.0)
    y = rand((n,), rng)
    for fn, ref, args in [
        (ops.exp, np.exp, [x]),
        (ops.div, np.divide, [x, y]),
    ]:
        out = nan_array((n,), ctx)
        fn(*[gpumat.array(a, ctx) for a in args], out)
        expected = ref(*[a.astype(np.float64) for a in args])
        assert_close(out.asnumpy(), expected, rtol=4 * ULP, atol=0, msg=f"seed {seed}")
    del expected
    out = nan_array((n,), ctx)
    ops.log(gpumat.array(np.abs(x), ctx), out)
    assert_close(out.asnumpy(), np.log(np.abs(x).astype(np.float64)), rtol=4 * ULP, atol=1e-7)


# The graph ops: gradients against float64 central differences on the numpy backend, and each
# device against numpy's analytic values and gradients.
ELEMENTWISE_GRAPHS = {
    "exp": (lambda x: ad.exp_op(x), 1),
    "log": (lambda x: ad.log_op(x), 1),
    "div": (lambda a, b: ad.div_op(a, b), 2),
    "log_exp_div": (lambda a, b: ad.log_op(ad.div_op(ad.exp_op(a), ad.exp_op(b))), 2),
}


def _graph_inputs(kind, shape, rng):
    # log needs x > 0; exp of |x| < 3; the divisors stay away from 0 (|b| >= 0.5)
    if kind == "log":
        return [rng.uniform(0.2, 3.0, size=shape)]
    if kind == "div":
        return [rand64(rng, shape, 0.1, 2.0), rand64(rng, shape, 0.5, 2.0)]
    return [rand64(rng, shape, 0.1, 3.0) for _ in range(ELEMENTWISE_GRAPHS[kind][1])]


@pytest.mark.parametrize("shape", [(1, 1), (1, 9), (9, 1), (6, 7), (2, 3, 4)], ids=shape_id)
@pytest.mark.parametrize("kind", list(ELEMENTWISE_GRAPHS))
def test_elementwise_graph_gradients_fd_float64(kind, shape):
    rng, _ = new_rng()
    check_fd_gradients(ELEMENTWISE_GRAPHS[kind][0], _graph_inputs(kind, shape, rng), rng)


@pytest.mark.parametrize("shape", [(1, 1), (9, 1), (6, 7), (2, 3, 4), (300, 70)], ids=shape_id)
@pytest.mark.parametrize("kind", list(ELEMENTWISE_GRAPHS))
def test_elementwise_graph_ops_on_devices_match_numpy(ctx, kind, shape):
    rng, _ = new_rng()
    check_device_gradients(ctx, ELEMENTWISE_GRAPHS[kind][0], _graph_inputs(kind, shape, rng), rng)


@pytest.mark.parametrize(
    "build,shapes,match",
    [
        pytest.param(ad.div_op, [(3, 4), (4, 3)], r"div_op .*\(3, 4\) and \(4, 3\)", id="div"),
        pytest.param(ad.div_op, [(3, 4), (12,)], r"div_op .*\(3, 4\) and \(12,\)", id="div_flat"),
    ],
)
def test_elementwise_graph_shape_errors(build, shapes, match):
    xs = [ad.Variable(f"in{i}") for i in range(len(shapes))]
    node = build(*xs)
    with pytest.raises(ValueError, match=match) as info:
        node.op.infer_shape(node, shapes)
    assert node.name in str(info.value)


def test_eq_op_values_and_no_gradient(ctx):
    """eq_op is piecewise constant: its gradient entries are None, so a loss that reaches a and b
    only through it gives them zero gradients, and the other factor gets eq's value."""
    a, b, c = ad.Variable("a"), ad.Variable("b"), ad.Variable("c")
    e = ad.eq_op(a, b)
    assert ad.eq_op.gradient(e, ad.oneslike_op(e)) == [None, None]
    loss = ad.mul_op(e, c)
    nodes = [loss, *ad.gradients(loss, [a, b, c])]
    rng, _ = new_rng()
    x, y = _tied((6, 7), rng)
    z = rand((6, 7), rng)
    want = (x == y).astype(np.float32)
    for ex in (ad.Executor(nodes), ad.Executor(nodes, device=ctx)):
        got = ex.run({a: x, b: y, c: z}, convert_to_numpy_ret_vals=True)
        np.testing.assert_array_equal(got[0], want * z)
        np.testing.assert_array_equal(got[1], np.zeros((6, 7)))
        np.testing.assert_array_equal(got[2], np.zeros((6, 7)))
        np.testing.assert_array_equal(got[3], want)


def test_eq_op_shape_rule():
    a, b = ad.Variable("a"), ad.Variable("b")
    node = ad.eq_op(a, b)
    assert node.op.infer_shape(node, [(3, 4), (3, 4)]) == (3, 4)
    with pytest.raises(ValueError, match=r"eq_op at node 'Eq\(a,b\)'.*\(3, 4\) and \(4, 3\)"):
        node.op.infer_shape(node, [(3, 4), (4, 3)])


def test_elementwise_graph_ops_reject_non_nodes():
    x = ad.Variable("x")
    for call in (
        lambda: ad.exp_op(3.0),
        lambda: ad.log_op(np.ones(2)),
        lambda: ad.div_op(x, 2),
        lambda: ad.eq_op("x", x),
    ):
        with pytest.raises(TypeError, match="must be a graph Node"):
            call()


# --------------------------------------------------------------------------------------------------
# one_hot (layout) and one_hot_op
# --------------------------------------------------------------------------------------------------

# (rows, classes): one row, one class, MNIST's 10 classes at an odd batch, many classes, and a
# large case (10M outputs)
ONE_HOT_CASES = [(1, 1), (1, 10), (7, 1), (1031, 10), (257, 1000), (3, 4099), (100_003, 100)]


def _one_hot64(indices, classes):
    return (indices.astype(np.float64)[:, None] == np.arange(classes)[None, :]).astype(np.float64)


@pytest.mark.parametrize("rows,classes", ONE_HOT_CASES, ids=lambda v: str(v))
def test_one_hot(ctx, rows, classes):
    rng, seed = new_rng()
    idx = rng.integers(0, classes, size=rows).astype(np.float32)
    got, expected, _ = check_op(
        ctx, ops.one_hot, lambda i: _one_hot64(i, classes), [idx], (rows, classes), rtol=0, atol=0
    )
    np.testing.assert_array_equal(got.sum(axis=1), np.ones(rows), err_msg=f"seed {seed}")


def test_one_hot_out_of_range_or_non_integer_gives_zero_rows(ctx):
    classes = 5
    idx = np.array(
        [0, 4, -1, 5, 2.5, np.nan, np.inf, -np.inf, -0.0, 3, 1e30, -1e-45, 4.0000005, 2**24],
        np.float32,
    )
    out = nan_array((idx.size, classes), ctx)
    ops.one_hot(gpumat.array(idx, ctx), out)
    got = out.asnumpy()
    hot = {0: 0, 1: 4, 8: 0, 9: 3}  # row -> its class; -0.0 is class 0
    for r in range(idx.size):
        want = np.zeros(classes)
        if r in hot:
            want[hot[r]] = 1
        np.testing.assert_array_equal(got[r], want, err_msg=f"row {r}: index {idx[r]!r}")
    np.testing.assert_array_equal(got, reference("one_hot", idx, Out(got.shape)))


def test_one_hot_edge_shapes_and_largest_class(ctx):
    for rows, classes in [(0, 3), (4, 0), (0, 0)]:
        out = gpumat.empty((rows, classes), ctx)
        ops.one_hot(gpumat.array(np.zeros(rows, np.float32), ctx), out)
        assert out.shape == (rows, classes)
    # the last class 2^24 - 1 and the largest class count (every index exact in float32)
    c = 2**24
    idx = np.array([c - 1, c], np.float32)
    out = nan_array((2, c), ctx)
    ops.one_hot(gpumat.array(idx, ctx), out)
    got = out.asnumpy()
    assert got[0, c - 1] == 1 and got[0].sum() == 1
    assert got[1].sum() == 0  # 2^24 is out of range


def test_one_hot_bad_arguments(ctx):
    idx = gpumat.array(np.array([0, 1, 2], np.float32), ctx)
    with pytest.raises(ValueError, match=r"one_hot: indices must be 1-D, got shape \(3, 1\)"):
        ops.one_hot(gpumat.array(np.zeros((3, 1), np.float32), ctx), nan_array((3, 4), ctx))
    with pytest.raises(ValueError, match=r"one_hot: the output must be 2-D, got shape \(12,\)"):
        ops.one_hot(idx, nan_array((12,), ctx))
    with pytest.raises(
        ValueError, match=r"one_hot: the output has shape \(4, 3\) for indices \(3,\), expected"
    ):
        ops.one_hot(idx, nan_array((4, 3), ctx))
    with pytest.raises(ValueError, match=r"one_hot: 16777217 classes .* exceed 2\^24"):
        ops.one_hot(gpumat.array(np.zeros(1, np.float32), ctx), gpumat.empty((1, 2**24 + 1), ctx))
    # out aliasing indices: a (3, 1) view of the same storage
    before = idx.asnumpy()
    with pytest.raises(ValueError, match="one_hot: the output must not be one of the inputs"):
        ops.one_hot(idx, idx.reshape((3, 1)))
    np.testing.assert_array_equal(idx.asnumpy(), before)
    other = gpumat.cpu() if ctx.device_type != "cpu" else gpumat.emu()
    with pytest.raises(ValueError, match="one_hot: arrays are on different devices"):
        ops.one_hot(idx, gpumat.empty((3, 4), other))
    for bad in (None, np.zeros(3, np.float32), [0.0, 1.0, 2.0]):
        with pytest.raises(TypeError):
            ops.one_hot(bad, nan_array((3, 4), ctx))
        with pytest.raises(TypeError):
            ops.one_hot(idx, bad)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_GPU, reason=str(GPU_SKIP_REASON))
def test_one_hot_past_one_cuda_grid():
    """rows * classes past grid_for's 65,535 * 16 * 256 = 268,431,360 threads: a second lap."""
    ctx = gpumat.gpu(0)
    rows, classes = 26_843_339, 10
    rng, seed = new_rng()
    idx = rng.integers(-1, classes + 1, size=rows).astype(np.float32)  # some out of range
    out = nan_array((rows, classes), ctx)
    ops.one_hot(gpumat.array(idx, ctx), out)
    got = out.asnumpy()
    np.testing.assert_array_equal(got, _one_hot64(idx, classes), err_msg=f"seed {seed}")


def test_one_hot_op_values_and_no_gradient(ctx):
    iv, wv = ad.Variable("i"), ad.Variable("w")
    oh = ad.one_hot_op(iv, 6)
    assert ad.one_hot_op.gradient(oh, ad.oneslike_op(oh)) == [None]
    loss = ad.mul_op(oh, wv)
    nodes = [oh, *ad.gradients(loss, [iv, wv])]
    rng, _ = new_rng()
    idx = rng.integers(-1, 7, size=9).astype(np.float32)  # some out of range: zero rows
    w = rand((9, 6), rng)
    want = _one_hot64(idx, 6)
    for ex in (ad.Executor(nodes), ad.Executor(nodes, device=ctx)):
        got = ex.run({iv: idx, wv: w}, convert_to_numpy_ret_vals=True)
        np.testing.assert_array_equal(got[0], want)
        np.testing.assert_array_equal(got[1], np.zeros(9))  # no gradient through one_hot
        np.testing.assert_array_equal(got[2], want)


def test_one_hot_op_shape_rules_and_arguments():
    iv = ad.Variable("i")
    node = ad.one_hot_op(iv, 10)
    assert node.op.infer_shape(node, [(32,)]) == (32, 10)
    assert node.op.infer_shape(node, [(0,)]) == (0, 10)
    with pytest.raises(
        ValueError, match=r"one_hot_op at node 'OneHot\(i,10\)': indices must be 1-D .*\(32, 1\)"
    ):
        node.op.infer_shape(node, [(32, 1)])
    with pytest.raises(ValueError, match=r"one_hot_op: num_classes must be in \[0, 2\*\*24\]"):
        ad.one_hot_op(iv, -1)
    with pytest.raises(ValueError, match="one_hot_op: num_classes"):
        ad.one_hot_op(iv, 2**24 + 1)
    for bad in (10.0, True, "10", None):
        with pytest.raises(TypeError, match="one_hot_op: num_classes must be an int"):
            ad.one_hot_op(iv, bad)
    with pytest.raises(TypeError, match="one_hot_op: argument 'indices' must be a graph Node"):
        ad.one_hot_op(np.zeros(3), 10)
