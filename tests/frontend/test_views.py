"""N-d tensors as PyTorch users write them: broadcasting in any rank (values and gradients),
basic indexing and index assignment, views (permute, transpose, expand, narrow, split, ...) with
PyTorch's semantics (an in-place change of a view reaches its base and a change of the base shows
in the view), joining, the layout queries, and a compiled step that uses them, each against
PyTorch on the CPU on fresh random inputs."""

import numpy as np
import pytest
import torch
from helpers import new_rng

import gpumat

BROADCAST_PAIRS = [
    ((3, 1, 5), (4, 1)),
    ((2, 3, 4, 5), (3, 1, 1)),
    ((8, 1, 6), (1, 7, 1)),
    ((6,), (5, 1)),
    ((), (2, 3)),
    ((2, 1, 2, 1, 2, 1, 2, 1), (1, 2, 1, 2, 1, 2, 1, 2)),
    ((0, 4), (1, 4)),
]

BINARY = {
    "add": lambda x, y: x + y,
    "sub": lambda x, y: x - y,
    "mul": lambda x, y: x * y,
    "div": lambda x, y: x / y,
    "maximum": lambda x, y: x.maximum(y),
    "minimum": lambda x, y: x.minimum(y),
    "where": lambda x, y: (gpumat if isinstance(x, gpumat.Tensor) else torch).where(x > y, x, y),
}


def _pair(rng, sa, sb):
    a = rng.uniform(0.5, 2.0, sa) * np.where(rng.random(sa) < 0.5, -1, 1)
    b = rng.uniform(0.5, 2.0, sb) * np.where(rng.random(sb) < 0.5, -1, 1)
    return np.asarray(a, np.float32), np.asarray(b, np.float32)


@pytest.mark.parametrize("pair", BROADCAST_PAIRS, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_broadcast_values_and_gradients_match_torch(ctx, name, pair):
    rng, seed = new_rng()
    a, b = _pair(rng, *pair)
    for x, y in ((a, b), (b, a)):
        gx = gpumat.tensor(x, device=ctx, requires_grad=True)
        gy = gpumat.tensor(y, device=ctx, requires_grad=True)
        tx, ty = (torch.from_numpy(v.copy()).requires_grad_() for v in (x, y))
        out, ref = BINARY[name](gx, gy), BINARY[name](tx, ty)
        assert out.shape == tuple(ref.shape)
        weights = rng.standard_normal(ref.shape).astype(np.float32)
        np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-6, atol=1e-6)
        (out * gpumat.tensor(weights, device=ctx)).sum().backward()
        (ref * torch.from_numpy(weights)).sum().backward()
        for g, t in ((gx, tx), (gy, ty)):
            assert g.grad.shape == tuple(t.shape)
            np.testing.assert_allclose(
                g.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"seed {seed}"
            )


def test_comparisons_broadcast_to_bool_tensors(ctx):
    rng, _ = new_rng()
    a, b = _pair(rng, (3, 1, 5), (4, 1))
    x, y = gpumat.tensor(a, device=ctx), gpumat.tensor(b, device=ctx)
    for op in ("__lt__", "__le__", "__gt__", "__ge__", "eq", "ne", "logical_and", "logical_or"):
        ours = getattr(x, op)(y)
        theirs = getattr(torch.from_numpy(a), op)(torch.from_numpy(b))
        assert ours.dtype is gpumat.bool
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_broadcasting_does_not_copy_the_repeated_operand(ctx):
    # the forward pass reads the (4, 1) operand in place: one kernel launch, no expand copy
    x = gpumat.randn(2, 3, 4, 5, device=ctx)
    b = gpumat.randn(4, 1, device=ctx)
    before = gpumat.launch_count(ctx)
    y = x * b
    assert gpumat.launch_count(ctx) - before == 1
    np.testing.assert_allclose(y.numpy(), x.numpy() * b.numpy(), rtol=1e-7)


KEYS = [
    (slice(None), -1),
    (slice(1, 3),),
    (slice(None), slice(-1, None)),
    (Ellipsis, 0),
    (None, 1, slice(None, None, 2)),
    (slice(None), None, slice(1, None), Ellipsis),
    (2, 3, 4),
    (slice(-3, -1), slice(None, None, 3), slice(5, 1)),
    (),
    (Ellipsis,),
    1,
    -4,
    slice(None, None, 2),
]


@pytest.mark.parametrize("key", KEYS, ids=str)
def test_basic_indexing_matches_torch(ctx, key):
    rng, seed = new_rng()
    values = rng.standard_normal((4, 5, 6)).astype(np.float32)
    x = gpumat.tensor(values, device=ctx, requires_grad=True)
    t = torch.from_numpy(values.copy()).requires_grad_()
    ours, theirs = x[key], t[key]
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy())
    w = rng.standard_normal(tuple(theirs.shape)).astype(np.float32)
    (ours * gpumat.tensor(w, device=ctx)).sum().backward()
    (theirs * torch.from_numpy(w)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy(), err_msg=f"seed {seed}")


@pytest.mark.parametrize(
    "key, value",
    [
        ((slice(None), 0), 0.0),
        ((slice(None), 0), "row"),
        ((1, slice(1, 4)), "block"),
        ((Ellipsis, slice(None, None, 2)), 7.5),
        ((None, 0), "row"),
        ((slice(None), slice(None)), "all"),
    ],
    ids=str,
)
def test_index_assignment_matches_torch(ctx, key, value):
    rng, seed = new_rng()
    values = rng.standard_normal((4, 5)).astype(np.float32)
    x, t = gpumat.tensor(values, device=ctx), torch.from_numpy(values.copy())
    shape = tuple(t[key].shape)
    if isinstance(value, str):
        v = rng.standard_normal(shape[-1:] if value == "row" else shape).astype(np.float32)
        x[key], t[key] = gpumat.tensor(v, device=ctx), torch.from_numpy(v)
    else:
        x[key], t[key] = value, value
    np.testing.assert_array_equal(x.numpy(), t.numpy(), err_msg=f"seed {seed}")


def test_augmented_assignment_through_an_index(ctx):
    rng, _ = new_rng()
    values = rng.standard_normal((4, 5)).astype(np.float32)
    x, t = gpumat.tensor(values, device=ctx), torch.from_numpy(values.copy())
    with gpumat.no_grad():
        x[:, 1] += 2.0
        x[1:3] *= gpumat.tensor(values[0], device=ctx)
    t[:, 1] += 2.0
    t[1:3] *= torch.from_numpy(values[0])
    np.testing.assert_array_equal(x.numpy(), t.numpy())


def test_views_share_changes_both_ways(ctx):
    rng, _ = new_rng()
    values = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x, t = gpumat.tensor(values, device=ctx), torch.from_numpy(values.copy())
    views = [
        lambda z: z[1],
        lambda z: z[:, ::2],
        lambda z: z.permute(2, 0, 1),
        lambda z: z.transpose(0, 2)[1:],
        lambda z: z.narrow(1, 1, 2),
        lambda z: z.unbind(2)[3],
        lambda z: z.split(2, 1)[1],
        lambda z: z[0].t(),
        lambda z: z.movedim(0, -1)[..., 1],
    ]
    for k, make in enumerate(views):
        v, u = make(x), make(t)
        v.mul_(2.0)
        u.mul_(2.0)
        np.testing.assert_array_equal(x.numpy(), t.numpy(), err_msg=f"view {k} wrote back")
        x.add_(float(k))
        t.add_(float(k))
        np.testing.assert_array_equal(v.numpy(), u.numpy(), err_msg=f"view {k} refreshed")
        w, s = v[0], u[0]  # a view of a view
        w.fill_(-1.0)
        s.fill_(-1.0)
        np.testing.assert_array_equal(x.numpy(), t.numpy(), err_msg=f"view of view {k}")


def test_views_are_copied_when_first_read(ctx):
    """A view holds its copy from its first read on: a view only viewed again (the heads of a
    split projection) is never copied, a view of a base changed before that read shows the
    change, and flip (a copy, not a view) copies at once."""
    rng, seed = new_rng()
    values = rng.standard_normal((2, 3, 12)).astype(np.float32)
    x, t = gpumat.tensor(values, device=ctx), torch.from_numpy(values.copy())

    def heads(z):
        return [p.view(2, 3, 2, 2).transpose(1, 2) for p in z.split(4, dim=2)]

    with gpumat.ops.trace_calls() as calls:
        q, k, v = heads(x)
    assert calls == []  # nine views made, none copied
    with gpumat.ops.trace_calls() as calls:
        got = q.numpy()
    assert [name for name, _ in calls] == ["as_strided_"]  # one copy, from the base
    np.testing.assert_array_equal(got, heads(t)[0].numpy(), err_msg=f"seed {seed}")
    x.mul_(3.0)  # k was never read: its first read shows the change, as PyTorch's view does
    t.mul_(3.0)
    np.testing.assert_array_equal(k.numpy(), heads(t)[1].numpy(), err_msg=f"seed {seed}")
    f, g = x.flip(2), t.flip(2)
    x.add_(1.0)
    np.testing.assert_array_equal(f.numpy(), g.numpy(), err_msg=f"flip copied at once, {seed}")


@pytest.mark.parametrize(
    "case",
    ["split heads", "two disjoint narrows", "overlapping narrows", "a narrow and the whole"],
)
def test_gradients_of_views_of_one_base_go_into_one_array(ctx, case):
    """The gradients of views of one base (each its region of an array of zeros) are written
    into one array when they are its only gradients and their regions are disjoint: no zero fill
    when they tile it, no sums; otherwise each is made alone and summed, as before."""
    rng, seed = new_rng()
    values = rng.standard_normal((2, 3, 12)).astype(np.float32)

    def parts(z):
        if case == "split heads":
            return [p.view(2, 3, 2, 2).transpose(1, 2) for p in z.split(4, dim=2)]
        if case == "two disjoint narrows":
            return [z.narrow(2, 0, 4), z[..., 8:]]
        if case == "overlapping narrows":
            return [z.narrow(2, 0, 8), z.narrow(2, 4, 8)]
        return [z.narrow(2, 2, 5), z]

    weights = [
        rng.standard_normal(tuple(p.shape)).astype(np.float32)
        for p in parts(torch.from_numpy(values))
    ]
    x = gpumat.tensor(values, device=ctx, requires_grad=True)
    pairs = zip(parts(x), weights, strict=True)
    loss = sum((p * gpumat.tensor(w, device=ctx)).sum() for p, w in pairs)
    with gpumat.ops.trace_calls() as calls:
        loss.backward()
    names = [name for name, _ in calls]
    xt = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    pairs = zip(parts(xt), weights, strict=True)
    sum((p * torch.tensor(w, dtype=torch.float64)).sum() for p, w in pairs).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-6, err_msg=f"seed {seed}")
    big = [
        args for name, args in calls if name in ("fill_", "add_") and args[0].shape == (2, 3, 12)
    ]
    if case == "split heads":  # three scatters tile the whole: one write each, nothing else
        assert names.count("as_strided_scatter_") == 3 and not big, names
    elif case == "two disjoint narrows":  # one fill, two scatters, no sum
        assert names.count("as_strided_scatter_") == 2 and len(big) == 1, names
    else:  # each view's gradient alone, then summed
        assert names.count("add_") >= 1, names


def test_layout_methods_match_torch(ctx):
    rng, _ = new_rng()
    values = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x, t = gpumat.tensor(values, device=ctx), torch.from_numpy(values.copy())
    cases = [
        lambda z: z.permute(1, 2, 0),
        lambda z: z.permute((-1, 0, 1)),
        lambda z: z.transpose(0, 2),
        lambda z: z.movedim((0, 1), (2, 0)),
        lambda z: z[:, :1].expand(2, 3, 4),
        lambda z: z[0, :, :1].expand(5, -1, 3),
        lambda z: z.narrow(2, -3, 2),
        lambda z: z.flip(0, 2),
        lambda z: z.unflatten(2, (2, -1)),
        lambda z: z.repeat(2, 1, 1, 2),
        lambda z: z.tile((2,)),
        lambda z: z.permute(2, 0, 1).reshape(4, 6),
        lambda z: z.permute(2, 0, 1).contiguous().view(4, 6),
        lambda z: z[:, 1:].reshape(-1),
        lambda z: z[:, :, 1].view(2, 3, 1),
        lambda z: z.mT,
    ]
    for k, make in enumerate(cases):
        ours, theirs = make(x), make(t)
        assert ours.shape == tuple(theirs.shape), k
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy(), err_msg=f"case {k}")
    for make in (
        lambda z: z,
        lambda z: z.transpose(0, 1),
        lambda z: z[:, 1:, ::2],
        lambda z: z[:, :1].expand(2, 3, 4),
        lambda z: z[1],
    ):
        ours, theirs = make(x), make(t)
        assert ours.stride() == theirs.stride()
        assert ours.is_contiguous() == theirs.is_contiguous()
        assert ours.storage_offset() == theirs.storage_offset()
    for args in ((2,), ([1, 2], 1), (3, 2)):
        ours, theirs = x.split(*args), t.split(*args)
        assert [o.shape for o in ours] == [tuple(s.shape) for s in theirs]
    for k in (1, 2, 3, 5):
        assert [c.shape for c in x.chunk(k, 1)] == [tuple(c.shape) for c in t.chunk(k, 1)]
    assert [u.shape for u in x] == [tuple(u.shape) for u in t]
    assert len(x.unbind(1)) == 3


def test_contiguous_of_a_view_is_one_copy_with_torchs_values_and_gradients(ctx, monkeypatch):
    # contiguous() of an eager view copies the region straight from the base (one strided copy,
    # not the view's copy and then a clone); values, gradients and the base's later changes as
    # PyTorch's, and no gradient through a view made under no_grad
    rng, seed = new_rng()
    values = rng.standard_normal((4, 6, 10)).astype(np.float32)
    weights = rng.standard_normal((6, 4, 5)).astype(np.float32)
    copies = []  # the kernels that copy: the strided copy, and a clone's multiply by 1
    for name in ("as_strided", "mul_scalar"):
        kernel = getattr(gpumat.ops, name)
        monkeypatch.setattr(gpumat.ops, name, lambda *a, k=kernel: copies.append(1) or k(*a))
    for make, one_copy in (
        (lambda z: z[:, :, ::2].transpose(0, 1), True),
        (lambda z: z.permute(2, 0, 1)[1:3], True),
        (lambda z: z[:, :1].expand(4, 3, 10), False),  # an expand's gradient sums: a clone
    ):
        x = gpumat.tensor(values, device=ctx, requires_grad=True)
        t = torch.tensor(values, requires_grad=True)
        copies.clear()
        ours, theirs = make(x).contiguous(), make(t).contiguous()
        assert ours.is_contiguous() and ours.shape == tuple(theirs.shape)
        np.testing.assert_array_equal(
            ours.detach().numpy(), theirs.detach().numpy(), err_msg=f"seed {seed}"
        )
        assert len(copies) == 1 or not one_copy
        w = weights.reshape(-1)[: ours.numel()].reshape(ours.shape)
        (ours * gpumat.tensor(w, device=ctx)).sum().backward()
        (theirs * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(
            x.grad.numpy(), t.grad.numpy(), rtol=1e-6, err_msg=f"seed {seed}"
        )
    # a change of the base after the view was made shows in the copy; the copy is not a view
    x = gpumat.tensor(values, device=ctx)
    view = x.transpose(0, 2)
    x.add_(1.0)
    out = view.contiguous()
    np.testing.assert_array_equal(out.numpy(), (values + 1.0).transpose(2, 1, 0))
    x.add_(1.0)
    np.testing.assert_array_equal(out.numpy(), (values + 1.0).transpose(2, 1, 0))
    # made under no_grad from a base that requires grad: the copy passes no gradient
    x = gpumat.tensor(values, device=ctx, requires_grad=True)
    with gpumat.no_grad():
        view = x.transpose(0, 1)
    out = view.contiguous()
    assert not out.requires_grad
    (x * 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(values.shape, 2.0, np.float32))


def test_view_gradients_match_torch(ctx):
    rng, seed = new_rng()
    values = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x = gpumat.tensor(values, device=ctx, requires_grad=True)
    t = torch.from_numpy(values.copy()).requires_grad_()

    def f(z):
        a = z.permute(2, 0, 1)[1:, :, ::2]
        b = z[:, :1].expand(3, 4, 5) * z.flip(1)
        pieces = z.split([1, 3], 1)
        return (a.sum() + (b * b).sum() + (pieces[0] * 3).sum() - pieces[1].mean()) * z[0, 0, 0]

    f(x).backward()
    f(t).backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg=seed)


def test_indexing_errors_are_pytorchs(ctx):
    x = gpumat.zeros(3, 4, device=ctx)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        x[3]
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension 1"):
        x[:, -5]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        x[0, 0, 0]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        x[::-1]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(TypeError, match="slice indices must be integers"):
        x[0.5:]
    with pytest.raises(ValueError, match="shape mismatch: value tensor of shape \\(2, 3\\)"):
        x[:, 0] = gpumat.ones(3, device=ctx)[None].expand(2, 3)
    with pytest.raises(ValueError, match="cannot be broadcast to indexing result of shape"):
        x[0] = gpumat.ones(3, device=ctx)
    with pytest.raises(TypeError, match="iteration over a 0-d tensor"):
        iter(gpumat.tensor(1.0, device=ctx))
    with pytest.raises(ValueError, match="must match the existing size 3"):
        x.expand(5, 4)
    with pytest.raises(ValueError, match="not a permutation"):
        x.permute(0, 0)
    with pytest.raises(IndexError, match="exceeds dimension size"):
        x.narrow(1, 2, 3)
    with pytest.raises(ValueError, match="name a dim more than once"):
        x.flip((0, 0))
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        x[:, :1].expand(3, 4).add_(1.0)
    leaf = gpumat.zeros(3, device=ctx, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        leaf[0] = 1.0
    with gpumat.no_grad():
        leaf[0] = 1.0
    assert leaf.detach().numpy()[0] == 1.0
    np.testing.assert_array_equal(x.numpy(), np.zeros((3, 4)))


def test_zero_size_views(ctx):
    x = gpumat.zeros(0, 3, device=ctx)
    assert x[:, 1].shape == (0,)
    assert x.permute(1, 0).shape == (3, 0)
    assert x.expand(2, 0, 3).shape == (2, 0, 3)
    assert gpumat.cat([x, gpumat.ones(2, 3, device=ctx)]).shape == (2, 3)
    y = gpumat.ones(2, 3, device=ctx)
    assert y[1:1].shape == (0, 3) and y[:, 3:].shape == (2, 0)
    y[1:1] = 5.0
    np.testing.assert_array_equal(y.numpy(), np.ones((2, 3)))
    assert [p.shape for p in y.split(2, 1)] == [(2, 2), (2, 1)]


def test_the_tutorial_update_loop_trains_through_indexing(ctx):
    # slicing a batch, a broadcast bias and an in-place update under no_grad, as the tutorial
    rng, _ = new_rng()
    x = rng.standard_normal((64, 8)).astype(np.float32)
    y = (x @ rng.standard_normal((8, 1))).astype(np.float32)
    w = gpumat.zeros(8, 1, device=ctx, requires_grad=True)
    b = gpumat.zeros(1, device=ctx, requires_grad=True)
    xs, ys = gpumat.tensor(x, device=ctx), gpumat.tensor(y, device=ctx)
    first = None
    for step in range(40):
        i = (step * 16) % 64
        pred = xs[i : i + 16] @ w + b
        loss = ((pred - ys[i : i + 16]) ** 2).mean()
        first = first if first is not None else loss.item()
        loss.backward()
        with gpumat.no_grad():
            for p in (w, b):
                p -= p.grad * 0.1
                p.grad.zero_()
    assert loss.item() < 0.1 * first


def test_a_compiled_step_with_indexing_broadcasting_and_bmm_equals_eager(ctx):
    rng, _ = new_rng()
    x = gpumat.tensor(rng.standard_normal((4, 3, 5)).astype(np.float32), device=ctx)
    w0 = rng.standard_normal((5, 6)).astype(np.float32)
    s0 = rng.standard_normal((3, 1)).astype(np.float32)

    def step(w, s, x):
        w.grad = s.grad = None
        h = x @ w  # (4, 3, 6): batched matmul, broadcast weight
        h = h * s + s.t()[:, :, None].permute(2, 1, 0)  # (3, 1) and (1, 3, 1) broadcast
        att = h @ h.transpose(1, 2)  # (4, 3, 3)
        pieces = gpumat.cat([att[:, :1], att[:, 1:].flip(1)], 1)
        picked = att[:, [2, 0, 2]] * h[..., [1, 4]].sum(-1, keepdim=True)  # advanced indexing
        loss = pieces[..., -1].sum() + gpumat.stack([h[0], h[-1]]).maximum(h[1:3]).mean()
        loss = loss + picked.var() + h.logsumexp(-1).mean()
        loss.backward()
        return loss, w.grad, s.grad

    eager_w = gpumat.tensor(w0, device=ctx, requires_grad=True)
    eager_s = gpumat.tensor(s0, device=ctx, requires_grad=True)
    eager = step(eager_w, eager_s, x)
    traced_w = gpumat.tensor(w0, device=ctx, requires_grad=True)
    traced_s = gpumat.tensor(s0, device=ctx, requires_grad=True)
    compiled = gpumat.compile(lambda x: step(traced_w, traced_s, x), fusion=False)
    for _ in range(2):  # the first call traces, the second replays
        for e, c in zip(eager, compiled(x), strict=True):
            np.testing.assert_allclose(c.numpy(), e.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_inplace_methods_match_torch(ctx):
    # the _ methods, the other operand broadcast to self's shape, through views too
    rng, seed = new_rng()
    values = rng.standard_normal((3, 4)).astype(np.float32)
    x, t = gpumat.tensor(values, device=ctx), torch.from_numpy(values.copy())
    changes = [
        lambda z: z.clamp_(-0.5, 0.75),
        lambda z: z.clip_(max=0.5),
        lambda z: z.exp_(),
        lambda z: z.log_(),
        lambda z: z.abs_(),
        lambda z: z.neg_(),
        lambda z: z.add_(z[0].clone()),
        lambda z: z.mul_(z[:, :1].clone()),
        lambda z: z.div_(z[:, 2:3].clone() + 3.0),
        lambda z: z.sub_(z[1].clone(), alpha=0.5),
        lambda z: z.sigmoid_(),
        lambda z: z.masked_fill_(z > 0.55, -1.0),
        lambda z: z[:, 1].tanh_(),
        lambda z: z.t().sin_(),
        lambda z: z.relu_(),
        lambda z: z.sqrt_(),
    ]
    with gpumat.no_grad():
        for k, change in enumerate(changes):
            assert change(x) is not None
            change(t)
            np.testing.assert_allclose(
                x.numpy(), t.numpy(), rtol=2e-6, atol=1e-7, err_msg=f"change {k} (seed {seed})"
            )
    with pytest.raises(ValueError, match="must broadcast to this shape"):
        x.add_(gpumat.ones(2, 4, device=ctx))
    leaf = gpumat.ones(3, device=ctx, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        leaf.exp_()


def test_roll_repeat_interleave_and_meshgrid_match_torch(ctx):
    rng, seed = new_rng()
    values = rng.standard_normal((3, 4, 5)).astype(np.float32)
    x = gpumat.tensor(values, device=ctx, requires_grad=True)
    t = torch.from_numpy(values.copy()).requires_grad_()
    cases = [
        lambda z: z.roll(2, 1),
        lambda z: z.roll(-1, -1),
        lambda z: z.roll((1, 7), (0, 2)),
        lambda z: z.roll(3),
        lambda z: z.repeat_interleave(2, 1),
        lambda z: z.repeat_interleave(3),
        lambda z: z.repeat_interleave(0, 2),
    ]
    w_total = 0.0
    ours_total, theirs_total = 0, 0
    for k, make in enumerate(cases):
        ours, theirs = make(x), make(t)
        assert ours.shape == tuple(theirs.shape), k
        np.testing.assert_array_equal(ours.detach().numpy(), theirs.detach().numpy(), err_msg=k)
        w = rng.standard_normal(tuple(theirs.shape)).astype(np.float32)
        ours_total = ours_total + (ours * gpumat.tensor(w, device=ctx)).sum()
        theirs_total = theirs_total + (theirs * torch.from_numpy(w)).sum()
        w_total += 1
    ours_total.backward()
    theirs_total.backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg=seed)
    counts = gpumat.tensor([1, 0, 3], device=ctx)
    np.testing.assert_array_equal(
        x.detach().repeat_interleave(counts, 0).numpy(),
        t.detach().repeat_interleave(torch.tensor([1, 0, 3]), 0).numpy(),
    )
    a, b = gpumat.arange(3, device=ctx).float(), gpumat.arange(4, device=ctx).float()
    for indexing in ("ij", "xy"):
        ours = gpumat.meshgrid(a, b, indexing=indexing)
        theirs = torch.meshgrid(torch.arange(3.0), torch.arange(4.0), indexing=indexing)
        for o, r in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(o.numpy(), r.numpy())
    with pytest.raises(ValueError, match="indexing must be"):
        gpumat.meshgrid(a, b, indexing="yx")
    with pytest.raises(ValueError, match="repeats must be non-negative"):
        x.repeat_interleave(-1, 0)
    with pytest.raises(ValueError, match="different lengths"):
        x.roll((1, 2), 0)


def test_views_of_a_view_made_under_no_grad_pass_no_gradient_as_pytorch():
    """A view made under no_grad from a tensor that requires grad: views of it, made later with
    grad enabled, pass no gradient to the base either (PyTorch's rule; gpumat's views of views
    are views of the base, which had let it through)."""
    rng, seed = new_rng()
    w0 = rng.standard_normal((3, 3)).astype(np.float32)
    grads = []
    for lib in (gpumat, torch):
        w = lib.tensor(w0, requires_grad=True)
        y = w * 2.0
        with lib.no_grad():
            cut = y.t()
        (cut[0] * y[0] + cut[:, 1:2].reshape(-1) * y[1]).sum().backward()
        grads.append(w.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6, atol=1e-6, err_msg=seed)
