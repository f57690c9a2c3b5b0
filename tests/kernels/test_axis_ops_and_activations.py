"""Axis ops and activations: softmax / log_softmax along any axis, nll_loss, tanh, sigmoid,
dropout and reductions along an axis (gpumat.ops kernels and gpumat.nn graph ops).

Each graph op: gradients in float64 on the numpy backend against central finite differences; the
same graph on every device (cpu, the emulated CUDA device, a GPU when present) against numpy's
float64 values and analytic gradients; odd shapes (one row, one column, a 1x5000 row); bad inputs
(ValueError / TypeError naming the op). Dropout: the mask is bit-identical on numpy, cpu and emu,
fresh every training step, and off in evaluation.
"""

import numpy as np
import pytest
from conftest import GPU_SKIP_REASON, HAS_GPU
from helpers import Out, nan_array, new_rng, rand, reference, shape_id
from nn_helpers import check_device_gradients, check_fd_gradients, rand64

import gpumat
import gpumat.autodiff as ad
from gpumat import graph, models, ops
from gpumat.runtime import Executor

# (shape, axis): last, first, middle axes of 3-D and 4-D, one row, one column
AXIS_CASES = [
    ((4, 6), -1),
    ((4, 6), 0),
    ((3, 4, 5), 1),
    ((2, 3, 4, 5), 2),
    ((1, 7), -1),
    ((7, 1), -1),
    ((7, 1), 0),
    ((9, 32), -1),  # a thread per row up to 32 values, a block per row past
    ((9, 33), -1),
    ((5,), 0),
]
AXIS_IDS = [f"{shape_id(s)}-axis{a}" for s, a in AXIS_CASES]
SMALL_AXIS_CASES = [c for c in AXIS_CASES if np.prod(c[0]) <= 60]


# ------------------------------------------------------------------------- forward against float64


@pytest.mark.parametrize(("shape", "axis"), [*AXIS_CASES, ((1, 5000), -1), ((5000, 3), 0)])
def test_softmax_and_log_softmax_kernels(ctx, shape, axis):
    rng, _ = new_rng()
    x = (rng.standard_normal(shape) * 10).astype(np.float32)
    x64 = x.astype(np.float64)
    a = gpumat.array(x, ctx)
    for name in ("softmax", "log_softmax"):
        out = nan_array(shape, ctx)
        getattr(ops, name)(a, out, axis)
        expected = reference(name, x64, Out(shape), axis)
        np.testing.assert_allclose(out.asnumpy(), expected, rtol=2e-5, atol=2e-6)


def test_log_softmax_is_finite_where_log_of_softmax_is_not(ctx):
    x = np.array([[0.0, -200.0, 1000.0]], np.float32)
    out = nan_array(x.shape, ctx)
    ops.log_softmax(gpumat.array(x, ctx), out, -1)
    np.testing.assert_allclose(out.asnumpy(), [[-1000.0, -1200.0, 0.0]], rtol=1e-6)


@pytest.mark.parametrize("shape", [(1,), (7, 1), (1, 9), (33, 65), (100_003,)], ids=shape_id)
def test_tanh_sigmoid_kernels_and_large_inputs(ctx, shape):
    rng, _ = new_rng()
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    a = gpumat.array(x, ctx)
    out = nan_array(shape, ctx)
    ops.tanh(a, out)
    np.testing.assert_allclose(out.asnumpy(), np.tanh(x.astype(np.float64)), rtol=2e-6, atol=1e-7)
    ops.sigmoid(a, out)
    np.testing.assert_allclose(
        out.asnumpy(),
        reference("sigmoid", x.astype(np.float64), Out(x.shape)),
        rtol=2e-6,
        atol=1e-30,
    )
    big = np.array([-1e4, -100.0, -89.0, 0.0, 89.0, 1e4, np.float32(3e38)], np.float32)
    out2 = nan_array(big.shape, ctx)
    ops.sigmoid(gpumat.array(big, ctx), out2)
    got = out2.asnumpy()
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(
        got, reference("sigmoid", big.astype(np.float64), Out(big.shape)), rtol=1e-6, atol=1e-43
    )  # denormals


def test_exp_tanh_sigmoid_keep_relative_accuracy_over_their_whole_range(ctx):
    """The host's SIMD exp, tanh and sigmoid (vec_math.h) against float64 over every binade they
    reach: tanh relative to itself down to |x| = 2^-40 (where 1 - 2 / (e^2x + 1) would cancel),
    exp and the sigmoid down into the float32 subnormals (within two subnormal spacings there: the
    argument shifted into range, then one rounding) and exp's overflow exactly where float32's
    rounding overflows."""
    rng, seed = new_rng()
    tiny = float(np.finfo(np.float32).tiny)
    mag = np.exp2(rng.uniform(-40, 7, 20_000))
    x = (mag * rng.choice([-1.0, 1.0], mag.size)).astype(np.float32)
    x = np.concatenate([x, np.linspace(0.6, 0.65, 2001, dtype=np.float32)])  # tanh's seam
    out = nan_array(x.shape, ctx)
    ops.tanh(gpumat.array(x, ctx), out)
    want = np.tanh(x.astype(np.float64))
    rel = np.abs(out.asnumpy() - want) / np.abs(want)
    assert rel.max() < 4 * 2.0**-24, f"seed {seed}: tanh({x[rel.argmax()]}) off by {rel.max():.2e}"
    for name, low, high, f64 in (
        ("exp", -110.0, 89.0, np.exp),
        ("sigmoid", -110.0, 110.0, lambda v: 1 / (1 + np.exp(-v))),
    ):
        x = rng.uniform(low, high, 20_000).astype(np.float32)
        out = nan_array(x.shape, ctx)
        getattr(ops, name)(gpumat.array(x, ctx), out)
        got, want = out.asnumpy(), f64(x.astype(np.float64))
        with np.errstate(over="ignore"):
            want32 = want.astype(np.float32)
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want32), err_msg=f"seed {seed}")
        normal = np.isfinite(want32) & (want32 >= tiny)
        rel = np.abs(got[normal] - want[normal]) / want[normal]
        assert rel.max() < 4 * 2.0**-24, f"seed {seed}: {name} off by {rel.max():.2e}"
        sub = want < tiny
        assert np.abs(got[sub] - want[sub]).max(initial=0) <= 2 * 2.0**-149, f"seed {seed}: {name}"


@pytest.mark.parametrize(("shape", "axis"), [*AXIS_CASES, ((1, 5000), 1), ((5000, 1), 0)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_kernels(ctx, shape, axis, keepdims):
    rng, _ = new_rng()
    x = rand(shape, rng)
    x64 = x.astype(np.float64)
    a = gpumat.array(x, ctx)
    out_shape = np.sum(x64, axis=axis, keepdims=keepdims).shape
    for fn, ref in ((ops.sum, np.sum), (ops.mean, np.mean), (ops.amax, np.max)):
        out = nan_array(out_shape, ctx)
        fn(a, out, axis)
        expected = ref(x64, axis=axis, keepdims=keepdims)
        n = shape[axis % len(shape)]
        # NOTE: a float32 sum of n terms, in any order, errs by at most (n - 1) * u * sum|x|
        # (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., 4.2): relative to
        # sum|x|, not to the sum, which cancellation can make tiny. One more u for the mean's
        # division and the final rounding.
        abs_sum = np.sum(np.abs(x64), axis=axis, keepdims=keepdims) / (n if ref is np.mean else 1)
        bound = (n + 1) * 2.0**-24 * abs_sum
        err = np.abs(out.asnumpy() - expected)
        assert np.all(err <= bound), (fn.__name__, float(np.max(err - bound)))


def test_reduce_max_ties_share_the_gradient(ctx):
    x = np.array([[1.0, 3.0, 3.0, 2.0], [5.0, 5.0, 5.0, 5.0], [0.0, -1.0, 7.0, 7.0]], np.float32)
    y = x.max(axis=1)
    dy = np.array([6.0, 2.0, -4.0], np.float32)
    out = nan_array(x.shape, ctx)
    ops.amax_gradient(gpumat.array(x, ctx), gpumat.array(y, ctx), gpumat.array(dy, ctx), out, 1)
    expected = [[0, 3, 3, 0], [0.5, 0.5, 0.5, 0.5], [0, 0, -2, -2]]
    np.testing.assert_array_equal(out.asnumpy(), np.array(expected, np.float32))
    # The numpy backend's op shares the same way (output gradient of ones: 1 / ties).
    xv = ad.Variable("x")
    (g,) = ad.gradients(graph.reduce_max_op(xv, 1), [xv])
    shares = [[0, 0.5, 0.5, 0], [0.25] * 4, [0, 0, 0.5, 0.5]]
    np.testing.assert_array_equal(Executor([g]).run({xv: x})[0], np.array(shares, np.float32))


def test_nll_loss_kernels(ctx):
    rng, _ = new_rng()
    lp = reference("log_softmax", rng.standard_normal((37, 10)), Out((37, 10)), -1)
    lp = lp.astype(np.float32)
    t = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 37)]
    out = nan_array((1,), ctx)
    ops.nll_loss(gpumat.array(lp, ctx), gpumat.array(t, ctx), out)
    expected = -np.sum(t.astype(np.float64) * lp) / 37
    np.testing.assert_allclose(out.asnumpy(), [expected], rtol=1e-6)
    dl = np.array([0.7], np.float32)
    g = nan_array((37, 10), ctx)
    ops.nll_loss_gradient(gpumat.array(t, ctx), gpumat.array(dl, ctx), g)
    np.testing.assert_allclose(g.asnumpy(), -0.7 * t / 37, rtol=1e-6)


def test_nll_of_log_softmax_equals_softmax_cross_entropy(ctx):
    rng, _ = new_rng()
    y = rng.standard_normal((50, 10)).astype(np.float32) * 5
    t = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 50)]
    yv, tv = ad.Variable("y"), ad.Variable("t")
    a = graph.nll_loss_op(graph.log_softmax_op(yv), tv)
    b = ad.softmaxcrossentropy_op(yv, tv)
    ga, gb = ad.gradients(a, [yv])[0], ad.gradients(b, [yv])[0]
    va, vb, dga, dgb = Executor([a, b, ga, gb], device=ctx).run({yv: y, tv: t}, True)
    np.testing.assert_allclose(va, vb, rtol=1e-5)
    np.testing.assert_allclose(dga, dgb, rtol=1e-4, atol=1e-7)


# ------------------------------------------------------------------------------ gradient checks

GRAPH_CASES = {
    "softmax": lambda axis: lambda x: ad.softmax_op(x, axis),
    "log_softmax": lambda axis: lambda x: graph.log_softmax_op(x, axis),
    "sum": lambda axis: lambda x: graph.reduce_sum_op(x, axis),
    "reduce_sum_keepdims": lambda axis: lambda x: graph.reduce_sum_op(x, axis, keepdims=True),
    "mean": lambda axis: lambda x: graph.reduce_mean_op(x, axis),
    "amax": lambda axis: lambda x: graph.reduce_max_op(x, axis),
    "reduce_max_keepdims": lambda axis: lambda x: graph.reduce_max_op(x, axis, keepdims=True),
}


@pytest.mark.parametrize(
    ("shape", "axis"), SMALL_AXIS_CASES, ids=[f"{shape_id(s)}-axis{a}" for s, a in SMALL_AXIS_CASES]
)
@pytest.mark.parametrize("kind", list(GRAPH_CASES))
def test_axis_ops_gradients_fd_float64(kind, shape, axis):
    rng, _ = new_rng()
    x = rand64(rng, shape)  # distinct values: no ties, so max is differentiable
    check_fd_gradients(GRAPH_CASES[kind](axis), [x], rng)


@pytest.mark.parametrize(
    ("shape", "axis"), [*AXIS_CASES, ((1, 5000), -1)], ids=[*AXIS_IDS, "1x5000"]
)
@pytest.mark.parametrize("kind", list(GRAPH_CASES))
def test_axis_ops_on_devices_match_numpy(ctx, kind, shape, axis):
    rng, _ = new_rng()
    x = rand64(rng, shape)
    if x.size >= 5000:
        # One long row reduced to one element: float32 sums (in index order, as on CUDA) of
        # 5000 terms of both signs can cancel to a result far smaller than its rounding error
        # (which the tolerance, relative to the result, cannot allow). Positive terms keep the
        # long row without the cancellation.
        x = np.abs(x) + 0.1
    check_device_gradients(ctx, GRAPH_CASES[kind](axis), [x], rng)


@pytest.mark.parametrize("shape", [(1, 1), (1, 9), (9, 1), (6, 7), (2, 3, 4)], ids=shape_id)
@pytest.mark.parametrize("op", ["tanh", "sigmoid"])
def test_activation_gradients(ctx, op, shape):
    rng, _ = new_rng()
    f = graph.tanh_op if op == "tanh" else graph.sigmoid_op
    x = rand64(rng, shape, 0.1, 3.0)
    check_fd_gradients(lambda a: f(a), [x.copy()], rng)
    check_device_gradients(ctx, lambda a: f(a), [x], rng)


@pytest.mark.parametrize("shape", [(1, 1), (1, 10), (10, 1), (7, 10)], ids=shape_id)
def test_nll_loss_gradients(ctx, shape):
    rng, _ = new_rng()
    t = np.eye(shape[1])[rng.integers(0, shape[1], shape[0])]
    y = rand64(rng, shape, 0.1, 3.0)

    target = ad.Variable("t")
    xs = ad.Variable("x")
    loss = graph.nll_loss_op(graph.log_softmax_op(xs), target)
    (g,) = ad.gradients(loss, [xs])
    val, grad = Executor([loss, g]).run({xs: y, target: t})
    # finite differences in float64
    eps = 1e-6
    fd = np.zeros_like(y)
    ex = Executor([loss])
    for idx in np.ndindex(y.shape):
        yp, ym = y.copy(), y.copy()
        yp[idx] += eps
        ym[idx] -= eps
        fd[idx] = (ex.run({xs: yp, target: t})[0][0] - ex.run({xs: ym, target: t})[0][0]) / (
            2 * eps
        )
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-9)
    got_val, got_grad = Executor([loss, g], device=ctx).run(
        {xs: y.astype(np.float32), target: t.astype(np.float32)}, True
    )
    np.testing.assert_allclose(got_val, val, rtol=1e-5)
    np.testing.assert_allclose(got_grad, grad, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------------- dropout


@pytest.mark.parametrize("shape", [(1,), (1, 9), (9, 1), (64, 130), (100_003,)], ids=shape_id)
@pytest.mark.parametrize("p", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_dropout_kernel_matches_numpy_mask(ctx, shape, p):
    rng, _ = new_rng()
    x = rand(shape, rng)
    out = nan_array(shape, ctx)
    ops.dropout(gpumat.array(x, ctx), out, p, 12345)
    expected = reference("dropout", x, Out(x.shape, np.float32), p, 12345)
    np.testing.assert_array_equal(out.asnumpy(), expected)  # bit for bit: same mask, same scale
    if x.size > 10_000 and 0 < p < 1:
        kept = np.mean(expected != 0)
        assert abs(kept - (1 - p)) < 0.02


def test_reference_uniform01_matches_random_uniform():
    ctx = gpumat.cpu()
    out = nan_array((1000,), ctx)
    ops.uniform(out, 0.0, 1.0, 99)
    np.testing.assert_array_equal(out.asnumpy(), gpumat.reference.uniform01(99, 1000))


def _dropout_graph(p=0.4, seed=7):
    x, r = ad.Variable("x"), ad.Variable("r")
    y = graph.dropout_op(x, p, seed=seed)
    (g,) = ad.gradients(y * r, [x])
    return x, r, y, g


@pytest.mark.parametrize("shape", [(1, 1), (1, 50), (50, 1), (8, 33)], ids=shape_id)
def test_dropout_gradient_fd_and_devices(ctx, shape):
    rng, _ = new_rng()
    x, r, y, g = _dropout_graph()
    xv, rv = rand64(rng, shape), rand64(rng, shape)
    ex = Executor([y, g])
    val, grad = ex.run({x: xv, r: rv})
    # finite differences at a fixed step (the mask changes with the step)
    fwd = Executor([y])
    eps = 1e-6
    fd = np.zeros_like(xv)
    for idx in np.ndindex(shape):
        vals = []
        for d in (eps, -eps):
            xx = xv.copy()
            xx[idx] += d
            fwd.step = 0
            vals.append(np.sum(fwd.run({x: xx, r: rv})[0] * rv))
        fd[idx] = (vals[0] - vals[1]) / (2 * eps)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-9)
    dval, dgrad = Executor([y, g], device=ctx).run(
        {x: xv.astype(np.float32), r: rv.astype(np.float32)}, True
    )
    keep = val != 0
    np.testing.assert_array_equal(dval != 0, keep)  # the same mask on the device
    np.testing.assert_allclose(dval, val, rtol=1e-6)
    np.testing.assert_allclose(dgrad, grad, rtol=1e-6)


def test_dropout_fresh_mask_per_step_and_off_in_evaluation(ctx):
    rng, _ = new_rng()
    xv = rand((40, 50), rng)
    x, _, y, _ = _dropout_graph(p=0.5, seed=3)
    ex = Executor([y], device=ctx)
    masks = [ex.run({x: xv}, True)[0] != 0 for _ in range(3)]
    assert ex.step == 3
    assert not np.array_equal(masks[0], masks[1]) and not np.array_equal(masks[1], masks[2])
    for step, m in enumerate(masks):  # step t uses seed + t, on every backend
        expected = reference("dropout", xv, Out(xv.shape, xv.dtype), 0.5, 3 + step)
        np.testing.assert_array_equal(m, expected != 0)
    again = Executor([y], device=ctx)
    np.testing.assert_array_equal(again.run({x: xv}, True)[0] != 0, masks[0])  # reproducible
    ev = Executor([y], device=ctx, training=False)
    np.testing.assert_array_equal(ev.run({x: xv}, True)[0], xv)
    assert ev.step == 0


def test_dropout_models_predict_without_dropout():
    m = models.mlp(dropout=0.5)
    assert any(n.op is graph.dropout_op for n in ad.find_topo_sort([m.logits]))
    rng, _ = new_rng()
    images = rng.random((20, 784)).astype(np.float32)
    from gpumat import train

    params = m.init_params(None)
    a = train.predict(m, params, images)
    b = train.predict(models.mlp(dropout=0.0), params, images)
    np.testing.assert_array_equal(a, b)
    assert any(
        n.op is graph.dropout_op for n in ad.find_topo_sort([models.cnn(dropout=0.3).logits])
    )


def test_dropout_mlp_trains(ctx):
    """A short run on synthetic separable data: the loss falls with dropout on."""
    from gpumat import train

    rng, _ = new_rng(5)
    centers = rng.random((10, 784)).astype(np.float32)  # pixel-like values in [0, 1)
    labels = rng.integers(0, 10, 600)
    images = np.clip(centers[labels] + 0.2 * rng.standard_normal((600, 784)), 0, 1)
    images = images.astype(np.float32)
    m = models.mlp(dropout=0.3)
    hist = train.fit(
        m,
        ((images, labels), None, (images, labels)),
        device=ctx,
        epochs=5,
        batch_size=50,
        lr=0.1,
        verbose=False,
    )
    assert hist.loss[-1] < hist.loss[0]
    assert hist.test_accuracy > 0.9


# ------------------------------------------------------------------------------------ bad inputs


def test_bad_inputs_raise_naming_the_op():
    x = ad.Variable("x")
    with pytest.raises(ValueError, match="log_softmax_op.*axis 2 is out of range"):
        Executor([graph.log_softmax_op(x, 2)]).run({x: np.ones((2, 3))})
    with pytest.raises(ValueError, match="softmax_op.*axis -3"):
        Executor([ad.softmax_op(x, -3)]).run({x: np.ones((2, 3))})
    with pytest.raises(TypeError, match="log_softmax_op: axis must be an int"):
        graph.log_softmax_op(x, 1.5)
    with pytest.raises(TypeError, match="reduce_sum_op: argument 'node_x'"):
        graph.reduce_sum_op(np.ones(3), 0)
    with pytest.raises(TypeError, match="reduce_max_op: keepdims must be a bool"):
        graph.reduce_max_op(x, 0, keepdims="yes")
    with pytest.raises(ValueError, match="reduce_mean_op.*empty axis"):
        Executor([graph.reduce_mean_op(x, 0)]).run({x: np.ones((0, 3))})
    with pytest.raises(ValueError, match="dropout_op: p must be in"):
        graph.dropout_op(x, 1.5)
    with pytest.raises(TypeError, match="dropout_op: p must be a real number"):
        graph.dropout_op(x, "0.5")
    with pytest.raises(TypeError, match="seed must be an int"):
        graph.dropout_op(x, 0.5, seed=1.0)
    t = ad.Variable("t")
    with pytest.raises(ValueError, match="nll_loss_op.*differ in shape"):
        Executor([graph.nll_loss_op(x, t)]).run({x: np.ones((2, 3)), t: np.ones((2, 4))})
    with pytest.raises(ValueError, match="nll_loss_op.*2-D"):
        Executor([graph.nll_loss_op(x, t)]).run({x: np.ones((6,)), t: np.ones((6,))})
    with pytest.raises(ValueError, match="nll_loss_op.*at least one row"):
        Executor([graph.nll_loss_op(x, t)]).run({x: np.ones((0, 3)), t: np.ones((0, 3))})
    with pytest.raises(TypeError, match="training must be a bool"):
        Executor([x], training="no")
    with pytest.raises(ValueError, match="mlp: dropout must be in"):
        models.mlp(dropout=1.0)


def test_bad_kernel_arguments(ctx):
    a = gpumat.array(np.ones((2, 3), np.float32), ctx)
    with pytest.raises(ValueError, match="log_softmax: axis 2 is out of range"):
        ops.log_softmax(a, gpumat.empty((2, 3), ctx), 2)
    with pytest.raises(ValueError, match="softmax: shapes differ"):
        ops.softmax(a, gpumat.empty((3, 2), ctx), 0)
    with pytest.raises(ValueError, match="softmax: the output must not be one of the inputs"):
        ops.softmax(a, a, 0)
    with pytest.raises(ValueError, match=r"sum: the output has shape \(3,\)"):
        ops.sum(a, gpumat.empty((3,), ctx), 1)
    with pytest.raises(ValueError, match="amax: cannot reduce an empty axis"):
        ops.amax(gpumat.empty((0, 3), ctx), gpumat.empty((3,), ctx), 0)
    with pytest.raises(ValueError, match="dropout: p must be in"):
        ops.dropout(a, gpumat.empty((2, 3), ctx), -0.1, 1)
    with pytest.raises(ValueError, match="nll_loss: shapes differ"):
        ops.nll_loss(a, gpumat.empty((2, 4), ctx), gpumat.empty((1,), ctx))
    with pytest.raises(ValueError, match="nll_loss: the output must have shape"):
        ops.nll_loss(a, gpumat.array(np.ones((2, 3), np.float32), ctx), gpumat.empty((2,), ctx))
    with pytest.raises(ValueError, match="tanh: shapes differ"):
        ops.tanh(a, gpumat.empty((6,), ctx))
    with pytest.raises(TypeError):
        ops.sigmoid(np.ones((2, 3), np.float32), a)
    with pytest.raises(TypeError, match="mean: dim must be an int"):
        ops.mean(a, gpumat.empty((3,), ctx), 0.0)
    with pytest.raises(ValueError, match="different devices"):
        ops.tanh(
            a, gpumat.empty((2, 3), gpumat.cpu() if ctx.device_type != "cpu" else gpumat.emu())
        )


# ------------------------------------------------------------------------------------- argmax

# (shape, axis): the reduction cases above, every axis of a 3-D array (negative ones too), a long
# row and a long column, and one large case
ARGMAX_CASES = [
    *AXIS_CASES,
    ((1, 1), 0),
    ((3, 4, 5), 0),
    ((3, 4, 5), 2),
    ((3, 4, 5), -1),
    ((3, 4, 5), -3),
    ((1, 5000), 1),
    ((5000, 1), 0),
    ((2000, 3000), 1),
    ((2000, 3000), 0),
]
ARGMAX_IDS = [f"{shape_id(s)}-axis{a}" for s, a in ARGMAX_CASES]


def _argmax_ref(x, axis, keepdims):
    """numpy's argmax (first maximum; the first NaN when there is one) as float64."""
    return np.argmax(x, axis=axis, keepdims=keepdims).astype(np.float64)


def _coarse(shape, rng, nan_frac=0.0):
    """float32 small integers (-3..3): most slices hold tied maxima; some NaNs if asked."""
    x = rng.integers(-3, 4, size=shape).astype(np.float32)
    if nan_frac:
        x[rng.random(shape) < nan_frac] = np.nan
    return x


@pytest.mark.parametrize(("shape", "axis"), ARGMAX_CASES, ids=ARGMAX_IDS)
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("data", ["random", "ties", "nan"])
def test_argmax_kernel(ctx, shape, axis, keepdims, data):
    rng, seed = new_rng()
    if data == "random":
        x = rand(shape, rng)
    else:
        x = _coarse(shape, rng, nan_frac=0.1 if data == "nan" else 0.0)
    expected = _argmax_ref(x, axis, keepdims)
    out = nan_array(expected.shape, ctx)
    a = gpumat.array(x, ctx)
    ops.argmax(a, out, axis)
    np.testing.assert_array_equal(out.asnumpy(), expected, err_msg=f"seed {seed}")
    np.testing.assert_array_equal(a.asnumpy(), x)  # the input is untouched


def test_argmax_ties_and_nan_rules(ctx):
    x = np.array(
        [
            [1.0, 3.0, 3.0, 2.0],  # tie: the first maximum
            [5.0, 5.0, 5.0, 5.0],  # all tied: 0
            [-np.inf, -np.inf, -np.inf, -np.inf],  # all -inf: 0
            [0.0, np.nan, 7.0, np.nan],  # NaN counts as the maximum: the first NaN
            [np.nan, 9.0, np.nan, 1.0],  # a NaN first
            [-1.0, -0.0, 0.0, -2.0],  # -0 and +0 tie: the first
            [1e-45, 0.0, -1e-45, 1e-45],  # denormals are numbers, not zeros
            [3.0, np.inf, np.nan, np.inf],  # NaN beats inf
        ],
        np.float32,
    )
    out = nan_array((8,), ctx)
    ops.argmax(gpumat.array(x, ctx), out, 1)
    np.testing.assert_array_equal(out.asnumpy(), [1, 0, 0, 1, 0, 1, 0, 2])
    out = nan_array((1, 4), ctx)
    ops.argmax(gpumat.array(x, ctx), out, 0)  # down the columns: each one's first NaN
    np.testing.assert_array_equal(out.asnumpy(), [[4, 3, 4, 3]])


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_argmax_matches_torch_on_every_axis_of_3d(ctx, axis):
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    x = _coarse((6, 7, 8), rng, nan_frac=0.02)
    out = nan_array(np.delete(np.array(x.shape), axis % 3), ctx)
    ops.argmax(gpumat.array(x, ctx), out, axis)
    want = torch.argmax(torch.from_numpy(x), dim=axis).numpy()
    np.testing.assert_array_equal(out.asnumpy(), want.astype(np.float32), err_msg=f"seed {seed}")


def test_argmax_bad_arguments(ctx):
    a = gpumat.array(rand((3, 4)), ctx)
    with pytest.raises(ValueError, match=r"argmax: axis 2 is out of range for shape \(3, 4\)"):
        ops.argmax(a, nan_array((3,), ctx), 2)
    with pytest.raises(ValueError, match=r"argmax: axis -3 is out of range"):
        ops.argmax(a, nan_array((3,), ctx), -3)
    with pytest.raises(TypeError, match="argmax: dim must be an int"):
        ops.argmax(a, nan_array((3,), ctx), 1.0)
    with pytest.raises(
        ValueError, match=r"argmax: the output has shape \(4,\), expected \(3,\) or \(3, 1\)"
    ):
        ops.argmax(a, nan_array((4,), ctx), 1)
    with pytest.raises(ValueError, match=r"argmax: the output has shape \(1, 3\)"):
        ops.argmax(a, nan_array((1, 3), ctx), 1)
    with pytest.raises(ValueError, match="argmax: cannot take the argmax of an empty axis 0"):
        ops.argmax(gpumat.empty((0, 3), ctx), nan_array((3,), ctx), 0)
    ops.argmax(gpumat.empty((3, 0), ctx), gpumat.empty((0,), ctx), 0)  # nothing to compute
    # out aliasing in: (3, 1) along axis 1 keeps the shape
    col = gpumat.array(rand((3, 1)), ctx)
    before = col.asnumpy()
    with pytest.raises(ValueError, match="argmax: the output must not be one of the inputs"):
        ops.argmax(col, col, 1)
    np.testing.assert_array_equal(col.asnumpy(), before)
    other = gpumat.cpu() if ctx.device_type != "cpu" else gpumat.emu()
    with pytest.raises(ValueError, match="argmax: arrays are on different devices"):
        ops.argmax(a, gpumat.empty((3,), other), 1)
    with pytest.raises(TypeError):
        ops.argmax(a.asnumpy(), nan_array((3,), ctx), 1)


def test_argmax_refuses_axes_past_float32_integers(ctx):
    """Indices are float32: exact up to 2^24. A longer axis is refused, not rounded."""
    n = 2**24 + 1
    with pytest.raises(
        ValueError, match=r"argmax: axis 0 of shape \(16777217,\) is longer than 2\^24"
    ):
        ops.argmax(gpumat.empty((n,), ctx), gpumat.empty((), ctx), 0)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_GPU, reason=str(GPU_SKIP_REASON))
def test_argmax_past_one_cuda_grid():
    """One thread per output: past grid_for's 65,535 * 16 blocks of 256 threads (268,431,360
    outputs) the grid-stride loop takes a second lap."""
    ctx = gpumat.gpu(0)
    inner = 65535 * 16 * 256 + 1031
    rng, seed = new_rng()
    x = _coarse((2, inner), rng)
    out = nan_array((inner,), ctx)
    ops.argmax(gpumat.array(x, ctx), out, 0)
    np.testing.assert_array_equal(out.asnumpy(), _argmax_ref(x, 0, False), err_msg=f"seed {seed}")


# argmax_op: values on numpy and every device, no gradient, shape rules.


@pytest.mark.parametrize(
    ("shape", "axis"), SMALL_AXIS_CASES, ids=[f"{shape_id(s)}-axis{a}" for s, a in SMALL_AXIS_CASES]
)
@pytest.mark.parametrize("keepdims", [False, True])
def test_argmax_op_values_and_no_gradient(ctx, shape, axis, keepdims):
    rng, _ = new_rng()
    x = _coarse(shape, rng, nan_frac=0.05)
    xv = ad.Variable("x")
    am = ad.argmax_op(xv, axis, keepdims=keepdims)
    assert ad.argmax_op.gradient(am, ad.oneslike_op(am)) == [None]
    (g,) = ad.gradients(am, [xv])  # argmax is piecewise constant: zeros, like zeroslike_op
    want = _argmax_ref(x, axis, keepdims)
    for ex in (Executor([am, g]), Executor([am, g], device=ctx)):
        got = ex.run({xv: x}, convert_to_numpy_ret_vals=True)
        np.testing.assert_array_equal(got[0], want)
        np.testing.assert_array_equal(got[1], np.zeros(shape))


def test_argmax_op_shape_rules():
    xv = ad.Variable("x")
    cases = [((3, 4, 5), 1, False, (3, 5)), ((3, 4, 5), -1, True, (3, 4, 1)), ((7,), 0, False, ())]
    for shape, axis, keepdims, want in cases:
        node = ad.argmax_op(xv, axis, keepdims=keepdims)
        assert node.op.infer_shape(node, [shape]) == want
    node = ad.argmax_op(xv, 2)
    with pytest.raises(
        ValueError,
        match=r"argmax_op at node 'Argmax\(x,axis=2\)': axis 2 is out of range for shape \(3, 4\)",
    ):
        node.op.infer_shape(node, [(3, 4)])
    node = ad.argmax_op(xv, 0)
    with pytest.raises(ValueError, match=r"argmax_op .*empty axis 0 of \(0, 3\)"):
        node.op.infer_shape(node, [(0, 3)])
    assert node.op.infer_shape(node, [(0, 0)]) == (0,)  # nothing to compute
    with pytest.raises(TypeError, match="argmax_op: keepdims must be a bool"):
        ad.argmax_op(xv, 0, keepdims=1)
    with pytest.raises(TypeError, match="argmax_op: axis must be an int"):
        ad.argmax_op(xv, 0.0)
    with pytest.raises(TypeError, match="argmax_op: argument 'node_x' must be a graph Node"):
        ad.argmax_op(np.ones(3), 0)
