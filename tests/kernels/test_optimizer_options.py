"""The optimizer kernels' options (weight decay, dampening, Nesterov, AdamW's decoupled decay,
AMSGrad) and the gradient-clipping kernels (ops.total_norm_multi, ops.clip_scale_multi) against
float64 numpy over several steps on every device, 40 tensors of awkward sizes (two 32-tensor
launches on CUDA), empty ones included."""

import numpy as np
import pytest

import gpumat
from gpumat import ops, reference

RNG = np.random.default_rng()
SIZES = [0, 1, 255, 256, 257, 1000, 3, 4099] + [int(n) for n in RNG.integers(1, 700, 32)]


def rand(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, size=shape).astype(np.float32)


def dev(x, ctx):
    return gpumat.array(np.asarray(x, np.float32), ctx)


def close(got, ref, tol=2e-6):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * scale)


@pytest.mark.parametrize(
    "damp, wd, nesterov",
    [(0.0, 0.0, True), (0.3, 0.0, False), (0.0, 0.05, False), (0.0, 0.1, True)],
)
def test_momentum_sgd_options_match_float64(ctx, damp, wd, nesterov):
    lr, mu = 0.05, 0.9
    ps = [rand(n) for n in SIZES]
    vs = [np.zeros(n, np.float32) for n in SIZES]
    p_d, v_d = [dev(p, ctx) for p in ps], [dev(v, ctx) for v in vs]
    p64, v64 = [p.astype(np.float64) for p in ps], [v.astype(np.float64) for v in vs]
    for _ in range(3):
        gs = [rand(n) for n in SIZES]
        ops.momentum_sgd_update(p_d, [dev(g, ctx) for g in gs], v_d, lr, mu, damp, wd, nesterov)
        reference.momentum_sgd_update(
            p64, [g.astype(np.float64) for g in gs], v64, lr, mu, damp, wd, nesterov
        )
    for a, b in zip(p_d + v_d, p64 + v64, strict=True):
        close(a.asnumpy(), b)


def test_sgd_weight_decay_matches_float64(ctx):
    ps = [rand(n) for n in SIZES]
    gs = [rand(n) for n in SIZES]
    p_d = [dev(p, ctx) for p in ps]
    ops.sgd_update(p_d, [dev(g, ctx) for g in gs], 0.3, 0.01)
    for a, p, g in zip(p_d, ps, gs, strict=True):
        close(a.asnumpy(), p - 0.3 * (g + 0.01 * p.astype(np.float64)))


@pytest.mark.parametrize(
    "wd, decoupled, amsgrad",
    [(0.1, False, False), (0.1, True, False), (0.0, False, True), (0.05, True, True)],
)
def test_adam_options_match_float64(ctx, wd, decoupled, amsgrad):
    lr, b1, b2, eps = 1e-2, 0.8, 0.95, 1e-6
    ps = [rand(n) for n in SIZES]
    z = [np.zeros(n, np.float32) for n in SIZES]
    p_d, m_d, v_d = [dev(p, ctx) for p in ps], [dev(a, ctx) for a in z], [dev(a, ctx) for a in z]
    mx_d = [dev(a, ctx) for a in z] if amsgrad else []
    p64 = [p.astype(np.float64) for p in ps]
    m64, v64 = [a.astype(np.float64) for a in z], [a.astype(np.float64) for a in z]
    mx64 = [a.astype(np.float64) for a in z] if amsgrad else []
    for t in range(1, 5):
        # shrinking gradients make v fall, so AMSGrad's max differs from v
        gs = [rand(n) / t**2 for n in SIZES]
        ops.adam_update_multi(
            p_d, [dev(g, ctx) for g in gs], m_d, v_d, lr, b1, b2, eps, t, wd, decoupled, mx_d
        )
        reference.adam_update_multi(
            p64,
            [g.astype(np.float64) for g in gs],
            m64,
            v64,
            lr,
            b1,
            b2,
            eps,
            t,
            wd,
            decoupled,
            mx64,
        )
    for a, b in zip(p_d + m_d + v_d + mx_d, p64 + m64 + v64 + mx64, strict=True):
        close(a.asnumpy(), b, 1e-5)


def test_adam_without_options_is_the_plain_step_bit_for_bit(ctx):
    p, g, m, v = (rand(300) for _ in range(4))
    v = np.abs(v)
    a = [dev(x, ctx) for x in (p, g, m, v)]
    b = [dev(x, ctx) for x in (p, g, m, v)]
    ops.adam_update(a[0], a[1], a[2], a[3], 0.01, 0.9, 0.999, 1e-8, 3)
    ops.adam_update_multi([b[0]], [b[1]], [b[2]], [b[3]], 0.01, 0.9, 0.999, 1e-8, 3, 0.0, True, [])
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.asnumpy(), y.asnumpy())


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, 0.5, float("inf")])
def test_total_norm_multi_matches_float64(ctx, p):
    xs = [rand(n) for n in SIZES]
    out = dev(np.array([np.nan]), ctx)
    ops.total_norm_multi([dev(x, ctx) for x in xs], p, out)
    flat = np.abs(np.concatenate(xs).astype(np.float64))
    ref = flat.max() if p == float("inf") else (flat**p).sum() ** (1 / p)
    np.testing.assert_allclose(out.asnumpy()[0], ref, rtol=2e-5)


def test_total_norm_multi_empty_and_nan(ctx):
    out = dev(np.array([np.nan]), ctx)
    ops.total_norm_multi([dev(np.zeros(0), ctx)], 2.0, out)
    assert out.asnumpy()[0] == 0
    out = dev(np.array([np.nan]), ctx)
    ops.total_norm_multi([], 2.0, out)
    assert out.asnumpy()[0] == 0
    x = rand(1000)
    x[517] = np.nan
    for p in (2.0, float("inf")):
        ops.total_norm_multi([dev(rand(5), ctx), dev(x, ctx)], p, out)
        assert np.isnan(out.asnumpy()[0])


@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_scale_multi_matches_float64(ctx, max_norm):
    xs = [rand(n) for n in SIZES]
    xd = [dev(x, ctx) for x in xs]
    norm = dev(np.array([3.25]), ctx)
    ops.clip_scale_multi(xd, norm, max_norm)
    coef = min(1.0, max_norm / (3.25 + 1e-6))
    for a, x in zip(xd, xs, strict=True):
        close(a.asnumpy(), x * coef)


def test_bad_inputs_raise(ctx):
    p, g, v = dev(rand(4), ctx), dev(rand(4), ctx), dev(rand(4), ctx)
    with pytest.raises(ValueError, match="momentum_sgd_update: dampening"):
        ops.momentum_sgd_update([p], [g], [v], 0.1, 0.9, 1.5)
    with pytest.raises(ValueError, match="sgd_update: weight_decay"):
        ops.sgd_update([p], [g], 0.1, -1.0)
    m, w = dev(rand(4), ctx), dev(np.abs(rand(4)), ctx)
    with pytest.raises(ValueError, match="adam_update_multi"):
        ops.adam_update_multi(
            [p], [g], [m], [w], 0.1, 0.9, 0.99, 1e-8, 1, 0.0, False, [dev(rand(5), ctx)]
        )
    with pytest.raises(ValueError, match="adam_update_multi.*max_v"):
        ops.adam_update_multi([p], [g], [m], [w], 0.1, 0.9, 0.99, 1e-8, 1, 0.0, False, [m])
    out = dev(rand(1), ctx)
    with pytest.raises(ValueError, match="total_norm_multi: norm_type"):
        ops.total_norm_multi([p], 0.0, out)
    with pytest.raises(ValueError, match="total_norm_multi: out"):
        ops.total_norm_multi([p], 2.0, dev(rand(2), ctx))
    with pytest.raises(ValueError, match="total_norm_multi: out must not"):
        ops.total_norm_multi([out], 2.0, out)
    with pytest.raises(TypeError, match="total_norm_multi"):
        ops.total_norm_multi([p.asnumpy()], 2.0, out)
    with pytest.raises(ValueError, match="clip_scale_multi: max_norm"):
        ops.clip_scale_multi([p], out, float("nan"))
    with pytest.raises(ValueError, match="clip_scale_multi"):
        ops.clip_scale_multi([p, p], out, 1.0)
    with pytest.raises(ValueError, match="clip_scale_multi"):
        ops.clip_scale_multi([out], out, 1.0)
    if ctx != gpumat.cpu():
        with pytest.raises(ValueError, match="total_norm_multi"):
            ops.total_norm_multi([p], 2.0, gpumat.array(np.zeros(1, np.float32), gpumat.cpu()))
