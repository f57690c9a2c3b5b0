"""The index family: :func:`gpumat.ops.index_select`, ``index_add`` and ``index_copy`` against
float64 numpy on every device (NaN-poisoned outputs, repeated and negative indices, indices naming
no row, empty index lists, zero-size dims, every dim); their determinism (two runs, same bits);
the graph ops' gradients against finite differences and on every device; the Tensor methods
(``index_select``, ``index_add``, ``index_copy``, ``index_fill``, ``index_put``, ``gather``,
``scatter_add``, ``masked_select``, ``nonzero``) and advanced indexing (``getitem`` /
``setitem`` of :mod:`gpumat.tensor._advanced_indexing`) against PyTorch on the CPU, values and
gradients; out-of-range errors; a step compiled by ``gpumat.compile`` against the eager one."""

import numpy as np
import pytest
import torch
from helpers import new_rng, rand
from nn_helpers import check_device_gradients, check_fd_gradients, rand64

import gpumat
import gpumat.ops as ops
from gpumat import reference
from gpumat.graph.index import (
    index_add_op,
    index_copy_op,
    index_select_gradient_op,
    index_select_op,
)
from gpumat.tensor._advanced_indexing import getitem, setitem

# (shape, dim, index): repeats, negatives, out of range / fractional (no row), empty, zero-size.
CASES = [
    ((4, 5, 6), 1, [4, 0, -1, 2, 2, -5]),
    ((7, 3), 0, [6, 6, 6, 0, 1]),
    ((3, 8), -1, [7, 0, 3, -8]),
    ((2, 3, 4), 2, [1, 9, -9, 0.5, np.nan, 3]),  # 9, -9, 0.5, NaN name no row
    ((5, 4), 0, []),
    ((0, 4), 1, [3, 0]),
    ((4, 0), 0, [1, 1]),
    ((300, 3), 0, list(np.random.default_rng(1).integers(-300, 300, 1000))),
]


def _case_id(case):
    return f"{case[0]}-d{case[1]}-n{len(case[2])}"


def _part(shape, dim, length):
    s = list(shape)
    s[dim] = length
    return tuple(s)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_index_kernels_match_float64_numpy(ctx, case):
    rng, seed = new_rng()
    shape, dim, index = case
    idx = np.asarray(index, np.float32)
    x = rand(shape, rng)
    part = _part(shape, dim, len(idx))
    src = rand(part, rng)
    d_idx = gpumat.array(idx, ctx)

    out = gpumat.array(np.full(part, np.nan, np.float32), ctx)
    ops.index_select(gpumat.array(x, ctx), dim, d_idx, out)
    want = np.empty(part)
    reference.index_select(x.astype(np.float64), dim, idx, want)
    np.testing.assert_array_equal(out.asnumpy(), want.astype(np.float32), err_msg=f"seed {seed}")

    got = gpumat.array(x, ctx)
    ops.index_add(got, dim, d_idx, gpumat.array(src, ctx), 0.5)
    want = x.astype(np.float64)
    reference.index_add(want, dim, idx, src.astype(np.float64), 0.5)
    np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}")

    got = gpumat.array(x, ctx)
    ops.index_copy(got, dim, d_idx, gpumat.array(src, ctx))
    want = x.copy()
    reference.index_copy(want, dim, idx, src)
    np.testing.assert_array_equal(got.asnumpy(), want, err_msg=f"seed {seed}")


def test_index_add_is_deterministic(ctx):
    """Many repeats of few rows (sums of 2000 terms each): the same bits on every run."""
    rng, _ = new_rng()
    idx = gpumat.array(rng.integers(-4, 4, 2000).astype(np.float32), ctx)
    src = gpumat.array(rng.standard_normal((3, 2000, 33)).astype(np.float32), ctx)
    runs = []
    for _ in range(3):
        out = gpumat.array(np.zeros((3, 4, 33), np.float32), ctx)
        ops.index_add(out, 1, idx, src, 1.0)
        runs.append(out.asnumpy())
    for r in runs[1:]:
        np.testing.assert_array_equal(r, runs[0])


def test_index_add_embedding_shape_on_cpu():
    """An embedding-like gradient (rows 5000, 800 indices, inner 64) against numpy's add.at."""
    rng, _ = new_rng()
    idx = rng.integers(0, 5000, 800)
    src = rng.standard_normal((800, 64)).astype(np.float32)
    out = gpumat.array(np.zeros((5000, 64), np.float32), gpumat.cpu())
    ops.index_add(
        out, 0, gpumat.array(idx.astype(np.float32), gpumat.cpu()), gpumat.array(src), 1.0
    )
    want = np.zeros((5000, 64))
    np.add.at(want, idx, src.astype(np.float64))
    np.testing.assert_allclose(out.asnumpy(), want, rtol=1e-5, atol=1e-5)


def test_index_ops_reject_bad_shapes(ctx):
    x = gpumat.array(np.zeros((3, 4), np.float32), ctx)
    idx = gpumat.array(np.zeros((2,), np.float32), ctx)
    with pytest.raises(ValueError, match=r"index_select: the output has shape \(3, 3\)"):
        ops.index_select(x, 1, idx, gpumat.array(np.zeros((3, 3), np.float32), ctx))
    with pytest.raises(ValueError, match="index_add: index must be 1-D"):
        ops.index_add(x, 0, gpumat.array(np.zeros((2, 1), np.float32), ctx), x._clone(), 1.0)
    with pytest.raises(ValueError, match="index_copy: axis 2 is out of range"):
        ops.index_copy(x, 2, idx, x._clone())
    with pytest.raises(ValueError, match="index_select"):
        ops.index_select(x, 0, idx, x)  # out aliases the input
    with pytest.raises(TypeError, match="index_add: alpha"):
        ops.index_add(x, 0, idx, gpumat.array(np.zeros((2, 4), np.float32), ctx), "1")


# ---------------------------------------------------------------------------- graph ops


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_graph_gradients_match_finite_differences(dim):
    """The index is the graph's first input, left out of the differentiated ones (wrt)."""
    rng, _ = new_rng()
    shape = (4, 5, 3)
    n = shape[dim]
    idx = np.array([n - 1, 0, -1, 1, 1], np.float64)  # repeats and a negative index
    part = _part(shape, dim % 3, len(idx))
    check_fd_gradients(
        lambda i, x: index_select_op(x, i, dim), [idx, rand64(rng, shape)], rng, wrt=[1]
    )
    check_fd_gradients(
        lambda i, x, s: index_add_op(x, i, s, dim, 0.5),
        [idx, rand64(rng, shape), rand64(rng, part)],
        rng,
        wrt=[1, 2],
    )
    # index_copy's src gradient follows PyTorch (every occurrence), so check it on unique rows
    uniq = np.array([n - 1, 0], np.float64)
    check_fd_gradients(
        lambda i, x, s: index_copy_op(x, i, s, dim),
        [uniq, rand64(rng, shape), rand64(rng, _part(shape, dim % 3, 2))],
        rng,
        wrt=[1, 2],
    )
    # index_select's gradient op, differentiated again
    check_fd_gradients(
        lambda i, x, dy: index_select_gradient_op(dy, i, x, dim),
        [idx, rand64(rng, shape), rand64(rng, part)],
        rng,
        wrt=[2],
    )


def test_graph_gradients_on_every_device(ctx):
    rng, _ = new_rng()
    idx = np.array([2, 0, -1, 2], np.float64)

    def build(i, x, s):
        return index_add_op(index_select_op(x, i, 1), i, s, 1, 2.0)

    check_device_gradients(
        ctx, build, [idx, rand64(rng, (3, 4)), rand64(rng, (3, 4))], rng, wrt=[1, 2]
    )


# ---------------------------------------------------------------------------- Tensor methods


def _pair(values, ctx, grad=False):
    g = gpumat.tensor(values, device=ctx, requires_grad=grad)
    t = torch.tensor(values, requires_grad=grad)
    return g, t


def _same(g, t, atol=0.0):
    got = g.detach().numpy() if isinstance(g, gpumat.Tensor) else g
    want = t.detach().numpy()
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-6 if atol else 0, atol=atol)


def test_tensor_index_methods_match_torch(ctx):
    rng, _ = new_rng()
    xv = rng.standard_normal((4, 5, 6)).astype(np.float32)
    x, xt = _pair(xv, ctx, grad=True)
    idx = [3, 0, 3, 4]
    gi, ti = gpumat.tensor(idx, device=ctx), torch.tensor(idx)
    w = rng.standard_normal((4, 4, 6)).astype(np.float32)
    g = x.index_select(1, gi)
    t = xt.index_select(1, ti)
    _same(g, t)
    (g * gpumat.tensor(w, device=ctx)).sum().backward()
    (t * torch.tensor(w)).sum().backward()
    _same(x.grad, xt.grad, 1e-6)

    src = rng.standard_normal((4, 4, 6)).astype(np.float32)
    s, st = _pair(src, ctx, grad=True)
    x.grad, xt.grad = None, None
    g = x.index_add(1, gi, s, alpha=-2)
    t = xt.index_add(1, ti, st, alpha=-2)
    _same(g, t, 1e-6)
    (g * g).sum().backward()
    (t * t).sum().backward()
    _same(x.grad, xt.grad, 1e-5)
    _same(s.grad, st.grad, 1e-5)

    uniq_g, uniq_t = gpumat.tensor([4, 1], device=ctx), torch.tensor([4, 1])
    s2, st2 = _pair(src[:, :2], ctx, grad=True)
    x.grad, xt.grad = None, None
    g = x.index_copy(1, uniq_g, s2)
    t = xt.index_copy(1, uniq_t, st2)
    _same(g, t)
    (g * g).sum().backward()
    (t * t).sum().backward()
    _same(x.grad, xt.grad, 1e-6)
    _same(s2.grad, st2.grad, 1e-6)
    _same(x.index_fill(2, uniq_g, 1.5), xt.index_fill(2, uniq_t, 1.5))

    gather_idx = rng.integers(0, 5, (3, 7, 6))
    x.grad, xt.grad = None, None
    g = x.gather(1, gpumat.tensor(gather_idx, device=ctx))
    t = xt.gather(1, torch.tensor(gather_idx))
    _same(g, t)
    (g * g).sum().backward()
    (t * t).sum().backward()
    _same(x.grad, xt.grad, 1e-5)

    scatter_idx = rng.integers(0, 4, (2, 5, 6))
    sv = rng.standard_normal((2, 5, 6)).astype(np.float32)
    s3, st3 = _pair(sv, ctx, grad=True)
    x.grad, xt.grad = None, None
    g = x.scatter_add(0, gpumat.tensor(scatter_idx, device=ctx), s3)
    t = xt.scatter_add(0, torch.tensor(scatter_idx), st3)
    _same(g, t, 1e-6)
    (g * g).sum().backward()
    (t * t).sum().backward()
    _same(x.grad, xt.grad, 1e-5)
    _same(s3.grad, st3.grad, 1e-5)

    mask = xv > 0.3
    x.grad, xt.grad = None, None
    g = x.masked_select(gpumat.tensor(mask, device=ctx))
    t = xt.masked_select(torch.tensor(mask))
    _same(g, t)
    (g * g).sum().backward()
    (t * t).sum().backward()
    _same(x.grad, xt.grad, 1e-6)
    _same(gpumat.tensor(mask, device=ctx).nonzero(), torch.tensor(mask).nonzero())
    for a, b in zip(
        gpumat.tensor(mask, device=ctx).nonzero(as_tuple=True),
        torch.tensor(mask).nonzero(as_tuple=True),
        strict=True,
    ):
        _same(a, b)
    assert gpumat.index_select(x.detach(), 0, gpumat.tensor([3], device=ctx)).shape == (1, 5, 6)


def test_tensor_in_place_index_methods(ctx):
    rng, _ = new_rng()
    xv = rng.standard_normal((5, 3)).astype(np.float32)
    x, xt = _pair(xv, ctx)
    src = rng.standard_normal((4, 3)).astype(np.float32)
    idx = [4, -1, 0, 4]
    v0 = x._version
    x.index_add_(0, gpumat.tensor(idx, device=ctx), gpumat.tensor(src, device=ctx))
    xt.index_add_(0, torch.tensor([4, 4, 0, 4]), torch.tensor(src))
    _same(x, xt, 1e-6)
    assert x._version == v0 + 1
    x.index_copy_(0, gpumat.tensor([1, 2], device=ctx), gpumat.tensor(src[:2], device=ctx))
    xt.index_copy_(0, torch.tensor([1, 2]), torch.tensor(src[:2]))
    _same(x, xt, 1e-6)
    x.index_fill_(1, gpumat.tensor([0], device=ctx), -3.0)
    xt.index_fill_(1, torch.tensor([0]), -3.0)
    _same(x, xt, 1e-6)
    si = rng.integers(0, 5, (2, 3))
    sv = rng.standard_normal((2, 3)).astype(np.float32)
    x.scatter_add_(0, gpumat.tensor(si, device=ctx), gpumat.tensor(sv, device=ctx))
    xt.scatter_add_(0, torch.tensor(si), torch.tensor(sv))
    _same(x, xt, 1e-6)
    leaf = gpumat.tensor(xv, device=ctx, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        leaf.index_add_(0, gpumat.tensor([0], device=ctx), gpumat.tensor(src[:1], device=ctx))


def test_index_errors(ctx):
    x = gpumat.tensor(np.zeros((3, 4), np.float32), device=ctx)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        x.index_select(0, gpumat.tensor([0, 3], device=ctx))
    with pytest.raises(IndexError, match="index -1 is out of bounds"):
        x.index_select(0, gpumat.tensor([-1], device=ctx))  # PyTorch's index_select: no negatives
    with pytest.raises(IndexError, match="index 4 is out of bounds for dimension 1 with size 4"):
        x.gather(1, gpumat.tensor([[4]], device=ctx))
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension 1 with size 4"):
        getitem(x, (slice(None), [-5]))
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 0"):
        getitem(gpumat.tensor(np.zeros((0, 2), np.float32), device=ctx), ([0],))
    with pytest.raises(TypeError, match="index_select: index must be an int64 tensor"):
        x.index_select(0, gpumat.tensor([0.0], device=ctx))
    with pytest.raises(IndexError, match="tensors used as indices must be long"):
        getitem(x, (gpumat.tensor([0.0], device=ctx),))
    with pytest.raises(IndexError, match="too many indices"):
        getitem(x, ([0], [0], [0]))
    with pytest.raises(IndexError, match="shape mismatch"):
        getitem(x, ([0, 1], [0, 1, 2]))
    with pytest.raises(IndexError, match="the shape of the mask"):
        getitem(x, (np.ones((3, 3), bool),))
    with pytest.raises(ValueError, match="index_add: source has shape"):
        x.index_add(0, gpumat.tensor([0], device=ctx), x)
    with pytest.raises(ValueError, match="scatter_add: src has shape"):
        x.scatter_add(0, gpumat.tensor([[0, 1]], device=ctx), x[:, :1])
    with pytest.raises(TypeError, match="masked_select: expected a bool tensor"):
        x.masked_select(x)
    scalar = gpumat.tensor(5.0, device=ctx)  # a 0-d tensor: one index, a 0-d result (PyTorch's)
    assert scalar.index_select(0, gpumat.tensor([0], device=ctx)).shape == ()
    with pytest.raises(ValueError, match="index_select: index to a 0-d tensor can have only 1"):
        scalar.index_select(0, gpumat.tensor([0, 0], device=ctx))


# ---------------------------------------------------------------------------- advanced indexing

KEYS = [
    ([0, 2, 2, -1],),
    (slice(None), [1, -2, 1]),
    ([[0, 1], [2, 3]], slice(None), [0, 5]),
    (Ellipsis, [1, 1]),
    ([0, 1], [2, 3]),
    ([[0], [3]], [2, 3, 4]),  # broadcast together: (2, 3)
    (1, slice(None), [0, 3]),  # an int is applied first, as PyTorch does
    ([1, 2], slice(None), 4),
    (np.array([True, False, True, True]),),
    (slice(None), np.ones((5, 6), bool)),
    ([],),
    (range(3), Ellipsis),
    (np.array([3, 1]), slice(None), slice(None)),
]


def _torch_key(key):
    out = []
    for k in key:
        if isinstance(k, (list, np.ndarray, range)):
            arr = np.asarray(k)
            out.append(
                torch.tensor(arr) if arr.dtype == bool else torch.tensor(arr, dtype=torch.long)
            )
        else:
            out.append(k)
    return tuple(out)


@pytest.mark.parametrize("key", KEYS, ids=[str(i) for i in range(len(KEYS))])
def test_getitem_matches_torch(ctx, key):
    rng, _ = new_rng()
    xv = rng.standard_normal((4, 5, 6)).astype(np.float32)
    x, xt = _pair(xv, ctx, grad=True)
    g = getitem(x, key)
    t = xt[_torch_key(key)]
    _same(g, t)
    w = rng.standard_normal(tuple(t.shape)).astype(np.float32)
    (g * gpumat.tensor(w, device=ctx)).sum().backward()
    (t * torch.tensor(w)).sum().backward()
    _same(x.grad, xt.grad, 1e-6)
    # the same key as gpumat tensors (int64 indices and bool masks on the device)
    dkey = tuple(
        gpumat.tensor(
            np.asarray(k), dtype=None if np.asarray(k).dtype == bool else gpumat.int64, device=ctx
        )
        if isinstance(k, (list, np.ndarray))
        else k
        for k in key
    )
    _same(getitem(x.detach(), dkey), t)


def test_getitem_int64_and_bool_tensors(ctx):
    x = gpumat.tensor([[1, 2, 3], [4, 5, 6]], device=ctx)
    g = getitem(x, ([1, 0, 1],))
    assert g.dtype is gpumat.int64 and g._range == (1, 6)
    np.testing.assert_array_equal(g.numpy(), [[4, 5, 6], [1, 2, 3], [4, 5, 6]])
    b = gpumat.tensor([True, False], device=ctx)
    assert getitem(b, ([1, 1],)).numpy().tolist() == [False, False]


SET_KEYS = [
    ([0, 3, 0],),  # repeated: the last wins
    (slice(None), [4, -1]),
    ([1, 2], slice(None), [0, 1]),
    ([[0], [2]], [1, 2]),
    (1, slice(None), [0, 3]),
]


@pytest.mark.parametrize("key", SET_KEYS, ids=[str(i) for i in range(len(SET_KEYS))])
def test_setitem_matches_numpy_and_torch(ctx, key):
    rng, _ = new_rng()
    xv = rng.standard_normal((4, 5, 6)).astype(np.float32)
    x, xt = _pair(xv, ctx)
    shape = tuple(xt[_torch_key(key)].shape)
    v = rng.standard_normal(shape).astype(np.float32)
    tkey = _torch_key(key)
    setitem(x, key, gpumat.tensor(v, device=ctx))
    xt[tkey] = torch.tensor(v)  # repeated indices: the last wins on PyTorch's CPU too
    _same(x, xt)
    setitem(x, key, 2.5)  # a number
    xt[tkey] = 2.5
    _same(x, xt)
    row = rng.standard_normal(shape[-1:]).astype(np.float32)  # broadcast over the rest
    setitem(x, key, gpumat.tensor(row, device=ctx))
    xt[tkey] = torch.tensor(row)
    _same(x, xt)


def test_setitem_last_repeat_wins(ctx):
    x = gpumat.tensor(np.zeros((4, 2), np.float32), device=ctx)
    setitem(x, ([1, 3, 1, 1, 3],), gpumat.tensor(np.arange(10.0).reshape(5, 2), device=ctx))
    np.testing.assert_array_equal(x.numpy(), [[0, 0], [6, 7], [0, 0], [8, 9]])


def test_setitem_masks_and_rules(ctx):
    rng, _ = new_rng()
    xv = rng.standard_normal((3, 4)).astype(np.float32)
    x, xt = _pair(xv, ctx)
    mask = xv > 0
    m = gpumat.tensor(mask, device=ctx)
    v0 = x._version
    setitem(x, (m,), -1.0)  # where(mask, -1, x): no device read
    xt[torch.tensor(mask)] = -1.0
    _same(x, xt)
    assert x._version == v0 + 1
    row_mask = gpumat.tensor([True, False, True], device=ctx)
    setitem(x, (row_mask, Ellipsis), 7.0)
    xt[torch.tensor([True, False, True])] = 7.0
    _same(x, xt)
    col_mask = np.array([False, True, True, False])
    vals = gpumat.tensor(np.arange(6, dtype=np.float32).reshape(3, 2), device=ctx)
    setitem(x, (slice(None), col_mask), vals)
    xt[:, torch.tensor(col_mask)] = torch.arange(6.0).reshape(3, 2)
    _same(x, xt)
    # += through getitem + setitem
    key = ([0, 2],)
    setitem(x, key, getitem(x, key) + 1.0)
    xt[torch.tensor([0, 2])] += 1.0
    _same(x, xt)
    # int64 tensors: the range follows the write
    y = gpumat.tensor([[1, 2], [3, 4]], device=ctx)
    setitem(y, ([1],), 9)
    assert y._range == (1, 9)
    np.testing.assert_array_equal(y.numpy(), [[1, 2], [9, 9]])
    # autograd rules
    leaf = gpumat.tensor(xv, device=ctx, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        setitem(leaf, ([0],), 1.0)
    with pytest.raises(RuntimeError, match="recorded for backward"):
        setitem(leaf * 2, ([0],), 1.0)
    with pytest.raises(RuntimeError, match="index_put"):
        setitem(x, ([0],), getitem(leaf, ([0],)))
    with gpumat.no_grad():
        setitem(leaf, ([0],), 1.0)
    with pytest.raises(ValueError, match="cannot be broadcast"):
        setitem(x, ([0, 1],), gpumat.tensor(np.zeros((3, 4), np.float32), device=ctx))


def test_index_put_is_differentiable(ctx):
    rng, _ = new_rng()
    xv = rng.standard_normal((5, 3)).astype(np.float32)
    vv = rng.standard_normal((2, 3)).astype(np.float32)
    x, xt = _pair(xv, ctx, grad=True)
    v, vt = _pair(vv, ctx, grad=True)
    for acc in (False, True):
        x.grad = v.grad = xt.grad = vt.grad = None
        g = (x * 2).index_put((gpumat.tensor([4, 1], device=ctx),), v, accumulate=acc)
        t = (xt * 2).index_put((torch.tensor([4, 1]),), vt, accumulate=acc)
        _same(g, t, 1e-6)
        (g * g).sum().backward()
        (t * t).sum().backward()
        _same(x.grad, xt.grad, 1e-5)
        _same(v.grad, vt.grad, 1e-5)
    y, yt = _pair(xv, ctx)
    y.index_put_(
        (gpumat.tensor([0, 0], device=ctx),), gpumat.tensor(vv, device=ctx), accumulate=True
    )
    yt.index_put_((torch.tensor([0, 0]),), torch.tensor(vv), accumulate=True)
    _same(y, yt, 1e-6)


def test_getitem_is_deterministic(ctx):
    """Backward of a lookup with many repeats: the same gradient bits on every run."""
    rng, _ = new_rng()
    xv = rng.standard_normal((6, 16)).astype(np.float32)
    idx = gpumat.tensor(rng.integers(-6, 6, 500), device=ctx)
    w = gpumat.tensor(rng.standard_normal((500, 16)).astype(np.float32), device=ctx)
    grads = []
    for _ in range(2):
        x = gpumat.tensor(xv, device=ctx, requires_grad=True)
        (getitem(x, (idx,)) * w).sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])


def test_compiled_step_equals_eager(ctx):
    rng, _ = new_rng()
    table = rng.standard_normal((10, 4)).astype(np.float32)
    idx = gpumat.tensor([3, 3, 0, 9, -1], device=ctx)
    gidx = gpumat.tensor(np.tile([[1, 0, 3, 2]], (5, 1)), device=ctx)

    def step(w, idx):
        w.grad = None
        rows = getitem(w, (idx,))  # (5, 4) lookup with repeats, negative
        picked = rows.gather(1, gidx)
        loss = (picked * picked).sum() + w.index_select(0, gpumat.tensor([2, 2], device=ctx)).sum()
        loss.backward()
        return loss, w.grad

    eager_w = gpumat.tensor(table, device=ctx, requires_grad=True)
    traced_w = gpumat.tensor(table, device=ctx, requires_grad=True)
    eager = step(eager_w, idx)
    compiled = gpumat.compile(lambda i: step(traced_w, i), fusion=False)
    for _ in range(2):  # the first call traces, the second replays
        traced = compiled(idx)
        for e, c in zip(eager, traced, strict=True):
            np.testing.assert_array_equal(c.numpy(), e.detach().numpy())
    with pytest.raises(IndexError, match="out of bounds"):
        compiled(gpumat.tensor([10, 0, 0, 0, 0], device=ctx))


def test_functions_are_the_methods_and_pytorchs(ctx):
    rng, _ = new_rng()
    xv = rng.standard_normal((4, 5)).astype(np.float32)
    x, xt = _pair(xv, ctx)
    i, it = gpumat.tensor([3, 0, 3], device=ctx), torch.tensor([3, 0, 3])
    src = rng.standard_normal((4, 3)).astype(np.float32)
    gi = rng.integers(0, 4, (2, 5))
    mask = xv > 0
    calls = [
        ("index_select", (1, i), (1, it)),
        ("index_add", (1, i, gpumat.tensor(src, device=ctx)), (1, it, torch.tensor(src))),
        ("index_copy", (0, gpumat.tensor([1, 2], device=ctx), gpumat.tensor(xv[:2], device=ctx)),
         (0, torch.tensor([1, 2]), torch.tensor(xv[:2]))),
        ("index_fill", (1, i, 0.5), (1, it, 0.5)),
        ("gather", (0, gpumat.tensor(gi, device=ctx)), (0, torch.tensor(gi))),
        ("scatter_add", (0, gpumat.tensor(gi, device=ctx), gpumat.tensor(xv[:2], device=ctx)),
         (0, torch.tensor(gi), torch.tensor(xv[:2]))),
        ("masked_select", (gpumat.tensor(mask, device=ctx),), (torch.tensor(mask),)),
    ]  # fmt: skip
    for name, ours, theirs in calls:
        got = getattr(gpumat, name)(x, *ours)
        _same(got, getattr(x, name)(*ours))
        _same(got, getattr(torch, name)(xt, *theirs), 1e-6)
        with pytest.raises(TypeError, match=f"{name}: expected a Tensor"):
            getattr(gpumat, name)(xv, *ours)


def test_gather_scatter_add_take_along_dim_with_smaller_index_and_larger_src(ctx):
    """PyTorch's size rules: index no larger than self in the dims but ``dim`` (gather narrows
    self), src at least index's size (scatter_add uses index's region of it); take_along_dim
    broadcasts. Values and gradients against torch, int64 self too."""
    rng, _ = new_rng()
    xv = rng.standard_normal((4, 6, 5)).astype(np.float32)
    gi = rng.integers(0, 6, (3, 8, 2))
    for dim, idx in (
        (1, gi),
        (0, rng.integers(0, 4, (7, 2, 5))),
        (2, rng.integers(0, 5, (4, 6, 9))),
    ):
        x, xt = _pair(xv, ctx, grad=True)
        g = x.gather(dim, gpumat.tensor(idx, device=ctx))
        t = xt.gather(dim, torch.tensor(idx))
        _same(g, t)
        (g * g).sum().backward()
        (t * t).sum().backward()
        _same(x.grad, xt.grad, 1e-5)

    si = rng.integers(0, 6, (2, 4, 3))
    sv = rng.standard_normal((3, 5, 4)).astype(np.float32)  # larger than si in every dim
    x, xt = _pair(xv, ctx, grad=True)
    s, _ = _pair(sv, ctx, grad=True)
    st = torch.tensor(sv[:2, :4, :3], requires_grad=True)  # torch's backward needs src's size
    g = x.scatter_add(1, gpumat.tensor(si, device=ctx), s)
    t = xt.scatter_add(1, torch.tensor(si), st)
    _same(g, t, 1e-6)
    _same(g, torch.tensor(xv).scatter_add(1, torch.tensor(si), torch.tensor(sv)), 1e-6)
    w = rng.standard_normal(g.shape).astype(np.float32)
    (g * gpumat.tensor(w, device=ctx)).sum().backward()
    (t * torch.tensor(w)).sum().backward()
    _same(x.grad, xt.grad, 1e-6)
    want = np.zeros_like(sv)
    want[:2, :4, :3] = st.grad.numpy()  # the rest of src is not read: no gradient
    assert np.array_equal(s.grad.numpy(), want)
    x2, xt2 = _pair(xv, ctx)
    x2.scatter_add_(1, gpumat.tensor(si, device=ctx), gpumat.tensor(sv, device=ctx))
    xt2.scatter_add_(1, torch.tensor(si), torch.tensor(sv))
    _same(x2, xt2, 1e-6)

    counts = gpumat.zeros(2, 5, dtype=gpumat.int64, device=ctx)
    ci = rng.integers(0, 5, (2, 7))
    got = counts.scatter_add(
        1, gpumat.tensor(ci, device=ctx), gpumat.ones(2, 7, dtype=gpumat.int64, device=ctx)
    )
    want = torch.zeros(2, 5, dtype=torch.int64).scatter_add(
        1, torch.tensor(ci), torch.ones(2, 7, dtype=torch.int64)
    )
    assert got.dtype == gpumat.int64
    assert np.array_equal(got.numpy(), want.numpy())

    x, xt = _pair(xv, ctx, grad=True)
    ti = rng.integers(0, 5, (1, 6, 3))  # broadcasts over dim 0
    g = x.take_along_dim(gpumat.tensor(ti, device=ctx), dim=2)
    t = torch.take_along_dim(xt, torch.tensor(ti), dim=2)
    _same(g, t)
    _same(gpumat.take_along_dim(x, gpumat.tensor(ti, device=ctx), 2), t)
    (g * g).sum().backward()
    (t * t).sum().backward()
    _same(x.grad, xt.grad, 1e-5)
    flat = rng.integers(0, xv.size, (11,))
    _same(
        x.take_along_dim(gpumat.tensor(flat, device=ctx)),
        torch.take_along_dim(xt, torch.tensor(flat)),
    )
    order = x.detach().argsort(dim=1)
    _same(x.take_along_dim(order, 1), torch.take_along_dim(xt, xt.argsort(dim=1), 1))

    empty = gpumat.tensor(np.zeros((0, 3), np.int64), device=ctx)
    assert x.reshape(24, 5)[:, :3].gather(0, empty).shape == (0, 3)
    with pytest.raises(ValueError, match="take_along_dim: .* same number of dimensions"):
        x.take_along_dim(gpumat.tensor([[0]], device=ctx), 1)
    with pytest.raises(ValueError, match="scatter_add: src has shape"):
        x.scatter_add(1, gpumat.tensor(si, device=ctx), s[:1])
    with pytest.raises(IndexError, match="index 6 is out of bounds for dimension 1"):
        x.gather(1, gpumat.tensor(np.full((1, 1, 1), 6), device=ctx))
