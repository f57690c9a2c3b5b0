"""Every differentiable Tensor op and functional layer: the value and the gradient against float64
numpy (the value from a numpy formula or gpumat.reference in float64, the gradient by central
differences of it) and against torch (CPU, float32, autograd) on the same fresh random inputs, on
every device. Outputs land in NaN-poisoned memory (frontend_helpers.poison).

Each case is (f(lib, *tensors), numpy float64 f(*arrays), input shapes[, options]); ``lib`` is
gpumat or torch, with ``lib.F`` their functional modules, so one expression serves both. The
gradient is that of sum(out * R) for a fixed random R (``backward(gradient=R)``).
"""

import operator
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as TF  # noqa: N812
from frontend_helpers import fd_gradient, poison
from helpers import new_rng, rand

import gpumat
import gpumat.nn.functional as F  # noqa: N812
from gpumat import reference as R

G = types.SimpleNamespace(F=F, lib=gpumat)
T = types.SimpleNamespace(F=TF, lib=torch)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x, axis):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def _out(fn, shape):
    out = np.empty(shape, np.float64)
    fn(out)
    return out


def _conv(x, w, stride, padding):
    n, _, h, wd = x.shape
    f, _, kh, kw = w.shape
    oh = (h + 2 * padding - kh) // stride + 1
    ow = (wd + 2 * padding - kw) // stride + 1
    return _out(lambda o: R.conv2d(x, w, o, stride, padding), (n, f, oh, ow))


def _pool(kind, x, k, s, p):
    n, c, h, w = x.shape
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    return _out(lambda o: getattr(R, kind)(x, o, k, s, p), (n, c, oh, ow))


POS = {"positive": True}

# name -> (f(lib, *xs), numpy f(*xs), shapes, options)
CASES = {
    "add": (lambda m, a, b: a + b, np.add, [(3, 4), (3, 4)]),
    "add_row_bias": (lambda m, a, b: a + b, np.add, [(5, 4), (4,)]),
    "add_leading": (lambda m, a, b: b + a, np.add, [(2, 3, 4), (3, 4)]),
    "add_column": (lambda m, a, b: a + b, np.add, [(5, 4), (5, 1)]),
    "add_channel_bias": (lambda m, a, b: a + b, np.add, [(2, 3, 4, 4), (3, 1, 1)]),
    "add_scalar": (lambda m, a: a + 1.5, lambda a: a + 1.5, [(3, 4)]),
    "radd_scalar": (lambda m, a: 2.5 + a, lambda a: 2.5 + a, [(3, 4)]),
    "add_0d": (lambda m, a, b: a + b, np.add, [(3, 4), ()]),
    "sub": (lambda m, a, b: a - b, np.subtract, [(3, 4), (3, 4)]),
    "sub_row": (lambda m, a, b: a - b, np.subtract, [(5, 4), (4,)]),
    "sub_scalar": (lambda m, a: a - 2.0, lambda a: a - 2.0, [(3, 4)]),
    "rsub_scalar": (lambda m, a: 2.0 - a, lambda a: 2.0 - a, [(3, 4)]),
    "mul": (lambda m, a, b: a * b, np.multiply, [(3, 4), (3, 4)]),
    "mul_column": (lambda m, a, b: a * b, np.multiply, [(5, 4), (5, 1)]),
    "mul_row_left": (lambda m, a, b: b * a, np.multiply, [(5, 4), (4,)]),
    "mul_scalar": (lambda m, a: a * 3.0, lambda a: a * 3.0, [(3, 4)]),
    "rmul_scalar": (lambda m, a: -0.5 * a, lambda a: -0.5 * a, [(3, 4)]),
    "div": (lambda m, a, b: a / b, np.divide, [(3, 4), (3, 4)]),
    "div_row": (lambda m, a, b: a / b, np.divide, [(5, 4), (4,)]),
    "div_scalar": (lambda m, a: a / 4.0, lambda a: a / 4.0, [(3, 4)]),
    "rdiv_scalar": (lambda m, a: 2.0 / a, lambda a: 2.0 / a, [(3, 4)]),
    "neg": (lambda m, a: -a, np.negative, [(3, 4)]),
    "pow2": (lambda m, a: a**2, lambda a: a**2, [(3, 4)]),
    "pow3": (lambda m, a: a**3, lambda a: a**3, [(3, 4)]),
    "matmul": (lambda m, a, b: a @ b, np.matmul, [(4, 5), (5, 3)]),
    "matmul_t": (lambda m, a, b: a @ b.t(), lambda a, b: a @ b.T, [(4, 5), (3, 5)]),
    "mm_T": (lambda m, a, b: a.T.mm(b), lambda a, b: a.T @ b, [(5, 4), (5, 3)]),
    "exp": (lambda m, a: a.exp(), np.exp, [(3, 4)]),
    "log": (lambda m, a: a.log(), np.log, [(3, 4)], POS),
    "relu": (lambda m, a: a.relu(), lambda a: np.maximum(a, 0), [(3, 4)]),
    "F_relu": (lambda m, a: m.F.relu(a), lambda a: np.maximum(a, 0), [(2, 3, 4)]),
    "tanh": (lambda m, a: a.tanh(), np.tanh, [(3, 4)]),
    "sigmoid": (lambda m, a: m.F.sigmoid(a), lambda a: 1 / (1 + np.exp(-a)), [(3, 4)]),
    "softmax_1": (lambda m, a: a.softmax(1), lambda a: _softmax(a, 1), [(4, 5)]),
    "softmax_0": (lambda m, a: m.F.softmax(a, 0), lambda a: _softmax(a, 0), [(4, 5)]),
    "softmax_3d": (lambda m, a: a.softmax(dim=1), lambda a: _softmax(a, 1), [(2, 3, 4)]),
    "log_softmax_1": (lambda m, a: a.log_softmax(1), lambda a: _log_softmax(a, 1), [(4, 5)]),
    "log_softmax_neg": (
        lambda m, a: m.F.log_softmax(a, dim=-2),
        lambda a: _log_softmax(a, -2),
        [(2, 4, 5)],
    ),
    "sum_all": (lambda m, a: a.sum(), np.sum, [(3, 4, 5)]),
    "sum_dim0": (lambda m, a: a.sum(0), lambda a: a.sum(0), [(3, 4, 5)]),
    "sum_dim_keep": (
        lambda m, a: a.sum(dim=1, keepdim=True),
        lambda a: a.sum(1, keepdims=True),
        [(3, 4, 5)],
    ),
    "sum_tuple": (lambda m, a: a.sum((0, 2)), lambda a: a.sum((0, 2)), [(3, 4, 5)]),
    "sum_all_keep": (
        lambda m, a: a.sum(dim=(0, 1), keepdim=True),
        lambda a: a.sum((0, 1), keepdims=True),
        [(3, 4)],
    ),
    "mean_all": (lambda m, a: a.mean(), np.mean, [(3, 4, 5)]),
    "mean_dim": (lambda m, a: a.mean(dim=-1), lambda a: a.mean(-1), [(3, 4, 5)]),
    "max_all": (lambda m, a: a.max(), np.max, [(3, 4, 5)]),
    "max_dim": (lambda m, a: a.max(dim=1)[0], lambda a: a.max(1), [(3, 4, 5)]),
    "max_dim_keep": (
        lambda m, a: a.max(2, keepdim=True).values,
        lambda a: a.max(2, keepdims=True),
        [(3, 4, 5)],
    ),
    "reshape": (lambda m, a: a.reshape(4, -1) * 2, lambda a: a.reshape(4, -1) * 2, [(2, 3, 4)]),
    "view": (lambda m, a: a.view(6, 4).tanh(), lambda a: np.tanh(a.reshape(6, 4)), [(2, 3, 4)]),
    "view_as": (lambda m, a, b: a.view_as(b) * b, lambda a, b: a.reshape(b.shape) * b,
                [(2, 6), (3, 4)]),
    "flatten": (lambda m, a: m.lib.flatten(a, 1).relu(),
                lambda a: np.maximum(a.reshape(2, -1), 0), [(2, 3, 4)]),
    "flatten_all": (lambda m, a: a.flatten() * 3, lambda a: a.reshape(-1) * 3, [(2, 3, 4)]),
    "squeeze": (lambda m, a: a.squeeze(1).exp(), lambda a: np.exp(a[:, 0]), [(3, 1, 4)]),
    "unsqueeze": (lambda m, a: a.unsqueeze(0).exp(), lambda a: np.exp(a[None]), [(3, 4)]),
    "t": (lambda m, a: a.t(), lambda a: a.T, [(3, 4)]),
    "transpose": (lambda m, a: a.transpose(0, 1).tanh(), lambda a: np.tanh(a.T), [(3, 4)]),
    "clone": (lambda m, a: a.clone() * a, lambda a: a * a, [(3, 4)]),
    "linear": (
        lambda m, x, w, b: m.F.linear(x, w, b),
        lambda x, w, b: x @ w.T + b,
        [(4, 6), (3, 6), (3,)],
    ),
    "linear_no_bias_3d": (
        lambda m, x, w: m.F.linear(x, w),
        lambda x, w: x @ w.T,
        [(2, 4, 6), (3, 6)],
    ),
    "linear_relu": (
        lambda m, x, w, b: m.F.relu(m.F.linear(x, w, b)),
        lambda x, w, b: np.maximum(x @ w.T + b, 0),
        [(5, 6), (4, 6), (4,)],
    ),
    "conv2d": (
        lambda m, x, w, b: m.F.conv2d(x, w, b),
        lambda x, w, b: _conv(x, w, 1, 0) + b[:, None, None],
        [(2, 3, 5, 5), (4, 3, 3, 3), (4,)],
    ),
    "conv2d_stride_pad": (
        lambda m, x, w: m.F.conv2d(x, w, stride=2, padding=1),
        lambda x, w: _conv(x, w, 2, 1),
        [(2, 2, 5, 5), (3, 2, 3, 3)],
    ),
    "max_pool2d": (
        lambda m, x: m.F.max_pool2d(x, 2),
        lambda x: _pool("max_pool2d", x, 2, 2, 0),
        [(2, 3, 6, 6)],
    ),
    "max_pool2d_overlap": (
        lambda m, x: m.F.max_pool2d(x, 3, stride=1, padding=1),
        lambda x: _pool("max_pool2d", x, 3, 1, 1),
        [(1, 2, 5, 5)],
    ),
    "avg_pool2d": (
        lambda m, x: m.F.avg_pool2d(x, 2),
        lambda x: _pool("avg_pool2d", x, 2, 2, 0),
        [(2, 3, 6, 6)],
    ),
    "mse_loss": (lambda m, a, b: m.F.mse_loss(a, b), lambda a, b: np.mean((a - b) ** 2),
                 [(3, 4), (3, 4)]),
    "mse_loss_sum": (lambda m, a, b: m.F.mse_loss(a, b, reduction="sum"),
                     lambda a, b: np.sum((a - b) ** 2), [(3, 4), (3, 4)]),
    "mse_loss_none": (lambda m, a, b: m.F.mse_loss(a, b, reduction="none"),
                      lambda a, b: (a - b) ** 2, [(3, 4), (3, 4)]),
    "l1_loss": (lambda m, a, b: m.F.l1_loss(a, b), lambda a, b: np.mean(np.abs(a - b)),
                [(3, 4), (3, 4)]),
    "l1_loss_none": (lambda m, a, b: m.F.l1_loss(a, b, reduction="none"),
                     lambda a, b: np.abs(a - b), [(3, 4), (3, 4)]),
    "cross_entropy_probs": (
        lambda m, x, p: m.F.cross_entropy(x, p.softmax(1)),
        lambda x, p: -np.mean(np.sum(_softmax(p, 1) * _log_softmax(x, 1), 1)),
        [(5, 4), (5, 4)],
    ),
}  # fmt: skip


def _inputs(shapes, rng, positive):
    return [np.abs(rand(s, rng)) if positive else rand(s, rng) for s in shapes]


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_value_and_gradient(name, ctx):
    fn, ref, shapes, *options = CASES[name]
    opts = options[0] if options else {}
    rng, seed = new_rng()
    xs = _inputs(shapes, rng, opts.get("positive", False))
    msg = f"{name} on {ctx} (seed={seed})"

    want = np.asarray(ref(*[x.astype(np.float64) for x in xs]), dtype=np.float64)
    r = rand(want.shape, rng)
    poison(ctx, [*shapes, want.shape])
    tg = [gpumat.tensor(x, device=ctx, requires_grad=True) for x in xs]
    out = fn(G, *tg)
    assert out.shape == want.shape, msg
    out.backward(gradient=gpumat.tensor(r, device=ctx))
    got = out.detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=msg)

    fd = fd_gradient(ref, xs, r)
    tt = [torch.tensor(x, requires_grad=True) for x in xs]
    tout = fn(T, *tt)
    tout.backward(torch.tensor(r))
    np.testing.assert_allclose(got, tout.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=msg)
    for i, (t, g_fd, g_t) in enumerate(zip(tg, fd, tt, strict=True)):
        assert t.grad is not None and t.grad.shape == t.shape, f"{msg}: input {i}"
        g = t.grad.numpy()
        assert not np.isnan(g).any(), f"{msg}: NaN in the gradient of input {i}"
        np.testing.assert_allclose(g, g_fd, rtol=1e-3, atol=1e-4, err_msg=f"{msg}: d/dx{i} fd")
        np.testing.assert_allclose(
            g, g_t.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"{msg}: d/dx{i} torch"
        )


# ------------------------------------------------------------------------------------------------
# Class-index losses: int64 targets


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("loss", ["nll_loss", "cross_entropy"])
def test_class_index_losses(ctx, loss, reduction):
    rng, seed = new_rng()
    n, c = 6, 5
    x = rand((n, c), rng)
    y = rng.integers(0, c, size=n)
    logp = _log_softmax(x.astype(np.float64), 1)
    picked = -logp[np.arange(n), y] if loss == "cross_entropy" else -x[np.arange(n), y]
    want = {"mean": picked.mean(), "sum": picked.sum(), "none": picked}[reduction]
    poison(ctx, [(n, c), (n,)])

    xt = gpumat.tensor(x, device=ctx, requires_grad=True)
    yt = gpumat.tensor(y, device=ctx)
    assert yt.dtype is gpumat.int64
    out = getattr(F, loss)(xt, yt, reduction=reduction)
    r = rand(np.shape(want), rng)
    out.backward(gradient=gpumat.tensor(r, device=ctx))
    msg = f"{loss} {reduction} on {ctx} (seed={seed})"
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-5, atol=1e-6, err_msg=msg)

    xtt = torch.tensor(x, requires_grad=True)
    tout = getattr(TF, loss)(xtt, torch.tensor(y), reduction=reduction)
    tout.backward(torch.tensor(r))
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(xt.grad.numpy(), xtt.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_nll_loss_takes_one_hot_rows(ctx):
    rng, _ = new_rng()
    x = rand((4, 3), rng)
    y = rng.integers(0, 3, size=4)
    rows = np.eye(3, dtype=np.float32)[y]
    a = F.nll_loss(gpumat.tensor(x, device=ctx), gpumat.tensor(rows, device=ctx))
    b = F.nll_loss(gpumat.tensor(x, device=ctx), gpumat.tensor(y, device=ctx))
    assert a.item() == pytest.approx(b.item(), rel=1e-6)
    assert a.item() == pytest.approx(-x[np.arange(4), y].mean(), rel=1e-5)


# ------------------------------------------------------------------------------------------------
# Ops without gradients: argmax, eq, ne, one_hot, sums of ints


def test_argmax_matches_numpy_and_torch(ctx):
    rng, _ = new_rng()
    x = rand((5, 7), rng)
    t = gpumat.tensor(x, device=ctx)
    for dim, keep in [(1, False), (0, True), (-1, True), (None, False)]:
        got = t.argmax(dim, keepdim=keep) if dim is not None else t.argmax()
        want = (
            torch.tensor(x).argmax(dim, keepdim=keep)
            if dim is not None
            else torch.tensor(x).argmax()
        )
        assert got.dtype is gpumat.int64
        np.testing.assert_array_equal(got.numpy(), want.numpy())
        assert got.numpy().dtype == np.int64
    values, indices = t.max(1)
    np.testing.assert_array_equal(indices.numpy(), x.argmax(1))
    np.testing.assert_array_equal(values.numpy(), x.max(1))


def test_eq_ne_and_counting_correct_predictions(ctx):
    # The PyTorch MNIST example's accuracy: pred.eq(target.view_as(pred)).sum().item()
    rng, _ = new_rng()
    x = rand((50, 10), rng)
    target = rng.integers(0, 10, size=50)
    out = gpumat.tensor(x, device=ctx)
    tgt = gpumat.tensor(target, device=ctx)
    pred = out.argmax(dim=1, keepdim=True)
    hits = pred.eq(tgt.view_as(pred))
    assert hits.dtype is gpumat.bool and hits.shape == (50, 1)
    correct = hits.sum()
    assert correct.dtype is gpumat.int64
    assert correct.item() == int((x.argmax(1) == target).sum())
    assert isinstance(correct.item(), int)
    ne = (pred != tgt.view_as(pred)).sum().item()
    assert ne == 50 - correct.item()
    eq_scalar = (tgt == 3).numpy()
    np.testing.assert_array_equal(eq_scalar, target == 3)
    assert eq_scalar.dtype == np.bool_


def test_one_hot(ctx):
    y = gpumat.tensor([2, 0, 1, 2], device=ctx)
    oh = F.one_hot(y, 4)
    assert oh.dtype is gpumat.int64
    np.testing.assert_array_equal(oh.numpy(), np.eye(4, dtype=np.int64)[[2, 0, 1, 2]])
    np.testing.assert_array_equal(F.one_hot(y).numpy(), np.eye(3, dtype=np.int64)[[2, 0, 1, 2]])


def test_sum_of_ints_refuses_what_could_round(ctx):
    big = gpumat.tensor(np.full(4, 2**23, dtype=np.int64), device=ctx)
    with pytest.raises(ValueError, match="2\\*\\*24"):
        big.sum()
    assert gpumat.tensor([1, 2, 3], device=ctx).sum().item() == 6


def test_float_conversions(ctx):
    b = gpumat.tensor([True, False, True], device=ctx)
    assert b.float().dtype is gpumat.float32
    np.testing.assert_array_equal(b.float().numpy(), [1.0, 0.0, 1.0])
    x = gpumat.tensor([1.7, -2.5, 3.0], device=ctx)
    np.testing.assert_array_equal(x.long().numpy(), [1, -2, 3])  # toward zero, as torch
    np.testing.assert_array_equal(x.bool().numpy(), [True, True, True])
    assert x.to(gpumat.int64).dtype is gpumat.int64


# ------------------------------------------------------------------------------------------------
# Dropout


def test_dropout_masks_scale_and_gradient(ctx):
    gpumat.manual_seed(7)
    x = gpumat.tensor(np.full((64, 128), 2.0, np.float32), device=ctx, requires_grad=True)
    y = F.dropout(x, p=0.25)
    values = y.detach().numpy()
    kept = values != 0
    np.testing.assert_allclose(values[kept], 2.0 / 0.75, rtol=1e-6)
    assert abs(kept.mean() - 0.75) < 0.02  # 8192 draws: 4.5 standard deviations
    y.backward(gradient=gpumat.ones(64, 128, device=ctx))
    np.testing.assert_allclose(x.grad.numpy(), np.where(kept, 1 / 0.75, 0.0), rtol=1e-6)
    z = F.dropout(x, p=0.25)
    assert not np.array_equal(z.detach().numpy() != 0, kept)  # a fresh mask per call
    assert F.dropout(x, 0.25, training=False) is x
    gpumat.manual_seed(7)
    again = F.dropout(x, p=0.25).detach().numpy()
    np.testing.assert_array_equal(again, values)  # manual_seed repeats the masks


@pytest.mark.parametrize("name", ["sum", "mean", "softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, -1])
def test_zero_dim_tensors_reduce_along_dim_0_as_pytorch(ctx, name, dim):
    # A 0-d tensor reduces along dim 0 or -1 as if it were (1,) and stays 0-d (it used to fail
    # inside the graph op); the gradient flows as PyTorch's.
    rng, _ = new_rng()
    value = float(rng.standard_normal())
    x = gpumat.tensor(value, device=ctx, requires_grad=True)
    t = torch.tensor(value, dtype=torch.float64, requires_grad=True)
    y, ty = getattr(x, name)(dim), getattr(t, name)(dim)
    assert y.shape == tuple(ty.shape) == ()
    np.testing.assert_allclose(y.item(), ty.item(), rtol=1e-6, atol=1e-7)
    (y * 3.0).backward()
    (ty * 3.0).backward()
    np.testing.assert_allclose(x.grad.item(), t.grad.item(), rtol=1e-6, atol=1e-7)
    with pytest.raises(IndexError, match=f"{name}: dim 1 is out of range"):
        getattr(x, name)(1)


@pytest.mark.parametrize("c", [1e-39, 3.0, 7.1, -0.0, float("inf"), 2.5e38])
def test_division_by_a_number_is_a_true_division(ctx, c):
    # x / c used to be x * (1/c): with c = 1e-39, 1/c overflows, so 0 / c was NaN and
    # 1e-10 / c inf where PyTorch gives 0 and 1e29. Now bit for bit PyTorch's float32 quotient.
    rng, _ = new_rng()
    values = np.concatenate([[0.0, 1e-10, -3.0], rng.standard_normal(13)]).astype(np.float32)
    x = gpumat.tensor(values, device=ctx, requires_grad=True)
    y = x / c
    want = torch.from_numpy(values) / c
    np.testing.assert_array_equal(y.detach().numpy(), want.numpy())
    y.sum().backward()
    t = torch.from_numpy(values.copy()).requires_grad_()
    (t / c).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.detach().numpy())


def test_integer_powers_are_new_tensors_with_pytorchs_gradients(ctx):
    # x ** 1 used to return x itself (an in-place change of the result changed x) and x ** 0 had
    # no gradient path; both now as PyTorch: new tensors, x ** 0 ones (inf and NaN included) with
    # a zero gradient, in eager and compiled steps.
    rng, _ = new_rng()
    values = np.concatenate([[0.0, np.inf, np.nan], rng.standard_normal(5)]).astype(np.float32)
    x = gpumat.tensor(values, device=ctx, requires_grad=True)
    t = torch.from_numpy(values.copy()).requires_grad_()
    for n in (0, 1, 2, 3):
        x.grad, t.grad = None, None
        y, ty = x**n, t**n
        assert y is not x
        np.testing.assert_array_equal(y.detach().numpy(), ty.detach().numpy())
        (y * 3.0).sum().backward()
        (ty * 3.0).sum().backward()
        # n >= 2: products in another order than torch's n * x**(n-1) (an ulp apart)
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=0 if n < 2 else 1e-6)
    with gpumat.no_grad():
        w = gpumat.tensor(values[3:], device=ctx)
        (w**1).add_(1.0)
    np.testing.assert_array_equal(w.numpy(), values[3:])

    finite = gpumat.tensor(values[3:], device=ctx, requires_grad=True)

    def step(a):
        loss = (a**0 * 2.0 + a**1 + a**3).sum()
        loss.backward()
        return loss

    compiled = gpumat.compile(step)
    for _ in range(2):
        finite.grad = None
        compiled(finite)
    want = 1.0 + 3.0 * values[3:].astype(np.float64) ** 2
    np.testing.assert_allclose(finite.grad.numpy(), want, rtol=1e-6)


TRANSPOSES = [
    lambda x: x.t(),
    lambda x: x.T,
    lambda x: x.transpose(0, 1),
    lambda x: x.transpose(-2, -1),
]


@pytest.mark.parametrize("make", TRANSPOSES)
def test_an_inplace_change_of_a_transpose_reaches_the_original(ctx, make):
    # A transpose is a view, as PyTorch's: an in-place change of it (or of its detach()) changes
    # x, a change of x shows in it, and view(-1) of it is refused as PyTorch refuses it.
    rng, _ = new_rng()
    values = rand((3, 4), rng)
    changes = (
        lambda y: y.add_(1.5),
        lambda y: y.mul_(2.0),
        lambda y: y.fill_(0.25),
        lambda y: y.zero_(),
        lambda y: y.copy_(y * 3.0 - 1.0),
        lambda y: y.detach().add_(1.0),
    )
    for change in changes:
        x, t = gpumat.tensor(values, device=ctx), torch.from_numpy(values.copy())
        y, u = make(x), make(t)
        with gpumat.no_grad():
            change(y)
        change(u)
        np.testing.assert_array_equal(x.numpy(), t.numpy())
        np.testing.assert_array_equal(y.numpy(), u.numpy())
        x.add_(1.0)
        u.add_(0)  # t and u share memory: u already shows t's change below
        t.add_(1.0)
        np.testing.assert_array_equal(y.numpy(), u.numpy())
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        make(gpumat.tensor(values, device=ctx)).view(-1)
    x, t = gpumat.tensor(values, device=ctx), torch.from_numpy(values.copy())
    for ours, theirs in (
        (make(x).clone().add_(1.0), make(t).clone().add_(1.0)),
        (make(x).contiguous().add_(1.0), make(t).contiguous().add_(1.0)),
        (make(x) + 1.0, make(t) + 1.0),
        (make(x).reshape(-1) * 2.0, make(t).reshape(-1) * 2.0),
    ):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    np.testing.assert_array_equal(x.numpy(), values)


def test_the_tutorials_update_loop_updates_the_parameters_in_place(ctx):
    # "What is torch.nn really?": with no_grad(), p -= p.grad * lr. Without __isub__ the loop
    # rebound p each step and trained nothing (the loss stayed at 2.34 where PyTorch's fell).
    rng, seed = new_rng()
    x = rand((64, 20), rng)
    y = rng.integers(0, 10, 64)
    w0, b0 = rand((20, 10), rng) * 0.1, np.zeros(10, np.float32)
    losses = {}
    for lib, make in (("gpumat", lambda a: gpumat.tensor(a, device=ctx)), ("torch", torch.tensor)):
        L = gpumat if lib == "gpumat" else torch
        functional = F if lib == "gpumat" else TF
        weights, bias = make(w0.copy()), make(b0.copy())
        weights.requires_grad_()
        bias.requires_grad_()
        params = [weights, bias]
        xs, ys, history = make(x), make(y), []
        for _ in range(5):
            loss = functional.cross_entropy(xs @ weights + bias, ys)
            loss.backward()
            with L.no_grad():
                weights -= weights.grad * 0.5
                bias -= bias.grad * 0.5
                weights.grad.zero_()
                bias.grad.zero_()
            history.append(loss.item())
        assert params[0] is weights and params[1] is bias  # updated in place, not rebound
        losses[lib] = (history, weights.detach().numpy(), bias.detach().numpy())
    (ours, w, b), (theirs, tw, tb) = losses["gpumat"], losses["torch"]
    assert ours[-1] < ours[0] - 0.1, f"seed={seed}: {ours}"
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, err_msg=f"seed={seed}")
    np.testing.assert_allclose(w, tw, rtol=1e-4, atol=1e-6, err_msg=f"seed={seed}")
    np.testing.assert_allclose(b, tb, rtol=1e-4, atol=1e-6, err_msg=f"seed={seed}")


def test_augmented_assignments_change_the_tensor_as_pytorchs_do(ctx):
    rng, seed = new_rng()
    a, b, row = rand((4, 5), rng), rand((4, 5), rng) + 2.0, rand((5,), rng)
    for op in (operator.iadd, operator.isub, operator.imul, operator.itruediv):
        for other in ("tensor", "row", "number"):
            ours, theirs = gpumat.tensor(a, device=ctx), torch.tensor(a)
            values = {"tensor": b, "row": row, "number": 3.0}[other]
            o = gpumat.tensor(values, device=ctx) if other != "number" else values
            t = torch.tensor(values) if other != "number" else values
            assert op(ours, o) is ours and op(theirs, t) is theirs  # in place, twice
            np.testing.assert_array_equal(
                ours.numpy(), theirs.numpy(), err_msg=f"{op.__name__} {other} (seed={seed})"
            )
    x = gpumat.tensor(a, device=ctx, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x += 1.0
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        row_t = gpumat.tensor(row, device=ctx)
        row_t += gpumat.tensor(a, device=ctx)
    # a tensor of a recorded graph: x += y is x + y (gpumat's autograd records no in-place op)
    y = x * 2.0
    before = y
    y += 1.0
    assert y is not before
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(a.shape, 2.0, np.float32))
