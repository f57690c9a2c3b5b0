"""Batched matrix products: :func:`gpumat.ops.bmm` (one launch for the whole batch) against float64
numpy on every device with NaN-poisoned outputs (broadcast batches, a summed output, a batch of 1,
zero-size dims in every axis, non-square, all four transposes); ``bmm_op``'s gradients against
finite differences and on every device; ``Tensor.matmul`` / ``@`` / ``bmm`` with
``torch.matmul``'s shape rules (ranks 1 to 4, broadcast batch dims) and their gradients against
PyTorch on the CPU; a step compiled by ``gpumat.compile`` against the eager one."""

import numpy as np
import pytest
from helpers import EPS32, assert_close, nan_array, new_rng, rand
from nn_helpers import check_device_gradients, check_fd_gradients

import gpumat
import gpumat.autodiff as ad
import gpumat.ops as ops

TRANSPOSES = [(False, False), (True, False), (False, True), (True, True)]
TRANSPOSE_IDS = ["NN", "TN", "NT", "TT"]

# (Ba, Bb, Bc, M, N, K): equal batches, a repeated operand (batch 1), a summed output (Bc = 1),
# a repeated output (Ba = Bb = 1), a batch of 1, tails of the 64x64 tiles, and zeros in each axis.
BMM_CASES = [
    (3, 3, 3, 5, 7, 4),
    (1, 1, 1, 1, 1, 1),
    (2, 2, 2, 64, 64, 16),
    (4, 4, 4, 65, 63, 17),
    (1, 5, 5, 70, 3, 33),
    (5, 1, 5, 3, 130, 2),
    (6, 6, 1, 65, 66, 9),
    (1, 6, 1, 9, 8, 7),
    (1, 1, 3, 4, 5, 6),
    (0, 0, 0, 3, 4, 5),
    (2, 2, 2, 0, 4, 5),
    (2, 2, 2, 3, 0, 5),
    (2, 2, 2, 3, 4, 0),
    (0, 1, 0, 3, 4, 5),
    (0, 0, 1, 3, 4, 5),
]


def _case_id(case):
    return "B{}x{}x{}_M{}_N{}_K{}".format(*case)


def _operands(case, ta, tb, rng):
    ba, bb, _, m, n, k = case
    a = rand((ba, k, m) if ta else (ba, m, k), rng)
    b = rand((bb, n, k) if tb else (bb, k, n), rng)
    return a, b


def _expected(a, b, ta, tb, bc):
    """float64 products and their error bound (K * eps * |a| @ |b|, times the batch when summed)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    x = a64.swapaxes(1, 2) if ta else a64
    y = b64.swapaxes(1, 2) if tb else b64
    prod, bound = np.matmul(x, y), x.shape[2] * EPS32 * np.matmul(np.abs(x), np.abs(y))
    if bc == 1 and prod.shape[0] != 1:  # the sum over the batch
        terms = prod.shape[0]
        prod = prod.sum(axis=0, keepdims=True)
        bound = terms * bound.sum(axis=0, keepdims=True)
    return np.broadcast_to(prod, (bc, *prod.shape[1:])), bound


@pytest.mark.parametrize("ta,tb", TRANSPOSES, ids=TRANSPOSE_IDS)
@pytest.mark.parametrize("case", BMM_CASES, ids=_case_id)
def test_bmm_matches_float64_numpy(ctx, case, ta, tb):
    rng, seed = new_rng()
    a, b = _operands(case, ta, tb, rng)
    bc, m, n = case[2], case[3], case[4]
    out = nan_array((bc, m, n), ctx)
    da, db = gpumat.array(a, ctx), gpumat.array(b, ctx)
    ops.bmm(da, db, out, ta, tb)
    want, bound = _expected(a, b, ta, tb, bc)
    assert_close(out.asnumpy(), want, rtol=EPS32, atol=0, bound=bound, msg=f"seed {seed}")
    np.testing.assert_array_equal(da.asnumpy(), a)  # the inputs are left as they were
    np.testing.assert_array_equal(db.asnumpy(), b)


@pytest.mark.parametrize("ta,tb", TRANSPOSES, ids=TRANSPOSE_IDS)
def test_bmm_large_batch_of_non_square_products(ctx, ta, tb):
    case = (1, 9, 9, 70, 50, 90)  # a repeated a; 9 tiles of 64 wide in m x n each
    rng, seed = new_rng()
    a, b = _operands(case, ta, tb, rng)
    out = nan_array(case[2:5], ctx)
    ops.bmm(gpumat.array(a, ctx), gpumat.array(b, ctx), out, ta, tb)
    want, bound = _expected(a, b, ta, tb, case[2])
    assert_close(out.asnumpy(), want, rtol=EPS32, atol=0, bound=bound, msg=f"seed {seed}")


def test_bmm_equals_matmul_per_product(ctx):
    # The batched kernel gives each product the value the 2-D kernel gives it.
    rng, _ = new_rng()
    a, b = rand((3, 65, 40), rng), rand((3, 40, 66), rng)
    out = nan_array((3, 65, 66), ctx)
    ops.bmm(gpumat.array(a, ctx), gpumat.array(b, ctx), out)
    for i in range(3):
        one = nan_array((65, 66), ctx)
        ops.matmul(gpumat.array(a[i], ctx), gpumat.array(b[i], ctx), one)
        np.testing.assert_array_equal(out.asnumpy()[i], one.asnumpy())


@pytest.mark.parametrize("case", [(3, 1, 3, 4, 5, 6), (4, 4, 1, 3, 2, 5), (1, 1, 2, 2, 3, 4)])
def test_bmm_reference_matches_ops(ctx, case):
    rng, _ = new_rng()
    a, b = _operands(case, False, True, rng)
    ref = np.empty(case[2:5], np.float64)
    gpumat.reference.bmm(a.astype(np.float64), b.astype(np.float64), ref, False, True)
    out = nan_array(case[2:5], ctx)
    ops.bmm(gpumat.array(a, ctx), gpumat.array(b, ctx), out, False, True)
    assert_close(out.asnumpy(), ref, rtol=1e-5, atol=1e-5)


def test_bmm_errors_name_the_op_and_shapes(ctx):
    def arr(*shape):
        return gpumat.empty(shape, ctx)

    with pytest.raises(ValueError, match=r"bmm: inner dimensions differ: A \(2, 3, 4\) @ B \(2, 5"):
        ops.bmm(arr(2, 3, 4), arr(2, 5, 6), arr(2, 3, 6))
    with pytest.raises(ValueError, match=r"bmm: batch sizes differ: A \(2, 3, 4\) @ B \(3, 4, 6\)"):
        ops.bmm(arr(2, 3, 4), arr(3, 4, 6), arr(3, 3, 6))
    with pytest.raises(ValueError, match=r"bmm: C has shape \(3, 3, 6\), expected \(2, 3, 6\)"):
        ops.bmm(arr(2, 3, 4), arr(2, 4, 6), arr(3, 3, 6))
    with pytest.raises(ValueError, match=r"bmm: .*3-D.*|bmm: .*\(3, 4\)"):
        ops.bmm(arr(3, 4), arr(2, 4, 6), arr(2, 3, 6))
    with pytest.raises(ValueError, match="bmm"):
        a = arr(2, 3, 3)
        ops.bmm(a, arr(2, 3, 3), a)  # out is an input
    with pytest.raises(TypeError, match="trans_b must be a bool"):
        ops.bmm(arr(2, 3, 4), arr(2, 4, 6), arr(2, 3, 6), False, 1)


# ---------------------------------------------------------------------------------- bmm_op


@pytest.mark.parametrize("ta,tb", TRANSPOSES, ids=TRANSPOSE_IDS)
@pytest.mark.parametrize("ba,bb", [(3, 3), (1, 3), (3, 1), (1, 1)])
def test_bmm_op_gradients_fd_float64(ba, bb, ta, tb):
    rng, _ = new_rng()
    m, n, k = 3, 4, 2
    a = rng.uniform(-1, 1, size=(ba, k, m) if ta else (ba, m, k))
    b = rng.uniform(-1, 1, size=(bb, n, k) if tb else (bb, k, n))
    check_fd_gradients(lambda x, y: ad.bmm_op(x, y, ta, tb), [a, b], rng)


@pytest.mark.parametrize("ta,tb", TRANSPOSES, ids=TRANSPOSE_IDS)
@pytest.mark.parametrize("ba,bb", [(4, 4), (1, 4), (4, 1)])
def test_bmm_op_on_devices_matches_numpy(ctx, ba, bb, ta, tb):
    rng, _ = new_rng()
    m, n, k = 33, 70, 17
    a = rng.uniform(-1, 1, size=(ba, k, m) if ta else (ba, m, k))
    b = rng.uniform(-1, 1, size=(bb, n, k) if tb else (bb, k, n))
    check_device_gradients(ctx, lambda x, y: ad.bmm_op(x, y, ta, tb), [a, b], rng)


def test_bmm_op_names_and_shape_errors():
    x, y = ad.Variable("x"), ad.Variable("y")
    z = ad.bmm_op(x, y, False, True)
    assert z.name == "Bmm(x,y,False,True)"
    ex = ad.Executor([z])
    with pytest.raises(ValueError, match=r"bmm_op at node .*inner dimensions differ \(4 != 5\)"):
        ex.run({x: np.ones((2, 3, 4)), y: np.ones((2, 6, 5))})
    with pytest.raises(ValueError, match=r"bmm_op at node .*batch sizes differ \(2 != 3; "):
        ex.run({x: np.ones((2, 3, 4)), y: np.ones((3, 6, 4))})
    with pytest.raises(ValueError, match=r"bmm_op at node .*3-D"):
        ex.run({x: np.ones((3, 4)), y: np.ones((2, 6, 4))})


# ---------------------------------------------------------------------------------- Tensor

# (a's shape, b's shape): torch.matmul's cases: 1-D and 2-D operands, a batched a over a 2-D b
# (folded into one 2-D product), batches broadcast along leading and middle dims, size-0 dims.
MATMUL_SHAPES = [
    ((4,), (4,)),
    ((3, 4), (4,)),
    ((4,), (4, 5)),
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 5)),
    ((2, 3, 4), (4,)),
    ((4,), (2, 4, 5)),
    ((2, 3, 4), (2, 4, 5)),
    ((1, 3, 4), (6, 4, 5)),
    ((6, 3, 4), (1, 4, 5)),
    ((3, 4), (6, 4, 5)),
    ((2, 1, 3, 4), (3, 4, 5)),
    ((2, 1, 3, 4), (1, 3, 4, 5)),
    ((1, 1, 3, 4), (2, 2, 4, 5)),
    ((1, 3, 4), (4, 5)),
    ((0, 3, 4), (0, 4, 5)),
    ((2, 0, 4), (2, 4, 5)),
    ((2, 3, 0), (2, 0, 5)),
    ((2, 3, 4), (2, 4, 0)),
    ((0, 1, 3, 4), (2, 4, 5)),
]


def _shape_pair_id(pair):
    return "@".join("x".join(map(str, s)) or "scalar" for s in pair)


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=[_shape_pair_id(p) for p in MATMUL_SHAPES])
def test_tensor_matmul_values_and_gradients_match_torch(ctx, sa, sb):
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    a, b = rand(sa, rng), rand(sb, rng)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    ta = gpumat.tensor(a, device=ctx, requires_grad=True)
    tb = gpumat.tensor(b, device=ctx, requires_grad=True)
    out = ta @ tb
    assert out.shape == want.shape
    k = sa[-1]
    bound = k * EPS32 * np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    assert_close(out.detach().numpy(), want, rtol=EPS32, atol=0, bound=bound, msg=f"seed {seed}")
    w = rand(want.shape, rng)
    (out * gpumat.tensor(w, device=ctx)).sum().backward()
    xa = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    xb = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    (torch.matmul(xa, xb) * torch.tensor(w, dtype=torch.float64)).sum().backward()
    for got, ref, name in [(ta.grad, xa.grad, "a"), (tb.grad, xb.grad, "b")]:
        assert got.shape == tuple(ref.shape), name
        mag = float(ref.abs().max()) if ref.numel() else 0.0
        assert_close(
            got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5 * max(mag, 1.0),
            msg=f"grad {name}, seed {seed}",
        )  # fmt: skip


def test_tensor_bmm_and_functions_match_torch(ctx):
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    a, b = rand((5, 3, 4), rng), rand((5, 4, 6), rng)
    ta = gpumat.tensor(a, device=ctx, requires_grad=True)
    tb = gpumat.tensor(b, device=ctx, requires_grad=True)
    out = ta.bmm(tb)
    out.sum().backward()
    xa, xb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ref = torch.bmm(xa, xb)
    ref.sum().backward()
    assert_close(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6, msg=f"{seed}")
    assert_close(ta.grad.numpy(), xa.grad.numpy(), rtol=1e-5, atol=1e-6, msg=f"seed {seed}")
    assert_close(tb.grad.numpy(), xb.grad.numpy(), rtol=1e-5, atol=1e-6, msg=f"seed {seed}")
    for got in (gpumat.bmm(ta, tb), gpumat.matmul(ta, tb), ta.matmul(tb), ta @ tb):
        np.testing.assert_array_equal(got.detach().numpy(), out.detach().numpy())


def test_tensor_matmul_and_bmm_errors_name_the_op_and_shapes(ctx):
    def t(*shape):
        return gpumat.tensor(rand(shape), device=ctx)

    with pytest.raises(ValueError, match=r"matmul: inner dimensions differ \(4 != 5\): "):
        t(2, 3, 4) @ t(2, 5, 6)
    with pytest.raises(ValueError, match=r"matmul: batch dimensions do not broadcast: "):
        t(2, 3, 4) @ t(3, 4, 6)
    with pytest.raises(ValueError, match=r"matmul: both operands need at least 1 dimension"):
        gpumat.tensor(1.5, device=ctx) @ t(3)
    with pytest.raises(ValueError, match=r"bmm: expected 3-D tensors, got \(3, 4\) @ "):
        t(3, 4).bmm(t(2, 4, 6))
    with pytest.raises(ValueError, match=r"bmm: batch sizes differ: \(2, 3, 4\) @ \(1, 4, 6\)"):
        t(2, 3, 4).bmm(t(1, 4, 6))  # no broadcasting in bmm, as PyTorch
    with pytest.raises(ValueError, match=r"bmm: inner dimensions differ \(4 != 5\)"):
        t(2, 3, 4).bmm(t(2, 5, 6))
    with pytest.raises(ValueError, match=r"mm: expected 2-D tensors"):
        t(2, 3, 4).mm(t(4, 6))
    with pytest.raises(TypeError, match="bmm"):
        gpumat.tensor([[[1, 2]]], device=ctx).bmm(t(1, 2, 2))  # int64


def test_compiled_batched_step_equals_eager(ctx):
    rng, _ = new_rng()
    x = gpumat.tensor(rand((2, 1, 3, 4), rng), device=ctx)
    y = gpumat.tensor(rand((6, 5, 7), rng), device=ctx)

    def step(w, v, x, y):
        w.grad = v.grad = None
        h = (x @ w).relu()  # (2, 1, 3, 4) @ (3, 4, 5): broadcast batch (2, 3)
        loss = (h.reshape(6, 3, 5).bmm(y) @ v).sum()  # bmm, then a 3-D @ 1-D product
        loss.backward()
        return loss, w.grad, v.grad

    w0, v0 = rand((3, 4, 5), rng), rand((7,), rng)
    eager_w, eager_v = (gpumat.tensor(z, device=ctx, requires_grad=True) for z in (w0, v0))
    traced_w, traced_v = (gpumat.tensor(z, device=ctx, requires_grad=True) for z in (w0, v0))
    eager = step(eager_w, eager_v, x, y)
    compiled = gpumat.compile(lambda x, y: step(traced_w, traced_v, x, y), fusion=False)
    for _ in range(2):  # the first call traces, the second replays
        traced = compiled(x, y)
        for e, c in zip(eager, traced, strict=True):
            np.testing.assert_array_equal(c.numpy(), e.detach().numpy())
