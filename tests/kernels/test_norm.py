"""The norm family: layer norm, RMS norm and batch norm.

Kernels (gpumat.ops.layer_norm, batch_norm, their statistics and gradients) against float64 numpy
written here on fresh random inputs (rows of every length class, zero rows, rows of large mean),
outputs NaN-poisoned, on every device; graph ops against float64 finite differences (numpy
backend, so the training batch-norm gradient is checked through the batch mean and variance) and
each device against numpy; F.layer_norm / rms_norm / batch_norm and nn.LayerNorm / RMSNorm /
BatchNorm1d / BatchNorm2d against PyTorch CPU (values, gradients, running statistics,
state_dict round trips, non-contiguous and empty inputs); a compiled step against the eager one;
the errors PyTorch raises.
"""

import numpy as np
import pytest
import torch
from helpers import nan_array, new_rng, rand, shape_id
from nn_helpers import check_device_gradients, check_fd_gradients, rand64

import gpumat
import gpumat.nn as nn
import gpumat.nn.functional as F  # noqa: N812
from gpumat import graph, ops, reference

# (rows shape, normalized shape): one value, a warp's tail, several warps, a long row, many rows,
# zero rows.
LN_CASES = [
    ((5,), (1,)),
    ((3,), (33,)),
    ((2, 3), (4, 5)),
    ((7,), (1000,)),
    ((97,), (260,)),  # the host weight gradient's row chunks (the last short) and column blocks
    ((0,), (6,)),
    ((), (9,)),
]
# (N, C, inner...) for batch norm
BN_SHAPES = [(2, 3), (5, 4, 7), (3, 2, 5, 6), (1, 3, 300), (0, 3, 4)]


def _ln64(x, w, b, eps, rms):
    d = w.size
    xr = x.astype(np.float64).reshape(-1, d)
    mean = 0.0 if rms else xr.mean(1, keepdims=True)
    var = ((xr - mean) ** 2).mean(1, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    y = (xr - mean) * rstd * w.reshape(-1) + b.reshape(-1)
    return y.reshape(x.shape), np.broadcast_to(mean, rstd.shape), rstd


def _ln_grads64(x, w, dy, eps, rms):
    """dx and dweight of sum(layer_norm(x) * dy), by the chain rule written out in float64."""
    d = w.size
    xr, g = x.astype(np.float64).reshape(-1, d), dy.astype(np.float64).reshape(-1, d)
    mean = 0.0 if rms else xr.mean(1, keepdims=True)
    c = xr - mean
    var = (c**2).mean(1, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    gw = g * w.reshape(-1)
    dvar = (gw * c).sum(1, keepdims=True) * -0.5 * rstd**3
    dx = gw * rstd + dvar * 2 * c / d
    if not rms:
        dmean = -(gw * rstd).sum(1, keepdims=True) - dvar * 2 * c.mean(1, keepdims=True)
        dx += dmean / d
    dw = (g * c * rstd).sum(0)
    return dx.reshape(x.shape), dw.reshape(w.shape)


@pytest.mark.parametrize("rms", [False, True], ids=["layer", "rms"])
@pytest.mark.parametrize("case", LN_CASES, ids=lambda c: shape_id(c[0] + c[1]))
def test_layer_norm_kernels_match_float64(ctx, case, rms):
    rng, seed = new_rng()
    lead, norm = case
    shape = lead + norm
    x = rand(shape, rng) + np.float32(3.0)  # an offset the statistics must remove
    w, b, dy = rand(norm, rng), rand(norm, rng), rand(shape, rng)
    eps = 1e-5
    y64, mean64, rstd64 = _ln64(x, w, b, eps, rms)
    x_, w_, b_ = (gpumat.array(a, ctx) for a in (x, w, b))
    y = nan_array(shape, ctx)
    ops.layer_norm(x_, w_, b_, y, eps, rms)
    np.testing.assert_allclose(y.asnumpy(), y64, rtol=2e-5, atol=2e-5, err_msg=f"seed={seed}")
    rows = int(np.prod(lead))
    stats = nan_array((rows, 2), ctx)
    ops.layer_norm_stats(x_, stats, eps, rms)
    want = np.concatenate([mean64, rstd64], axis=1) if rows else np.zeros((0, 2))
    np.testing.assert_allclose(stats.asnumpy(), want, rtol=2e-5, atol=1e-6)
    dx64, dw64 = _ln_grads64(x, w, dy, eps, rms)
    dx, dw = nan_array(shape, ctx), nan_array(norm, ctx)
    ops.layer_norm_gradient(x_, stats, w_, gpumat.array(dy, ctx), dx, rms)
    ops.layer_norm_weight_gradient(x_, stats, gpumat.array(dy, ctx), dw)
    scale = max(1.0, float(np.abs(dx64).max(initial=0)))
    np.testing.assert_allclose(dx.asnumpy(), dx64, rtol=1e-4, atol=2e-5 * scale)
    np.testing.assert_allclose(dw.asnumpy(), dw64, rtol=1e-4, atol=1e-5 * max(rows, 1))
    # the three gradients in one call: dx and dweight the separate kernels' (the host: their
    # bits), dbias the sum of dy over the rows
    fdx, fdw, fdb = nan_array(shape, ctx), nan_array(norm, ctx), nan_array(norm, ctx)
    ops.layer_norm_backward(x_, w_, gpumat.array(dy, ctx), fdx, fdw, fdb, eps, rms)
    np.testing.assert_allclose(fdx.asnumpy(), dx64, rtol=1e-4, atol=2e-5 * scale)
    np.testing.assert_allclose(fdw.asnumpy(), dw64, rtol=1e-4, atol=1e-5 * max(rows, 1))
    db64 = dy.astype(np.float64).reshape(-1, int(np.prod(norm))).sum(0).reshape(norm)
    np.testing.assert_allclose(fdb.asnumpy(), db64, rtol=1e-5, atol=1e-6 * max(rows, 1))
    if ctx.device_type == "cpu":
        np.testing.assert_array_equal(fdx.asnumpy(), dx.asnumpy())
        np.testing.assert_array_equal(fdw.asnumpy(), dw.asnumpy())
    # numpy twin (gpumat.reference) agrees as well
    ry = np.full(shape, np.nan, np.float32)
    reference.layer_norm(x, w, b, ry, eps, rms)
    np.testing.assert_allclose(ry, y64, rtol=1e-5, atol=1e-6)
    rdx, rdw, rdb = (np.full(a.shape, np.nan) for a in (x, w, w))
    reference.layer_norm_backward(x, w, dy, rdx, rdw, rdb, eps, rms)
    np.testing.assert_allclose(rdx, dx64, rtol=1e-6, atol=1e-6 * scale)
    np.testing.assert_allclose(rdw, dw64, rtol=1e-6, atol=1e-9 * max(rows, 1))
    np.testing.assert_allclose(rdb, db64, rtol=1e-9, atol=1e-9 * max(rows, 1))


def test_layer_norm_large_mean_keeps_precision(ctx):
    """Rows of mean 1e4 and spread 1: E[x^2] - mean^2 in float32 would lose every digit."""
    rng, seed = new_rng()
    x = (rng.standard_normal((6, 300)) + 1e4).astype(np.float32)
    w, b = np.ones(300, np.float32), np.zeros(300, np.float32)
    y = nan_array(x.shape, ctx)
    ops.layer_norm(gpumat.array(x, ctx), gpumat.array(w, ctx), gpumat.array(b, ctx), y, 1e-5, False)
    np.testing.assert_allclose(
        y.asnumpy(), _ln64(x, w, b, 1e-5, False)[0], atol=2e-3, err_msg=f"seed={seed}"
    )


def _bn64(x, eps):
    xc = x.astype(np.float64).reshape(x.shape[0], x.shape[1], -1)
    mean = xc.mean((0, 2))
    var = ((xc - mean[None, :, None]) ** 2).mean((0, 2))
    return mean, var


@pytest.mark.parametrize("shape", BN_SHAPES, ids=shape_id)
def test_batch_norm_kernels_match_float64(ctx, shape):
    rng, seed = new_rng()
    x = rand(shape, rng) + np.float32(-2.0)
    c = shape[1]
    w, b, dy = rand((c,), rng), rand((c,), rng), rand(shape, rng)
    eps = 1e-3
    x_ = gpumat.array(x, ctx)
    stats = nan_array((c, 2), ctx)
    ops.batch_norm_stats(x_, stats)
    count = x.size // c
    if count:
        mean, var = _bn64(x, eps)
        np.testing.assert_allclose(stats.asnumpy(), np.stack([mean, var], 1), rtol=1e-5, atol=1e-6)
    else:
        assert np.isnan(stats.asnumpy()).all()  # no values: NaN statistics, as 0 / 0
        mean, var = np.zeros(c), np.ones(c)
        stats = gpumat.array(np.stack([mean, var], 1).astype(np.float32), ctx)
    bshape = (1, c) + (1,) * (len(shape) - 2)
    rstd = (1 / np.sqrt(var + eps)).reshape(bshape)
    xhat = (x.astype(np.float64) - mean.reshape(bshape)) * rstd
    y = nan_array(shape, ctx)
    ops.batch_norm(x_, stats, gpumat.array(w, ctx), gpumat.array(b, ctx), y, eps)
    y64 = xhat * w.reshape(bshape) + b.reshape(bshape)
    np.testing.assert_allclose(y.asnumpy(), y64, rtol=2e-5, atol=2e-5, err_msg=f"seed={seed}")
    axes = (0,) + tuple(range(2, len(shape)))
    g = dy.astype(np.float64)
    for training in (True, False):
        dx = nan_array(shape, ctx)
        ops.batch_norm_gradient(
            x_, stats, gpumat.array(w, ctx), gpumat.array(dy, ctx), dx, eps, training
        )
        gg = g
        if training and count:
            gg = g - g.mean(axes, keepdims=True) - xhat * (g * xhat).mean(axes, keepdims=True)
        want = w.reshape(bshape) * rstd * gg
        np.testing.assert_allclose(dx.asnumpy(), want, rtol=1e-4, atol=1e-4, err_msg=f"{training}")
    dw = nan_array((c,), ctx)
    ops.batch_norm_weight_gradient(x_, stats, gpumat.array(dy, ctx), dw, eps)
    np.testing.assert_allclose(dw.asnumpy(), (g * xhat).sum(axes), rtol=1e-4, atol=1e-4)


def test_kernels_are_deterministic(ctx):
    rng, _ = new_rng()
    x, dy = rand((64, 257), rng), rand((64, 257), rng)
    results = []
    for _ in range(2):
        stats, dw = nan_array((64, 2), ctx), nan_array((257,), ctx)
        ops.layer_norm_stats(gpumat.array(x, ctx), stats, 1e-5, False)
        ops.layer_norm_weight_gradient(gpumat.array(x, ctx), stats, gpumat.array(dy, ctx), dw)
        bst = nan_array((257, 2), ctx)
        ops.batch_norm_stats(gpumat.array(x, ctx), bst)
        results.append([stats.asnumpy(), dw.asnumpy(), bst.asnumpy()])
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)


def test_ops_reject_bad_shapes(ctx):
    a = lambda *s: gpumat.array(np.ones(s, np.float32), ctx)  # noqa: E731
    with pytest.raises(
        ValueError, match=r"layer_norm: the input \(2, 3\) has no trailing dims of 4"
    ):
        ops.layer_norm(a(2, 3), a(4), a(4), a(2, 3), 1e-5, False)
    with pytest.raises(ValueError, match="layer_norm: the bias"):
        ops.layer_norm(a(2, 3), a(3), a(2), a(2, 3), 1e-5, False)
    with pytest.raises(ValueError, match="layer_norm_gradient: stats"):
        ops.layer_norm_gradient(a(2, 3), a(3, 2), a(3), a(2, 3), a(2, 3), False)
    with pytest.raises(ValueError, match="batch_norm: the weight"):
        ops.batch_norm(a(2, 3), a(3, 2), a(4), a(3), a(2, 3), 1e-5)
    with pytest.raises(ValueError, match="batch_norm_stats: the input must be"):
        ops.batch_norm_stats(a(3), a(3, 2))
    x = a(2, 3)
    with pytest.raises(ValueError, match="batch_norm"):
        ops.batch_norm(x, a(3, 2), a(3), a(3), x, 1e-5)  # out aliases x
    with pytest.raises(TypeError, match="rms"):
        ops.layer_norm(a(2, 3), a(3), a(3), a(2, 3), 1e-5, 1)


# --------------------------------------------------------------------------------------------------
# Graph ops: finite differences and every device
# --------------------------------------------------------------------------------------------------


def _ln_build(rms):
    return lambda x, w, b: graph.layer_norm_op(x, w, b, 1e-3, rms)


def _bn_build(training):
    def build(x, w, b, running=None):
        stats = graph.batch_norm_stats_op(x) if training else running
        return graph.batch_norm_op(x, stats, w, b, 1e-3, training)

    return build


@pytest.mark.parametrize("rms", [False, True], ids=["layer", "rms"])
def test_layer_norm_graph_gradients_match_finite_differences(rms):
    rng, _ = new_rng()
    inputs = [rand64(rng, (3, 2, 5)), rand64(rng, (2, 5)), rand64(rng, (2, 5))]
    check_fd_gradients(_ln_build(rms), inputs, rng, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_batch_norm_graph_gradients_match_finite_differences(training):
    rng, _ = new_rng()
    x = rand64(rng, (4, 3, 5))
    inputs = [x, rand64(rng, (3,)), rand64(rng, (3,))]
    if training:
        check_fd_gradients(_bn_build(True), inputs, rng, rtol=1e-5, atol=1e-7)
    else:
        stats = np.stack([rand64(rng, (3,)), rng.uniform(0.5, 2.0, 3)], 1)
        build = _bn_build(False)
        check_fd_gradients(build, [*inputs, stats], rng, wrt=[0, 1, 2], rtol=1e-5, atol=1e-7)


def test_graph_gradients_on_every_device(ctx):
    rng, _ = new_rng()
    ln_in = [rand64(rng, (4, 6)) + 2.0, rand64(rng, (6,)), rand64(rng, (6,))]
    for rms in (False, True):
        check_device_gradients(ctx, _ln_build(rms), ln_in, rng)
    bn_in = [rand64(rng, (5, 3, 4)), rand64(rng, (3,)), rand64(rng, (3,))]
    check_device_gradients(ctx, _bn_build(True), bn_in, rng)


# --------------------------------------------------------------------------------------------------
# Front end against PyTorch
# --------------------------------------------------------------------------------------------------


def _pair(a, ctx, grad=True):
    return gpumat.tensor(a, device=ctx, requires_grad=grad), torch.tensor(a, requires_grad=grad)


def _check_grads(pairs, rtol=1e-4, atol=1e-4):
    for g, t in pairs:
        assert (g.grad is None) == (t.grad is None)
        if t.grad is not None:
            np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("shape,norm", [((4, 7), (7,)), ((2, 3, 4, 5), (4, 5)), ((0, 6), (6,))])
def test_functional_layer_and_rms_norm_match_torch(ctx, shape, norm):
    rng, _ = new_rng()
    x64 = rng.standard_normal(shape) * 3 + 50.0  # large mean: catastrophic cancellation shows
    x, w, b = x64.astype(np.float32), rand(norm, rng), rand(norm, rng)
    (gx, tx), (gw, tw), (gb, tb) = _pair(x, ctx), _pair(w, ctx), _pair(b, ctx)
    dy = rand(shape, rng)
    gy = F.layer_norm(gx, norm, gw, gb, eps=1e-4)
    ty = torch.nn.functional.layer_norm(tx, norm, tw, tb, eps=1e-4)
    np.testing.assert_allclose(gy.detach().numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
    (gy * gpumat.tensor(dy, device=ctx)).sum().backward()
    (ty * torch.tensor(dy)).sum().backward()
    _check_grads([(gx, tx), (gw, tw), (gb, tb)], atol=3e-4)
    # rms_norm, eps None (finfo(float32).eps), no weight
    gx2, tx2 = _pair(x, ctx)
    gy = F.rms_norm(gx2, norm)
    ty = torch.nn.functional.rms_norm(tx2, norm)
    np.testing.assert_allclose(gy.detach().numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    (gy * gpumat.tensor(dy, device=ctx)).sum().backward()
    (ty * torch.tensor(dy)).sum().backward()
    _check_grads([(gx2, tx2)], atol=1e-5)


def test_layer_norm_of_a_transposed_view(ctx):
    rng, _ = new_rng()
    x = rand((5, 8), rng)
    gx, tx = _pair(x, ctx)
    ln, tln = nn.LayerNorm(5).to(ctx), torch.nn.LayerNorm(5)
    with torch.no_grad():
        tln.weight.copy_(torch.tensor(rand((5,), rng)))
        tln.bias.copy_(torch.tensor(rand((5,), rng)))
    ln.load_state_dict({k: v.numpy() for k, v in tln.state_dict().items()})
    gy, ty = ln(gx.t()), tln(tx.t())
    np.testing.assert_allclose(gy.detach().numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    gy.sum().backward()
    ty.sum().backward()
    _check_grads([(gx, tx), (ln.weight, tln.weight), (ln.bias, tln.bias)])
    # batch norm of the same view: channels along the original rows
    gx, tx = _pair(x, ctx)
    gy = F.batch_norm(gx.t(), None, None, training=True)
    ty = torch.nn.functional.batch_norm(tx.t(), None, None, training=True)
    np.testing.assert_allclose(gy.detach().numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    (gy * gy).sum().backward()
    (ty * ty).sum().backward()
    _check_grads([(gx, tx)])


def test_modules_state_dict_round_trip_with_torch(ctx):
    rng, _ = new_rng()
    tln, tbn, trms = torch.nn.LayerNorm((3, 4)), torch.nn.BatchNorm2d(3), torch.nn.RMSNorm(4)
    with torch.no_grad():
        for m in (tln, tbn, trms):
            for p in m.parameters():
                p.copy_(torch.tensor(rand(tuple(p.shape), rng)))
        tbn.running_mean.copy_(torch.tensor(rand((3,), rng)))
        tbn.running_var.copy_(torch.tensor(rng.uniform(0.5, 2, 3).astype(np.float32)))
        tbn.num_batches_tracked.fill_(7)
    ln, bn, rms = nn.LayerNorm((3, 4)), nn.BatchNorm2d(3), nn.RMSNorm(4)
    for g, t in ((ln, tln), (bn, tbn), (rms, trms)):
        assert list(g.state_dict()) == list(t.state_dict())
        g.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
        g.to(ctx).eval()
        t.eval()
        x = rand((2, 3, 3, 4), rng)
        np.testing.assert_allclose(
            g(gpumat.tensor(x, device=ctx)).detach().numpy(),
            t(torch.tensor(x)).detach().numpy(),
            rtol=1e-5,
            atol=1e-5,
        )
        back = type(t)(*((3,) if t is tbn else ((3, 4),) if t is tln else (4,)))
        back.load_state_dict({k: torch.tensor(v.numpy()) for k, v in g.state_dict().items()})
        for k, v in t.state_dict().items():
            np.testing.assert_array_equal(back.state_dict()[k].numpy(), v.numpy())
    assert int(bn.num_batches_tracked.item()) == 7


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize("kind", ["1d2", "1d3", "2d"])
def test_batch_norm_modules_train_and_eval_match_torch(ctx, kind, momentum):
    rng, _ = new_rng()
    shape, cls, tcls = {
        "1d2": ((6, 4), nn.BatchNorm1d, torch.nn.BatchNorm1d),
        "1d3": ((3, 4, 5), nn.BatchNorm1d, torch.nn.BatchNorm1d),
        "2d": ((2, 4, 3, 3), nn.BatchNorm2d, torch.nn.BatchNorm2d),
    }[kind]
    g, t = cls(4, momentum=momentum), tcls(4, momentum=momentum)
    with torch.no_grad():
        t.weight.copy_(torch.tensor(rand((4,), rng)))
        t.bias.copy_(torch.tensor(rand((4,), rng)))
    g.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
    g.to(ctx)
    for step in range(3):
        x = (rng.standard_normal(shape) * 2 + 10.0 * step).astype(np.float32)
        gx, tx = _pair(x, ctx)
        gy, ty = g(gx), t(tx)
        np.testing.assert_allclose(gy.detach().numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-4)
        dy = rand(shape, rng)
        (gy * gpumat.tensor(dy, device=ctx)).sum().backward()
        (ty * torch.tensor(dy)).sum().backward()
        _check_grads([(gx, tx), (g.weight, t.weight), (g.bias, t.bias)])
        g.weight.grad = g.bias.grad = t.weight.grad = t.bias.grad = None
    for k, v in t.state_dict().items():
        np.testing.assert_allclose(g.state_dict()[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-5)
    g.eval()
    t.eval()
    x = rand(shape, rng)
    np.testing.assert_allclose(
        g(gpumat.tensor(x, device=ctx)).detach().numpy(),
        t(torch.tensor(x)).detach().numpy(),
        atol=1e-5,
    )
    # an empty batch: an empty output; the running statistics stay, the counter moves (PyTorch)
    g.train()
    t.train()
    empty = np.zeros((0,) + shape[1:], np.float32)
    assert g(gpumat.tensor(empty, device=ctx)).shape == tuple(t(torch.tensor(empty)).shape)
    for k, v in t.state_dict().items():
        np.testing.assert_allclose(g.state_dict()[k].numpy(), v.numpy(), rtol=1e-5, atol=1e-5)


def test_batch_norm_without_running_stats_and_functional(ctx):
    rng, _ = new_rng()
    x = rand((5, 3, 4), rng)
    g, t = (
        nn.BatchNorm1d(3, track_running_stats=False, affine=False),
        torch.nn.BatchNorm1d(3, track_running_stats=False, affine=False),
    )
    assert list(g.state_dict()) == list(t.state_dict()) == []
    g.to(ctx).eval()
    t.eval()
    np.testing.assert_allclose(
        g(gpumat.tensor(x, device=ctx)).detach().numpy(),
        t(torch.tensor(x)).detach().numpy(),
        atol=1e-5,
    )
    rm, rv = rand((3,), rng), rng.uniform(0.5, 2, 3).astype(np.float32)
    grm, grv = gpumat.tensor(rm, device=ctx), gpumat.tensor(rv, device=ctx)
    trm, trv = torch.tensor(rm), torch.tensor(rv)
    for training in (True, False):
        gy = F.batch_norm(gpumat.tensor(x, device=ctx), grm, grv, training=training, momentum=0.3)
        ty = torch.nn.functional.batch_norm(
            torch.tensor(x), trm, trv, training=training, momentum=0.3
        )
        np.testing.assert_allclose(gy.detach().numpy(), ty.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(grm.numpy(), trm.numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(grv.numpy(), trv.numpy(), rtol=1e-6, atol=1e-6)


def test_compiled_step_equals_eager(ctx):
    rng, _ = new_rng()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 8)
            self.ln = nn.LayerNorm(8)
            self.rms = nn.RMSNorm(8)
            self.bn = nn.BatchNorm1d(8, track_running_stats=False)

        def forward(self, x):
            return self.bn(self.rms(self.ln(self.fc(x)))).sum(1)

    a, b = Net(), Net()
    b.load_state_dict(a.state_dict())
    a.to(ctx)
    b.to(ctx)
    opt_a, opt_b = (
        gpumat.optim.SGD(a.parameters(), lr=0.1),
        gpumat.optim.SGD(b.parameters(), lr=0.1),
    )

    def make_step(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return step

    eager, compiled = make_step(a, opt_a), gpumat.compile(make_step(b, opt_b), fusion=False)
    for _ in range(3):  # 40 rows: the CUDA weight gradient sums two runs through a workspace
        x = gpumat.tensor(rand((40, 6), rng), device=ctx)
        y = gpumat.tensor(rand((40,), rng), device=ctx)
        np.testing.assert_array_equal(compiled(x, y).numpy(), eager(x, y).detach().numpy())
    # replayed natively (the norm ops' program steps), as a CUDA graph on the emulated device
    assert compiled.executor.schedule_report.mode in ("compiled", "cuda-graph")
    for (name, p), q in zip(a.named_parameters(), b.parameters(), strict=True):
        np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy(), err_msg=name)


def test_compiled_batch_norm_eval_step_and_training_refusal(ctx):
    rng, _ = new_rng()
    a, b = nn.BatchNorm2d(3), nn.BatchNorm2d(3)
    with gpumat.no_grad():
        a.running_mean.copy_(gpumat.tensor(rand((3,), rng)))
        a.running_var.copy_(gpumat.tensor(rng.uniform(0.5, 2, 3).astype(np.float32)))
        a.weight.copy_(gpumat.tensor(rand((3,), rng)))
    b.load_state_dict(a.state_dict())
    for m in (a, b):
        m.to(ctx).eval()
    opt_a = gpumat.optim.SGD(a.parameters(), lr=0.1)
    opt_b = gpumat.optim.SGD(b.parameters(), lr=0.1)

    def make_step(model, opt):
        def step(x):
            opt.zero_grad()
            loss = (model(x) * model(x)).mean()
            loss.backward()
            opt.step()
            return loss

        return step

    eager, compiled = make_step(a, opt_a), gpumat.compile(make_step(b, opt_b), fusion=False)
    for _ in range(2):
        x = gpumat.tensor(rand((2, 3, 4, 4), rng), device=ctx)
        np.testing.assert_array_equal(compiled(x).numpy(), eager(x).detach().numpy())
    np.testing.assert_array_equal(b.weight.detach().numpy(), a.weight.detach().numpy())
    b.train()
    with pytest.raises(RuntimeError, match="BatchNorm2d: training mode updates running_mean"):
        compiled(gpumat.tensor(rand((2, 3, 4, 4), rng), device=ctx))
    assert int(b.num_batches_tracked.item()) == 0  # the refused call changed nothing


def test_errors_match_torch(ctx):
    x = gpumat.tensor(rand((2, 3)), device=ctx)
    with pytest.raises(ValueError, match=r"layer_norm: given normalized_shape=\(4,\)"):
        F.layer_norm(x, (4,))
    with pytest.raises(ValueError, match=r"weight has shape \(4,\), expected \(3,\)"):
        F.layer_norm(x, 3, gpumat.ones(4, device=ctx))
    with pytest.raises(TypeError, match="layer_norm: input must be a float32 tensor"):
        F.layer_norm(gpumat.tensor([[1, 2, 3]], device=ctx), 3)
    with pytest.raises(TypeError, match="normalized_shape"):
        nn.LayerNorm("3")
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        nn.BatchNorm2d(3).to(ctx)(gpumat.tensor(rand((1, 3, 1, 1)), device=ctx))
    with pytest.raises(ValueError, match=r"running_mean has shape \(3,\), expected \(4,\)"):
        nn.BatchNorm1d(3).to(ctx)(gpumat.tensor(rand((2, 4)), device=ctx))
    with pytest.raises(ValueError, match="expected 4D input"):
        nn.BatchNorm2d(3)(gpumat.tensor(rand((2, 3))))
    with pytest.raises(ValueError, match="must be given when not training"):
        F.batch_norm(x, None, None)
    node = graph.layer_norm_op(graph.Variable("x"), graph.Variable("w"), graph.Variable("b"))
    with pytest.raises(ValueError, match=r"layer_norm_op at node .* does not end with"):
        node.op.infer_shape(node, [(2, 3), (4,), (4,)])
