"""The sort family: argsort (the first k of the stable order, NaN the largest), gather and its
gradient, against numpy references on every device with NaN-poisoned outputs (ties, NaN, +-inf,
-0, every axis); the graph ops' gradients against finite differences and on every device;
``Tensor.sort`` / ``argsort`` / ``topk`` against PyTorch on the CPU, their gradients, and a step
compiled by ``gpumat.compile`` against the eager one."""

import numpy as np
import pytest
from helpers import nan_array, new_rng, shape_id
from nn_helpers import check_device_gradients, check_fd_gradients

import gpumat
import gpumat.graph as ad
import gpumat.ops as ops
import gpumat.reference as reference

SHAPES = [(1,), (7,), (1, 1), (3, 300), (300, 3), (2, 5, 33), (4, 1, 6)]


def _ties(shape, rng):
    """Values with many ties, NaNs, infinities and signed zeros (the order's hard cases)."""
    x = rng.integers(-3, 4, size=shape).astype(np.float32)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0], np.float32)
    mask = rng.random(shape) < 0.2
    x[mask] = rng.choice(special, size=int(mask.sum()))
    return x


def _stable_order(x, axis, descending):
    """The stable order along axis with NaN the largest, by Python's sort (a third reference)."""
    x = np.moveaxis(x, axis, -1)
    out = np.empty(x.shape, np.int64)
    for idx in np.ndindex(x.shape[:-1]):
        row = x[idx]

        def key(j, row=row):
            v = row[j]
            nan = bool(np.isnan(v))
            if descending:
                return (0 if nan else 1, 0.0 if nan else -float(v))
            return (1 if nan else 0, 0.0 if nan else float(v))

        out[idx] = sorted(range(row.shape[0]), key=key)
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("descending", [False, True])
def test_argsort_is_the_stable_order(ctx, shape, descending):
    rng, seed = new_rng()
    x = _ties(shape, rng)
    for axis in range(-len(shape), len(shape)):
        want = _stable_order(x, axis, descending)
        out = nan_array(shape, ctx)
        ops.argsort(gpumat.array(x, ctx), out, axis, descending)
        np.testing.assert_array_equal(out.asnumpy(), want, err_msg=f"seed {seed} axis {axis}")
        ref = np.full(shape, np.nan, np.float32)
        reference.argsort(x, ref, axis, descending)
        np.testing.assert_array_equal(ref, want, err_msg=f"reference, seed {seed}")
        # the first k only: top-k
        a = axis % len(shape)
        k = shape[a] // 2
        part = shape[:a] + (k,) + shape[a + 1 :]
        out_k = nan_array(part, ctx)
        ops.argsort(gpumat.array(x, ctx), out_k, axis, descending)
        np.testing.assert_array_equal(out_k.asnumpy(), np.take(want, range(k), axis=a))


def test_argsort_long_rows_and_distinct_values(ctx):
    rng, seed = new_rng()
    x = rng.standard_normal((3, 2000)).astype(np.float32)
    out = nan_array((3, 2000), ctx)
    ops.argsort(gpumat.array(x, ctx), out, 1, True)
    np.testing.assert_array_equal(out.asnumpy(), np.argsort(-x, axis=1, kind="stable"), f"{seed}")


@pytest.mark.parametrize("n", [4096, 4097])  # the shared-memory sort's longest row, and past it
def test_argsort_at_the_shared_memory_limit(ctx, n):
    rng, seed = new_rng()
    x = _ties((2, n), rng)
    for descending in (False, True):
        out = nan_array((2, n), ctx)
        ops.argsort(gpumat.array(x, ctx), out, 1, descending)
        want = _stable_order(x, 1, descending)
        np.testing.assert_array_equal(out.asnumpy(), want, err_msg=f"seed {seed}")


@pytest.mark.parametrize("shape", [(6,), (4, 9), (3, 5, 2)], ids=shape_id)
def test_gather_and_its_gradient(ctx, shape):
    rng, seed = new_rng()
    x = rng.standard_normal(shape).astype(np.float32)
    for axis in range(len(shape)):
        k = shape[axis] + 2  # repeated indices
        ishape = shape[:axis] + (k,) + shape[axis + 1 :]
        index = rng.integers(0, shape[axis], size=ishape).astype(np.float32)
        index.flat[0] = -1.0  # invalid: NaN out, nothing back
        out = nan_array(ishape, ctx)
        ops.gather(gpumat.array(x, ctx), gpumat.array(index, ctx), out, axis)
        safe = np.where(index < 0, 0, index).astype(np.int64)
        want = np.where(index < 0, np.nan, np.take_along_axis(x, safe, axis))
        np.testing.assert_array_equal(out.asnumpy(), want, err_msg=f"seed {seed}")
        dy = rng.standard_normal(ishape).astype(np.float32)
        dx = nan_array(shape, ctx)
        ops.gather_gradient(gpumat.array(index, ctx), gpumat.array(dy, ctx), dx, axis)
        want_dx = np.zeros(shape, np.float64)
        idx = list(np.indices(ishape, sparse=True))
        idx[axis] = safe
        np.add.at(want_dx, tuple(idx), np.where(index < 0, 0.0, dy))
        np.testing.assert_allclose(dx.asnumpy(), want_dx, rtol=1e-6, atol=1e-6)
        ref = np.full(shape, np.nan, np.float32)
        reference.gather_gradient(index, dy, ref, axis)
        np.testing.assert_allclose(ref, want_dx, rtol=1e-6, atol=1e-6)


def test_sort_ops_errors_name_the_op(ctx):
    a = gpumat.empty((3, 4), ctx)
    with pytest.raises(ValueError, match=r"argsort: .*\(3, 5\)"):
        ops.argsort(a, gpumat.empty((3, 5), ctx), 1)
    with pytest.raises(ValueError, match=r"argsort: axis 2 is out of range"):
        ops.argsort(a, gpumat.empty((3, 4), ctx), 2)
    with pytest.raises(ValueError, match="argsort"):
        ops.argsort(a, a, 1)  # aliased
    with pytest.raises(TypeError, match="argsort"):
        ops.argsort(a, gpumat.empty((3, 4), ctx), 1, descending=1)
    with pytest.raises(ValueError, match=r"gather: the output has shape \(2, 5\)"):
        ops.gather(a, gpumat.empty((2, 4), ctx), gpumat.empty((2, 5), ctx), 1)
    with pytest.raises(ValueError, match=r"gather_gradient: .*"):
        ops.gather_gradient(gpumat.empty((3, 2), ctx), gpumat.empty((3, 2), ctx), a, 2)
    out = gpumat.empty((0, 4), ctx)
    ops.argsort(gpumat.empty((0, 4), ctx), out, 1)  # empty: nothing to do


@pytest.mark.parametrize("shape", [(1, 5), (6, 7), (3, 4, 5)], ids=shape_id)
def test_sort_values_gradient_fd_float64(shape):
    rng, _ = new_rng()
    x = rng.permutation(np.prod(shape)).reshape(shape) + rng.uniform(0, 0.5, size=shape)
    for axis in range(len(shape)):
        check_fd_gradients(lambda x, a=axis: ad.gather_op(x, ad.argsort_op(x, a), a), [x], rng)
        check_fd_gradients(
            lambda x, a=axis: ad.gather_op(x, ad.argsort_op(x, a, True, 1), a), [x], rng
        )


def test_sort_graph_on_devices_matches_numpy(ctx):
    rng, _ = new_rng()
    x = rng.permutation(60).reshape(6, 10) + rng.uniform(0, 0.5, size=(6, 10))
    check_device_gradients(
        ctx, lambda x: ad.gather_op(x, ad.argsort_op(x, 1, True, 3), 1), [x], rng
    )
    check_device_gradients(ctx, lambda x: ad.gather_op(x, ad.argsort_op(x, 0), 0), [x], rng)


def test_sort_graph_ops_shapes_and_names():
    x = ad.Variable("x")
    idx = ad.argsort_op(x, 1, k=2)
    assert idx.name == "Argsort(x,1)"
    with pytest.raises(ValueError, match=r"argsort_op.*k = 5 is out of range"):
        ad.argsort_op.infer_shape(ad.argsort_op(x, 1, k=5), [(3, 4)])
    with pytest.raises(ValueError, match="gather_op.*index"):
        g = ad.gather_op(x, idx, 1)
        g.op.infer_shape(g, [(3, 4), (2, 2)])
    with pytest.raises(TypeError, match="descending"):
        ad.argsort_op(x, 1, 1)


@pytest.mark.parametrize("descending", [False, True])
def test_tensor_sort_matches_torch(ctx, descending):
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    x = _ties((4, 6, 5), rng)
    t = gpumat.tensor(x, device=ctx)
    for dim in (-1, 0, 1):
        values, indices = t.sort(dim, descending)
        tv, ti = torch.sort(torch.tensor(x), dim=dim, descending=descending, stable=True)
        assert indices.dtype is gpumat.int64 and type(values) is gpumat.Tensor
        np.testing.assert_array_equal(indices.numpy(), ti.numpy(), err_msg=f"seed {seed}")
        np.testing.assert_array_equal(values.numpy(), tv.numpy())
        np.testing.assert_array_equal(t.argsort(dim, descending).numpy(), ti.numpy())
        np.testing.assert_array_equal(gpumat.argsort(t, dim, descending).numpy(), ti.numpy())
    s = gpumat.sort(t, stable=True)
    assert s.values.shape == (4, 6, 5) and type(s).__name__ == "sort"
    v0, i0 = gpumat.tensor(2.5, device=ctx).sort()
    assert v0.shape == () and i0.item() == 0 and v0.item() == 2.5


@pytest.mark.parametrize("largest", [False, True])
def test_tensor_topk_matches_torch_and_its_gradient(ctx, largest):
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    x = rng.standard_normal((5, 40)).astype(np.float32)
    w = rng.standard_normal((5, 7)).astype(np.float32)
    t = gpumat.tensor(x, device=ctx, requires_grad=True)
    tt = torch.tensor(x, requires_grad=True)
    got = t.topk(7, largest=largest)
    want = tt.topk(7, largest=largest)
    np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy(), f"seed {seed}")
    np.testing.assert_array_equal(got.values.detach().numpy(), want.values.detach().numpy())
    (got.values * gpumat.tensor(w, device=ctx)).sum().backward()
    (want.values * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())
    # sort's gradient: a permutation back
    t.grad = None
    tt.grad = None
    wv = rng.standard_normal((5, 40)).astype(np.float32)
    (t.sort(1, True).values * gpumat.tensor(wv, device=ctx)).sum().backward()
    (tt.sort(1, True).values * torch.tensor(wv)).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())
    top0 = gpumat.topk(t.detach(), 0)
    assert top0.values.shape == (5, 0)


def test_tensor_sort_int64_and_bad_arguments(ctx):
    t = gpumat.tensor([[3, 1, 2], [0, -5, 7]], device=ctx)
    v, i = t.sort(1)
    assert v.dtype is gpumat.int64
    np.testing.assert_array_equal(v.numpy(), [[1, 2, 3], [-5, 0, 7]])
    np.testing.assert_array_equal(i.numpy(), [[1, 2, 0], [1, 0, 2]])
    with pytest.raises(ValueError, match=r"topk: k = 4 is out of range.*\(2, 3\)"):
        t.topk(4)
    with pytest.raises(ValueError, match="topk: k = -1"):
        t.topk(-1)
    with pytest.raises(TypeError, match="topk: k must be an int"):
        t.topk(1.5)
    with pytest.raises(IndexError, match="sort: dim 2 is out of range"):
        t.sort(2)
    with pytest.raises(TypeError, match="sort: descending must be a bool"):
        t.sort(1, "yes")
    with pytest.raises(TypeError, match="argsort: stable must be a bool"):
        t.argsort(stable=None)
    with pytest.raises(TypeError, match="sort: expected a Tensor"):
        gpumat.sort([1, 2])


def test_compiled_sort_step_equals_eager(ctx):
    rng, _ = new_rng()
    x0 = rng.standard_normal((4, 9)).astype(np.float32)
    x = gpumat.tensor(x0, device=ctx)

    def step(w, x):
        w.grad = None
        y = (w * x).topk(3, dim=1).values
        loss = (y * y).sum() + ((w * x).sort(0, descending=True).values * x).sum()
        loss.backward()
        return loss, w.grad, (w * x).argsort(1)

    w0 = rng.standard_normal((4, 9)).astype(np.float32)
    w_eager = gpumat.tensor(w0, device=ctx, requires_grad=True)
    w_traced = gpumat.tensor(w0, device=ctx, requires_grad=True)
    eager = step(w_eager, x)
    compiled = gpumat.compile(lambda x: step(w_traced, x), fusion=False)
    for _ in range(2):
        traced = compiled(x)
        for e, c in zip(eager, traced, strict=True):
            np.testing.assert_array_equal(c.numpy(), e.detach().numpy())
