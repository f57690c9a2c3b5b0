"""GELU (exact and tanh), SiLU, softplus, leaky ReLU, ELU and hardtanh: the kernels against
float64 numpy on every device with the outputs poisoned by NaN (values around 0 and of large
magnitude, zero-size arrays), the graph ops' gradients against float64 central differences and
on every device, the ``gpumat.nn.functional`` forms and their modules against PyTorch on the CPU
(contiguous and transposed inputs), a compiled step against the eager one, and bad input."""

import math

import numpy as np
import pytest
from helpers import EPS32, nan_array, new_rng, shape_id
from nn_helpers import check_device_gradients, check_fd_gradients

import gpumat
import gpumat.graph as ad
import gpumat.nn as nn
import gpumat.nn.functional as F  # noqa: N812
import gpumat.ops as ops

torch = pytest.importorskip("torch")
TF = torch.nn.functional

_erf = np.vectorize(math.erf, otypes=[np.float64])
SQRT2, BETA, KAPPA = math.sqrt(2.0), math.sqrt(2.0 / math.pi), 0.044715


def _sig(z):
    return 1.0 / (1.0 + np.exp(-z))


def _softplus64(x, beta, threshold):
    z = beta * x
    soft = (np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))) / beta
    return np.where(z > threshold, x, soft)


# name: (kernel args after x, forward f64, gradient f64 (x, dy))
KERNELS = {
    "gelu": ((), lambda x: 0.5 * x * (1 + _erf(x / SQRT2))),
    "gelu_tanh": ((), lambda x: 0.5 * x * (1 + np.tanh(BETA * (x + KAPPA * x**3)))),
    "silu": ((), lambda x: x * _sig(x)),
    "softplus": ((1.5, 4.0), lambda x: _softplus64(x, 1.5, 4.0)),
    "leaky_relu": ((0.07,), lambda x: np.where(x > 0, x, 0.07 * x)),
    "elu": ((0.8,), lambda x: np.where(x > 0, x, 0.8 * np.expm1(x))),
}


def _pdf(x):
    return np.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def _gelu_tanh_grad(x):
    t = np.tanh(BETA * (x + KAPPA * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * BETA * (1 + 3 * KAPPA * x * x)


GRADIENTS = {
    "gelu_gradient": (
        (),
        lambda x: 0.5 * (1 + _erf(x / SQRT2)) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi),
    ),
    "gelu_tanh_gradient": ((), _gelu_tanh_grad),
    "silu_gradient": ((), lambda x: _sig(x) * (1 + x * (1 - _sig(x)))),
    "softplus_gradient": ((1.5, 4.0), lambda x: np.where(1.5 * x > 4.0, 1.0, _sig(1.5 * x))),
    "leaky_relu_gradient": ((0.07,), lambda x: np.where(x > 0, 1.0, 0.07)),
    "elu_gradient": ((0.8,), lambda x: np.where(x > 0, 1.0, 0.8 * np.exp(x))),
    "hardtanh_gradient": ((-0.5, 2.0), lambda x: np.where((x <= -0.5) | (x >= 2.0), 0.0, 1.0)),
}

SHAPES = [(0,), (7,), (1, 1031), (33, 65), (2, 3, 4, 5)]


def _inputs(shape, rng):
    """Values around 0 and of large magnitude (|x| up to 60), and exact zeros."""
    n = math.prod(shape)
    x = np.concatenate(
        [rng.uniform(-3, 3, n), rng.uniform(-60, 60, n), rng.uniform(-1e-3, 1e-3, n)]
    )
    x = rng.permutation(x)[:n]
    if n > 4:
        x[:2] = 0.0
    return x.reshape(shape).astype(np.float32)


def _scale(x, name=""):
    """The magnitude of the terms a float32 kernel adds for input x: its rounding errors are a
    few eps of it, whatever the result (1 + erf(x / sqrt 2) and 1 - tanh^2 cancel for x << 0, as
    in PyTorch's own kernels)."""
    x = np.abs(np.asarray(x, np.float64))
    if name.startswith("gelu_tanh"):
        return 1 + x * BETA * (1 + 3 * KAPPA * x * x)
    return 1 + x


def _close(got, want, seed, what, rtol=8 * EPS32, scale=1.0):
    """|got - want| <= rtol * |want| + 4 eps * scale (see _scale)."""
    want = np.asarray(want, np.float64)
    err = np.abs(got.astype(np.float64) - want)
    bound = rtol * np.abs(want) + 4 * EPS32 * np.asarray(scale)
    bad = ~(err <= bound)
    assert not bad.any(), f"{what} (seed {seed}): {got[bad][:5]} vs {want[bad][:5]}"


@pytest.mark.parametrize("name", sorted(KERNELS))
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_forward_kernels_match_float64(ctx, name, shape):
    rng, seed = new_rng()
    args, f = KERNELS[name]
    x = _inputs(shape, rng)
    out = nan_array(shape, ctx)
    getattr(ops, name)(gpumat.array(x, ctx), *args, out)
    _close(out.asnumpy(), f(x.astype(np.float64)), seed, name, scale=_scale(x, name))
    ref = np.full(shape, np.nan, np.float32)
    getattr(gpumat.reference, name)(x, *args, ref)
    _close(ref, f(x.astype(np.float64)), seed, f"reference.{name}", scale=_scale(x, name))


@pytest.mark.parametrize("name", sorted(GRADIENTS))
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_gradient_kernels_match_float64(ctx, name, shape):
    rng, seed = new_rng()
    args, g = GRADIENTS[name]
    x = _inputs(shape, rng)
    dy = rng.uniform(-2, 2, size=shape).astype(np.float32)
    out = nan_array(shape, ctx)
    getattr(ops, name)(gpumat.array(x, ctx), gpumat.array(dy, ctx), *args, out)
    want = dy.astype(np.float64) * g(x.astype(np.float64))
    _close(out.asnumpy(), want, seed, name, 16 * EPS32, np.abs(dy) * _scale(x, name))


def test_gelu_keeps_relative_accuracy_in_the_lower_tail(ctx):
    """x Phi(x) for x << 0 is tiny; computed as 1 + erf(x / sqrt 2) it loses every digit to
    cancellation (x = -5: 6e-7 left of 1 + erf in float32). Every device keeps it to float32
    rounding relative to the value itself (the reference through erfc, exact in float64): a few
    eps times the relative condition number of Phi, about 1 + x^2 in the tail (the float32
    argument of the exponential, -x^2 / 2, carries an absolute rounding error of eps x^2)."""
    rng, seed = new_rng()
    x = np.concatenate([-rng.uniform(0.5, 12.0, 500), [-0.5, -3.0, -5.0, -8.0, -12.0]])
    x = x.astype(np.float32)
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    x64 = x.astype(np.float64)
    want = 0.5 * x64 * erfc(-x64 / SQRT2)
    out = nan_array(x.shape, ctx)
    ops.gelu(gpumat.array(x, ctx), out)
    rel = np.abs(out.asnumpy() - want) / np.abs(want) / (1 + x64**2)
    worst = rel.argmax()
    assert rel[worst] < 4 * EPS32, (
        f"seed {seed}: x = {x[worst]}, relative error / (1 + x^2) {rel[worst]:.2e}"
    )


def test_special_values(ctx):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30], np.float32)
    for name, (args, _) in KERNELS.items():
        out = nan_array(x.shape, ctx)
        getattr(ops, name)(gpumat.array(x, ctx), *args, out)
        got = out.asnumpy()
        assert np.isnan(got[0]), name  # NaN propagates through every activation
        assert got[5] == pytest.approx(1e30, rel=1e-6), (name, got)
        at_zero = math.log(2) / 1.5 if name == "softplus" else 0.0
        assert got[3] == pytest.approx(at_zero, abs=1e-7), (name, got)
        if name in ("silu", "gelu", "gelu_tanh", "softplus", "elu"):
            assert np.isfinite(got[6]), (name, got)  # no overflow for x << 0
    a = gpumat.array(x[3:], ctx)
    ops.silu(a, a)  # in place
    np.testing.assert_array_equal(a.asnumpy()[:2], [0.0, 0.0])


def test_shape_errors_name_the_op(ctx):
    a, b = gpumat.empty((3, 4), ctx), gpumat.empty((4, 3), ctx)
    with pytest.raises(ValueError, match=r"gelu: .*\(3, 4\).*\(4, 3\)"):
        ops.gelu(a, b)
    with pytest.raises(ValueError, match=r"softplus_gradient: .*\(3, 4\).*\(4, 3\)"):
        ops.softplus_gradient(a, b, 1.0, 20.0, a)


# --------------------------------------------------------------------------------------------------
# Graph ops
# --------------------------------------------------------------------------------------------------

GRAPH = {
    "gelu": lambda x: ad.gelu_op(x),
    "gelu_tanh": lambda x: ad.gelu_op(x, "tanh"),
    "silu": lambda x: ad.silu_op(x),
    "softplus": lambda x: ad.softplus_op(x, 2.0, 3.0),
    "softplus_neg_beta": lambda x: ad.softplus_op(x, -0.5, 20.0),
    "leaky_relu": lambda x: ad.leaky_relu_op(x, 0.2),
    "elu": lambda x: ad.elu_op(x, 1.3),
    "hardtanh": lambda x: ad.hardtanh_op(x, -0.7, 0.9),
}


def _away_from_kinks(rng, shape):
    """float64 values in (-4, 4) kept 0.02 away from the kinks (0, the hardtanh bounds and
    softplus' threshold 3 / beta = 1.5) so central differences see one smooth piece."""
    x = rng.uniform(-4, 4, size=shape)
    for k in (0.0, -0.7, 0.9, 1.5):
        near = np.abs(x - k) < 0.02
        x[near] += 0.05
    return x


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_graph_gradients_fd_float64(name):
    rng, _ = new_rng()
    check_fd_gradients(GRAPH[name], [_away_from_kinks(rng, (5, 7))], rng)


@pytest.mark.parametrize("name", sorted(GRAPH))
def test_graph_ops_on_devices_match_numpy(ctx, name):
    rng, _ = new_rng()
    check_device_gradients(ctx, GRAPH[name], [_away_from_kinks(rng, (40, 30))], rng)


def test_graph_op_names_and_no_second_derivative():
    x = ad.Variable("x")
    y = ad.gelu_op(x, "tanh")
    assert y.name == "Gelu(x,tanh)"
    (g,) = ad.gelu_op.gradient(y, ad.oneslike_op(y))
    assert g.op is ad.gelu_gradient_op and g.approximate == "tanh"
    assert all(isinstance(d, ad.Undefined) for d in g.op.gradient(g, ad.oneslike_op(g)))
    assert ad.softplus_op(x, 2.0).name == "Softplus(x,2.0,20.0)"
    with pytest.raises(ValueError, match="approximate"):
        ad.gelu_op(x, "fast")
    with pytest.raises(ValueError, match="beta"):
        ad.softplus_op(x, 0.0)
    with pytest.raises(ValueError, match="min_val"):
        ad.hardtanh_op(x, 1.0, -1.0)


# --------------------------------------------------------------------------------------------------
# Front end against PyTorch
# --------------------------------------------------------------------------------------------------

FRONT = {
    "gelu": (lambda t: F.gelu(t), lambda t: TF.gelu(t)),
    "gelu_tanh": (
        lambda t: F.gelu(t, approximate="tanh"),
        lambda t: TF.gelu(t, approximate="tanh"),
    ),
    "silu": (F.silu, TF.silu),
    "softplus": (lambda t: F.softplus(t), lambda t: TF.softplus(t)),
    "softplus_beta": (lambda t: F.softplus(t, 0.5, 5.0), lambda t: TF.softplus(t, 0.5, 5.0)),
    "leaky_relu": (lambda t: F.leaky_relu(t), lambda t: TF.leaky_relu(t)),
    "leaky_relu_slope": (lambda t: F.leaky_relu(t, 0.3), lambda t: TF.leaky_relu(t, 0.3)),
    "elu": (lambda t: F.elu(t, 0.6), lambda t: TF.elu(t, 0.6)),
    "hardtanh": (lambda t: F.hardtanh(t, -2.0, 3.0), lambda t: TF.hardtanh(t, -2.0, 3.0)),
    "relu6": (F.relu6, TF.relu6),
    "GELU": (nn.GELU(), torch.nn.GELU()),
    "GELU_tanh": (nn.GELU("tanh"), torch.nn.GELU("tanh")),
    "SiLU": (nn.SiLU(), torch.nn.SiLU()),
    "Softplus": (nn.Softplus(2.0, 10.0), torch.nn.Softplus(2.0, 10.0)),
    "LeakyReLU": (nn.LeakyReLU(0.2), torch.nn.LeakyReLU(0.2)),
    "ELU": (nn.ELU(), torch.nn.ELU()),
    "Hardtanh": (nn.Hardtanh(), torch.nn.Hardtanh()),
    "ReLU6": (nn.ReLU6(), torch.nn.ReLU6()),
}


@pytest.mark.parametrize("transposed", [False, True], ids=["contiguous", "transposed"])
@pytest.mark.parametrize("name", sorted(FRONT))
def test_functional_matches_torch(ctx, name, transposed):
    rng, seed = new_rng()
    ours, theirs = FRONT[name]
    x = _inputs((6, 9), rng)
    x[0, :4] = [-1.0, 1.0, 6.0, 3.0]  # hardtanh / relu6 bounds: no gradient there, as PyTorch
    w = rng.uniform(-1, 1, size=(9, 6) if transposed else (6, 9)).astype(np.float32)
    t = gpumat.tensor(x, device=ctx, requires_grad=True)
    tt = torch.tensor(x, requires_grad=True)
    a, ta = (t.t(), tt.t()) if transposed else (t, tt)
    y, ty = ours(a), theirs(ta)
    assert y.shape == tuple(ty.shape)
    (y * gpumat.tensor(w, device=ctx)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()
    scale = _scale(x, name.lower())
    got, want = y.detach().numpy(), ty.detach().double().numpy()
    _close(got, want, seed, name, 16 * EPS32, scale.T if transposed else scale)
    _close(t.grad.numpy(), tt.grad.double().numpy(), seed, f"{name} gradient", 32 * EPS32, scale)


@pytest.mark.parametrize("name", ["gelu", "silu", "softplus", "leaky_relu", "elu", "relu6"])
def test_functional_zero_size(ctx, name):
    ours, theirs = FRONT[name]
    t = gpumat.zeros(0, 3, device=ctx, requires_grad=True)
    y = ours(t)
    assert y.shape == (0, 3)
    y.sum().backward()
    assert t.grad.shape == (0, 3)


def test_compiled_step_equals_eager(ctx):
    rng, _ = new_rng()
    x = gpumat.tensor(_inputs((4, 6), rng), device=ctx)
    w0 = rng.uniform(-1, 1, size=(4, 6)).astype(np.float32)

    def step(w, x):
        w.grad = None
        h = w * x
        loss = (F.gelu(h) + F.gelu(h, "tanh") + F.silu(h) + F.softplus(h, 2.0)).sum()
        loss = loss + (F.leaky_relu(h, 0.1) + F.elu(h) + F.hardtanh(h)).sum()
        loss.backward()
        return loss, w.grad

    w_eager = gpumat.tensor(w0, device=ctx, requires_grad=True)
    w_traced = gpumat.tensor(w0, device=ctx, requires_grad=True)
    eager = step(w_eager, x)
    compiled = gpumat.compile(lambda x: step(w_traced, x), fusion=False)
    for _ in range(2):  # the first call traces, the second replays
        traced = compiled(x)
        for e, c in zip(eager, traced, strict=True):
            np.testing.assert_array_equal(c.numpy(), e.detach().numpy())


def test_bad_input():
    ints = gpumat.tensor([1, 2, 3])
    x = gpumat.randn(3)
    for f in (F.gelu, F.silu, F.softplus, F.leaky_relu, F.elu, F.hardtanh, F.relu6):
        with pytest.raises(TypeError, match=f.__name__):
            f(ints)
        with pytest.raises(TypeError, match=f.__name__):
            f(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="gelu: approximate must be 'none' or 'tanh'"):
        F.gelu(x, approximate="fast")
    with pytest.raises(ValueError, match="GELU: approximate"):
        nn.GELU("erf")
    with pytest.raises(TypeError, match="negative_slope"):
        F.leaky_relu(x, "0.1")
    with pytest.raises(ValueError, match="beta"):
        F.softplus(x, beta=0)
    with pytest.raises(ValueError, match="min_val"):
        F.hardtanh(x, 2.0, 1.0)
