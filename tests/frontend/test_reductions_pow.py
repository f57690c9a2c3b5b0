"""Issue 35's Tensor methods and gpumat functions against PyTorch on the CPU (values and
gradients, on every device, fresh random inputs, NaN-poisoned allocator): min, argmin, amin,
amax, prod, cumsum, var, std, norm, logsumexp, any, all, pow (** with a number, a tensor, a
number base), square, tril, triu; special values (NaN, ties, zeros, +-inf rows); bad input; and
a step compiled by gpumat.compile against the eager one."""

import math

import numpy as np
import pytest
from frontend_helpers import poison
from helpers import new_rng

import gpumat

torch = pytest.importorskip("torch")

RTOL = 2e-5


def _pair(x, ctx, grad=True):
    return (
        gpumat.tensor(x, device=ctx, requires_grad=grad),
        torch.tensor(x, dtype=torch.float32, requires_grad=grad),
    )


def _check(ctx, fn, x, rtol=RTOL, atol=1e-6, tfn=None, grad=True):
    """fn(gpumat tensor) against (tfn or fn)(torch tensor): values and the gradient of a random
    weighting of the output."""
    tfn = tfn or fn
    poison(ctx, [x.shape])
    g, t = _pair(x, ctx, grad)
    yg, yt = fn(g), tfn(t)
    np.testing.assert_allclose(yg.detach().numpy(), yt.detach().numpy(), rtol=rtol, atol=atol)
    if grad:
        rng, _ = new_rng()
        w = rng.uniform(-1, 1, size=tuple(yt.shape)).astype(np.float32)
        (yg * gpumat.tensor(w, device=ctx)).sum().backward()
        (yt * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=rtol * 10, atol=atol * 10)


DIMS = [None, 0, 1, -1, (0, 2), (1, 2), (0, 1, 2)]


@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("keepdim", [False, True])
def test_amax_amin_var_std_norm_logsumexp_match_torch(ctx, dim, keepdim):
    rng, _ = new_rng()
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    d = () if dim is None else dim
    _check(ctx, lambda v: v.amax(d, keepdim), x)
    _check(ctx, lambda v: v.amin(d, keepdim), x)
    _check(ctx, lambda v: v.var(dim, keepdim=keepdim), x)
    _check(ctx, lambda v: v.std(dim, keepdim=keepdim, correction=0), x)
    _check(ctx, lambda v: v.var(dim, False, keepdim), x)
    for p in (2, "fro", 1, math.inf, -math.inf, 3.0, 0.5):
        _check(
            ctx,
            lambda v, p=p: v.norm(p, dim, keepdim),
            np.abs(x) + 0.1,
            rtol=1e-4,
            tfn=lambda v, p=p: torch.linalg.vector_norm(v, 2 if p == "fro" else p, dim, keepdim),
        )
    _check(ctx, lambda v: v.norm(0, dim, keepdim), x, grad=False)  # torch leaves grad None
    if dim is not None:
        _check(ctx, lambda v: v.logsumexp(dim, keepdim), x * 30, rtol=1e-5, atol=1e-4)
        _check(
            ctx,
            lambda v: gpumat.logsumexp(v, dim, keepdim=keepdim),
            x,
            tfn=lambda v: torch.logsumexp(v, dim, keepdim=keepdim),
        )


@pytest.mark.parametrize("dim", [None, 0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_min_argmin_prod_cumsum_match_torch(ctx, dim, keepdim):
    rng, _ = new_rng()
    x = rng.standard_normal((4, 6)).astype(np.float32)
    if dim is None:
        _check(ctx, lambda v: v.min(), x)
        _check(ctx, lambda v: v.prod(), rng.uniform(0.5, 1.5, (4, 6)).astype(np.float32))
        got = gpumat.tensor(x, device=ctx).argmin()
        assert got.dtype is gpumat.int64 and got.item() == torch.tensor(x).argmin().item()
        return
    _check(ctx, lambda v: v.min(dim, keepdim).values, x)
    got = gpumat.tensor(x, device=ctx).min(dim, keepdim)
    want = torch.tensor(x).min(dim, keepdim)
    assert type(got).__name__ == "min"
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
    np.testing.assert_array_equal(
        gpumat.tensor(x, device=ctx).argmin(dim, keepdim).numpy(),
        torch.tensor(x).argmin(dim, keepdim).numpy(),
    )
    _check(ctx, lambda v: v.prod(dim, keepdim), x)
    _check(ctx, lambda v: v.cumsum(dim), x)
    _check(ctx, lambda v: gpumat.cumsum(v, dim), x, tfn=lambda v: torch.cumsum(v, dim))


def test_prod_gradient_with_zeros_matches_torch(ctx):
    x = np.array([[0.0, 2.0, 3.0, 0.5], [0.0, 2.0, 0.0, 4.0], [1.5, -2.0, 3.0, 0.5]], np.float32)
    _check(ctx, lambda v: v.prod(1), x)
    _check(ctx, lambda v: v.prod(), x[2:])


def test_special_values_match_torch(ctx):
    x = np.array([[1.0, np.nan, -1.0, np.nan], [2.0, -1.0, -1.0, 5.0]], np.float32)
    g, t = gpumat.tensor(x, device=ctx), torch.tensor(x)
    np.testing.assert_array_equal(g.argmin(1).numpy(), t.argmin(1).numpy())  # first NaN; ties
    np.testing.assert_array_equal(g.amin(1).numpy(), t.amin(1).numpy())
    np.testing.assert_array_equal(g.any(1).numpy(), t.any(1).numpy())
    np.testing.assert_array_equal(g.all().numpy(), t.all().numpy())
    rows = np.array([[-np.inf, -np.inf], [np.inf, 1.0], [-np.inf, 2.0]], np.float32)
    np.testing.assert_array_equal(
        gpumat.tensor(rows, device=ctx).logsumexp(1).numpy(), torch.tensor(rows).logsumexp(1)
    )
    b = np.array([[0, 0, 1], [1, 1, 1]], bool)
    gb, tb = gpumat.tensor(b, device=ctx), torch.tensor(b)
    for name in ("any", "all"):
        np.testing.assert_array_equal(getattr(gb, name)().numpy(), getattr(tb, name)().numpy())
        for dim in (0, 1):
            want = getattr(tb, name)(dim).numpy()
            np.testing.assert_array_equal(getattr(gb, name)(dim).numpy(), want)
    assert gb.any().dtype is gpumat.bool
    empty = gpumat.zeros((0, 3), device=ctx)
    assert not empty.any().item() and empty.all().item()
    np.testing.assert_array_equal(empty.all(0).numpy(), [True, True, True])
    # int64 min / cumsum keep their dtype
    i = gpumat.tensor([[3, -2, 7], [1, 1, -5]], device=ctx)
    assert i.min().item() == -5 and i.min().dtype is gpumat.int64
    np.testing.assert_array_equal(i.cumsum(1).numpy(), [[3, 1, 8], [1, 2, -3]])
    assert i.cumsum(1).dtype is gpumat.int64


def test_norm_gradient_at_zero_is_zero(ctx):
    z = gpumat.zeros((3, 4), device=ctx, requires_grad=True)
    z.norm().backward()
    np.testing.assert_array_equal(z.grad.numpy(), np.zeros((3, 4), np.float32))
    z = gpumat.zeros((3, 4), device=ctx, requires_grad=True)
    z.norm(dim=1).sum().backward()
    np.testing.assert_array_equal(z.grad.numpy(), np.zeros((3, 4), np.float32))


@pytest.mark.parametrize("c", [0, 1, 2, 3, 0.5, -1, -2.5, 1.7, 4])
def test_pow_number_exponent_matches_torch(ctx, c):
    rng, _ = new_rng()
    x = rng.uniform(0.2, 2.0, (3, 5)).astype(np.float32)
    _check(ctx, lambda v: v**c, x, rtol=1e-5)
    _check(ctx, lambda v: v.pow(c), x, rtol=1e-5)
    _check(ctx, lambda v: gpumat.pow(v, c), x, rtol=1e-5, tfn=lambda v: torch.pow(v, c))


def test_pow_exact_products_and_negative_bases(ctx):
    rng, _ = new_rng()
    x = rng.standard_normal((4, 5)).astype(np.float32)
    g = gpumat.tensor(x, device=ctx)
    np.testing.assert_array_equal((g**2).numpy(), x * x)  # x * x, as PyTorch's
    np.testing.assert_array_equal(g.square().numpy(), (torch.tensor(x).square()).numpy())
    neg = np.array([-2.0, -0.5, 0.0, -0.0, np.nan, np.inf], np.float32)
    for c in (0.5, -1.0, 3.0, -2.0, 1.5, 0.0):
        got = (gpumat.tensor(neg, device=ctx) ** c).numpy()
        want = (torch.tensor(neg) ** c).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True)


def test_rpow_and_tensor_exponent_match_torch(ctx):
    rng, _ = new_rng()
    e = rng.uniform(-2, 2, (3, 4)).astype(np.float32)
    _check(ctx, lambda v: 2.5**v, e)
    _check(ctx, lambda v: gpumat.pow(0.7, v), e, tfn=lambda v: torch.pow(0.7, v))
    a = rng.uniform(0.2, 2.0, (3, 4)).astype(np.float32)
    ga, ta = _pair(a, ctx)
    ge, te = _pair(e, ctx)
    (ga**ge).sum().backward()
    (ta**te).sum().backward()
    np.testing.assert_allclose((ga**ge).detach().numpy(), (ta**te).detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(ga.grad.numpy(), ta.grad.numpy(), rtol=1e-4)
    np.testing.assert_allclose(ge.grad.numpy(), te.grad.numpy(), rtol=1e-4, atol=1e-6)
    # zero base and exponent: PyTorch's masks
    zb, tb = _pair(np.array([0.0, 0.0, 2.0], np.float32), ctx)
    ze, tz = _pair(np.array([0.0, 2.0, 0.0], np.float32), ctx)
    (zb**ze).sum().backward()
    (tb**tz).sum().backward()
    np.testing.assert_array_equal(zb.grad.numpy(), tb.grad.numpy())
    np.testing.assert_array_equal(ze.grad.numpy(), tz.grad.numpy())
    # a row exponent broadcast along the batch (the existing rules)
    row = gpumat.tensor(e[0], device=ctx)
    np.testing.assert_allclose(
        (gpumat.tensor(a, device=ctx) ** row).numpy(),
        (torch.tensor(a) ** torch.tensor(e[0])).numpy(),
        rtol=1e-5,
    )


@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_tril_triu_match_torch(ctx, diagonal):
    rng, _ = new_rng()
    x = rng.standard_normal((2, 4, 5)).astype(np.float32)
    _check(ctx, lambda v: v.tril(diagonal), x)
    _check(ctx, lambda v: gpumat.triu(v, diagonal), x, tfn=lambda v: torch.triu(v, diagonal))
    i = gpumat.tensor([[1, 2], [3, 4]], device=ctx).triu()
    assert i.dtype is gpumat.int64 and i.tolist() == [[1, 2], [0, 4]]


def test_bad_input_names_the_op(ctx):
    x = gpumat.tensor(np.ones((2, 3), np.float32), device=ctx)
    with pytest.raises(TypeError, match="min"):
        x.min((0, 1))
    with pytest.raises(IndexError, match="min"):
        x.min(5)
    with pytest.raises(IndexError, match="amin"):
        x.amin((0, 4))
    with pytest.raises(ValueError, match="argmin"):
        gpumat.zeros((0, 3), device=ctx).argmin(0)
    with pytest.raises(TypeError, match="prod"):
        gpumat.tensor([1, 2]).prod()
    with pytest.raises(IndexError, match="cumsum"):
        x.cumsum(2)
    with pytest.raises(TypeError, match="var"):
        x.var(0, unbiased=True, correction=1)
    with pytest.raises(ValueError, match="norm"):
        x.norm("nuc")
    with pytest.raises(ValueError, match="tril"):
        gpumat.tensor([1.0, 2.0], device=ctx).tril()
    with pytest.raises(TypeError, match="pow"):
        x.pow("2")
    with pytest.raises(TypeError, match="pow"):
        gpumat.pow(2, 3)
    with pytest.raises(ValueError, match="pow"):
        x ** gpumat.tensor(np.ones((4, 4), np.float32), device=ctx)
    with pytest.raises(TypeError, match="tril"):
        x.tril(0.5)
    with pytest.raises(IndexError, match="logsumexp"):
        x.logsumexp(3)


def test_compiled_step_equals_eager(ctx):
    rng, _ = new_rng()
    x = gpumat.tensor(rng.uniform(0.5, 2.0, (4, 3)).astype(np.float32), device=ctx)

    def step(w, x):
        w.grad = None
        y = w * x
        loss = (
            y.prod(1).sum()
            + y.cumsum(0).amax()
            + y.var(0).sum()
            + y.norm()
            + y.logsumexp(1).sum()
            + (y**1.5).sum()
            + (1.3**y).sum()
            + (y**x).sum()
            + y.tril(-1).sum()
            + y.min()
            + y.std()
        )
        loss.backward()
        return loss, w.grad

    w0 = rng.uniform(0.5, 2.0, (4, 3)).astype(np.float32)
    w_eager = gpumat.tensor(w0, device=ctx, requires_grad=True)
    w_traced = gpumat.tensor(w0, device=ctx, requires_grad=True)
    eager = step(w_eager, x)
    compiled = gpumat.compile(lambda x: step(w_traced, x), fusion=False)
    for _ in range(2):
        traced = compiled(x)
        for e, c in zip(eager, traced, strict=True):
            np.testing.assert_array_equal(c.numpy(), e.detach().numpy())
