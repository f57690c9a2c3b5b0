"""The strided family (extensions/src/{cuda,host}/strided.*): broadcast_binary, broadcast_where,
sum_to, as_strided and as_strided_scatter against float64 numpy on fresh random inputs with
NaN-poisoned outputs, on every device; broadcasts in up to 8 dims, either operand repeated,
zero-size dims, negative strides; the graph ops' gradients against central differences (numpy,
float64) and on every device; and the argument checks."""

import numpy as np
import pytest
from helpers import nan_array, new_rng, shape_id
from nn_helpers import check_device_gradients, check_fd_gradients

import gpumat
import gpumat.ops as ops
from gpumat.graph.strided import (
    as_strided_backward_op,
    as_strided_op,
    as_strided_scatter_op,
    assemble_op,
    broadcast_binary_op,
    broadcast_where_op,
    cat_op,
    expand_op,
    sum_to_op,
)

PAIRS = [  # (a's shape, b's shape): numpy broadcasts them
    ((3, 1, 5), (4, 1)),
    ((2, 3, 4, 5), (3, 1, 1)),
    ((1,), (6, 7)),
    ((5, 4), (5, 4)),
    ((), (2, 3)),
    ((2, 1, 3, 1, 2, 1, 2, 1), (1, 2, 1, 3, 1, 2, 1, 3)),  # 8 dims, each side repeated
    ((0, 3), (1, 3)),
    ((4, 1, 0), (1, 5, 1)),
    ((257, 1), (1, 129)),
    ((9, 1, 37, 3), (1, 41, 1, 3)),  # short rows in several blocks of threads' rows
]

F64 = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "minimum": np.minimum,
    "maximum": np.maximum,
    "logical_and": np.logical_and,
    "logical_or": np.logical_or,
}


def _operands(rng, sa, sb):
    a = rng.uniform(-2, 2, sa).astype(np.float32)
    b = rng.uniform(-2, 2, sb).astype(np.float32)
    # exact ties, zeros and NaNs, where each op has a rule for them
    for x in (a, b):
        flat = x.reshape(-1)
        if flat.size > 4:
            flat[rng.integers(0, flat.size, 2)] = 0.0
            flat[rng.integers(0, flat.size, 1)] = np.nan
    if a.size and b.size and a.shape == b.shape:
        a.reshape(-1)[:2] = b.reshape(-1)[:2]
    return a, b


@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{shape_id(p[0])}-{shape_id(p[1])}")
@pytest.mark.parametrize("op", ops.BROADCAST_BINARY_OPS)
def test_broadcast_binary_matches_float64(ctx, op, pair):
    rng, seed = new_rng()
    sa, sb = pair
    a, b = _operands(rng, sa, sb)
    target = np.broadcast_shapes(sa, sb)
    for x, y in ((a, b), (b, a)):
        out = nan_array(target, ctx)
        ops.broadcast_binary(gpumat.array(x, ctx), gpumat.array(y, ctx), out, op)
        with np.errstate(all="ignore"):
            want = F64[op](x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
        np.testing.assert_array_equal(out.asnumpy(), want, err_msg=f"{op} seed {seed}")
        ref = np.full(target, np.nan, np.float64)
        gpumat.reference.broadcast_binary(x.astype(np.float64), y.astype(np.float64), ref, op)
        np.testing.assert_array_equal(ref.astype(np.float32), want, err_msg=f"reference {op}")


@pytest.mark.parametrize("shapes", [((3, 1, 5), (4, 1), (1, 4, 5)), ((2, 3), (), (3,))])
def test_broadcast_where_matches_numpy(ctx, shapes):
    rng, seed = new_rng()
    sc, sa, sb = shapes
    cond = (rng.random(sc) < 0.5).astype(np.float32)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    target = np.broadcast_shapes(sc, sa, sb)
    out = nan_array(target, ctx)
    ops.broadcast_where(*(gpumat.array(v, ctx) for v in (cond, a, b)), out)
    np.testing.assert_array_equal(out.asnumpy(), np.where(cond != 0, a, b), err_msg=seed)


@pytest.mark.parametrize(
    "shapes",
    [
        ((6, 7), (7,)),
        ((6, 7), (6, 1)),
        ((2, 3, 4, 5), (3, 1, 1)),
        ((4, 5), ()),
        ((3, 0, 2), (1, 2)),
        ((2, 2, 2, 2, 2, 2, 2, 2), (2, 1, 2, 1, 2, 1, 2, 1)),
        ((1000, 3), (1, 3)),
        ((300, 203), (203,)),  # a bias gradient in blocks of columns, the last ragged
        ((96, 520), (520,)),  # blocks of the widest size, then a short one
        ((5,), (5,)),
    ],
    ids=lambda s: f"{shape_id(s[0])}-to-{shape_id(s[1])}",
)
def test_sum_to_matches_float64(ctx, shapes):
    rng, seed = new_rng()
    s, t = shapes
    x = rng.standard_normal(s).astype(np.float32)
    out = nan_array(t, ctx)
    ops.sum_to(gpumat.array(x, ctx), out)
    want = np.empty(t, np.float64)
    gpumat.reference.sum_to(x.astype(np.float64), want)
    n = max(x.size // max(int(np.prod(t)), 1), 1)
    np.testing.assert_allclose(out.asnumpy(), want, rtol=n * 2e-7, atol=n * 1e-6, err_msg=seed)
    again = nan_array(t, ctx)
    ops.sum_to(gpumat.array(x, ctx), again)
    np.testing.assert_array_equal(again.asnumpy(), out.asnumpy())  # the same bits every run


VIEWS = [  # (input shape, view shape, strides, offset)
    ((4, 5, 6), (6, 4, 5), (1, 30, 6), 0),  # permute
    ((4, 5, 6), (4, 3), (30, 2), 7),  # slice with a step
    ((4, 5), (4, 5), (-5, -1), 19),  # flip both dims
    ((3, 1), (3, 4), (1, 0), 0),  # expand
    ((10,), (3, 3), (3, 1), 1),  # overlapping windows (reads may repeat)
    ((2, 3), (0, 3), (3, 1), 0),
    ((2, 2, 2, 2, 2, 2, 2, 2), (2,) * 8, (1, 2, 4, 8, 16, 32, 64, 128), 0),  # 8 dims reversed
    ((16, 64, 192), (16, 4, 64, 16), (12288, 16, 192, 1), 64),  # attention heads: rows in blocks
]


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: f"{shape_id(v[0])}-as-{shape_id(v[1])}")
def test_as_strided_copies_the_region(ctx, view):
    rng, seed = new_rng()
    shape, size, stride, offset = view
    x = rng.standard_normal(shape).astype(np.float32)
    out = nan_array(size, ctx)
    ops.as_strided(gpumat.array(x, ctx), out, stride, offset)
    want = np.empty(size, np.float32)
    gpumat.reference.as_strided(x, want, stride, offset)
    idx = np.indices(size).reshape(len(size), -1) if size else np.zeros((0, 1), int)
    flat = offset + sum(idx[d] * stride[d] for d in range(len(size)))
    np.testing.assert_array_equal(want.reshape(-1), x.reshape(-1)[flat])
    np.testing.assert_array_equal(out.asnumpy(), want, err_msg=seed)


@pytest.mark.parametrize(
    "view",
    [v for v in VIEWS if 0 not in v[2] and v[1] != (3, 3)],
    ids=lambda v: f"{shape_id(v[0])}-as-{shape_id(v[1])}",
)
def test_as_strided_scatter_writes_only_the_region(ctx, view):
    rng, seed = new_rng()
    shape, size, stride, offset = view
    base = rng.standard_normal(shape).astype(np.float32)
    src = rng.standard_normal(size).astype(np.float32)
    out = gpumat.array(base, ctx)
    ops.as_strided_scatter(gpumat.array(src, ctx), out, stride, offset)
    want = base.copy()
    gpumat.reference.as_strided_scatter(src, want, stride, offset)
    np.testing.assert_array_equal(out.asnumpy(), want, err_msg=seed)
    back = nan_array(size, ctx)
    ops.as_strided(out, back, stride, offset)
    np.testing.assert_array_equal(back.asnumpy(), src)


def test_argument_checks(ctx):
    a, b = (
        gpumat.array(np.ones((2, 3), np.float32), ctx),
        gpumat.array(np.ones((4,), np.float32), ctx),
    )
    with pytest.raises(ValueError, match=r"broadcast_binary: shapes \(2, 3\) and \(4,\) cannot"):
        ops.broadcast_binary(a, b, gpumat.empty((2, 3), ctx), "add")
    with pytest.raises(ValueError, match=r"broadcast to \(2, 3\), output \(3, 2\)"):
        ops.broadcast_binary(a, a, gpumat.empty((3, 2), ctx), "mul")
    with pytest.raises(ValueError, match="op must be one of"):
        ops.broadcast_binary(a, a, gpumat.empty((2, 3), ctx), "pow")
    row = gpumat.array(np.ones((1, 3), np.float32), ctx)
    nine = gpumat.empty((1,) * 9, ctx)
    with pytest.raises(ValueError, match="at most 8"):
        ops.broadcast_binary(nine, nine, gpumat.empty((1,) * 9, ctx), "add")
    with pytest.raises(ValueError, match=r"sum_to: cannot sum \(2, 3\) to \(2,\)"):
        ops.sum_to(a, gpumat.empty((2,), ctx))
    with pytest.raises(ValueError, match="outside the input"):
        ops.as_strided(a, gpumat.empty((3, 3), ctx), (3, 1), 0)
    with pytest.raises(ValueError, match="outside the input"):
        ops.as_strided(a, gpumat.empty((2,), ctx), (-1,), 0)
    with pytest.raises(ValueError, match="2 strides for an output of shape"):
        ops.as_strided(a, gpumat.empty((6,), ctx), (1, 1), 0)
    with pytest.raises(TypeError, match="as_strided: a stride must be an int"):
        ops.as_strided(a, gpumat.empty((6,), ctx), (1.5,), 0)
    with pytest.raises(ValueError, match="more than once"):
        ops.as_strided_scatter(gpumat.empty((2, 3), ctx), gpumat.empty((6,), ctx), (0, 1), 0)
    with pytest.raises(ValueError, match="more than once"):
        ops.as_strided_scatter(gpumat.empty((2, 3), ctx), gpumat.empty((6,), ctx), (2, 1), 0)
    with pytest.raises(ValueError, match="must not be one of the inputs"):
        ops.as_strided(a, a, (3, 1), 0)
    empty = gpumat.empty((0, 3), ctx)
    ops.as_strided(a, empty, (3, 1), 100)  # nothing to read: no address to check
    ops.broadcast_binary(empty, row, gpumat.empty((0, 3), ctx), "add")


# ---------------------------------------------------------------------------- graph gradients

BUILDS = {
    "add": (lambda a, b: broadcast_binary_op(a, b, "add"), ((3, 1, 5), (4, 1))),
    "sub": (lambda a, b: broadcast_binary_op(a, b, "sub"), ((2, 3, 4), (3, 1))),
    "mul": (lambda a, b: broadcast_binary_op(a, b, "mul"), ((3, 1, 5), (4, 1))),
    "div": (lambda a, b: broadcast_binary_op(a, b, "div"), ((2, 1, 4), (3, 1))),
    "maximum": (lambda a, b: broadcast_binary_op(a, b, "maximum"), ((3, 1, 5), (4, 1))),
    "minimum": (lambda a, b: broadcast_binary_op(a, b, "minimum"), ((5,), (2, 5))),
    "where": (
        lambda a, b: broadcast_where_op(broadcast_binary_op(a, b, "gt"), a, b),
        ((3, 1), (1, 4)),
    ),
    "sum_to": (lambda a, b: broadcast_binary_op(sum_to_op(a, b), b, "mul"), ((3, 4), (4,))),
    "expand": (lambda a: expand_op(a, (2, 3, 4)), ((3, 1),)),
    "as_strided": (lambda a: as_strided_op(a, (3, 2), (1, 6), 2), ((4, 3, 2),)),
    "permute": (lambda a: as_strided_op(a, (4, 2, 3), (1, 12, 4), 0), ((2, 3, 4),)),
    "scatter": (lambda a, b: as_strided_scatter_op(a, b, (6, 1), 1), ((4, 6), (3, 2))),
    "cat": (lambda a, b: cat_op([a, b, a], 1), ((2, 3), (2, 1))),
}


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_graph_gradients_match_finite_differences(name):
    rng, seed = new_rng()
    build, shapes = BUILDS[name]
    inputs = [rng.uniform(0.5, 2.0, s) * np.where(rng.random(s) < 0.5, -1, 1) for s in shapes]
    check_fd_gradients(build, inputs, rng)


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_graph_gradients_on_every_device(ctx, name):
    rng, seed = new_rng()
    build, shapes = BUILDS[name]
    inputs = [rng.uniform(0.5, 2.0, s) * np.where(rng.random(s) < 0.5, -1, 1) for s in shapes]
    check_device_gradients(ctx, build, inputs, rng)


@pytest.mark.parametrize(
    "g_shape, stride, offset",
    [((4, 2, 3), (1, 12, 4), 0), ((2, 3, 2), (12, 4, 1), 1), ((4, 3), (1, 4), 0)],
    ids=["permute", "slab", "half"],
)
def test_as_strided_backward_writes_every_element(ctx, g_shape, stride, offset):
    """as_strided_backward_op's output: g at the region's addresses, zeros elsewhere; a region as
    large as the output (a permute's gradient) skips the zeros, and still every element is
    written (the output starts as NaN)."""
    import gpumat.graph as graph

    rng, seed = new_rng()
    like_shape = (2, 3, 4)
    g = rng.standard_normal(g_shape).astype(np.float32)
    want = np.zeros(24, np.float32)
    idx = np.indices(g_shape).reshape(len(g_shape), -1)
    want[offset + (np.array(stride)[:, None] * idx).sum(0)] = g.ravel()
    node = as_strided_backward_op(graph.Variable("g"), graph.Variable("like"), stride, offset)
    out = nan_array(like_shape, ctx)
    node.op.compute(node, [gpumat.array(g, ctx), gpumat.empty(like_shape, ctx)], out, ctx)
    np.testing.assert_array_equal(out.asnumpy().ravel(), want, err_msg=f"seed {seed}")


def test_the_64_bit_index_path_agrees_with_the_32_bit_one(monkeypatch):
    # Arrays under 2**31 elements take the 32-bit path (magic-number division); the emulated
    # device's GPUMAT_EMU_WIDE_INDEX sends the same calls down the 64-bit one: same bits.
    ctx = gpumat.emu(0)
    rng, seed = new_rng()
    a = gpumat.array(rng.standard_normal((7, 1, 13)).astype(np.float32), ctx)
    b = gpumat.array(rng.standard_normal((5, 1)).astype(np.float32), ctx)
    big = gpumat.array(rng.standard_normal((300, 77)).astype(np.float32), ctx)

    def run():
        outs = [nan_array((7, 5, 13), ctx), nan_array((13, 7), ctx), nan_array((77,), ctx)]
        outs.append(nan_array((300, 1), ctx))
        ops.broadcast_binary(a, b, outs[0], "mul")
        ops.as_strided(a, outs[1], (1, -13), 78)  # a transpose with a flip: a negative stride
        ops.sum_to(big, outs[2])  # the column mapping
        ops.sum_to(big, outs[3])  # the row mapping
        return [o.asnumpy() for o in outs]

    narrow = run()
    monkeypatch.setenv("GPUMAT_EMU_WIDE_INDEX", "1")
    wide = run()
    for k, (n, w) in enumerate(zip(narrow, wide, strict=True)):
        np.testing.assert_array_equal(n, w, err_msg=f"output {k} (seed {seed})")
    np.testing.assert_array_equal(narrow[1], a.asnumpy().reshape(7, 13)[::-1].T)


def test_assemble_op_writes_each_region_on_every_device(ctx):
    """assemble_op (the fusion pass's one write of views' gradients that tile a whole): each node
    lands in its strided region, on every device and in numpy; nothing else is written, so the
    regions must cover the output (here: the heads of a (2, 3, 24) projection split in three)."""
    rng, seed = new_rng()
    xs = [gpumat.graph.Variable(f"p{k}") for k in range(3)]
    stride = (72, 4, 24, 1)  # piece k: (2, 2, 3, 4) = heads of whole[..., 8k:8k+8]
    node = assemble_op(xs, (2, 3, 24), (stride,) * 3, (0, 8, 16))
    whole = rng.standard_normal((2, 3, 24)).astype(np.float32)
    pieces = [
        np.ascontiguousarray(
            whole[..., 8 * k : 8 * k + 8].reshape(2, 3, 2, 4).transpose(0, 2, 1, 3)
        )
        for k in range(3)
    ]
    feeds = dict(zip(xs, pieces, strict=True))
    (ref,) = gpumat.Executor([node]).run(feeds)
    np.testing.assert_array_equal(ref, whole, err_msg=seed)
    (got,) = gpumat.Executor([node], device=ctx).run(
        {x: gpumat.array(p, ctx) for x, p in feeds.items()}, convert_to_numpy_ret_vals=True
    )
    np.testing.assert_array_equal(got, whole, err_msg=seed)


def test_assemble_op_checks_its_arguments():
    x = gpumat.graph.Variable("x")
    with pytest.raises(TypeError, match="assemble_op: nodes"):
        assemble_op([x, "y"], (4,), ((1,), (1,)), (0, 2))
    with pytest.raises(TypeError, match="assemble_op: nodes"):
        assemble_op([], (4,), (), ())
    with pytest.raises(ValueError, match="one stride tuple and one offset per node"):
        assemble_op([x, x], (4,), ((1,),), (0, 2))
    with pytest.raises(TypeError, match="assemble_op: strides must be a tuple"):
        assemble_op([x], (4,), 1, (0,))
    node = assemble_op([x], (4,), ((1,),), (2,))
    with pytest.raises(ValueError, match="outside the output of 4 elements"):
        gpumat.Executor([node]).run({x: np.ones(3, np.float32)})
