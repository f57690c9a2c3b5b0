"""gpumat.autodiff on the numpy backend: graph building, gradients against float64 finite
differences for every op and for logistic-regression and MLP losses, shape inference errors,
deep graphs.

Everything here runs on the numpy backend (``Executor(..., device=None)``), the reference, where a
float64 feed makes the whole run float64, so central differences are accurate to ~1e-9.
Device backends are compared with this reference in test_executor.py.
"""

import sys

import numpy as np
import pytest
from nn_helpers import check_fd_gradients, numeric_grad
from nn_helpers import rand64 as rand

import gpumat.autodiff as ad

# --------------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------------


def one_hot(rng, rows, classes):
    return np.eye(classes)[rng.integers(0, classes, size=rows)]


def soft_labels(rng, rows, classes):
    p = rng.uniform(0.1, 1.0, size=(rows, classes))
    return p / p.sum(axis=1, keepdims=True)


# --------------------------------------------------------------------------------------------------
# Graph building
# --------------------------------------------------------------------------------------------------


def test_node_arithmetic_builds_the_seed_ops():
    x, y = ad.Variable("x"), ad.Variable("y")
    assert (x + y).op is ad.add_op and (x + y).inputs == [x, y]
    assert (x * y).op is ad.mul_op
    for node in (x + 3, 3 + x):
        assert node.op is ad.add_byconst_op and node.const_attr == 3.0 and node.inputs == [x]
    for node in (2 * x, x * 2):
        assert node.op is ad.mul_byconst_op and node.const_attr == 2.0
    assert str(x + y) == "(x+y)" and repr(x) == "x"
    assert (-x).const_attr == -1.0
    with pytest.raises(TypeError, match="real number"):
        x + np.ones(3)
    with pytest.raises(TypeError, match="real number"):
        x * "2"


def test_arithmetic_values_match_numpy():
    rng = np.random.default_rng()
    xv, yv = rand(rng, (3, 4)), rand(rng, (3, 4))
    x, y = ad.Variable("x"), ad.Variable("y")
    nodes = [x + y, x + 3, 3 + x, x * y, 2 * x, x * 2, x - y, x - 1.5, 1.5 - x, -x]
    expected = [xv + yv, xv + 3, 3 + xv, xv * yv, 2 * xv, xv * 2, xv - yv, xv - 1.5, 1.5 - xv, -xv]
    got = ad.Executor(nodes).run({x: xv, y: yv})
    for g, e, n in zip(got, expected, nodes, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-15, err_msg=n.name)


def test_gradient_contributions_are_summed():
    # y = x*x + 3x + x: dy/dx = 2x + 4 (x reaches y along four edges).
    rng = np.random.default_rng()
    x = ad.Variable("x")
    y = x * x + 3 * x + x
    (gx,) = ad.gradients(y, [x])
    xv = rand(rng, (5,))
    (g,) = ad.Executor([gx]).run({x: xv})
    np.testing.assert_allclose(g, 2 * xv + 4, rtol=1e-14)


def test_gradients_are_graphs_and_can_be_differentiated_again():
    # d/dx of d/dx (x*x*x) = 6x, through mul and add gradients.
    rng = np.random.default_rng()
    x = ad.Variable("x")
    (gx,) = ad.gradients(x * x * x, [x])
    (ggx,) = ad.gradients(gx, [x])
    xv = rand(rng, (4,))
    g1, g2 = ad.Executor([gx, ggx]).run({x: xv})
    np.testing.assert_allclose(g1, 3 * xv**2, rtol=1e-14)
    np.testing.assert_allclose(g2, 6 * xv, rtol=1e-14)


def test_gradient_of_unconnected_node_is_zeros():
    rng = np.random.default_rng()
    x, z = ad.Variable("x"), ad.Variable("z")
    gx, gz = ad.gradients(2 * x, [x, z])
    assert gz.op is ad.zeroslike_op
    zv = rand(rng, (2, 3))
    got = ad.Executor([gx, gz]).run({x: rand(rng, (4,)), z: zv})
    np.testing.assert_array_equal(got[0], np.full(4, 2.0))
    np.testing.assert_array_equal(got[1], np.zeros((2, 3)))


def test_gradient_of_output_with_respect_to_itself_is_ones():
    x = ad.Variable("x")
    (g,) = ad.gradients(x, [x])
    np.testing.assert_array_equal(ad.Executor([g]).run({x: np.zeros((2, 2))})[0], np.ones((2, 2)))


def test_only_paths_to_requested_nodes_are_differentiated():
    # The labels' gradient is Undefined, but nobody asks for it, so it is never built.
    x, w, y_ = ad.Variable("x"), ad.Variable("w"), ad.Variable("y_")
    loss = ad.softmaxcrossentropy_op(ad.matmul_op(x, w), y_)
    (gw,) = ad.gradients(loss, [w])
    reached = ad.find_topo_sort([gw])
    assert not any(n.op is ad.zeroslike_op for n in reached)
    with pytest.raises(NotImplementedError, match="labels"):
        ad.gradients(loss, [y_])


def test_topo_sort_is_iterative_and_ordered():
    x = ad.Variable("x")
    h = x
    for _ in range(3 * sys.getrecursionlimit()):
        h = h + 1
    order = ad.find_topo_sort([h])
    assert order[0] is x and order[-1] is h and len(order) == 3 * sys.getrecursionlimit() + 1
    pos = {n: i for i, n in enumerate(order)}
    assert all(pos[i] < pos[n] for n in order for i in n.inputs)


def test_deep_chain_gradients_10000_nodes():
    # y = x + x + ... (10,000 adds, each using x): dy/dx = 10,001, summed over 10,001 contributions.
    depth = 10_000
    assert depth > sys.getrecursionlimit()
    x = ad.Variable("x")
    h = x
    for _ in range(depth):
        h = h + x
    (gx,) = ad.gradients(h, [x])
    xv = np.random.default_rng().uniform(-1, 1, size=(3,))
    y, g = ad.Executor([h, gx]).run({x: xv})
    np.testing.assert_allclose(y, (depth + 1) * xv, rtol=1e-12)
    np.testing.assert_array_equal(g, np.full(3, depth + 1.0))
    assert len(h.name) < 200  # names stay short however deep the graph


# --------------------------------------------------------------------------------------------------
# Every op against finite differences (float64, numpy backend)
# --------------------------------------------------------------------------------------------------

OP_CASES = [
    # id, build(*vars), input shapes
    ("add", lambda a, b: a + b, [(3, 4), (3, 4)]),
    ("add_byconst", lambda a: a + 2.5, [(3, 4)]),
    ("radd_byconst", lambda a: 2.5 + a, [(3, 4)]),
    ("sub", lambda a, b: a - b, [(3, 4), (3, 4)]),
    ("rsub_const", lambda a: 1.5 - a, [(3, 4)]),
    ("mul", lambda a, b: a * b, [(3, 4), (3, 4)]),
    ("mul_self", lambda a: a * a, [(7,)]),
    ("mul_byconst", lambda a: 3 * a, [(2, 3, 4)]),
    ("neg", lambda a: -a, [(5,)]),
    ("matmul", lambda a, b: ad.matmul_op(a, b), [(3, 4), (4, 5)]),
    ("matmul_tA", lambda a, b: ad.matmul_op(a, b, trans_A=True), [(4, 3), (4, 5)]),
    ("matmul_tB", lambda a, b: ad.matmul_op(a, b, trans_B=True), [(3, 4), (5, 4)]),
    ("matmul_tAtB", lambda a, b: ad.matmul_op(a, b, True, True), [(4, 3), (5, 4)]),
    ("transpose", lambda a: ad.transpose_op(a), [(3, 5)]),
    ("oneslike", lambda a: a * ad.oneslike_op(a), [(3, 4)]),
    ("zeroslike", lambda a: a + ad.zeroslike_op(a), [(3, 4)]),
    ("reducesumaxiszero", lambda a: ad.reducesumaxiszero_op(a), [(4, 3, 5)]),
    (
        "reducesumaxiszero_1d",
        lambda a: ad.reducesumaxiszero_op(a) * ad.oneslike_op(ad.reducesumaxiszero_op(a)),
        [(6,)],
    ),
    ("reducesum_to_2_axes", lambda a, like: ad.reducesumaxiszero_op(a, like), [(4, 3, 5), (5,)]),
    ("reducesum_to_leading_1", lambda a, like: ad.reducesumaxiszero_op(a, like), [(4, 5), (1, 5)]),
    ("broadcastto_1_axis", lambda a, b: ad.broadcastto_op(a, b), [(5,), (4, 5)]),
    ("broadcastto_2_axes", lambda a, b: ad.broadcastto_op(a, b), [(5,), (4, 3, 5)]),
    ("broadcastto_leading_1", lambda a, b: ad.broadcastto_op(a, b), [(1, 5), (4, 5)]),
    ("broadcastto_same", lambda a, b: ad.broadcastto_op(a, b), [(3, 5), (3, 5)]),
    ("relu", lambda a: ad.relu_op(a), [(4, 6)]),
    ("relu_gradient", lambda a, g: ad.relu_gradient_op(a, g), [(4, 6), (4, 6)]),
    ("softmax", lambda a: ad.softmax_op(a), [(4, 6)]),
    ("softmax_1_row", lambda a: ad.softmax_op(a), [(1, 3)]),
]


@pytest.mark.parametrize("build,shapes", [pytest.param(b, s, id=i) for i, b, s in OP_CASES])
def test_op_gradient_matches_finite_differences(build, shapes):
    rng = np.random.default_rng()
    inputs = [rand(rng, s) for s in shapes]
    # Inputs that only give a shape (broadcast and reduce targets) get zero gradients, as the
    # finite differences do.
    check_fd_gradients(build, inputs, rng, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("rows,classes", [(1, 3), (5, 4), (8, 10)])
@pytest.mark.parametrize("labels", ["one_hot", "soft"])
def test_softmaxcrossentropy_gradient_carries_one_over_n(rows, classes, labels):
    rng = np.random.default_rng()
    y = rand(rng, (rows, classes), high=3.0)
    y_ = one_hot(rng, rows, classes) if labels == "one_hot" else soft_labels(rng, rows, classes)
    yv, lv = ad.Variable("y"), ad.Variable("y_")
    loss = ad.softmaxcrossentropy_op(yv, lv)
    (g,) = ad.gradients(loss, [yv])
    loss_val, g_val = ad.Executor([loss, g]).run({yv: y, lv: y_})
    z = y - y.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    assert loss_val.shape == (1,)
    np.testing.assert_allclose(loss_val[0], np.mean(-np.sum(y_ * np.log(p), axis=1)), rtol=1e-13)
    np.testing.assert_allclose(g_val, (p - y_) / rows, rtol=1e-12, atol=1e-15)
    # Finite differences of the loss (R weights the single output) and of a scaled loss, whose
    # output gradient is not the ones seed (the broadcast path).
    xs = ad.Variable("logits")
    for scale in (1.0, -2.5):
        node = ad.softmaxcrossentropy_op(xs, lv) * scale
        (gnode,) = ad.gradients(node, [xs])
        ex, gex = ad.Executor([node]), ad.Executor([gnode])
        got = gex.run({xs: y, lv: y_})[0]
        expected = numeric_grad(lambda ex=ex: float(ex.run({xs: y, lv: y_})[0][0]), y)
        # Central differences carry rounding noise of about eps_mach * |f| / h ~ 2e-16 * 5 / 1e-6
        # = 1e-9 in absolute terms (the loss is a few units), so atol sits above that floor.
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-8)


def test_softmaxcrossentropy_is_stable_for_large_logits():
    y = np.array([[1000.0, 0.0, -1000.0], [0.0, 0.0, 0.0]])
    y_ = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    yv, lv = ad.Variable("y"), ad.Variable("y_")
    loss, p = ad.Executor([ad.softmaxcrossentropy_op(yv, lv), ad.softmax_op(yv)]).run(
        {yv: y, lv: y_}
    )
    assert np.all(np.isfinite(loss)) and np.all(np.isfinite(p))
    np.testing.assert_allclose(loss[0], np.log(3.0) / 2, rtol=1e-13)


# --------------------------------------------------------------------------------------------------
# Whole models against finite differences
# --------------------------------------------------------------------------------------------------


def logreg_loss(x, w, b, y_):
    """The dlsys course's logistic regression: softmax cross-entropy of x @ w + b."""
    z = ad.matmul_op(x, w)
    return ad.softmaxcrossentropy_op(z + ad.broadcastto_op(b, z), y_)


def mlp_loss(x, w1, b1, w2, b2, w3, b3, y_):
    """The course's 3-layer MLP (784-256-100-10 on MNIST): relu hidden layers, softmax loss."""
    h = x
    for w, b, act in ((w1, b1, True), (w2, b2, True), (w3, b3, False)):
        z = ad.matmul_op(h, w)
        z = z + ad.broadcastto_op(b, z)
        h = ad.relu_op(z) if act else z
    return ad.softmaxcrossentropy_op(h, y_)


def test_logistic_regression_gradients_match_finite_differences():
    rng = np.random.default_rng()
    n, d, c = 7, 5, 4
    inputs = [rand(rng, (n, d)), rand(rng, (d, c)), rand(rng, (c,)), one_hot(rng, n, c)]
    check_fd_gradients(logreg_loss, inputs, rng, wrt=[0, 1, 2], rtol=1e-5, atol=1e-7)


def test_mlp_gradients_match_finite_differences():
    rng = np.random.default_rng()
    n, dims = 6, [12, 8, 7, 5]
    params = []
    for a, b in zip(dims[:-1], dims[1:], strict=True):
        params += [rand(rng, (a, b)), rand(rng, (b,), 0.01, 0.1)]
    inputs = [rand(rng, (n, dims[0])), *params, soft_labels(rng, n, dims[-1])]
    check_fd_gradients(mlp_loss, inputs, rng, wrt=list(range(7)), rtol=1e-5, atol=1e-7)


# --------------------------------------------------------------------------------------------------
# Shape inference (each op's own checks; executor-level errors are in test_executor.py)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build,shapes,match",
    [
        pytest.param(
            lambda a, b: a + b, [(3, 4), (4, 3)], r"add_op .*\(3, 4\) and \(4, 3\)", id="add"
        ),
        pytest.param(lambda a, b: a * b, [(3, 4), (4,)], r"mul_op .*\(3, 4\) and \(4,\)", id="mul"),
        pytest.param(
            lambda a, b: ad.matmul_op(a, b),
            [(1000, 784), (785, 256)],
            r"inner dimensions differ.*\(1000, 784\).*\(785, 256\)",
            id="matmul",
        ),
        pytest.param(
            lambda a, b: ad.matmul_op(a, b, True),
            [(3, 4), (4, 5)],
            r"A\^T \(3, 4\)",
            id="matmul_tA",
        ),
        pytest.param(lambda a, b: ad.matmul_op(a, b), [(3, 4, 1), (4, 5)], "2-D", id="matmul_rank"),
        pytest.param(
            lambda a, b: ad.broadcastto_op(a, b),
            [(4,), (4, 3)],
            r"cannot broadcast \(4,\) to \(4, 3\)",
            id="broadcast",
        ),
        pytest.param(
            lambda a, b: ad.reducesumaxiszero_op(a, b),
            [(4, 3), (4,)],
            r"cannot sum \(4, 3\) down to \(4,\)",
            id="reduce_to",
        ),
        pytest.param(
            lambda a: ad.softmax_op(a, 1),
            [(3,)],
            r"softmax_op .*axis 1 is out of range for shape \(3,\)",
            id="softmax_rank",
        ),
        pytest.param(
            lambda a, b: ad.softmaxcrossentropy_op(a, b),
            [(3, 4), (3, 5)],
            r"logits \(3, 4\) and labels \(3, 5\)",
            id="sce",
        ),
        pytest.param(
            lambda a, b: ad.relu_gradient_op(a, b),
            [(3,), (4,)],
            "relu_gradient_op",
            id="relu_gradient",
        ),
        pytest.param(lambda a: ad.transpose_op(a), [(3, 4, 5)], "transpose_op", id="transpose"),
    ],
)
def test_infer_shape_errors_name_node_and_shapes(build, shapes, match):
    xs = [ad.Variable(f"in{i}") for i in range(len(shapes))]
    node = build(*xs)
    with pytest.raises(ValueError, match=match) as info:
        node.op.infer_shape(node, shapes)
    assert node.name in str(info.value)


def test_infer_shape_results():
    a, b = ad.Variable("a"), ad.Variable("b")
    cases = [
        (ad.matmul_op(a, b), [(3, 4), (4, 5)], (3, 5)),
        (ad.matmul_op(a, b, True, True), [(4, 3), (5, 4)], (3, 5)),
        (ad.broadcastto_op(a, b), [(1, 5), (2, 3, 5)], (2, 3, 5)),
        (ad.reducesumaxiszero_op(a), [(2, 3, 5)], (3, 5)),
        (ad.reducesumaxiszero_op(a, b), [(2, 3, 5), (1, 5)], (1, 5)),
        (ad.softmaxcrossentropy_op(a, b), [(3, 4), (3, 4)], (1,)),
        (ad.softmaxcrossentropy_gradient_op(a, b), [(3, 4), (3, 4)], (3, 4)),
        (ad.transpose_op(a), [(3, 4)], (4, 3)),
    ]
    for node, shapes, expected in cases:
        assert node.op.infer_shape(node, shapes) == expected, node.name
