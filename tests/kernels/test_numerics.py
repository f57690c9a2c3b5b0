"""Pinned numerics: inputs chosen so that a kernel that drifts from its documented arithmetic fails.

Reductions. ``sum_to_size`` and ``reduce_sum_channels`` accumulate in float64 on every
device (extensions/src/cuda/reduce.cu, ../host/reduce.cpp), so their error is the final rounding to
float32 plus the float64 accumulation error: at most half an ulp of the result plus
(n - 1) * 2^-53 * sum |x| (Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., 2002,
eq. (4.4)). The data cancel (pairs +a, -a with a up to 1e4 plus small terms), so the sum is small
against sum |x| and a float32 accumulator misses the bound by orders of magnitude; each test also
shows that a float32 sum of the same data fails it, so the bound cannot pass by slack.

Optimizers. Each hyperparameter is set where it moves the result by far more than the tolerance
(each test checks that too, against a float64 reference with the hyperparameter changed): Adam's
eps with gradients of 1e-9..1e-8 (sqrt(v) and eps then have the same size), its bias corrections
at steps 1 and 3 (1 - beta^t far from 1), beta1 and beta2 over steps with changing gradients;
momentum with a velocity much larger than the gradient. References: Kingma & Ba, "Adam: A Method
for Stochastic Optimization", ICLR 2015, Algorithm 1; momentum as gpumat.optim.MomentumSGD.
"""

import math

import numpy as np
import pytest

import gpumat
from gpumat import ops
from gpumat.optim import Adam

U64 = 2.0**-53


def cancelling_columns(rng, rows, cols):
    """float32 (rows, cols): per column, pairs +a, -a (|a| in [1e3, 1e4]) plus terms in +-[0.1, 1],
    shuffled: the exact column sums are ~sqrt(rows) while sum |x| is ~5e3 * rows."""
    half = rows // 2
    a = rng.uniform(1e3, 1e4, size=(half, cols)) * rng.choice([-1.0, 1.0], size=(half, cols))
    big = np.concatenate([a, -a, np.zeros((rows - 2 * half, cols))])
    small = rng.uniform(0.1, 1.0, size=(rows, cols)) * rng.choice([-1.0, 1.0], size=(rows, cols))
    x = (big + small).astype(np.float32)
    for c in range(cols):
        rng.shuffle(x[:, c])
    return x


def exact_sums(x2d):
    """The exact sums of the columns of a float32 array (math.fsum: correctly rounded float64)."""
    x = np.asarray(x2d, dtype=np.float64)
    return np.array([math.fsum(x[:, c]) for c in range(x.shape[1])])


def float64_bound(x2d, exact):
    """Half an ulp of each float32 result plus the float64 accumulation error bound."""
    n = x2d.shape[0]
    abs_sum = np.abs(np.asarray(x2d, dtype=np.float64)).sum(axis=0)
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    return 0.5 * ulp + (n - 1) * U64 * abs_sum * 1.01


def float32_sequential(x2d):
    """The column sums as a float32 accumulator computes them, in row order."""
    acc = np.zeros(x2d.shape[1], dtype=np.float32)
    for row in x2d:
        acc += row
    return acc


@pytest.mark.parametrize("rows, cols", [(5000, 1), (3001, 7), (2000, 40)])
def test_reduce_sum_axis_zero_is_the_float64_sum_rounded(ctx, rows, cols):
    rng = np.random.default_rng(rows * 100 + cols)
    x = cancelling_columns(rng, rows, cols)
    exact = exact_sums(x)
    bound = float64_bound(x, exact)
    assert np.any(np.abs(float32_sequential(x) - exact) > bound), "the data must defeat float32"
    out = gpumat.array(np.full(cols, np.nan, dtype=np.float32), ctx)
    ops.sum_to_size(gpumat.array(x, ctx), out)
    got = out.asnumpy().astype(np.float64)
    assert np.all(np.abs(got - exact) <= bound), np.max(np.abs(got - exact) / bound)


@pytest.mark.parametrize("n, channels, spatial", [(2500, 3, 2), (40, 5, 201)])
def test_reduce_sum_channels_is_the_float64_sum_rounded(ctx, n, channels, spatial):
    rng = np.random.default_rng(n + channels + spatial)
    flat = cancelling_columns(rng, n * spatial, channels)  # per channel: n * spatial terms
    x = flat.reshape(n, spatial, channels).transpose(0, 2, 1).copy()  # (N, C, S)
    exact = exact_sums(flat)
    bound = float64_bound(flat, exact)
    assert np.any(np.abs(float32_sequential(flat) - exact) > bound)
    out = gpumat.array(np.full(channels, np.nan, dtype=np.float32), ctx)
    ops.reduce_sum_channels(gpumat.array(x, ctx), out)
    got = out.asnumpy().astype(np.float64)
    assert np.all(np.abs(got - exact) <= bound), np.max(np.abs(got - exact) / bound)


# ---------------------------------------------------------------------------- optimizers


def adam64(p, g, m, v, lr, b1, b2, eps, t, bias_correction=True):
    """Kingma & Ba (2015), Algorithm 1, in float64 (bias_correction=False: without 1 - beta^t)."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    bc1, bc2 = (1 - b1**t, 1 - b2**t) if bias_correction else (1.0, 1.0)
    return p - lr * (m / bc1) / (np.sqrt(v / bc2) + eps), m, v


ADAM_CASES = {
    # name: (lr, beta1, beta2, eps, gradient magnitude range, steps)
    "eps": (0.05, 0.9, 0.999, 1e-8, (1e-9, 1e-8), 1),
    "bias_correction_step1": (0.05, 0.9, 0.999, 1e-8, (0.1, 1.0), 1),
    "bias_correction_step3": (0.05, 0.9, 0.999, 1e-8, (0.1, 1.0), 3),
    "betas": (0.05, 0.6, 0.95, 1e-8, (0.1, 1.0), 4),
}


def run_adam_reference(case, p0, grads, **change):
    lr, b1, b2, eps, _, _ = ADAM_CASES[case]
    settings = {"lr": lr, "b1": b1, "b2": b2, "eps": eps, "bias_correction": True, **change}
    p, m, v = p0.astype(np.float64), np.zeros_like(p0, np.float64), np.zeros_like(p0, np.float64)
    for t, g in enumerate(grads, start=1):
        p, m, v = adam64(p, g.astype(np.float64), m, v, t=t, **settings)
    return p


def adam_inputs(case, n=700):
    _, _, _, _, (lo, hi), steps = ADAM_CASES[case]
    rng = np.random.default_rng(sorted(ADAM_CASES).index(case) + 11)
    p0 = rng.uniform(-1.0, 1.0, n).astype(np.float32)
    grads = [
        (rng.uniform(lo, hi, n) * rng.choice([-1.0, 1.0], n)).astype(np.float32)
        for _ in range(steps)
    ]
    return p0, grads


def each_hyperparameter_matters(case, p0, grads, ref, tol):
    """The reference moves by far more than `tol` when the hyperparameter the case is about
    changes: a kernel that ignored it, or got it wrong, could not pass."""
    changes = {
        "eps": [{"eps": 2e-8}, {"eps": 0.0}],
        "bias_correction_step1": [{"bias_correction": False}],
        "bias_correction_step3": [{"bias_correction": False}],
        "betas": [{"b1": 0.7}, {"b2": 0.97}],
    }[case]
    for change in changes:
        moved = np.max(np.abs(run_adam_reference(case, p0, grads, **change) - ref))
        assert moved > 100 * tol, f"{case}: {change} moves the result by only {moved}"


@pytest.mark.parametrize("case", sorted(ADAM_CASES))
def test_adam_update_hyperparameters(ctx, case):
    lr, b1, b2, eps, _, _ = ADAM_CASES[case]
    p0, grads = adam_inputs(case)
    ref = run_adam_reference(case, p0, grads)
    tol = 2e-6
    each_hyperparameter_matters(case, p0, grads, ref, tol)
    p = gpumat.array(p0, ctx)
    m = gpumat.array(np.zeros_like(p0), ctx)
    v = gpumat.array(np.zeros_like(p0), ctx)
    for t, g in enumerate(grads, start=1):
        ops.adam_update(p, gpumat.array(g, ctx), m, v, lr, b1, b2, eps, t)
    np.testing.assert_allclose(p.asnumpy(), ref, rtol=0, atol=tol)


@pytest.mark.parametrize("case", sorted(ADAM_CASES))
def test_adam_optimizer_hyperparameters(ctx, case):
    # gpumat.optim.Adam: one adam_update_multi call per step over several tensors.
    lr, b1, b2, eps, _, _ = ADAM_CASES[case]
    p0, grads = adam_inputs(case, n=900)
    ref = run_adam_reference(case, p0, grads)
    tol = 2e-6
    each_hyperparameter_matters(case, p0, grads, ref, tol)
    cuts = [0, 1, 300, 900]  # tensors of 1, 299 and 600 elements
    params = [gpumat.array(p0[a:b], ctx) for a, b in zip(cuts, cuts[1:], strict=False)]
    opt = Adam(params, lr=lr, betas=(b1, b2), eps=eps)
    for g in grads:
        opt.step([gpumat.array(g[a:b], ctx) for a, b in zip(cuts, cuts[1:], strict=False)])
    got = np.concatenate([p.asnumpy() for p in params])
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol)


def test_momentum_matters_and_matches(ctx):
    # A velocity ~100x the gradients: v <- mu v + g is mostly mu v, so mu is what the result is.
    rng = np.random.default_rng(3)
    n, lr, mu = 1000, 0.3, 0.85
    p0 = rng.uniform(-1, 1, n).astype(np.float32)
    v0 = rng.uniform(-1, 1, n).astype(np.float32)
    g = (rng.uniform(-1, 1, n) * 1e-2).astype(np.float32)

    def reference(momentum):
        v = momentum * v0.astype(np.float64) + g
        return p0 - lr * v, v

    ref_p, ref_v = reference(mu)
    tol = 2e-6
    assert np.max(np.abs(reference(mu + 0.01)[0] - ref_p)) > 100 * tol
    p, v = gpumat.array(p0, ctx), gpumat.array(v0, ctx)
    ops.momentum_sgd_update([p], [gpumat.array(g, ctx)], [v], lr, mu)
    np.testing.assert_allclose(v.asnumpy(), ref_v, rtol=0, atol=tol)
    np.testing.assert_allclose(p.asnumpy(), ref_p, rtol=0, atol=tol)
