"""Embedding, adaptive average pooling, pad and dropout of any rank: the adaptive pooling kernels
against float64 numpy on every device with NaN-poisoned outputs, the graph ops' gradients against
float64 central differences, the front end (values and gradients) against PyTorch on the CPU on
fresh random inputs (zero-size, transposed), compiled steps against eager ones, Embedding's
state_dict against torch.nn.Embedding, its deterministic backward, and bad input."""

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
from gpumat.runtime import Executor

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _backward_both(ctx, y, ty, rng):
    """sum(y * w) backward in gpumat and torch with the same random w."""
    w = rng.uniform(-1, 1, size=y.shape).astype(np.float32)
    (y * gpumat.tensor(w, device=ctx)).sum().backward()
    (ty * torch.tensor(w)).sum().backward()


def _allclose(got, want, seed, what, rtol=4 * EPS32, atol=4 * EPS32):
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"{what} (seed {seed})")


# --------------------------------------------------------------------------------------------------
# adaptive_avg_pool2d
# --------------------------------------------------------------------------------------------------


def _windows(size, out):
    return [(o * size // out, math.ceil((o + 1) * size / out)) for o in range(out)]


def _adaptive64(x, oh, ow):
    n, c, h, w = x.shape
    y = np.zeros((n, c, oh, ow))
    for i, (h0, h1) in enumerate(_windows(h, oh)):
        for j, (w0, w1) in enumerate(_windows(w, ow)):
            y[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return y


def _adaptive_grad64(dy, h, w):
    n, c, oh, ow = dy.shape
    dx = np.zeros((n, c, h, w))
    for i, (h0, h1) in enumerate(_windows(h, oh)):
        for j, (w0, w1) in enumerate(_windows(w, ow)):
            dx[:, :, h0:h1, w0:w1] += dy[:, :, i, j, None, None] / ((h1 - h0) * (w1 - w0))
    return dx


ADAPTIVE = [
    ((2, 3, 7, 5), (3, 2)),  # uneven, overlapping windows
    ((1, 2, 8, 8), (4, 4)),  # even: plain 2x2 pooling
    ((2, 1, 5, 3), (9, 7)),  # growing: OH > H
    ((1, 300, 6, 6), (1, 1)),  # global pooling over many planes
    ((0, 3, 4, 4), (2, 2)),  # no batch
    ((3, 2, 1, 1), (2, 3)),
]


@pytest.mark.parametrize("xs,size", ADAPTIVE, ids=lambda v: shape_id(v))
def test_adaptive_kernels_match_float64(ctx, xs, size):
    rng, seed = new_rng()
    x = rng.standard_normal(xs).astype(np.float32)
    ys = xs[:2] + size
    out = nan_array(ys, ctx)
    ops.adaptive_avg_pool2d(gpumat.array(x, ctx), out)
    _allclose(out.asnumpy(), _adaptive64(x.astype(np.float64), *size), seed, "forward")
    dy = rng.standard_normal(ys).astype(np.float32)
    dx = nan_array(xs, ctx)
    ops.adaptive_avg_pool2d_gradient(gpumat.array(dy, ctx), dx)
    _allclose(dx.asnumpy(), _adaptive_grad64(dy.astype(np.float64), *xs[2:]), seed, "gradient")
    ref = np.full(ys, np.nan, np.float32)
    gpumat.reference.adaptive_avg_pool2d(x, ref)
    _allclose(ref, _adaptive64(x.astype(np.float64), *size), seed, "reference")


def test_adaptive_kernel_errors_name_the_op(ctx):
    x = gpumat.empty((2, 3, 4, 4), ctx)
    with pytest.raises(ValueError, match=r"adaptive_avg_pool2d: .*\(2, 3, 4, 4\).*\(2, 4, 2, 2\)"):
        ops.adaptive_avg_pool2d(x, gpumat.empty((2, 4, 2, 2), ctx))
    with pytest.raises(ValueError, match="adaptive_avg_pool2d_gradient: .*>= 1"):
        ops.adaptive_avg_pool2d_gradient(gpumat.empty((2, 3, 0, 2), ctx), x)
    with pytest.raises(ValueError, match="4-D"):
        ops.adaptive_avg_pool2d(gpumat.empty((3, 4, 4), ctx), gpumat.empty((3, 2, 2), ctx))


@pytest.mark.parametrize("size", [(2, 3), (5, 1), (7, 9)], ids=shape_id)
def test_adaptive_graph_gradient_fd_float64(size):
    rng, _ = new_rng()
    check_fd_gradients(
        lambda v: ad.adaptive_avg_pool2d_op(v, size), [rng.standard_normal((2, 2, 5, 6))], rng
    )


def test_adaptive_graph_ops_on_devices(ctx):
    rng, _ = new_rng()
    check_device_gradients(
        ctx,
        lambda v: ad.adaptive_avg_pool2d_op(v, (3, 4)),
        [rng.standard_normal((3, 4, 7, 9))],
        rng,
    )


@pytest.mark.parametrize(
    "shape,size",
    [((2, 3, 7, 5), (3, 2)), ((3, 8, 6), 4), ((2, 2, 5, 6), (None, 3)), ((1, 1, 4, 4), (6, None))],
)
@pytest.mark.parametrize("transposed", [False, True], ids=["contiguous", "transposed"])
def test_adaptive_functional_matches_torch(ctx, shape, size, transposed):
    rng, seed = new_rng()
    x = rng.standard_normal(shape).astype(np.float32)
    t = gpumat.tensor(x, device=ctx, requires_grad=True)
    tt = torch.tensor(x, requires_grad=True)
    a, ta = (t.transpose(-1, -2), tt.transpose(-1, -2)) if transposed else (t, tt)
    y, ty = F.adaptive_avg_pool2d(a, size), TF.adaptive_avg_pool2d(ta, size)
    assert y.shape == tuple(ty.shape)
    _backward_both(ctx, y, ty, rng)
    _allclose(y.detach().numpy(), ty.detach().numpy(), seed, "value")
    _allclose(t.grad.numpy(), tt.grad.numpy(), seed, "gradient")
    m = nn.AdaptiveAvgPool2d(size)
    np.testing.assert_array_equal(m(a).detach().numpy(), y.detach().numpy())


def test_adaptive_bad_input():
    x = gpumat.randn(2, 3, 4, 4)
    with pytest.raises(TypeError, match="adaptive_avg_pool2d"):
        F.adaptive_avg_pool2d(gpumat.tensor([[[1, 2]]]), 1)
    with pytest.raises(ValueError, match="output_size"):
        F.adaptive_avg_pool2d(x, (0, 2))
    with pytest.raises(ValueError, match="output_size"):
        F.adaptive_avg_pool2d(x, (1, 2, 3))
    with pytest.raises(ValueError, match=r"\(N, C, H, W\) or \(C, H, W\)"):
        F.adaptive_avg_pool2d(gpumat.randn(4, 4), 2)
    with pytest.raises(ValueError, match=">= 1"):
        F.adaptive_avg_pool2d(gpumat.zeros(2, 3, 0, 4), 2)


# --------------------------------------------------------------------------------------------------
# Embedding
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("idx_shape", [(3, 5), (40,), (2, 0), (2, 3, 4)], ids=shape_id)
@pytest.mark.parametrize("padding_idx", [None, 2, -1])
def test_embedding_matches_torch(ctx, idx_shape, padding_idx):
    rng, seed = new_rng()
    w = rng.standard_normal((10, 6)).astype(np.float32)
    idx = rng.integers(0, 10, size=idx_shape)
    if idx.size:
        idx.flat[0] = 2  # the padding row is used (and repeated indices are frequent)
        idx.flat[-1] = 9
    W = gpumat.tensor(w, device=ctx, requires_grad=True)
    tW = torch.tensor(w, requires_grad=True)
    y = F.embedding(gpumat.tensor(idx, device=ctx), W, padding_idx)
    ty = TF.embedding(torch.tensor(idx), tW, padding_idx)
    assert y.shape == tuple(ty.shape) == (*idx_shape, 6)
    np.testing.assert_array_equal(y.detach().numpy(), w[idx])  # a gather: exact
    _backward_both(ctx, y, ty, rng)
    _allclose(W.grad.numpy(), tW.grad.numpy(), seed, "weight gradient")
    if padding_idx is not None:
        assert not W.grad.numpy()[padding_idx % 10].any()


def test_embedding_backward_is_deterministic(ctx):
    rng, _ = new_rng()
    idx = gpumat.tensor(rng.integers(0, 5, size=(64, 33)), device=ctx)  # heavy repetition
    g = gpumat.tensor(rng.standard_normal((64, 33, 8)).astype(np.float32), device=ctx)
    grads = []
    for _ in range(3):
        W = gpumat.tensor(np.ones((5, 8), np.float32), device=ctx, requires_grad=True)
        (F.embedding(idx, W) * g).sum().backward()
        grads.append(W.grad.numpy())
    for other in grads[1:]:
        np.testing.assert_array_equal(other, grads[0])  # the same bits every run
    rows, terms = idx.numpy().ravel(), g.numpy().reshape(-1, 8).astype(np.float64)
    want, magnitude = np.zeros((5, 8)), np.zeros((5, 8))
    np.add.at(want, rows, terms)
    np.add.at(magnitude, rows, np.abs(terms))
    # A float32 sum of n terms is within (n - 1) u sum|terms| of the exact one (Higham, "Accuracy
    # and Stability of Numerical Algorithms", 2nd ed., 4.2; EPS32 = 2u): about 400 terms a row
    # that cancel, so a relative tolerance on the result would not hold; a term left out or
    # added twice (about 1 in size) still fails by far.
    bound = np.bincount(rows, minlength=5)[:, None] * EPS32 * magnitude
    err = np.abs(grads[0] - want)
    assert np.all(err <= bound), f"sum: error {err.max()} beyond the float32 bound"


def test_embedding_transposed_weight(ctx):
    rng, seed = new_rng()
    w = rng.standard_normal((6, 10)).astype(np.float32)
    W = gpumat.tensor(w, device=ctx, requires_grad=True)
    idx = rng.integers(0, 10, size=(7,))
    y = F.embedding(gpumat.tensor(idx, device=ctx), W.t())
    np.testing.assert_array_equal(y.detach().numpy(), w.T[idx])
    y.sum().backward()
    want = np.zeros((10, 6))
    np.add.at(want, idx, 1.0)
    _allclose(W.grad.numpy(), want.T, seed, "gradient")


def test_embedding_graph_op_fd_float64():
    rng, _ = new_rng()
    idx = rng.integers(0, 6, size=(9,)).astype(np.float64)
    idx[:3] = 4  # a repeated row
    w = rng.standard_normal((6, 3))
    check_fd_gradients(lambda v, i: ad.embedding_op(v, i), [w, idx], rng, wrt=[0])
    # With padding_idx = 4 (PyTorch's rule, not a derivative): the same gradient, row 4 zero.
    x, i, r = ad.Variable("w"), ad.Variable("i"), ad.Variable("r")
    grads = [ad.gradients(ad.embedding_op(x, i, pad) * r, [x])[0] for pad in (None, 4)]
    plain, padded = Executor(grads).run({x: w, i: idx, r: rng.standard_normal((9, 3))})
    assert not padded[4].any() and plain[4].any()
    np.testing.assert_array_equal(np.delete(padded, 4, 0), np.delete(plain, 4, 0))


def test_embedding_module_init_state_dict_and_from_pretrained(ctx):
    gpumat.manual_seed(0)
    m = nn.Embedding(1000, 16, padding_idx=3, device=ctx)
    w = m.weight.detach().numpy()
    assert m.weight.shape == (1000, 16) and m.weight.requires_grad
    assert not w[3].any()  # the padding row zeroed at initialisation
    assert abs(w.mean()) < 0.02 and abs(w.std() - 1) < 0.02  # N(0, 1)
    assert list(m.state_dict()) == ["weight"]
    tm = torch.nn.Embedding(1000, 16, padding_idx=3)
    tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()})
    idx = np.random.default_rng(1).integers(0, 1000, size=(4, 7))
    np.testing.assert_array_equal(
        tm(torch.tensor(idx)).detach().numpy(), m(gpumat.tensor(idx, device=ctx)).detach().numpy()
    )
    back = nn.Embedding(1000, 16, device=ctx)
    back.load_state_dict({k: gpumat.tensor(v.numpy()) for k, v in tm.state_dict().items()})
    np.testing.assert_array_equal(back.weight.detach().numpy(), tm.weight.detach().numpy())
    assert "padding_idx=3" in repr(m)
    pre = gpumat.tensor(np.arange(12, dtype=np.float32).reshape(4, 3), device=ctx)
    frozen = nn.Embedding.from_pretrained(pre, padding_idx=1)
    assert not frozen.weight.requires_grad and frozen.padding_idx == 1
    np.testing.assert_array_equal(frozen.weight.detach().numpy()[1], [3, 4, 5])  # as given
    assert nn.Embedding.from_pretrained(pre, freeze=False).weight.requires_grad
    assert nn.Embedding(5, 2, padding_idx=-1).padding_idx == 4


def test_compiled_embedding_step_equals_eager(ctx):
    rng, _ = new_rng()
    idx = gpumat.tensor(rng.integers(0, 12, size=(5, 4)), device=ctx)
    w0 = rng.standard_normal((12, 3)).astype(np.float32)

    def step(w, idx):
        w.grad = None
        loss = F.gelu(F.embedding(idx, w, padding_idx=0)).sum()
        loss.backward()
        return loss, w.grad

    w_eager = gpumat.tensor(w0, device=ctx, requires_grad=True)
    w_traced = gpumat.tensor(w0, device=ctx, requires_grad=True)
    eager = step(w_eager, idx)
    compiled = gpumat.compile(lambda i: step(w_traced, i), fusion=False)
    for _ in range(2):
        traced = compiled(idx)
        for e, c in zip(eager, traced, strict=True):
            np.testing.assert_array_equal(c.numpy(), e.detach().numpy())
    with pytest.raises(IndexError, match="embedding"):
        compiled(gpumat.tensor(np.full((5, 4), 12), device=ctx))  # checked on every call


def test_embedding_bad_input():
    w = gpumat.randn(10, 4)
    with pytest.raises(TypeError, match="embedding: input must be an int64"):
        F.embedding(gpumat.tensor([1.0, 2.0]), w)
    with pytest.raises(IndexError, match="embedding: index 10 is out of bounds"):
        F.embedding(gpumat.tensor([1, 10]), w)
    with pytest.raises(IndexError, match="embedding: index -1 is out of bounds"):
        F.embedding(gpumat.tensor([-1, 3]), w)
    with pytest.raises(TypeError, match="embedding: weight must be a float32"):
        F.embedding(gpumat.tensor([1]), gpumat.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="2-D"):
        F.embedding(gpumat.tensor([1]), gpumat.randn(10))
    with pytest.raises(ValueError, match="padding_idx 10 must be within"):
        F.embedding(gpumat.tensor([1]), w, padding_idx=10)
    with pytest.raises(ValueError, match="max_norm"):
        F.embedding(gpumat.tensor([1]), w, max_norm=1.0)
    with pytest.raises(ValueError, match="num_embeddings"):
        nn.Embedding(-1, 3)
    with pytest.raises(ValueError, match="_weight has shape"):
        nn.Embedding(3, 2, _weight=gpumat.randn(2, 3))


# --------------------------------------------------------------------------------------------------
# pad
# --------------------------------------------------------------------------------------------------

PADS = [
    ((2, 3, 4, 5), (1, 2), "constant", 0.0),
    ((2, 3, 4, 5), (1, -2, 0, 3), "constant", 1.5),
    ((2, 3, 4, 5), (-1, -1, -2, -1), "constant", 0.0),  # crops only
    ((2, 3, 4, 5), (1, 1, 1, 1, 1, 1, 1, 1), "constant", -2.0),  # every dim
    ((7,), (3, 0), "constant", 0.5),
    ((1, 2, 1, 2, 1), (1, 0, 0, 1, 2, 2), "constant", 0.0),  # rank 5
    ((0, 3), (1, 1, 2, 0), "constant", 3.0),  # zero-size input
    ((2, 3, 4, 5), (2, 1, 3, 2), "reflect", None),
    ((2, 3, 5), (4, 1), "reflect", None),
    ((2, 3, 4, 5), (2, 1, 1, 2), "replicate", None),
    ((1, 2, 3, 4, 5), (2, 1, 1, 2, 1, 1), "replicate", None),
    ((2, 3, 4, 5), (2, 1, 1, 3), "circular", None),
]


@pytest.mark.parametrize(
    "shape,pad,mode,value,transposed",
    [(*case, tr) for case in PADS for tr in (False, True) if not (tr and len(case[0]) < 2)],
    ids=str,
)
def test_pad_matches_torch(ctx, shape, pad, mode, value, transposed):
    """transposed: the same values seen through a non-contiguous view."""
    rng, seed = new_rng()
    x = rng.standard_normal(shape).astype(np.float32)
    if transposed:
        x = np.ascontiguousarray(x.swapaxes(-1, -2))
    t = gpumat.tensor(x, device=ctx, requires_grad=True)
    tt = torch.tensor(x, requires_grad=True)
    a, ta = (t.transpose(-1, -2), tt.transpose(-1, -2)) if transposed else (t, tt)
    kw = {"value": value} if mode == "constant" else {}
    y, ty = F.pad(a, pad, mode, **kw), TF.pad(ta, pad, mode, **kw)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())  # copies: exact
    if y.numel():
        _backward_both(ctx, y, ty, rng)
        _allclose(t.grad.numpy(), tt.grad.numpy(), seed, "gradient")


def test_constant_pad_graph_ops_fd_float64():
    rng, _ = new_rng()
    pad = ((0, 1), (2, 0), (1, 3))
    check_fd_gradients(
        lambda v: ad.constant_pad_op(v, pad, 0.5), [rng.standard_normal((2, 3, 4))], rng
    )
    check_fd_gradients(
        lambda g, like: ad.constant_pad_gradient_op(g, like, pad),
        [rng.standard_normal((3, 5, 8)), rng.standard_normal((2, 3, 4))],
        rng,
        wrt=[0],
    )


def test_constant_pad_on_devices(ctx):
    rng, _ = new_rng()
    pad = ((1, 0), (0, 2), (3, 1))
    check_device_gradients(
        ctx, lambda v: ad.constant_pad_op(v, pad, -1.0), [rng.standard_normal((2, 30, 40))], rng
    )


def test_compiled_pad_step_equals_eager(ctx):
    rng, _ = new_rng()
    x = gpumat.tensor(rng.standard_normal((2, 3, 5, 6)).astype(np.float32), device=ctx)
    w0 = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)

    def step(w, x):
        w.grad = None
        h = w * x
        y = F.pad(h, (1, 2, -1, 1), value=0.5).sum() + F.pad(h, (2, 1, 1, 2), "reflect").sum()
        loss = y + (F.adaptive_avg_pool2d(h, (2, 4)) ** 2).sum()
        loss.backward()
        return loss, w.grad

    w_eager = gpumat.tensor(w0, device=ctx, requires_grad=True)
    w_traced = gpumat.tensor(w0, device=ctx, requires_grad=True)
    eager = step(w_eager, x)
    compiled = gpumat.compile(lambda x: step(w_traced, x), fusion=False)
    for _ in range(2):
        traced = compiled(x)
        for e, c in zip(eager, traced, strict=True):
            np.testing.assert_array_equal(c.numpy(), e.detach().numpy())


def test_pad_bad_input():
    x = gpumat.randn(2, 3, 4)
    with pytest.raises(ValueError, match="pad: pad must have an even length"):
        F.pad(x, (1, 2, 3))
    with pytest.raises(ValueError, match="more than the input's 3 dims"):
        F.pad(x, (1,) * 8)
    with pytest.raises(TypeError, match="pad: pad must be a tuple of ints"):
        F.pad(x, (1.0, 2))
    with pytest.raises(ValueError, match="mode must be one of"):
        F.pad(x, (1, 1), "symmetric")
    with pytest.raises(ValueError, match="reflect padding .* less than the size 4"):
        F.pad(x, (4, 0), "reflect")
    with pytest.raises(ValueError, match="negative size"):
        F.pad(x, (-3, -2))
    with pytest.raises(ValueError, match="only for mode 'constant'"):
        F.pad(x, (1, 1), "replicate", value=2.0)
    with pytest.raises(TypeError, match="pad"):
        F.pad(gpumat.tensor([1, 2]), (1, 1))


# --------------------------------------------------------------------------------------------------
# dropout of any rank
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(50,), (4, 5, 6), (2, 3, 4, 5, 2)], ids=shape_id)
def test_dropout_any_rank(ctx, shape):
    rng, _ = new_rng()
    x = rng.uniform(0.5, 1.5, size=shape).astype(np.float32)
    t = gpumat.tensor(x, device=ctx, requires_grad=True)
    y = F.dropout(t, 0.25)
    assert y.shape == shape
    v = y.detach().numpy()
    kept = v != 0
    np.testing.assert_allclose(v[kept], x[kept] / np.float32(0.75), rtol=EPS32)
    y.sum().backward()
    g = t.grad.numpy()
    np.testing.assert_allclose(g[kept], 1 / np.float32(0.75), rtol=EPS32)
    assert not g[~kept].any()
    assert F.dropout(t, 0.0) is t and F.dropout(t, 0.9, training=False) is t
    t.grad = None
    z = F.dropout(t, 1.0)
    assert not z.detach().numpy().any()  # p = 1: every element dropped, as PyTorch
    z.sum().backward()
    assert not t.grad.numpy().any()
    m = nn.Dropout(0.5).eval()
    assert m(t) is t
