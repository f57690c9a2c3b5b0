"""The multi-tensor optimizer ops (ops.momentum_sgd_update, ops.adam_update_multi,
ops.adadelta_update_multi) and the optimizers built on them, against float64 numpy references over
several steps on every device (Adadelta against torch.optim.Adadelta too); and the host
relu_bias_gradient's row chunks (boundaries, thread-count independence)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import gpumat
from gpumat import ops
from gpumat.optim import Adam, MomentumSGD

RNG = np.random.default_rng(1617)

# Sizes around the CUDA block (256 threads) and the table of 32 tensors per launch: 40 tensors run
# the chunk loop twice; 0 and 1 are the edge sizes.
SIZES_40 = [0, 1, 255, 256, 257, 1000, 3, 4099] + [int(n) for n in RNG.integers(1, 700, 32)]


def rand(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, size=shape).astype(np.float32)


def shapes_for(count):
    sizes = SIZES_40[:count]
    # some 2-D shapes, so that shapes (not only sizes) travel through the lists
    return [(n // 3, 3) if n % 3 == 0 and n else (n,) for n in sizes]


def dev(x, ctx):
    return gpumat.array(np.asarray(x, np.float32), ctx)


def close(got, ref, tol):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape
    scale = max(1.0, float(np.abs(ref).max(initial=0.0)))
    np.testing.assert_allclose(got, ref, rtol=0, atol=tol * scale)


def adam64(p, g, m, v, lr, b1, b2, eps, t):
    """Kingma & Ba (2015), Algorithm 1, in float64."""
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    p = p - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return p, m, v


# ------------------------------------------------------------------------------------------------
# ops.momentum_sgd_update / ops.adam_update_multi
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 5, 40])
def test_momentum_sgd_update_matches_float64(ctx, count):
    shapes = shapes_for(count)
    p64 = [rand(*s).astype(np.float64) for s in shapes]
    v64 = [rand(*s).astype(np.float64) for s in shapes]
    p_d, v_d = [dev(p, ctx) for p in p64], [dev(v, ctx) for v in v64]
    for lr, mu in [(0.1, 0.9), (0.35, 0.5), (0.02, 0.0)]:
        grads = [rand(*s) for s in shapes]
        before = gpumat.launch_count(ctx)
        ops.momentum_sgd_update(p_d, [dev(g, ctx) for g in grads], v_d, lr, mu)
        assert gpumat.launch_count(ctx) - before == 1
        v64 = [mu * v + g for v, g in zip(v64, grads, strict=True)]
        p64 = [p - lr * v for p, v in zip(p64, v64, strict=True)]
        for got_p, got_v, p, v in zip(p_d, v_d, p64, v64, strict=True):
            close(got_v.asnumpy(), v, 1e-6)
            close(got_p.asnumpy(), p, 1e-6)


@pytest.mark.parametrize("count", [1, 5, 40])
def test_adam_update_multi_matches_float64(ctx, count):
    shapes = shapes_for(count)
    p64 = [rand(*s).astype(np.float64) for s in shapes]
    m64 = [np.zeros(s) for s in shapes]
    v64 = [np.zeros(s) for s in shapes]
    p_d = [dev(p, ctx) for p in p64]
    m_d, v_d = [dev(m, ctx) for m in m64], [dev(v, ctx) for v in v64]
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
    for t in range(1, 5):
        grads = [rand(*s) for s in shapes]
        before = gpumat.launch_count(ctx)
        ops.adam_update_multi(p_d, [dev(g, ctx) for g in grads], m_d, v_d, lr, b1, b2, eps, t)
        assert gpumat.launch_count(ctx) - before == 1
        new = [adam64(*x, lr, b1, b2, eps, t) for x in zip(p64, grads, m64, v64, strict=True)]
        p64, m64, v64 = (list(x) for x in zip(*new, strict=True))
        for got, ref in zip(p_d + m_d + v_d, p64 + m64 + v64, strict=True):
            close(got.asnumpy(), ref, 1e-5)


def test_adam_update_multi_equals_single_tensor_adam_update(ctx):
    """Each tensor of the multi-tensor op gets the single-tensor op's float32 result."""
    shapes = shapes_for(7)
    start = [[rand(*s), rand(*s), rand(*s), rand(*s, low=0.0)] for s in shapes]
    multi = [[dev(x, ctx) for x in tensor] for tensor in start]
    single = [[dev(x, ctx) for x in tensor] for tensor in start]
    args = (0.003, 0.8, 0.99, 1e-6, 3)
    ops.adam_update_multi(*([t[i] for t in multi] for i in range(4)), *args)
    for p, g, m, v in single:
        ops.adam_update(p, g, m, v, *args)
    for a, b in zip(multi, single, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_allclose(x.asnumpy(), y.asnumpy(), rtol=1e-6, atol=1e-7)


def test_empty_lists_are_a_no_op(ctx):
    before = gpumat.launch_count(ctx)
    ops.momentum_sgd_update([], [], [], 0.1, 0.9)
    ops.adam_update_multi([], [], [], [], 0.1, 0.9, 0.999, 1e-8, 1)
    assert gpumat.launch_count(ctx) == before


def test_multi_tensor_ops_reject_bad_lists(ctx, gpu_ctx):
    other = gpu_ctx if ctx != gpu_ctx else gpumat.cpu()
    p, q, g = dev(rand(3, 4), ctx), dev(rand(5), ctx), dev(rand(3, 4), ctx)
    gq, v, w = dev(rand(5), ctx), dev(rand(3, 4), ctx), dev(rand(5), ctx)
    m, mw = dev(rand(3, 4), ctx), dev(rand(5), ctx)
    values = [x.asnumpy() for x in (p, q, v, w, m, mw)]
    bad_momentum = [
        (ValueError, "got 1 gradients for 2 parameters", ([p, q], [g], [v, w])),
        (ValueError, "got 1 velocities for 2 parameters", ([p, q], [g, gq], [v])),
        (ValueError, "velocity 1 has shape", ([p, q], [g, gq], [v, v])),
        (ValueError, "gradient 0 has shape", ([p], [dev(rand(4, 3), ctx)], [v])),
        (ValueError, "different devices", ([p], [dev(rand(3, 4), other)], [v])),
        (ValueError, "different devices", ([p, q], [g, gq], [v, dev(rand(5), other)])),
        (ValueError, "shares memory", ([p, q], [g, gq], [p, w])),  # velocity is a parameter
        (ValueError, "shares memory", ([p, q], [v, gq], [v, w])),  # velocity is a gradient
        (ValueError, "shares memory", ([p, p], [g, g], [v, m])),  # a parameter twice
        (ValueError, "shares memory", ([p], [g], [p.reshape((12,)).reshape((3, 4))])),  # a view
        (TypeError, "velocity 0 is a ndarray", ([p], [g], [v.asnumpy()])),
        (TypeError, "must be lists", ([p], [g], v)),
        (TypeError, "must be lists", (p, [g], [v])),
    ]
    for exc, match, lists in bad_momentum:
        with pytest.raises(exc, match=f"momentum_sgd_update.*{match}"):
            ops.momentum_sgd_update(*lists, 0.1, 0.9)
    for lr, mu in [(float("nan"), 0.9), (-1.0, 0.9), (0.1, 1.0), (0.1, -0.1), (float("inf"), 0.5)]:
        with pytest.raises(ValueError, match="momentum_sgd_update"):
            ops.momentum_sgd_update([p], [g], [v], lr, mu)
    for lr, mu in [("0.1", 0.9), (0.1, None), (True, 0.9)]:
        with pytest.raises(TypeError, match="momentum_sgd_update"):
            ops.momentum_sgd_update([p], [g], [v], lr, mu)

    ok = ([p, q], [g, gq], [m, mw], [v, w])
    bad_adam = [
        (ValueError, "got 1 m arrays for 2 parameters", ([p, q], [g, gq], [m], [v, w])),
        (ValueError, "v 1 has shape", ([p, q], [g, gq], [m, mw], [v, v])),
        (ValueError, "shares memory", ([p, q], [g, gq], [m, mw], [m, w])),  # m is v
        (ValueError, "shares memory", ([p, q], [g, gq], [g, mw], [v, w])),  # m is a gradient
        (ValueError, "different devices", ([p], [g], [dev(rand(3, 4), other)], [v])),
        (TypeError, "gradient 1 is a NoneType", ([p, q], [g, None], [m, mw], [v, w])),
    ]
    for exc, match, lists in bad_adam:
        with pytest.raises(exc, match=f"adam_update_multi.*{match}"):
            ops.adam_update_multi(*lists, 0.1, 0.9, 0.999, 1e-8, 1)
    for scalars in [
        (0.1, 1.0, 0.999, 1e-8, 1),
        (0.1, 0.9, -0.5, 1e-8, 1),
        (-0.1, 0.9, 0.999, 1e-8, 1),
        (0.1, 0.9, 0.999, float("nan"), 1),
        (0.1, 0.9, 0.999, 1e-8, 0),
    ]:
        with pytest.raises(ValueError, match="adam_update_multi"):
            ops.adam_update_multi(*ok, *scalars)
    with pytest.raises(TypeError, match="adam_update_multi: step must be an int"):
        ops.adam_update_multi(*ok, 0.1, 0.9, 0.999, 1e-8, 1.0)
    # nothing was written by any rejected call
    for x, before in zip((p, q, v, w, m, mw), values, strict=True):
        np.testing.assert_array_equal(x.asnumpy(), before)


def test_gradients_may_share_memory(ctx):
    """Gradients are only read: two parameters may be given one gradient array."""
    p, q, g = dev(rand(6), ctx), dev(rand(6), ctx), rand(6)
    v, w = dev(np.zeros(6), ctx), dev(np.zeros(6), ctx)
    p0, q0 = p.asnumpy().astype(np.float64), q.asnumpy().astype(np.float64)
    g_d = dev(g, ctx)
    ops.momentum_sgd_update([p, q], [g_d, g_d], [v, w], 0.5, 0.9)
    close(p.asnumpy(), p0 - 0.5 * g, 1e-6)
    close(q.asnumpy(), q0 - 0.5 * g, 1e-6)


# ------------------------------------------------------------------------------------------------
# ops.adadelta_update_multi
# ------------------------------------------------------------------------------------------------

# Hyperparameters at which each of lr, rho and eps moves the result far past the tolerance
# (test_adadelta_hyperparameters_each_matter checks it): eps is large enough to matter next to the
# running averages, and the first steps' size is sqrt(eps) / sqrt(sq + eps) by design.
ADADELTA = {"lr": 0.7, "rho": 0.8, "eps": 1e-3}
ADADELTA_TOL = 1e-5  # float32 steps against float64: a few ulps of the result, times the steps


def adadelta64(p, g, sq, acc, lr, rho, eps):
    """Zeiler (2012), Algorithm 1, with PyTorch's lr factor, in float64."""
    sq = rho * sq + (1 - rho) * g * g
    d = np.sqrt(acc + eps) / np.sqrt(sq + eps) * g
    acc = rho * acc + (1 - rho) * d * d
    return p - lr * d, sq, acc


def _adadelta_run(shapes, grads_per_step, start, ctx, lr, rho, eps):
    """Runs the steps on ctx (and in float64); returns (device arrays, float64 arrays)."""
    p64 = [x.astype(np.float64) for x in start]
    sq64 = [np.zeros(s) for s in shapes]
    acc64 = [np.zeros(s) for s in shapes]
    p_d = [dev(x, ctx) for x in start]
    sq_d = [dev(np.zeros(s), ctx) for s in shapes]
    acc_d = [dev(np.zeros(s), ctx) for s in shapes]
    for grads in grads_per_step:
        before = gpumat.launch_count(ctx)
        ops.adadelta_update_multi(p_d, [dev(g, ctx) for g in grads], sq_d, acc_d, lr, rho, eps)
        assert gpumat.launch_count(ctx) - before == 1
        new = [adadelta64(*x, lr, rho, eps) for x in zip(p64, grads, sq64, acc64, strict=True)]
        p64, sq64, acc64 = (list(x) for x in zip(*new, strict=True))
    return (p_d, sq_d, acc_d), (p64, sq64, acc64)


@pytest.mark.parametrize("count", [1, 5, 40])
def test_adadelta_update_multi_matches_float64(ctx, count):
    shapes = shapes_for(count)
    start = [rand(*s) for s in shapes]
    steps = [[rand(*s) for s in shapes] for _ in range(5)]
    got, ref = _adadelta_run(shapes, steps, start, ctx, **ADADELTA)
    for got_list, ref_list in zip(got, ref, strict=True):
        for x, r in zip(got_list, ref_list, strict=True):
            close(x.asnumpy(), r, ADADELTA_TOL)


def test_adadelta_large_tensor_runs_the_grid_stride_loop(ctx):
    """CUDA gives each tensor at most 1024 blocks of 256 threads (262,144 elements): a tensor of
    300,001 takes the grid-stride loop's second lap, next to a small one in the same launch."""
    shapes = [(300_001,), (5,), (600, 501)]
    start = [rand(*s) for s in shapes]
    steps = [[rand(*s) for s in shapes] for _ in range(2)]
    got, ref = _adadelta_run(shapes, steps, start, ctx, **ADADELTA)
    for got_list, ref_list in zip(got, ref, strict=True):
        for x, r in zip(got_list, ref_list, strict=True):
            close(x.asnumpy(), r, ADADELTA_TOL)


@pytest.mark.parametrize(
    "hyper",
    [ADADELTA, {"lr": 1.0, "rho": 0.9, "eps": 1e-6}, {"lr": 0.05, "rho": 0.3, "eps": 0.1}],
    ids=["test-values", "pytorch-defaults", "small-rho"],
)
def test_adadelta_matches_torch_optim_adadelta(ctx, hyper):
    torch = pytest.importorskip("torch")
    shapes = shapes_for(7)
    start = [rand(*s) for s in shapes]
    steps = [[rand(*s) for s in shapes] for _ in range(6)]
    steps[2][0][...] = 0.0  # a zero gradient: no move, the averages decay
    t_params = [torch.tensor(x, requires_grad=True) for x in start]
    t_opt = torch.optim.Adadelta(t_params, **hyper)
    p_d = [dev(x, ctx) for x in start]
    sq_d = [dev(np.zeros(s), ctx) for s in shapes]
    acc_d = [dev(np.zeros(s), ctx) for s in shapes]
    for grads in steps:
        for tp, g in zip(t_params, grads, strict=True):
            tp.grad = torch.from_numpy(g.copy())
        t_opt.step()
        ops.adadelta_update_multi(
            p_d, [dev(g, ctx) for g in grads], sq_d, acc_d, hyper["lr"], hyper["rho"], hyper["eps"]
        )
    for i, tp in enumerate(t_params):
        state = t_opt.state[tp]
        close(p_d[i].asnumpy(), tp.detach().numpy(), ADADELTA_TOL)
        close(sq_d[i].asnumpy(), state["square_avg"].numpy(), ADADELTA_TOL)
        close(acc_d[i].asnumpy(), state["acc_delta"].numpy(), ADADELTA_TOL)


def test_adadelta_hyperparameters_each_matter():
    """At ADADELTA's values, a 10% change of any one of lr, rho, eps moves the float64 result by
    over 100 times the tolerance the devices are held to: the tests above would see a kernel that
    ignored or misused any of them."""
    shapes = shapes_for(5)
    start = [rand(*s) for s in shapes]
    steps = [[rand(*s) for s in shapes] for _ in range(5)]

    def final(lr, rho, eps):
        p = [x.astype(np.float64) for x in start]
        sq, acc = [np.zeros(s) for s in shapes], [np.zeros(s) for s in shapes]
        for grads in steps:
            new = [adadelta64(*x, lr, rho, eps) for x in zip(p, grads, sq, acc, strict=True)]
            p, sq, acc = (list(x) for x in zip(*new, strict=True))
        return np.concatenate([x.ravel() for x in p])

    base = final(**ADADELTA)
    for name in ADADELTA:
        changed = final(**{**ADADELTA, name: ADADELTA[name] * 1.1})
        assert np.max(np.abs(changed - base)) > 100 * ADADELTA_TOL * max(1, np.abs(base).max()), (
            name
        )


def test_adadelta_update_multi_rejects_bad_input(ctx, gpu_ctx):
    other = gpu_ctx if ctx != gpu_ctx else gpumat.cpu()
    p, q, g, gq = dev(rand(3, 4), ctx), dev(rand(5), ctx), dev(rand(3, 4), ctx), dev(rand(5), ctx)
    s, sq5, a, a5 = (dev(np.zeros(n), ctx) for n in ((3, 4), (5,), (3, 4), (5,)))
    values = [x.asnumpy() for x in (p, q, s, sq5, a, a5)]
    ok = ([p, q], [g, gq], [s, sq5], [a, a5])
    bad_lists = [
        (ValueError, "got 1 gradients for 2 parameters", ([p, q], [g], [s, sq5], [a, a5])),
        (ValueError, "got 1 square_avgs for 2 parameters", ([p, q], [g, gq], [s], [a, a5])),
        (ValueError, "got 3 acc_deltas for 2 parameters", ([p, q], [g, gq], [s, sq5], [a, a5, a])),
        (ValueError, "acc_delta 1 has shape", ([p, q], [g, gq], [s, sq5], [a, a])),
        (ValueError, "gradient 0 has shape", ([p], [dev(rand(4, 3), ctx)], [s], [a])),
        (ValueError, "different devices", ([p], [dev(rand(3, 4), other)], [s], [a])),
        (ValueError, "different devices", ([p], [g], [s], [dev(np.zeros((3, 4)), other)])),
        (ValueError, "shares memory", ([p, q], [g, gq], [s, sq5], [s, a5])),  # acc is sq
        (ValueError, "shares memory", ([p, q], [g, gq], [p, sq5], [a, a5])),  # sq is a parameter
        (ValueError, "shares memory", ([p, q], [g, gq], [g, sq5], [a, a5])),  # sq is a gradient
        (  # a parameter twice
            ValueError,
            "shares memory",
            ([p, p], [g, g], [s, dev(np.zeros((3, 4)), ctx)], [a, dev(np.zeros((3, 4)), ctx)]),
        ),
        (ValueError, "shares memory", ([p], [g], [s], [p.reshape((12,)).reshape((3, 4))])),
        (TypeError, "acc_delta 0 is a ndarray", ([p], [g], [s], [a.asnumpy()])),
        (TypeError, "gradient 1 is a NoneType", ([p, q], [g, None], [s, sq5], [a, a5])),
        (TypeError, "must be lists", ([p], [g], s, [a])),
        (TypeError, "must be lists", (p, [g], [s], [a])),
    ]
    for exc, match, lists in bad_lists:
        with pytest.raises(exc, match=f"adadelta_update_multi.*{match}"):
            ops.adadelta_update_multi(*lists, 0.5, 0.9, 1e-6)
    nan, inf = float("nan"), float("inf")
    for lr, rho, eps, what in [
        (-0.1, 0.9, 1e-6, "lr"),
        (nan, 0.9, 1e-6, "lr"),
        (inf, 0.9, 1e-6, "lr"),
        (1e300, 0.9, 1e-6, "lr"),  # infinite once float32
        (0.5, -0.01, 1e-6, "rho"),
        (0.5, 1.01, 1e-6, "rho"),
        (0.5, nan, 1e-6, "rho"),
        (0.5, 0.9, 0.0, "eps"),
        (0.5, 0.9, -1e-6, "eps"),
        (0.5, 0.9, nan, "eps"),
        (0.5, 0.9, inf, "eps"),
    ]:
        with pytest.raises(ValueError, match=f"adadelta_update_multi: {what} must be"):
            ops.adadelta_update_multi(*ok, lr, rho, eps)
    for scalars in [("0.5", 0.9, 1e-6), (0.5, None, 1e-6), (0.5, 0.9, True), (0.5, 0.9, [1e-6])]:
        with pytest.raises(TypeError, match="adadelta_update_multi"):
            ops.adadelta_update_multi(*ok, *scalars)
    # nothing was written by any rejected call
    for x, before in zip((p, q, s, sq5, a, a5), values, strict=True):
        np.testing.assert_array_equal(x.asnumpy(), before)
    # the edges of the ranges are accepted: lr 0 (no move), rho 0 and 1, a tiny eps
    for lr, rho, eps in [(0.0, 0.9, 1e-6), (0.5, 0.0, 1e-6), (0.5, 1.0, 1e-30)]:
        ops.adadelta_update_multi(*ok, lr, rho, eps)
    before = gpumat.launch_count(ctx)
    ops.adadelta_update_multi([], [], [], [], 0.5, 0.9, 1e-6)  # no tensors: no launch
    assert gpumat.launch_count(ctx) == before


# ------------------------------------------------------------------------------------------------
# The optimizers: one call per step on a device, same steps as the float64 numpy path
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["MomentumSGD", "Adam"])
@pytest.mark.parametrize("count", [3, 40])
def test_optimizer_on_device_matches_float64_numpy_path(ctx, kind, count):
    shapes = shapes_for(count)
    start = [rand(*s) for s in shapes]
    ref_params = [x.astype(np.float64) for x in start]
    dev_params = [dev(x, ctx) for x in start]
    make = {
        "MomentumSGD": lambda ps: MomentumSGD(ps, lr=0.05, momentum=0.8),
        "Adam": lambda ps: Adam(ps, lr=0.01, betas=(0.8, 0.99), eps=1e-6),
    }[kind]
    ref_opt, dev_opt = make(ref_params), make(dev_params)
    for step in range(4):
        grads = [rand(*s) for s in shapes]
        ref_opt.step([g.astype(np.float64) for g in grads])
        before = gpumat.launch_count(ctx)
        dev_opt.step([dev(g, ctx) for g in grads])
        assert gpumat.launch_count(ctx) - before == 1
        if step == 1:
            dev_opt.lr = ref_opt.lr = dev_opt.lr * 0.5
    for got, ref in zip(dev_params, ref_params, strict=True):
        close(got.asnumpy(), ref, 1e-5)
    own, ref_state = dev_opt.state_dict()["tensors"], ref_opt.state_dict()["tensors"]
    assert set(own) == set(ref_state)
    for key, value in own.items():
        close(value.asnumpy(), ref_state[key], 1e-5)


def test_rejected_step_changes_no_state(ctx):
    params = [dev(rand(3, 2), ctx), dev(rand(4), ctx)]
    values = [p.asnumpy() for p in params]
    for opt in (MomentumSGD(params, lr=0.1), Adam(params, lr=0.1)):
        state = {k: v.asnumpy() for k, v in opt.state_dict()["tensors"].items()}
        with pytest.raises(ValueError, match="has shape"):
            opt.step([dev(rand(3, 2), ctx), dev(rand(5), ctx)])
        for p, before in zip(params, values, strict=True):
            np.testing.assert_array_equal(p.asnumpy(), before)
        for key, value in opt.state_dict()["tensors"].items():
            np.testing.assert_array_equal(value.asnumpy(), state[key])
        assert getattr(opt, "t", 0) == 0


def test_optimizers_on_two_devices_keep_the_per_parameter_path(gpu_ctx):
    """Parameters on two devices: no single multi-tensor call can take them; each is updated on
    its own device, with the same result as the float64 reference."""
    start = [rand(4, 3), rand(7)]
    for kind in ("MomentumSGD", "Adam"):
        params = [dev(start[0], gpumat.cpu()), dev(start[1], gpu_ctx)]
        ref = [x.astype(np.float64) for x in start]
        opt = MomentumSGD(params, lr=0.1) if kind == "MomentumSGD" else Adam(params, lr=0.1)
        ref_opt = MomentumSGD(ref, lr=0.1) if kind == "MomentumSGD" else Adam(ref, lr=0.1)
        for _ in range(2):
            grads = [rand(4, 3), rand(7)]
            opt.step([dev(grads[0], gpumat.cpu()), dev(grads[1], gpu_ctx)])
            ref_opt.step([g.astype(np.float64) for g in grads])
        for got, r in zip(params, ref, strict=True):
            close(got.asnumpy(), r, 1e-5)


# ------------------------------------------------------------------------------------------------
# relu_bias_gradient: the host kernel's row chunks (64+ rows each, at most 64 chunks, 512-column
# tiles) and vector tails, on every device
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rows,cols",
    [
        (1, 1),
        (1, 1031),
        (63, 3),
        (64, 5),
        (65, 7),
        (129, 513),
        (1000, 256),
        (4097, 33),
        (200, 1025),
    ],
)
def test_relu_bias_gradient_chunk_boundaries_match_float64(ctx, rows, cols):
    y, dy = rand(rows, cols), rand(rows, cols, low=-3.0, high=3.0)
    dz_ref = np.where(y > 0, dy.astype(np.float64), 0.0)
    dz, db = gpumat.empty((rows, cols), ctx), gpumat.empty((cols,), ctx)
    ops.relu_bias_gradient(dev(y, ctx), dev(dy, ctx), dz, db)
    np.testing.assert_array_equal(dz.asnumpy(), dz_ref.astype(np.float32))
    close(db.asnumpy(), dz_ref.sum(axis=0), 1e-6 * max(1, rows) ** 0.5)


_THREADS_SCRIPT = """
import sys, numpy as np, gpumat
from gpumat import ops
rng = np.random.default_rng(7)
out = []
for rows, cols in [(1000, 256), (4097, 33), (200, 1025)]:
    y = gpumat.array(rng.standard_normal((rows, cols), dtype=np.float32))
    dy = gpumat.array(rng.standard_normal((rows, cols), dtype=np.float32))
    dz, db = gpumat.empty((rows, cols)), gpumat.empty((cols,))
    ops.relu_bias_gradient(y, dy, dz, db)
    out.append(db.asnumpy().tobytes().hex())
sys.stdout.write(" ".join(out))
"""


def test_host_relu_bias_gradient_is_independent_of_thread_count(tmp_path):
    """The column sums are bitwise equal on 1, 2 and 3 OpenMP threads (fixed row chunks, added in
    chunk order)."""
    outs = []
    for threads in ("1", "2", "3"):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        # Outside the checkout, so that `import gpumat` finds the installed package, not the source.
        run = subprocess.run(
            [sys.executable, "-c", _THREADS_SCRIPT],
            env=env,
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stderr
        outs.append(run.stdout)
    assert outs[0] == outs[1] == outs[2]
