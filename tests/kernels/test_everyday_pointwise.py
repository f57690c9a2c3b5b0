"""The everyday pointwise ops PyTorch users expect: abs, sign, sin, cos, erf, log1p, rsqrt; the
comparisons lt, le, gt, ge and logical_not / and / or; minimum, maximum, where, clamp and
masked_fill. The kernels against float64 numpy on fresh random inputs on every device with the
outputs poisoned by NaN, special values, the graph ops' gradients against float64 central
differences and on every device, the Tensor methods against PyTorch on the CPU, zero-size
tensors, dtype errors, and a step compiled by ``gpumat.compile`` against the eager one."""

import math

import numpy as np
import pytest
from helpers import EPS32, assert_close, nan_array, new_rng, shape_id
from nn_helpers import check_device_gradients, check_fd_gradients

import gpumat
import gpumat.graph as ad
import gpumat.ops as ops

ULP = EPS32  # 2**-23
SHAPES = [(7,), (1, 1), (1, 1031), (513, 257), (2, 3, 4, 5)]
_erf64 = np.vectorize(math.erf, otypes=[np.float64])


def _log1p_input(rng, shape):
    """|x| over 40 binades (where log(1 + x) would lose everything, and up to 1e3), x > -0.99."""
    m = np.exp2(rng.uniform(-30, 10, shape))
    return np.where(rng.random(shape) < 0.5, -np.minimum(m, 0.99), m)


# name: (input drawer, float64 reference, relative tolerance in ulp; 0: exact)
UNARY = {
    "abs": (lambda rng, s: rng.uniform(-5, 5, s), np.abs, 0),
    "sign": (lambda rng, s: rng.uniform(-5, 5, s), np.sign, 0),
    "sin": (lambda rng, s: rng.uniform(-10, 10, s), np.sin, 4),
    "cos": (lambda rng, s: rng.uniform(-10, 10, s), np.cos, 4),
    "erf": (lambda rng, s: rng.uniform(-4, 4, s), _erf64, 4),
    # small |x| (where log(1 + x) would lose everything) and up to 1e3
    "log1p": (lambda rng, s: _log1p_input(rng, s), np.log1p, 2),
    "rsqrt": (lambda rng, s: np.exp2(rng.uniform(-20, 20, s)), lambda x: 1 / np.sqrt(x), 2),
}


def _draw(name, rng, shape):
    return UNARY[name][0](rng, shape).astype(np.float32)


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_kernels_match_float64(ctx, name, shape):
    rng, seed = new_rng()
    x = _draw(name, rng, shape)
    out = nan_array(shape, ctx)
    getattr(ops, name)(gpumat.array(x, ctx), out)
    _, ref, ulps = UNARY[name]
    want = ref(x.astype(np.float64))
    if ulps == 0:
        np.testing.assert_array_equal(out.asnumpy(), want, err_msg=f"seed {seed}")
    else:
        assert_close(out.asnumpy(), want, rtol=ulps * ULP, atol=1e-30, msg=f"seed {seed}")
    ref_out = np.full(shape, np.nan, np.float32)
    getattr(gpumat.reference, name)(x, ref_out)  # the numpy twin agrees to the same bound
    assert_close(ref_out, want, rtol=max(ulps, 1) * ULP, atol=1e-30, msg=f"seed {seed}")


def test_unary_special_values_and_in_place(ctx):
    x = np.array([0.0, -0.0, -1.0, 1.0, np.inf, -np.inf, np.nan, 1e-30, -2.0], np.float32)
    with np.errstate(all="ignore"):
        want = {
            "abs": np.abs(x),
            "sign": np.array([0, 0, -1, 1, 1, -1, 0, 1, -1], np.float32),  # NaN -> 0 (PyTorch)
            "sin": np.sin(x),
            "cos": np.cos(x),
            "erf": np.array(
                [0, -0.0, math.erf(-1), math.erf(1), 1, -1, np.nan, 1.1283792e-30, math.erf(-2)],
                np.float32,
            ),  # fmt: skip
            "log1p": np.log1p(x),
            "rsqrt": 1 / np.sqrt(x),
        }
    for name, expected in want.items():
        a = gpumat.array(x, ctx)
        getattr(ops, name)(a, a)  # in place
        got = a.asnumpy()
        tol = 0 if name in ("abs", "sign") else 2 * ULP
        finite = np.isfinite(expected)
        want64 = expected[finite].astype(np.float64)
        assert_close(got[finite], want64, rtol=tol, atol=1e-37, msg=name)
        np.testing.assert_array_equal(got[~finite], expected[~finite], err_msg=name)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=name)
    a = gpumat.array(x, ctx)
    ops.rsqrt(a, a)
    assert a.asnumpy()[1] == -np.inf and a.asnumpy()[0] == np.inf  # rsqrt(-0) = -inf


@pytest.mark.parametrize("shape", SHAPES[:3], ids=shape_id)
def test_rsqrt_gradient(ctx, shape):
    rng, seed = new_rng()
    y = np.exp2(rng.uniform(-10, 10, shape)).astype(np.float32)
    dy = rng.uniform(-1, 1, shape).astype(np.float32)
    out = nan_array(shape, ctx)
    ops.rsqrt_gradient(gpumat.array(y, ctx), gpumat.array(dy, ctx), out)
    want = -0.5 * dy.astype(np.float64) * y.astype(np.float64) ** 3
    assert_close(out.asnumpy(), want, rtol=3 * ULP, atol=1e-37, msg=f"seed {seed}")


BINARY = {
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "logical_and": lambda a, b: (a != 0) & (b != 0),
    "logical_or": lambda a, b: (a != 0) | (b != 0),
    "minimum": np.minimum,
    "maximum": np.maximum,
}


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_kernels_match_numpy(ctx, name, shape):
    rng, seed = new_rng()
    # a few values, so that ties and zeros are common, and NaN, +-inf, -0 among them
    pool = np.array([-2.5, -1.0, -0.0, 0.0, 1.0, 3.0, np.inf, -np.inf, np.nan], np.float32)
    a = rng.choice(pool, shape) + rng.choice([0.0, 0.25], shape).astype(np.float32)
    b = rng.choice(pool, shape)
    out = nan_array(shape, ctx)
    getattr(ops, name)(gpumat.array(a, ctx), gpumat.array(b, ctx), out)
    with np.errstate(invalid="ignore"):
        want = np.asarray(BINARY[name](a.astype(np.float64), b.astype(np.float64)), np.float64)
    np.testing.assert_array_equal(out.asnumpy(), want, err_msg=f"seed {seed}")
    ref = np.full(shape, np.nan, np.float32)
    getattr(gpumat.reference, name)(a, b, ref)
    np.testing.assert_array_equal(ref, want, err_msg=f"seed {seed}")


def test_logical_not_and_nan_is_true(ctx):
    x = np.array([0.0, -0.0, 1.0, np.nan, -3.0], np.float32)
    out = nan_array((5,), ctx)
    ops.logical_not(gpumat.array(x, ctx), out)
    np.testing.assert_array_equal(out.asnumpy(), [1, 1, 0, 0, 0])


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_where_kernel_never_leaks_the_other_value(ctx, shape):
    rng, seed = new_rng()
    cond = rng.integers(0, 2, shape).astype(np.float32)
    a = rng.uniform(-3, 3, shape).astype(np.float32)
    b = rng.uniform(-3, 3, shape).astype(np.float32)
    a[cond == 0] = np.nan  # the unselected side is poison
    b[cond == 1] = np.inf
    out = nan_array(shape, ctx)
    ops.where(gpumat.array(cond, ctx), gpumat.array(a, ctx), gpumat.array(b, ctx), out)
    np.testing.assert_array_equal(out.asnumpy(), np.where(cond != 0, a, b), f"seed {seed}")
    assert np.isfinite(out.asnumpy()).all()


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_clamp_and_its_gradient(ctx, shape):
    rng, seed = new_rng()
    x = rng.uniform(-3, 3, shape).astype(np.float32)
    x.flat[0] = np.nan
    lo, hi = float(rng.uniform(-2, 0)), float(rng.uniform(0, 2))
    lo32, hi32 = np.float32(lo), np.float32(hi)
    x.flat[-1] = lo32  # a value on the bound gets the gradient (PyTorch's closed interval)
    dy = rng.uniform(-1, 1, shape).astype(np.float32)
    out = nan_array(shape, ctx)
    ops.clamp(gpumat.array(x, ctx), lo, hi, out)
    with np.errstate(invalid="ignore"):
        want = np.minimum(np.maximum(x.astype(np.float64), lo32), hi32)
    np.testing.assert_array_equal(out.asnumpy(), want, err_msg=f"seed {seed}")
    g = nan_array(shape, ctx)
    ops.clamp_gradient(gpumat.array(x, ctx), gpumat.array(dy, ctx), lo, hi, g)
    with np.errstate(invalid="ignore"):
        inside = (x >= lo32) & (x <= hi32)
    np.testing.assert_array_equal(g.asnumpy(), np.where(inside, dy, 0.0), f"seed {seed}")
    assert g.asnumpy().flat[-1] == dy.flat[-1] and (x.size == 1 or g.asnumpy().flat[0] == 0.0)


def test_clamp_inverted_and_open_bounds(ctx):
    x = np.array([-5.0, 0.0, 0.5, 5.0, np.nan], np.float32)
    out = nan_array((5,), ctx)
    ops.clamp(gpumat.array(x, ctx), 1.0, -1.0, out)  # lo > hi: hi everywhere (torch.clamp)
    np.testing.assert_array_equal(out.asnumpy(), [-1, -1, -1, -1, np.nan])
    ops.clamp(gpumat.array(x, ctx), -math.inf, 0.25, out)
    np.testing.assert_array_equal(out.asnumpy(), [-5, 0, 0.25, 0.25, np.nan])


def test_pointwise_shape_errors_name_the_op(ctx):
    a, b = gpumat.empty((3, 4), ctx), gpumat.empty((4, 3), ctx)
    for name in ("lt", "logical_and", "maximum"):
        with pytest.raises(ValueError, match=rf"{name}: .*\(3, 4\).*\(4, 3\)"):
            getattr(ops, name)(a, b, a)
    with pytest.raises(ValueError, match=r"where: .*\(3, 4\).*\(4, 3\)"):
        ops.where(a, a, b, a)
    with pytest.raises(ValueError, match=r"clamp: .*\(3, 4\).*\(4, 3\)"):
        ops.clamp(a, 0.0, 1.0, b)
    with pytest.raises(ValueError, match=r"clamp_gradient: .*\(3, 4\).*\(4, 3\)"):
        ops.clamp_gradient(a, b, 0.0, 1.0, a)
    with pytest.raises(TypeError):
        ops.sin(np.ones((3, 4), np.float32), a)


# ------------------------------------------------------------------------------------ gradients

GRAPH = {
    "abs": (lambda x: ad.abs_op(x), (-2.0, 2.0)),
    "sin": (lambda x: ad.sin_op(x), (-4.0, 4.0)),
    "cos": (lambda x: ad.cos_op(x), (-4.0, 4.0)),
    "erf": (lambda x: ad.erf_op(x), (-2.5, 2.5)),
    "log1p": (lambda x: ad.log1p_op(x), (-0.8, 3.0)),
    "rsqrt": (lambda x: ad.rsqrt_op(x), (0.2, 3.0)),
    "clamp": (lambda x: ad.clamp_op(x, -0.5, 0.7), (-2.0, 2.0)),
    "sign": (lambda x: ad.sign_op(x) * x, (-2.0, 2.0)),
}


@pytest.mark.parametrize("name", sorted(GRAPH))
@pytest.mark.parametrize("shape", [(1, 1), (9, 1), (6, 7), (2, 3, 4)], ids=shape_id)
def test_unary_op_gradients_fd_float64(name, shape):
    rng, _ = new_rng()
    build, (low, high) = GRAPH[name]
    x = rng.uniform(low, high, size=shape)
    x[np.abs(x) < 0.05] += 0.1  # away from the kinks of abs, sign and clamp
    x[np.abs(np.abs(x - 0.1) - 0.6) < 0.05] += 0.1
    check_fd_gradients(build, [x], rng)


@pytest.mark.parametrize("shape", [(1, 1), (6, 7), (2, 3, 4)], ids=shape_id)
def test_binary_op_gradients_fd_float64(shape):
    rng, _ = new_rng()
    a = rng.uniform(-2, 2, size=shape)
    b = a + rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.1, 1.0, size=shape)  # no ties
    c = rng.uniform(-2, 2, size=shape)
    check_fd_gradients(lambda a, b: ad.maximum_op(a, b), [a, b], rng)
    check_fd_gradients(lambda a, b: ad.minimum_op(a, b), [a, b], rng)
    where = lambda a, b, c: ad.where_op(ad.gt_op(c, a), a, b)  # noqa: E731
    check_fd_gradients(where, [a, b, c], rng, wrt=[0, 1])


@pytest.mark.parametrize("shape", [(1, 1), (6, 7), (300, 70)], ids=shape_id)
def test_graph_ops_on_devices_match_numpy(ctx, shape):
    rng, _ = new_rng()
    for build, (low, high) in GRAPH.values():
        x = rng.uniform(low, high, size=shape)
        check_device_gradients(ctx, build, [x], rng)
    a, b = rng.uniform(-2, 2, size=shape), rng.uniform(-2, 2, size=shape)
    b[::2] = a[::2]  # ties: half the gradient to each
    check_device_gradients(ctx, lambda a, b: ad.maximum_op(a, b) * 2.0, [a, b], rng)
    check_device_gradients(ctx, lambda a, b: ad.minimum_op(a, b), [a, b], rng)
    check_device_gradients(ctx, lambda a, b: ad.where_op(ad.le_op(a, b), a, b * b), [a, b], rng)


def test_graph_node_names_and_no_second_derivatives():
    x = ad.Variable("x")
    assert ad.clamp_op(x, -1, 2).name == "Clamp(x,-1.0,2.0)"
    assert ad.lt_op(x, x).name == "Lt(x,x)"
    assert ad.where_op(x, x, x).name == "Where(x,x,x)"
    g = ad.clamp_gradient_op(x, x, 0.0, 1.0)
    assert all(isinstance(d, ad.Undefined) for d in g.op.gradient(g, ad.oneslike_op(g)))
    r = ad.rsqrt_gradient_op(x, x)
    assert all(isinstance(d, ad.Undefined) for d in r.op.gradient(r, ad.oneslike_op(r)))
    with pytest.raises(ValueError, match="clamp_op: lo is NaN"):
        ad.clamp_op(x, math.nan, 1.0)
    with pytest.raises(TypeError, match="clamp_op"):
        ad.clamp_op(x, "0", 1.0)


# ------------------------------------------------------------------------------- the front end


def _pair(rng, ctx, shape=(5, 6)):
    a = rng.uniform(-2, 2, size=shape).astype(np.float32)
    t = gpumat.tensor(a, device=ctx, requires_grad=True)
    return a, t


@pytest.mark.parametrize("name", ["abs", "sign", "sin", "cos", "erf", "log1p", "rsqrt"])
def test_tensor_unary_matches_torch(ctx, name):
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    x = _draw(name, rng, (5, 6))
    w = rng.uniform(-1, 1, (5, 6)).astype(np.float32)
    t = gpumat.tensor(x, device=ctx, requires_grad=True)
    (getattr(gpumat, name)(t) * gpumat.tensor(w, device=ctx)).sum().backward()
    tt = torch.tensor(x, requires_grad=True)
    (getattr(torch, name)(tt) * torch.tensor(w)).sum().backward()
    got = getattr(t.detach(), name)().numpy()
    assert_close(got, getattr(torch, name)(tt).detach().numpy(), rtol=4 * ULP, atol=1e-30,
                 msg=f"{name} seed {seed}")  # fmt: skip
    assert_close(t.grad.numpy(), tt.grad.numpy(), rtol=8 * ULP, atol=1e-30, msg=f"seed {seed}")
    with pytest.raises(TypeError, match=name):
        getattr(gpumat.tensor([1, 4], device=ctx), name)()  # int64
    assert abs(t).detach().numpy().tolist() == t.detach().abs().numpy().tolist()


def test_tensor_comparisons_and_logic_match_torch(ctx):
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    a = rng.integers(-2, 3, (4, 5)).astype(np.float32)
    b = rng.integers(-2, 3, (4, 5)).astype(np.float32)
    row = rng.integers(-2, 3, (5,)).astype(np.float32)
    ta, tb, tr = (gpumat.tensor(v, device=ctx) for v in (a, b, row))
    qa, qb, qr = (torch.tensor(v) for v in (a, b, row))
    cases = [
        (ta < tb, qa < qb), (ta <= tb, qa <= qb), (ta > tb, qa > qb), (ta >= tb, qa >= qb),
        (ta < 0.5, qa < 0.5), (1 <= ta, 1 <= qa), (ta.gt(tr), qa.gt(qr)), (tr.ge(ta), qr.ge(qa)),
        (gpumat.lt(ta, 1), torch.lt(qa, 1)), (gpumat.le(ta, tb), torch.le(qa, qb)),
        ((ta > 0).logical_not(), (qa > 0).logical_not()),
        (gpumat.logical_and(ta > 0, tb > 0), torch.logical_and(qa > 0, qb > 0)),
        (gpumat.logical_or(ta > 0, tr > 0), torch.logical_or(qa > 0, qr > 0)),
        (gpumat.logical_not(ta), torch.logical_not(qa)),
    ]  # fmt: skip
    for k, (got, want) in enumerate(cases):
        assert got.dtype is gpumat.bool, k
        np.testing.assert_array_equal(got.numpy(), want.numpy(), err_msg=f"case {k} seed {seed}")
    # int64 tensors compare exactly; the results take no gradient
    ints = gpumat.tensor([[1, 2], [3, 4]], device=ctx)
    assert (ints >= 3).numpy().tolist() == [[False, False], [True, True]]
    x = gpumat.tensor(a, device=ctx, requires_grad=True)
    assert not (x < 1).requires_grad
    with pytest.raises(TypeError, match="lt: cannot compare"):
        ta.lt("1")
    with pytest.raises(ValueError, match=r"gt: shapes \(4, 5\) and \(3,\)"):
        ta.gt(gpumat.tensor([1.0, 2.0, 3.0], device=ctx))


def test_clamp_minimum_maximum_where_masked_fill_match_torch(ctx):
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    a = rng.uniform(-2, 2, (4, 5)).astype(np.float32)
    b = rng.uniform(-2, 2, (4, 5)).astype(np.float32)
    b[0] = a[0]  # ties
    col = rng.uniform(-2, 2, (4, 1)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 5)).astype(np.float32)
    funcs = {
        "clamp": lambda m, a, b, c: m.clamp(a, min=-0.5, max=0.75),
        "clamp min": lambda m, a, b, c: a.clamp(min=0.1),
        "clip max": lambda m, a, b, c: m.clip(a, max=-0.2),
        "maximum": lambda m, a, b, c: m.maximum(a, b),
        "minimum": lambda m, a, b, c: a.minimum(c),
        "where": lambda m, a, b, c: m.where(a > b, a, b * c),
        "where scalar": lambda m, a, b, c: m.where(c > 0, a, 0.5),
        "masked_fill": lambda m, a, b, c: a.masked_fill(c < 0, -3.0) * b,
    }
    for name, f in funcs.items():
        ts = [gpumat.tensor(v, device=ctx, requires_grad=True) for v in (a, b, col)]
        qs = [torch.tensor(v, requires_grad=True) for v in (a, b, col)]
        (f(gpumat, *ts) * gpumat.tensor(w, device=ctx)).sum().backward()
        (f(torch, *qs) * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(
            f(gpumat, *ts).detach().numpy(), f(torch, *qs).detach().numpy(), rtol=1e-6,
            err_msg=f"{name} seed {seed}",
        )  # fmt: skip
        for t, q in zip(ts, qs, strict=True):
            want = np.zeros_like(a if q.shape == (4, 5) else col) if q.grad is None else q.grad
            got = np.zeros_like(want) if t.grad is None else t.grad.numpy()
            np.testing.assert_allclose(got, np.asarray(want), rtol=1e-6, atol=1e-7,
                                       err_msg=f"{name} seed {seed}")  # fmt: skip


def test_front_end_dtype_and_argument_errors(ctx):
    x = gpumat.tensor([[1.0, -2.0]], device=ctx)
    ints = gpumat.tensor([[1, 2]], device=ctx)
    with pytest.raises(TypeError, match="clamp: expected float32"):
        ints.clamp(0, 1)
    with pytest.raises(ValueError, match="clamp: at least one"):
        x.clamp()
    with pytest.raises(ValueError, match="clamp: min is NaN"):
        x.clamp(min=math.nan)
    with pytest.raises(TypeError, match="clamp: max must be a number"):
        x.clamp(max=x)
    with pytest.raises(TypeError, match="maximum: expected float32"):
        x.maximum(ints)
    with pytest.raises(TypeError, match="minimum: expected a Tensor"):
        x.minimum(1.0)
    with pytest.raises(TypeError, match="where: expected a bool tensor as condition"):
        gpumat.where(x, x, x)
    with pytest.raises(TypeError, match="where: expected float32"):
        gpumat.where(x > 0, ints, x)
    with pytest.raises(ValueError, match=r"where: shapes \(3, 1\), \(1, 2\) and \(2, 1\)"):
        gpumat.where(gpumat.tensor([[True], [False], [True]], device=ctx), x, x.t())
    with pytest.raises(TypeError, match="masked_fill: expected a bool tensor as mask"):
        x.masked_fill(x, 1.0)
    with pytest.raises(ValueError, match=r"masked_fill: mask of shape \(2, 2\)"):
        x.masked_fill(gpumat.tensor([[True, False], [False, True]], device=ctx), 0.0)
    with pytest.raises(TypeError, match="logical_and: expected a Tensor"):
        (x > 0).logical_and(True)


@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0, 4)], ids=shape_id)
def test_zero_size_tensors(ctx, shape):
    x = gpumat.zeros(shape, device=ctx, requires_grad=True)
    y = gpumat.zeros(shape, device=ctx)
    results = [getattr(x, n)() for n in ("abs", "sign", "sin", "cos", "erf", "log1p", "rsqrt")]
    results += [x.clamp(-1, 1), x.maximum(y), x.minimum(y), gpumat.where(x < y, x, y)]
    results += [x.masked_fill(y >= 0, 1.0)]
    for r in results:
        assert r.shape == shape
    sum(r.sum() for r in results).backward()
    assert x.grad.shape == shape
    for b in (x < y, x <= 1, x > y, x >= y, (x < y).logical_not(), (x < y).logical_or(y > x)):
        assert b.shape == shape and b.dtype is gpumat.bool


def test_compiled_step_equals_eager(ctx):
    rng, _ = new_rng()
    x = gpumat.tensor(rng.uniform(0.2, 2.0, size=(4, 3)).astype(np.float32), device=ctx)

    def step(w, x):
        w.grad = None
        h = (w * x).sin() + w.cos() * x.erf() + (w.abs() + 1.0).rsqrt() + x.log1p() * w.sign()
        h = gpumat.where(h > 0.5, h.clamp(max=1.5), h.minimum(w)).maximum(x * 0.1)
        h = h.masked_fill(gpumat.logical_and(w < 0, x.ge(1.0)).logical_not(), 0.25) + h
        loss = (h * (h <= 1.2).float()).sum()
        loss.backward()
        return loss, w.grad

    w0 = rng.uniform(-1.5, 1.5, size=(4, 3)).astype(np.float32)
    w_eager = gpumat.tensor(w0, device=ctx, requires_grad=True)
    w_traced = gpumat.tensor(w0, device=ctx, requires_grad=True)
    eager = step(w_eager, x)
    compiled = gpumat.compile(lambda x: step(w_traced, x), fusion=False)
    for _ in range(2):  # the first call traces, the second replays
        traced = compiled(x)
        for e, c in zip(eager, traced, strict=True):
            np.testing.assert_array_equal(c.numpy(), e.detach().numpy())
