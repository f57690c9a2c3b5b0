"""Regression losses: gpumat.ops.mse_loss / l1_loss and their gradients, the graph ops
mse_loss_op / mae_loss_op, and the fused Adam kernel with gpumat.optim.Adam and MomentumSGD.

Kernels against float64 numpy with NaN-poisoned outputs (sizes from 1 to past one CUDA reduction
grid), the subgradient sign(0) = 0, NaN propagation and bad shapes; graph ops against float64
finite differences (numpy backend) and each device against numpy's analytic gradients; Adam
against a float64 transcription of Kingma & Ba's Algorithm 1.
"""

import numpy as np
import pytest
from helpers import EPS32, assert_close, nan_array, new_rng, rand, shape_id
from nn_helpers import check_device_gradients, check_fd_gradients, rand64

import gpumat
import gpumat.autodiff as ad
from gpumat import graph, ops
from gpumat.optim import Adam, MomentumSGD

LOSS_SHAPES = [(1,), (7,), (37, 129), (3, 4, 5), (2, 3, 8, 8), (300_001,)]


@pytest.mark.parametrize("shape", LOSS_SHAPES, ids=shape_id)
@pytest.mark.parametrize("kind", ["mse", "mae"])
def test_loss_and_gradient_match_float64(ctx, kind, shape):
    rng, seed = new_rng()
    p, t, dl = rand(shape, rng), rand(shape, rng), rand((1,), rng)
    d = p.astype(np.float64) - t.astype(np.float64)
    n = d.size
    loss_fn, grad_fn = (
        (ops.mse_loss, ops.mse_loss_gradient)
        if kind == "mse"
        else (ops.l1_loss, ops.l1_loss_gradient)
    )
    terms = d * d if kind == "mse" else np.abs(d)
    expected = np.array([terms.mean()])
    p_, t_ = gpumat.array(p, ctx), gpumat.array(t, ctx)
    out = nan_array((1,), ctx)
    loss_fn(p_, t_, out)
    bound = 3 * n * EPS32 * terms.mean()  # rounding of each term plus the sum
    assert_close(out.asnumpy(), expected, rtol=1e-6, atol=0, bound=bound, msg=f"{kind} seed={seed}")

    g = nan_array(shape, ctx)
    grad_fn(p_, t_, gpumat.array(dl, ctx), g)
    scale = float(dl[0]) * (2.0 / n if kind == "mse" else 1.0 / n)
    expected = scale * (d if kind == "mse" else np.sign(d))
    assert_close(g.asnumpy(), expected, rtol=1e-5, atol=1e-12, msg=f"{kind} gradient seed={seed}")
    np.testing.assert_array_equal(p_.asnumpy(), p)


def test_mae_gradient_at_zero_is_zero_and_nan_propagates(ctx):
    p = np.array([1.0, 2.0, 3.0, np.nan, 5.0], np.float32)
    t = np.array([1.0, 1.0, 4.0, 0.0, 5.0], np.float32)
    g = nan_array((5,), ctx)
    ops.l1_loss_gradient(
        gpumat.array(p, ctx), gpumat.array(t, ctx), gpumat.array(np.ones(1, np.float32), ctx), g
    )
    got = g.asnumpy()
    np.testing.assert_array_equal(got[[0, 1, 2, 4]], np.array([0.0, 0.2, -0.2, 0.0], np.float32))
    assert np.isnan(got[3])
    for fn in (ops.mse_loss, ops.l1_loss):
        out = nan_array((1,), ctx)
        fn(gpumat.array(p, ctx), gpumat.array(t, ctx), out)
        assert np.isnan(out.asnumpy()[0])


def test_loss_of_equal_arrays_is_zero(ctx):
    x = gpumat.array(rand((64, 10)), ctx)
    for fn in (ops.mse_loss, ops.l1_loss):
        out = nan_array((1,), ctx)
        fn(x, x, out)
        assert out.asnumpy()[0] == 0.0


def _a(ctx, *shape):
    return gpumat.array(np.ones(shape, np.float32), ctx)


BAD_LOSS = [
    ("mse_loss", lambda c: ops.mse_loss(_a(c, 3, 4), _a(c, 4, 3), _a(c, 1))),
    ("l1_loss", lambda c: ops.l1_loss(_a(c, 3, 4), _a(c, 3, 4), _a(c, 1, 1))),
    ("mse_loss", lambda c: ops.mse_loss(_a(c, 0, 4), _a(c, 0, 4), _a(c, 1))),
    ("mse_loss_gradient", lambda c: ops.mse_loss_gradient(_a(c, 3), _a(c, 3), _a(c, 2), _a(c, 3))),
    ("l1_loss_gradient", lambda c: ops.l1_loss_gradient(_a(c, 3), _a(c, 3), _a(c, 1), _a(c, 4))),
    ("mse_loss", lambda c: (lambda x: ops.mse_loss(x, _a(c, 1), x))(_a(c, 1))),
    (
        "mse_loss_gradient",
        lambda c: (lambda d: ops.mse_loss_gradient(_a(c, 1), _a(c, 1), d, d))(_a(c, 1)),
    ),
]


@pytest.mark.parametrize(
    "name,call", BAD_LOSS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(BAD_LOSS)]
)
def test_bad_loss_shapes_raise_value_error(ctx, name, call):
    with pytest.raises(ValueError) as info:
        call(ctx)
    assert str(info.value).startswith(name + ":"), str(info.value)


# --------------------------------------------------------------------------------------------------
# Graph ops
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", [graph.mse_loss_op, graph.mae_loss_op], ids=["mse", "mae"])
def test_loss_op_gradients_match_finite_differences(loss):
    rng, _ = new_rng()
    # |pred - target| >= 0.2 elementwise keeps mae away from its kink
    t = rand64(rng, (4, 5))
    p = t + rand64(rng, (4, 5), 0.2, 1.0)
    check_fd_gradients(loss, [p, t], rng)
    # through a model: the loss of a linear map, times 3 (a non-unit output gradient)
    x, w = rand64(rng, (6, 3)), rand64(rng, (3, 2))
    y = x @ w + rand64(rng, (6, 2), 0.2, 1.0)
    check_fd_gradients(lambda x_, w_, y_: loss(ad.matmul_op(x_, w_), y_) * 3.0, [x, w, y], rng)


@pytest.mark.parametrize("loss", [graph.mse_loss_op, graph.mae_loss_op], ids=["mse", "mae"])
def test_loss_ops_on_device_match_numpy(ctx, loss):
    rng, _ = new_rng()
    x, w = rand64(rng, (16, 5)), rand64(rng, (5, 3))
    y = x @ w + rand64(rng, (16, 3), 0.2, 1.0)
    check_device_gradients(
        ctx, lambda x_, w_, y_: loss(ad.matmul_op(x_, w_), y_), [x, w, y], rng, wrt=[0, 1, 2]
    )


def test_loss_shape_inference_errors():
    p, t = ad.Variable("p"), ad.Variable("t")
    for build in (graph.mse_loss_op, graph.mae_loss_op):
        node = build(p, t)
        with pytest.raises(ValueError, match="differ in shape") as info:
            ad.Executor([node]).run({p: np.ones((3, 4)), t: np.ones((4, 3))})
        assert node.op.name in str(info.value)
        with pytest.raises(ValueError, match="at least one element"):
            ad.Executor([node]).run({p: np.ones((0, 4)), t: np.ones((0, 4))})


def test_regression_trains_with_mse_on_device(ctx):
    # A linear least-squares fit with Adam on the device reaches the closed-form loss.
    rng, _ = new_rng()
    x_val = rng.standard_normal((64, 4)).astype(np.float32)
    w_true = rng.standard_normal((4, 1)).astype(np.float32)
    y_val = x_val @ w_true + 0.01 * rng.standard_normal((64, 1)).astype(np.float32)
    x, y, w = ad.Variable("x"), ad.Variable("y"), ad.Variable("w")
    loss = graph.mse_loss_op(ad.matmul_op(x, w), y)
    ex = ad.Executor([loss, *ad.gradients(loss, [w])], device=ctx)
    w_dev = gpumat.array(np.zeros((4, 1), np.float32), ctx)
    opt = Adam([w_dev], lr=0.05)
    for _ in range(400):
        _, g = ex.run({x: x_val, y: y_val, w: w_dev})
        opt.step([g])
    np.testing.assert_allclose(w_dev.asnumpy(), w_true, atol=0.02)


# --------------------------------------------------------------------------------------------------
# Adam and momentum
# --------------------------------------------------------------------------------------------------


def adam_ref(p, grads, lr, b1, b2, eps):
    """Kingma & Ba 2015, Algorithm 1, in float64."""
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return p, m, v


@pytest.mark.parametrize("shape", [(1,), (37, 129), (3, 4, 5)], ids=shape_id)
def test_adam_update_kernel_matches_algorithm_1(ctx, shape):
    rng, seed = new_rng()
    p0 = rand(shape, rng)
    grads = [rand(shape, rng) for _ in range(4)]
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
    p, m, v = (gpumat.array(a, ctx) for a in (p0, np.zeros(shape), np.zeros(shape)))
    for t, g in enumerate(grads, start=1):
        ops.adam_update(p, gpumat.array(g, ctx), m, v, lr, b1, b2, eps, t)
    p_ref, m_ref, v_ref = adam_ref(
        p0.astype(np.float64), [g.astype(np.float64) for g in grads], lr, b1, b2, eps
    )
    label = f"adam seed={seed}"
    assert_close(p.asnumpy(), p_ref, rtol=1e-6, atol=1e-6, msg=label)
    assert_close(m.asnumpy(), m_ref, rtol=1e-5, atol=1e-7, msg=label)
    assert_close(v.asnumpy(), v_ref, rtol=1e-5, atol=1e-7, msg=label)


BAD_ADAM = [
    ("aliased", lambda c, a: ops.adam_update(a, _a(c, 3), a, _a(c, 3), 0.1, 0.9, 0.99, 1e-8, 1)),
    ("shape", lambda c, a: ops.adam_update(a, _a(c, 4), _a(c, 3), _a(c, 3), 0.1, 0.9, 0.99, 0, 1)),
    ("beta", lambda c, a: ops.adam_update(a, _a(c, 3), _a(c, 3), _a(c, 3), 0.1, 1.0, 0.99, 0, 1)),
    ("beta", lambda c, a: ops.adam_update(a, _a(c, 3), _a(c, 3), _a(c, 3), 0.1, 0.9, -0.1, 0, 1)),
    ("lr", lambda c, a: ops.adam_update(a, _a(c, 3), _a(c, 3), _a(c, 3), -1.0, 0.9, 0.9, 0, 1)),
    ("step", lambda c, a: ops.adam_update(a, _a(c, 3), _a(c, 3), _a(c, 3), 0.1, 0.9, 0.9, 0, 0)),
]


@pytest.mark.parametrize("what,call", BAD_ADAM, ids=[w for w, _ in BAD_ADAM])
def test_adam_update_rejects_bad_arguments(ctx, what, call):
    a = _a(ctx, 3)
    with pytest.raises(ValueError, match="adam_update"):
        call(ctx, a)
    np.testing.assert_array_equal(a.asnumpy(), 1.0)


def _optimizer_run(ctx, make, steps=5, seed=0):
    """Parameters after `steps` updates with fixed gradients, on numpy (device=None) or a device."""
    rng = np.random.default_rng(seed)
    params = [rand((3, 4), rng), rand((5,), rng)]
    grads = [[rand(p.shape, rng) for p in params] for _ in range(steps)]
    if ctx is None:
        ps = [p.astype(np.float64) for p in params]
        opt = make(ps)
        for gs in grads:
            opt.step([g.astype(np.float64) for g in gs])
        return ps
    ps = [gpumat.array(p, ctx) for p in params]
    opt = make(ps)
    for gs in grads:
        opt.step([gpumat.array(g, ctx) for g in gs])
    return [p.asnumpy() for p in ps]


def test_adam_class_numpy_matches_reference():
    rng = np.random.default_rng(0)
    params = [rand((3, 4), rng), rand((5,), rng)]
    grads = [[rand(p.shape, rng) for p in params] for _ in range(5)]
    got = _optimizer_run(None, lambda ps: Adam(ps, lr=0.01), seed=0)
    for i, p in enumerate(params):
        ref, _, _ = adam_ref(
            p.astype(np.float64), [gs[i].astype(np.float64) for gs in grads], 0.01, 0.9, 0.999, 1e-8
        )
        np.testing.assert_allclose(got[i], ref, rtol=1e-12)


@pytest.mark.parametrize(
    "make",
    [lambda ps: Adam(ps, lr=0.01, betas=(0.8, 0.99)), lambda ps: MomentumSGD(ps, 0.1, 0.9)],
    ids=["adam", "momentum"],
)
def test_optimizers_on_device_match_numpy(ctx, make):
    ref = _optimizer_run(None, make)
    got = _optimizer_run(ctx, make)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)


def test_momentum_sgd_numpy_formula():
    p = np.array([1.0, -2.0])
    opt = MomentumSGD([p], lr=0.5, momentum=0.9)
    opt.step([np.array([1.0, 1.0])])  # v = g; p -= 0.5 v
    np.testing.assert_allclose(p, [0.5, -2.5])
    opt.step([np.array([1.0, 1.0])])  # v = 0.9 + 1 = 1.9
    np.testing.assert_allclose(p, [0.5 - 0.95, -2.5 - 0.95])
    assert "momentum=0.9" in repr(opt)


def test_optimizer_argument_errors():
    p = [np.zeros(3)]
    with pytest.raises(ValueError, match="momentum"):
        MomentumSGD(p, 0.1, momentum=1.0)
    with pytest.raises(ValueError, match="learning rate"):
        Adam(p, lr=-1.0)
    with pytest.raises(ValueError, match="beta2"):
        Adam(p, betas=(0.9, 1.5))
    with pytest.raises(ValueError, match="eps"):
        Adam(p, eps=float("nan"))
    with pytest.raises(TypeError):
        Adam([np.zeros(3, np.int64)])
    with pytest.raises(TypeError):
        MomentumSGD(["not an array"], 0.1)
    opt = Adam(p)
    with pytest.raises(ValueError, match="gradients"):
        opt.step([])
    with pytest.raises(ValueError, match="shape"):
        opt.step([np.zeros(4)])
    assert opt.t == 0  # a rejected step does not count
