"""gpumat.runtime.Executor: every backend against the float64 numpy reference, shape errors before
any kernel, feeds, the memory plan, steady-state allocation, deep graphs.

The ``ctx`` fixture here overrides conftest's: it adds the numpy backend (``device=None``, run in
float32 here, compared with the same graph in float64) to conftest's cpu and gpu (gpu skipped, with
the reason shown by -ra, where no CUDA device is usable).
"""

import itertools

import numpy as np
import pytest
from conftest import DEVICE_PARAMS
from conftest import make_ctx as make_device_ctx

import gpumat.autodiff as ad
from gpumat.runtime import Executor, MemoryPlan, plan_buffers, value_lifetimes

BACKENDS = [pytest.param("numpy", id="numpy"), *DEVICE_PARAMS]


def make_ctx(name):
    return None if name == "numpy" else make_device_ctx(name)


@pytest.fixture(params=BACKENDS)
def ctx(request):
    """None (numpy backend), gpumat.cpu() or gpumat.gpu(0)."""
    return make_ctx(request.param)


@pytest.fixture(params=DEVICE_PARAMS)
def device_ctx(request):
    """gpumat.cpu() or gpumat.gpu(0): backends with a device allocator."""
    return make_ctx(request.param)


def to_numpy(v):
    return v if isinstance(v, np.ndarray) else v.asnumpy()


def rand(rng, shape, low=0.1, high=1.0):
    """Entries with |x| in [low, high) and a random sign: never zero."""
    return rng.uniform(low, high, size=shape) * np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)


def one_hot(rng, rows, classes):
    return np.eye(classes)[rng.integers(0, classes, size=rows)]


def assert_float32_close(got, ref, what, rtol=2e-4):
    """A float32 result against a float64 reference: relative error, with an absolute floor scaled
    to the reference's magnitude (for entries that cancel to near zero)."""
    got = to_numpy(got)
    assert got.dtype == np.float32, f"{what}: dtype {got.dtype}"
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    scale = max(float(np.abs(ref).max(initial=0.0)), 1e-30)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * scale * 0.1, err_msg=what)


def run_against_reference(ctx, nodes, feeds32, feeds64=None):
    """Run `nodes` on `ctx` with float32 feeds and on numpy in float64; compare every value."""
    feeds64 = feeds64 or {k: np.asarray(v, dtype=np.float64) for k, v in feeds32.items()}
    ref = Executor(nodes).run(feeds64)
    got = Executor(nodes, device=ctx).run(feeds32, convert_to_numpy_ret_vals=True)
    for g, r, n in zip(got, ref, nodes, strict=True):
        assert r.dtype == np.float64
        assert_float32_close(g, r, n.name)
    return got, ref


# --------------------------------------------------------------------------------------------------
# Models (as in test_autodiff.py)
# --------------------------------------------------------------------------------------------------


def logreg(x, w, b, y_):
    z = ad.matmul_op(x, w)
    return ad.softmaxcrossentropy_op(z + ad.broadcastto_op(b, z), y_)


def mlp(x, params, y_):
    """relu MLP with softmax cross-entropy; params = [w1, b1, w2, b2, ...]."""
    h = x
    layers = list(zip(params[0::2], params[1::2], strict=True))
    for i, (w, b) in enumerate(layers):
        z = ad.matmul_op(h, w)
        z = z + ad.broadcastto_op(b, z)
        h = ad.relu_op(z) if i + 1 < len(layers) else z
    return ad.softmaxcrossentropy_op(h, y_)


# How far from 0 every hidden pre-activation of mlp_problem's feeds lies. Where one lies within
# float32 rounding of 0 (errors here are ~1e-7), the float32 run and the float64 reference take
# different sides of its ReLU and a whole column of the first layer's gradient differs (about 2 %
# of random draws failed so): the feeds avoid the kink, as rand() keeps |x| >= 0.1.
KINK_MARGIN = 4e-6


def _nearest_kink(feeds, x, params) -> float:
    """The smallest |z| over the hidden layers' pre-activations, in float64."""
    h, nearest = feeds[x].astype(np.float64), np.inf
    for w, b in zip(params[0:-2:2], params[1:-2:2], strict=True):
        z = h @ feeds[w].astype(np.float64) + feeds[b].astype(np.float64)
        nearest = min(nearest, float(np.abs(z).min()))
        h = np.maximum(z, 0.0)
    return nearest


def mlp_problem(rng, batch, dims):
    """Variables, the training graph's eval nodes [loss, *grads] and float32 feeds whose hidden
    pre-activations are all at least KINK_MARGIN from the ReLU's kink."""
    x, y_ = ad.Variable("X"), ad.Variable("y_")
    params = []
    for i in range(len(dims) - 1):
        params += [ad.Variable(f"W{i + 1}"), ad.Variable(f"b{i + 1}")]
    loss = mlp(x, params, y_)
    nodes = [loss, *ad.gradients(loss, params)]
    for _ in range(100):
        feeds = {x: rng.uniform(0, 1, size=(batch, dims[0])), y_: one_hot(rng, batch, dims[-1])}
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            # He-style scale keeps activations O(1) so the float32 comparison is meaningful.
            feeds[params[2 * i]] = rng.normal(0, np.sqrt(2.0 / a), size=(a, b))
            feeds[params[2 * i + 1]] = rng.normal(0, 0.1, size=(b,))
        feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
        if _nearest_kink(feeds, x, params) >= KINK_MARGIN:
            return x, y_, params, nodes, feeds
    raise AssertionError(f"mlp_problem: no draw of {dims} at batch {batch} clear of the kink")


# --------------------------------------------------------------------------------------------------
# Every op, forward and backward, on every backend
# --------------------------------------------------------------------------------------------------

OP_CASES = [
    ("add", lambda a, b: a + b, [(33, 17), (33, 17)]),
    ("add_byconst", lambda a: 2.5 + a, [(33, 17)]),
    ("sub", lambda a, b: a - b, [(9,), (9,)]),
    ("mul", lambda a, b: a * b, [(33, 17), (33, 17)]),
    ("mul_byconst", lambda a: a * -3.0, [(4, 5, 6)]),
    ("matmul", lambda a, b: ad.matmul_op(a, b), [(72, 73), (73, 74)]),
    ("matmul_tA", lambda a, b: ad.matmul_op(a, b, True, False), [(73, 72), (73, 74)]),
    ("matmul_tB", lambda a, b: ad.matmul_op(a, b, False, True), [(72, 73), (74, 73)]),
    ("matmul_tAtB", lambda a, b: ad.matmul_op(a, b, True, True), [(73, 72), (74, 73)]),
    ("transpose", lambda a: ad.transpose_op(a), [(31, 17)]),
    ("oneslike", lambda a: a * ad.oneslike_op(a), [(5, 7)]),
    ("zeroslike", lambda a: a + ad.zeroslike_op(a), [(5, 7)]),
    ("reducesumaxiszero", lambda a: ad.reducesumaxiszero_op(a), [(50, 20, 10)]),
    ("reducesum_to", lambda a, like: ad.reducesumaxiszero_op(a, like), [(6, 5, 4), (1, 4)]),
    ("broadcastto", lambda a, b: ad.broadcastto_op(a, b), [(20, 30), (13, 20, 30)]),
    ("broadcastto_leading_1", lambda a, b: ad.broadcastto_op(a, b), [(1, 10), (7, 10)]),
    ("relu", lambda a: ad.relu_op(a), [(40, 30)]),
    ("relu_gradient", lambda a, g: ad.relu_gradient_op(a, g), [(40, 30), (40, 30)]),
    ("softmax", lambda a: ad.softmax_op(a), [(37, 10)]),
]


@pytest.mark.parametrize("build,shapes", [pytest.param(b, s, id=i) for i, b, s in OP_CASES])
def test_op_forward_and_backward_match_numpy_float64(ctx, build, shapes):
    rng = np.random.default_rng()
    xs = [ad.Variable(f"x{i}") for i in range(len(shapes))]
    out = build(*xs)
    r = ad.Variable("R")
    r_shape = Executor([out]).infer_shape({x: s for x, s in zip(xs, shapes, strict=True)})[out]
    grads = ad.gradients(out * r, xs)
    feeds = {x: rand(rng, s).astype(np.float32) for x, s in zip(xs, shapes, strict=True)}
    feeds[r] = rand(rng, r_shape).astype(np.float32)
    run_against_reference(ctx, [out, *grads], feeds)


@pytest.mark.parametrize(
    "rows,classes", [(1, 1), (1, 10), (1000, 10), (37, 129)], ids=lambda v: str(v)
)
def test_softmaxcrossentropy_forward_and_backward(ctx, rows, classes):
    rng = np.random.default_rng()
    y, y_ = ad.Variable("y"), ad.Variable("y_")
    loss = ad.softmaxcrossentropy_op(y, y_)
    scaled = loss * 3.0  # an output gradient that is not the ones seed
    (g,) = ad.gradients(loss, [y])
    (g3,) = ad.gradients(scaled, [y])
    feeds = {
        y: rand(rng, (rows, classes), high=4.0).astype(np.float32),
        y_: one_hot(rng, rows, classes).astype(np.float32),
    }
    got, ref = run_against_reference(ctx, [loss, g, g3], feeds)
    z = feeds[y].astype(np.float64)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(ref[1], (p - feeds[y_]) / rows, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ref[2], 3 * ref[1], rtol=1e-12, atol=1e-15)


def test_logistic_regression_matches_numpy(ctx):
    rng = np.random.default_rng()
    x, w, b, y_ = (ad.Variable(n) for n in ("x", "W", "b", "y_"))
    loss = logreg(x, w, b, y_)
    nodes = [loss, *ad.gradients(loss, [w, b])]
    feeds = {
        x: rng.uniform(0, 1, size=(100, 784)),
        w: rng.normal(0, 0.05, size=(784, 10)),
        b: rng.normal(0, 0.1, size=(10,)),
        y_: one_hot(rng, 100, 10),
    }
    run_against_reference(ctx, nodes, {k: v.astype(np.float32) for k, v in feeds.items()})


def test_mlp_matches_numpy(ctx):
    rng = np.random.default_rng()
    _, _, _, nodes, feeds = mlp_problem(rng, 200, [784, 256, 100, 10])
    run_against_reference(ctx, nodes, feeds)


def test_numpy_backend_dtype_follows_feeds():
    x = ad.Variable("x")
    ex = Executor([x * 2, ad.softmax_op(x)])
    assert all(v.dtype == np.float32 for v in ex.run({x: np.ones((2, 3), dtype=np.float32)}))
    assert all(v.dtype == np.float64 for v in ex.run({x: np.ones((2, 3))}))
    assert all(v.dtype == np.float32 for v in ex.run({x: np.ones((2, 3), dtype=np.int64)}))


# --------------------------------------------------------------------------------------------------
# Shape inference: errors before any kernel runs
# --------------------------------------------------------------------------------------------------


class SpyOp(ad.Op):
    """Identity that counts its computes: proves no kernel ran before an error."""

    name = "spy_op"

    def __init__(self):
        self.calls = 0

    def __call__(self, a):
        node = ad.Op.__call__(self)
        node.inputs = [a]
        node.name = f"Spy({a.name})"
        return node

    def compute(self, node, input_vals, output_val, ctx=None):
        self.calls += 1
        if ctx is None:
            np.copyto(output_val, input_vals[0])
        else:
            import gpumat.ops

            gpumat.ops.copy(input_vals[0], output_val)

    def gradient(self, node, output_grad):
        return [output_grad]

    def infer_shape(self, node, input_shapes):
        return input_shapes[0]


def alloc_requests(ctx):
    if ctx is None:
        return None
    import gpumat

    stats = gpumat.memory_stats(ctx)
    return stats["device_malloc_calls"], stats.get("num_alloc_requests")


@pytest.mark.parametrize(
    "case",
    ["missing_feed", "matmul_inner", "bad_broadcast", "add_shapes", "softmax_rank", "labels_shape"],
)
def test_shape_errors_raise_before_any_kernel(ctx, case):
    rng = np.random.default_rng()
    spy = SpyOp()
    x, w, b, y_ = ad.Variable("X"), ad.Variable("W1"), ad.Variable("b1"), ad.Variable("y_")
    h = spy(x)
    z = ad.matmul_op(h, w)
    logits = z + ad.broadcastto_op(b, z)
    loss = ad.softmaxcrossentropy_op(logits, y_)
    feeds = {
        x: rand(rng, (1000, 784)),
        w: rand(rng, (784, 10)),
        b: rand(rng, (10,)),
        y_: one_hot(rng, 1000, 10),
    }
    eval_nodes = [loss]
    if case == "missing_feed":
        del feeds[b]
        match = r"no value fed for variable\(s\) 'b1'"
    elif case == "matmul_inner":
        feeds[w] = rand(rng, (785, 10))
        match = (
            r"matmul_op at node 'MatMul\(Spy\(X\),W1,False,False\)': "
            r"inner dimensions differ .*\(1000, 784\) @ B \(785, 10\)"
        )
    elif case == "bad_broadcast":
        feeds[b] = rand(rng, (11,))
        match = (
            r"broadcastto_op at node 'BroadcastTo\(b1,.*cannot broadcast \(11,\) to \(1000, 10\)"
        )
    elif case == "add_shapes":
        eval_nodes = [h + w]
        match = r"add_op at node '\(Spy\(X\)\+W1\)': shapes differ: \(1000, 784\) and \(784, 10\)"
    elif case == "softmax_rank":
        feeds[x] = rand(rng, (7,))
        eval_nodes = [ad.softmax_op(h, 1)]
        match = r"softmax_op at node 'Softmax\(Spy\(X\),axis=1\)'.*axis 1 .*\(7,\)"
    else:
        feeds[y_] = one_hot(rng, 999, 10)
        match = r"softmaxcrossentropy_op .*logits \(1000, 10\) and labels \(999, 10\)"
    ex = Executor(eval_nodes, device=ctx)
    before = alloc_requests(ctx)
    with pytest.raises(ValueError, match=match):
        ex.run(feeds)
    assert spy.calls == 0, "a kernel ran before the shape error"
    assert alloc_requests(ctx) == before, "buffers were allocated before the shape error"
    assert ex.memory_plan is None


def test_error_on_second_run_with_new_shape_keeps_executor_usable(ctx):
    rng = np.random.default_rng()
    x, w = ad.Variable("x"), ad.Variable("w")
    y = ad.matmul_op(x, w)
    ex = Executor([y], device=ctx)
    xv, wv = rand(rng, (4, 3)).astype(np.float32), rand(rng, (3, 2)).astype(np.float32)
    ex.run({x: xv, w: wv})
    plan = ex.memory_plan
    with pytest.raises(ValueError, match="inner dimensions differ"):
        ex.run({x: xv, w: rand(rng, (4, 2))})
    (got,) = ex.run({x: xv, w: wv}, convert_to_numpy_ret_vals=True)
    assert ex.memory_plan is plan  # the valid plan was kept, not remade
    assert_float32_close(got, xv.astype(np.float64) @ wv, "after the error")


# --------------------------------------------------------------------------------------------------
# Feeds and returned values
# --------------------------------------------------------------------------------------------------


def test_device_array_feeds_are_used_in_place(device_ctx):
    import gpumat

    rng = np.random.default_rng()
    x, w = ad.Variable("x"), ad.Variable("w")
    y = ad.matmul_op(x, w)
    wv = rand(rng, (3, 2)).astype(np.float32)
    w_dev = gpumat.array(wv, device_ctx)
    ex = Executor([y, w], device=device_ctx)
    xv = rand(rng, (4, 3)).astype(np.float32)
    y_val, w_val = ex.run({x: xv, w: w_dev})
    assert w_val is w_dev  # not copied
    assert ex.memory_plan.num_values == 2  # x (copied in) and y; w is the caller's array
    # Changing the caller's array changes the next result: the executor reads it in place.
    w_dev.copyfrom(2 * wv)
    (y2,) = ex.run({x: xv, w: w_dev}, convert_to_numpy_ret_vals=True)[:1]
    assert_float32_close(y2, 2 * (xv.astype(np.float64) @ wv), "second run")


def test_returned_device_values_belong_to_the_executor(device_ctx):
    rng = np.random.default_rng()
    x = ad.Variable("x")
    y = x * 2
    ex = Executor([y], device=device_ctx)
    a, b = rand(rng, (3, 4)).astype(np.float32), rand(rng, (3, 4)).astype(np.float32)
    (first,) = ex.run({x: a})
    first_np = ex.run({x: a}, convert_to_numpy_ret_vals=True)[0]
    (second,) = ex.run({x: b})
    assert second is first  # the same planned buffer, overwritten by the next run
    np.testing.assert_array_equal(first.asnumpy(), 2 * b)
    np.testing.assert_array_equal(first_np, 2 * a)  # the numpy copy is the caller's


def test_numpy_backend_returns_fresh_arrays():
    x = ad.Variable("x")
    ex = Executor([x * 2])
    (a,) = ex.run({x: np.ones(3, dtype=np.float32)})
    (b,) = ex.run({x: np.full(3, 5.0, dtype=np.float32)})
    np.testing.assert_array_equal(a, 2.0)
    np.testing.assert_array_equal(b, 10.0)


def test_feeds_are_copied(ctx):
    x = ad.Variable("x")
    ex = Executor([x, x + 1], device=ctx)
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = ex.run({x: xv}, convert_to_numpy_ret_vals=True)
    xv[:] = -1
    np.testing.assert_array_equal(to_numpy(got[0]), np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(to_numpy(got[1]), np.arange(6).reshape(2, 3) + 1)


def _fed_in_place(ex, node) -> bool:
    return any(n is node for _, n in ex._state.plan.external_steps)


def test_large_float32_numpy_feeds_are_read_in_place_on_the_cpu_device():
    """On the cpu device a writable C-contiguous float32 batch of 64 KiB or more is a view of the
    caller's memory, not a copy (as PyTorch's ``from_numpy`` batches are): each run reads what
    the array holds then, the array is never written, and steady state allocates nothing. Small,
    read-only, non-contiguous and non-float32 feeds are copied as before."""
    import gpumat

    cpu = gpumat.cpu()
    rng = np.random.default_rng()
    x, w = ad.Variable("x"), ad.Variable("w")
    y = ad.relu_op(ad.matmul_op(x, w)) * 2.0
    ex = Executor([y], device=cpu)
    wn = rng.normal(size=(200, 7))
    wd = gpumat.array(wn, cpu)
    batches = rng.normal(size=(3, 128, 200)).astype(np.float32)  # 100 KiB a batch
    mallocs = []
    for k in range(3):
        xb = batches[k]
        before = xb.copy()
        (got,) = ex.run({x: xb, w: wd}, convert_to_numpy_ret_vals=True)
        assert _fed_in_place(ex, x)
        assert_float32_close(got, 2 * np.maximum(xb.astype(np.float64) @ wn, 0), f"batch {k}")
        np.testing.assert_array_equal(xb, before)  # only read
        mallocs.append(gpumat.memory_stats(cpu)["device_malloc_calls"])
    assert mallocs[1:] == [mallocs[1]] * 2
    # The same array changed between runs: the next run reads the new values.
    xb[:] = rng.normal(size=xb.shape)
    (got,) = ex.run({x: xb, w: wd}, convert_to_numpy_ret_vals=True)
    assert_float32_close(got, 2 * np.maximum(xb.astype(np.float64) @ wn, 0), "changed in place")
    small = batches[0][:8]  # 6.4 KB: a copy is cheaper than a view
    read_only = batches[1].copy()
    read_only.flags.writeable = False
    strided = np.asarray(batches[2].T.copy().T)  # Fortran order: not C-contiguous
    wide = batches[0].astype(np.float64)
    for what, xb in (
        ("small", small),
        ("read-only", read_only),
        ("strided", strided),
        ("float64", wide),
    ):
        (got,) = ex.run({x: xb, w: wd}, convert_to_numpy_ret_vals=True)
        assert not _fed_in_place(ex, x), what
        assert_float32_close(got, 2 * np.maximum(xb.astype(np.float32) @ wn, 0), what)


def test_a_numpy_feed_that_is_returned_or_lies_in_a_planned_buffer_is_copied():
    """The in-place numpy feed is not taken for a fed node that the run returns (the result would
    be gpumat's array over the caller's memory) or for ``np.asarray`` of a value the executor
    returned (its buffer may be overwritten mid-run): both are copied, and the results are
    right."""
    import gpumat

    cpu = gpumat.cpu()
    rng = np.random.default_rng()
    x = ad.Variable("x")
    ex = Executor([x, ad.tanh_op(x) * 0.5], device=cpu)
    xb = rng.normal(size=(128, 160)).astype(np.float32)
    got, _ = ex.run({x: xb})
    assert not _fed_in_place(ex, x)
    got.copyfrom(np.zeros_like(xb))
    assert np.all(xb != 0)  # the returned value is the executor's, not the caller's memory

    w = ad.Variable("w")
    h = ad.tanh_op(ad.matmul_op(x, w)) + x
    ex = Executor([h], device=cpu)
    wn = rng.normal(size=(160, 160)) * 0.1
    wd = gpumat.array(wn, cpu)
    value = xb
    ref = xb.astype(np.float64)
    for k in range(4):
        (out,) = ex.run({x: value, w: wd})
        ref = np.tanh(ref @ wn) + ref
        np.testing.assert_allclose(out.asnumpy(), ref, rtol=1e-4, atol=1e-4, err_msg=f"run {k}")
        value = np.asarray(out)  # a view of the executor's buffer, fed back
        assert np.shares_memory(value, np.asarray(out))
        if k:
            assert not _fed_in_place(ex, x)


def test_device_array_feed_on_the_wrong_device_names_the_node():
    import gpumat

    x = ad.Variable("pixels")
    arr = gpumat.array(np.ones((2, 2), dtype=np.float32), gpumat.cpu())
    with pytest.raises(ValueError, match=r"'pixels'.*numpy"):
        Executor([x * 2]).run({x: arr})


def test_host_array_fed_to_gpu_executor_is_rejected(gpu_ctx):
    import gpumat

    x = ad.Variable("pixels")
    arr = gpumat.array(np.ones((2, 2), dtype=np.float32), gpumat.cpu())
    with pytest.raises(ValueError, match=rf"'pixels' is on .*cpu.*runs on .*{gpu_ctx.device_type}"):
        Executor([x * 2], device=gpu_ctx).run({x: arr})


def test_feeding_an_intermediate_node_skips_its_inputs(ctx):
    x, w = ad.Variable("x"), ad.Variable("w")
    h = ad.matmul_op(x, w)
    y = ad.relu_op(h)
    hv = np.array([[-1.0, 2.0], [3.0, -4.0]], dtype=np.float32)
    (got,) = Executor([y], device=ctx).run({h: hv}, convert_to_numpy_ret_vals=True)  # x, w not fed
    np.testing.assert_array_equal(to_numpy(got), np.maximum(hv, 0))


def test_feeds_of_nodes_outside_the_graph_are_ignored(ctx):
    x, other = ad.Variable("x"), ad.Variable("other")
    (got,) = Executor([x + 1], device=ctx).run(
        {x: np.zeros(2, dtype=np.float32), other: np.ones(5)}, convert_to_numpy_ret_vals=True
    )
    np.testing.assert_array_equal(to_numpy(got), [1.0, 1.0])


def test_bad_feed_keys_and_values():
    x = ad.Variable("x")
    with pytest.raises(TypeError, match="graph nodes"):
        Executor([x + 1]).run({"x": np.zeros(2)})
    with pytest.raises(TypeError, match="'x'.*real numbers"):
        Executor([x + 1]).run({x: np.array(["a"])})
    with pytest.raises(TypeError, match="graph nodes"):
        Executor([np.zeros(2)])


# --------------------------------------------------------------------------------------------------
# Deep graphs
# --------------------------------------------------------------------------------------------------


def test_deep_chain_runs_without_recursion_error(ctx):
    depth = 6000
    x = ad.Variable("x")
    h = x
    for _ in range(depth):
        h = h * 1.0 + x  # after k steps h = (k + 1) x
    (gx,) = ad.gradients(h, [x])
    xv = np.array([0.5, -0.25, 1.0], dtype=np.float32)
    ex = Executor([h, gx], device=ctx)
    y, g = ex.run({x: xv}, convert_to_numpy_ret_vals=True)
    np.testing.assert_allclose(to_numpy(y), (depth + 1) * xv, rtol=1e-5)
    np.testing.assert_allclose(to_numpy(g), np.full(3, depth + 1.0), rtol=1e-5)
    # A long chain of same-shape values needs only a handful of buffers.
    assert ex.memory_plan.num_buffers <= 8, ex.memory_plan


# --------------------------------------------------------------------------------------------------
# Memory plan
# --------------------------------------------------------------------------------------------------


def test_plan_shares_buffers_only_between_disjoint_lifetimes():
    # a -> b -> c -> d chain plus e = a + d: a lives until e, so its buffer is never reused before.
    a = ad.Variable("a")
    b = a * 2
    c = b * 2
    d = c * 2
    e = a + d
    order = ad.find_topo_sort([e])
    shapes = {n: (10,) for n in order}
    nodes = set(order)
    assignment, sizes = plan_buffers(order, shapes, nodes, [e], nodes - {a}, 4)
    assert assignment[a] not in {assignment[n] for n in (b, c, d, e)}
    assert assignment[c] != assignment[b] and assignment[d] != assignment[c]  # never in place
    assert assignment[d] == assignment[b]  # b is dead once c is computed
    assert len(sizes) == 3 and sum(sizes) == 120


def test_plan_best_fit_reuses_a_larger_buffer_of_another_shape():
    a = ad.Variable("a")
    b = ad.transpose_op(a)
    c = ad.matmul_op(b, a)
    d = c * 2
    order = ad.find_topo_sort([d])
    shapes = {a: (4, 2), b: (2, 4), c: (2, 2), d: (2, 2)}
    nodes = set(order)
    assignment, sizes = plan_buffers(order, shapes, nodes, [d], nodes - {a}, 4)
    assert assignment[d] in (assignment[a], assignment[b]) and len(sizes) == 3


def test_shape_only_inputs_do_not_extend_lifetimes():
    x, big = ad.Variable("x"), ad.Variable("big")
    m = big * 2
    bc = ad.broadcastto_op(x, m)  # reads x, only m's shape
    z = ad.zeroslike_op(bc)  # reads nothing
    out = z + bc
    order = ad.find_topo_sort([out])
    life = value_lifetimes(order, set(order) - {x, big}, [out])
    step = {n: i for i, n in enumerate(order)}
    assert life[m] == (step[m], step[m])  # dead as soon as written
    assert life[bc] == (step[bc], step[out])
    assert life[x] == (step[x], step[bc])


def test_plan_on_random_graphs_never_shares_live_values():
    rng = np.random.default_rng()
    for _ in range(20):
        shapes_pool = [(2, 3), (3, 2), (6,), (4, 4)]
        leaves = [ad.Variable(f"v{i}") for i in range(3)]
        shapes = {v: shapes_pool[rng.integers(len(shapes_pool))] for v in leaves}
        nodes = list(leaves)
        for _ in range(int(rng.integers(5, 40))):
            a = nodes[int(rng.integers(len(nodes)))]
            same = [n for n in nodes if shapes[n] == shapes[a]]
            b = same[int(rng.integers(len(same)))]
            kind = rng.integers(4)
            n = (
                a + b
                if kind == 0
                else a * b
                if kind == 1
                else ad.relu_op(a)
                if kind == 2
                else ad.zeroslike_op(a)
            )
            shapes[n] = shapes[a]
            nodes.append(n)
        evals = [nodes[-1], nodes[int(rng.integers(len(nodes)))]]
        order = ad.find_topo_sort(evals)
        planned = set(order)
        computed = planned - set(leaves)
        assignment, sizes = plan_buffers(order, shapes, planned, evals, computed, 4)
        life = value_lifetimes(order, computed, evals)
        for node in order:
            assert sizes[assignment[node]] >= 4 * int(np.prod(shapes[node]))
            if node in computed:  # never in place on a value input (shape-only inputs may be)
                for k, inp in enumerate(node.inputs):
                    if k not in node.op.shape_only_inputs:
                        assert assignment[inp] != assignment[node]
        by_buffer = {}
        for node in order:
            by_buffer.setdefault(assignment[node], []).append(life[node])
        for intervals in by_buffer.values():
            intervals.sort()
            assert all(p[1] < q[0] for p, q in itertools.pairwise(intervals))


def test_planned_values_are_correct_under_sharing(ctx):
    # Many short-lived values of several shapes: results must equal the reference exactly as if
    # every value had its own buffer.
    rng = np.random.default_rng()
    x, w = ad.Variable("x"), ad.Variable("w")
    h = x
    outs = []
    for _ in range(6):
        h = ad.relu_op(ad.matmul_op(h, w)) * 0.5 + h
        t = ad.transpose_op(h)
        outs.append(ad.reducesumaxiszero_op(t))
    nodes = [h, *outs, *ad.gradients(h, [x, w])]
    feeds = {x: rand(rng, (9, 9)).astype(np.float32), w: rand(rng, (9, 9)).astype(np.float32)}
    ex = Executor(nodes, device=ctx)
    run_against_reference(ctx, nodes, feeds)
    ex.run(feeds)
    plan = ex.memory_plan
    assert isinstance(plan, MemoryPlan)
    assert plan.num_buffers < plan.num_values and plan.planned_bytes < plan.naive_bytes


@pytest.mark.parametrize("name", ["numpy", "cpu"])
def test_mlp_training_plan_numbers(name):
    """The MNIST MLP (784-256-100-10, batch 1000) training graph: loss and 6 gradients."""
    rng = np.random.default_rng()
    x, y_, params, nodes, feeds = mlp_problem(rng, 1000, [784, 256, 100, 10])
    ex = Executor(nodes, device=make_ctx(name))
    ex.run(feeds)
    plan = ex.memory_plan
    print(f"\nMLP 784-256-100-10, batch 1000, {name}: {plan}")
    print(
        f"  num_buffers={plan.num_buffers} planned_bytes={plan.planned_bytes} "
        f"naive_bytes={plan.naive_bytes} num_values={plan.num_values}"
    )
    assert plan.planned_bytes < plan.naive_bytes
    assert plan.num_buffers < plan.num_values
    # Feeding the parameters as device arrays removes their buffers from the plan (the large
    # float32 numpy ones, W1 and W2, the cpu device already reads in place).
    if name == "cpu":
        import gpumat

        in_place = [p for p in params if _fed_in_place(ex, p)]
        assert {p.name for p in in_place} == {"W1", "W2"}, in_place
        dev = {p: gpumat.array(feeds[p], ex.device) for p in params}
        ex.run({**feeds, **dev})
        plan2 = ex.memory_plan
        print(f"  parameters fed as device arrays: {plan2}")
        assert plan2.num_values == plan.num_values - len(params) + len(in_place)


def test_plan_is_made_once_and_remade_when_a_feed_shape_changes(ctx):
    rng = np.random.default_rng()
    x, y_, params, nodes, feeds = mlp_problem(rng, 8, [6, 5, 3])
    ex = Executor(nodes, device=ctx)
    ex.run(feeds)
    plan, order = ex.memory_plan, ex.topo_order
    for _ in range(3):
        ex.run({**feeds, x: rand(rng, (8, 6)).astype(np.float32)})
    assert ex.memory_plan is plan and ex.topo_order is order
    ex.run({**feeds, x: rand(rng, (5, 6)).astype(np.float32), y_: one_hot(rng, 5, 3)})
    assert ex.memory_plan is not plan
    assert ex.feed_shapes[x] == (5, 6) and ex.node_to_shape_map[nodes[1]] == (6, 5)


def test_training_steps_allocate_nothing_after_the_first(device_ctx):
    """The course's rule "cudaMalloc calls do not grow with epochs", measured by the allocator."""
    import gpumat
    from gpumat.optim import SGD

    rng = np.random.default_rng()
    x, y_, params, nodes, feeds = mlp_problem(rng, 100, [784, 256, 100, 10])
    dev_params = [gpumat.array(feeds[p], device_ctx) for p in params]
    opt = SGD(dev_params, lr=0.5)
    ex = Executor(nodes, device=device_ctx)
    batches = [
        (rng.uniform(0, 1, (100, 784)).astype(np.float32), one_hot(rng, 100, 10).astype(np.float32))
        for _ in range(6)
    ]

    def step(xb, yb):
        loss_val, *grads = ex.run({x: xb, y_: yb, **dict(zip(params, dev_params, strict=True))})
        opt.step(grads)
        return loss_val

    step(*batches[0])  # plans and allocates
    gpumat.synchronize(device_ctx)
    before = gpumat.memory_stats(device_ctx)
    losses = [step(xb, yb).asnumpy()[0] for xb, yb in batches[1:]]
    gpumat.synchronize(device_ctx)
    after = gpumat.memory_stats(device_ctx)
    assert after["device_malloc_calls"] == before["device_malloc_calls"]
    assert after["bytes_in_use"] == before["bytes_in_use"]
    if "num_alloc_requests" in before:  # not even a cached block was requested
        assert after["num_alloc_requests"] == before["num_alloc_requests"]
    assert all(np.isfinite(losses))


# --------------------------------------------------------------------------------------------------
# Threads: one executor run from several threads at once
# --------------------------------------------------------------------------------------------------

_THREADS_CHILD = r"""
import sys, threading
import numpy as np
import gpumat
from gpumat import graph as g
from gpumat.runtime import Executor

ctx = {"cpu": gpumat.cpu(), "emu": gpumat.emu(0), "gpu": gpumat.gpu(0)}[sys.argv[1]]
x, W = g.Variable("x"), g.Variable("W")
# A chain long enough that the plan reuses buffers (a shared buffer would be overwritten).
y = g.relu_op(g.matmul_op(x, W)) * 2.0 + 1.0
loss = g.reduce_sum_op(y * y, axis=1)
ex = Executor([y, loss, *g.gradients(loss, [W])], device=ctx)
errors, done = [], []

def work(t):
    rng = np.random.default_rng(t)
    w = rng.normal(size=(16, 8)).astype(np.float32)
    w_dev = gpumat.array(w, ctx)  # each thread feeds its own device parameter
    for _ in range(15):
        xn = rng.normal(size=(32, 16))
        y_val, loss_val, gw = ex.run({x: xn, W: w_dev})
        got = [y_val.asnumpy(), loss_val.asnumpy(), gw.asnumpy()]
        x64, w64 = xn, w.astype(np.float64)
        h = np.maximum(x64 @ w64, 0)
        yy = 2 * h + 1
        want = [yy, (yy * yy).sum(axis=1), x64.T @ (2 * yy * 2 * (x64 @ w64 > 0))]
        rel = [float(np.max(np.abs(a - b) / (1 + np.abs(b)))) for a, b in zip(got, want)]
        errors.append(max(rel))
    done.append(t)

threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert len(done) == 4, done
print(max(errors))
"""


@pytest.mark.parametrize("device", [p.values[0] for p in DEVICE_PARAMS])
def test_one_executor_run_from_four_threads_at_once(device):
    """Each thread has its own plan, buffers and compiled step: every thread's values are right,
    and nothing crashes (run in a child process, so a crash fails this test)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-P", "-c", _THREADS_CHILD, device],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert float(proc.stdout.split()[-1]) < 1e-4, proc.stdout


def test_threads_each_see_their_own_plan_and_schedule(device_ctx):
    import threading

    x = ad.Variable("x")
    ex = Executor([ad.relu_op(x * 3.0)], device=device_ctx)
    ex.run({x: np.ones((4, 5))})
    seen = []
    worker = threading.Thread(target=lambda: seen.append((ex.memory_plan, ex.topo_order)))
    worker.start()
    worker.join()
    assert seen == [(None, None)]  # the worker has not run yet: no plan of its own
    assert ex.memory_plan is not None and ex.topo_order is not None


def test_a_failed_training_run_gives_its_step_back():
    class FailingOp(ad.Op):
        name = "failing_op"

        def __call__(self, node_x: ad.Node) -> ad.Node:
            node = ad.Op.__call__(self)
            node.inputs, node.name = [node_x], "Failing"
            return node

        def compute(self, node, input_vals, output_val, ctx=None):
            if input_vals[0].sum() < 0:
                raise RuntimeError("failing_op: negative input")
            output_val[...] = input_vals[0]

        def infer_shape(self, node, input_shapes):
            return input_shapes[0]

    x = ad.Variable("x")
    ex = Executor([FailingOp()(x)], device=None)
    ex.run({x: np.ones((2, 2))})
    assert ex.step == 1
    with pytest.raises(RuntimeError, match="negative input"):
        ex.run({x: -np.ones((2, 2))})
    assert ex.step == 1  # the dropout masks of later runs are those they would have been
    ex.run({x: np.ones((2, 2))})
    assert ex.step == 2


@pytest.mark.parametrize("fusion", [True, False])
def test_a_returned_array_fed_back_is_never_overwritten_mid_run(device_ctx, fusion):
    """``h = ex.run({x: h})[0]``: the returned array is one of the executor's buffers, which the
    plan reuses during the next run; it is copied in (a feed of its own), so every step is right
    (it once read a buffer a later op had overwritten), and steady state allocates nothing."""
    import gpumat

    x, w, b = ad.Variable("x"), ad.Variable("W"), ad.Variable("b")
    z = ad.matmul_op(x, w)
    h = ad.tanh_op(ad.relu_op(z + ad.broadcastto_op(b, z)) * 0.5) + x
    ex = Executor([h], device=device_ctx, fusion=fusion)
    rng = np.random.default_rng()
    wn, bn = rng.normal(size=(8, 8)), rng.normal(size=(8,))
    wd, bd = gpumat.array(wn, device_ctx), gpumat.array(bn, device_ctx)
    value = rng.normal(size=(5, 8))
    ref = value.copy()
    mallocs = []
    for _ in range(6):
        (value,) = ex.run({x: value, w: wd, b: bd})
        ref = np.tanh(np.maximum(ref @ wn + bn, 0) * 0.5) + ref
        np.testing.assert_allclose(value.asnumpy(), ref, rtol=1e-5, atol=1e-5)
        mallocs.append(gpumat.memory_stats(device_ctx)["device_malloc_calls"])
    assert mallocs[2:] == [mallocs[2]] * 4


def test_repeated_feeds_keep_every_check(device_ctx):
    """A device array fed again as the same object is not checked again, and a run whose fed
    nodes, shapes and placements repeat keeps its plan without rebuilding the plan key; every
    change is still seen: a new shape plans again, a bad shape and an array on another device
    still raise, naming the node."""
    import gpumat

    rng = np.random.default_rng()
    x, w = ad.Variable("x"), ad.Variable("w")
    ex = Executor([ad.matmul_op(x, w)], device=device_ctx)
    wn = rand(rng, (3, 2))
    wd = gpumat.array(wn, device_ctx)
    xn = rand(rng, (4, 3))
    xd = gpumat.array(xn, device_ctx)
    for _ in range(3):  # the same objects: one plan
        (got,) = ex.run({x: xd, w: wd}, convert_to_numpy_ret_vals=True)
        assert_float32_close(got, xn @ wn, "same feeds")
    plan = ex.memory_plan
    xn = rand(rng, (4, 3))
    (got,) = ex.run({x: gpumat.array(xn, device_ctx), w: wd}, convert_to_numpy_ret_vals=True)
    assert ex.memory_plan is plan  # a new array of the same shape: the same plan
    assert_float32_close(got, xn @ wn, "a new array")
    xn = rand(rng, (5, 3))
    xd = gpumat.array(xn, device_ctx)
    (got,) = ex.run({x: xd, w: wd}, convert_to_numpy_ret_vals=True)
    assert ex.memory_plan is not plan and got.shape == (5, 2)
    assert_float32_close(got, xn @ wn, "a new shape")
    with pytest.raises(ValueError, match="inner dimensions differ"):
        ex.run({x: xd, w: gpumat.array(rand(rng, (4, 2)), device_ctx)})
    other = gpumat.cpu() if device_ctx.device_type != "cpu" else gpumat.emu(0)
    with pytest.raises(ValueError, match=r"'x' is on .*devices are never mixed"):
        ex.run({x: gpumat.array(xn, other), w: wd})
    with pytest.raises(ValueError, match=r"'w' is on .*devices are never mixed"):
        ex.run({x: xd, w: gpumat.array(wn, other)})
    (got,) = ex.run({x: xd, w: wd}, convert_to_numpy_ret_vals=True)
    assert_float32_close(got, xn @ wn, "after the errors")


def _same_storage(a, b):
    """Whether two planned values lie in the same bytes (numpy: shared memory; device: address)."""
    if isinstance(a, np.ndarray):
        return np.shares_memory(a, b)
    return a._address_range()[0] == b._address_range()[0]


def test_reshapes_share_their_input_buffer_and_run_nothing(ctx):
    # A reshape of a planned value is the same bytes with another shape: it shares the buffer
    # and the run does nothing for it. A fed device array and a returned input keep the copy.
    rng = np.random.default_rng()
    x, w = ad.Variable("x"), ad.Variable("w")
    h = ad.relu_op(ad.matmul_op(x, w))  # (6, 8)
    r = ad.reshape_op(h, (4, 12))
    r2 = ad.reshape_op(r, (48,))  # a reshape of a reshape: one buffer for the three
    f = ad.flatten_op(ad.reshape_op(h * 2.0, (6, 2, 4)))
    y = r2 * 3.0
    z = f + 1.0
    xv, wv = rand(rng, (6, 5)).astype(np.float32), rand(rng, (5, 8)).astype(np.float32)
    ex = Executor([y, z, r], device=ctx)
    for _ in range(2):  # the second run reuses the plan and its buffers
        yv, zv, rv = (to_numpy(v) for v in ex.run({x: xv, w: wv}))
        hv = np.maximum(xv.astype(np.float64) @ wv, 0)
        assert_float32_close(yv, 3 * hv.reshape(48), "reshape chain")
        assert_float32_close(zv, 2 * hv + 1, "flatten of a reshape")
        assert_float32_close(rv, hv.reshape(4, 12), "returned reshape")
    arrays = ex.node_to_arr_map
    assert _same_storage(arrays[r], arrays[h]) and _same_storage(arrays[r2], arrays[h])
    if ctx is not None:  # no reshape kernel runs (a Python-run executor: one call per op)
        import gpumat

        ex_py = Executor([y, z, r], device=ctx, compiled=False)
        with gpumat.ops.trace_calls() as calls:
            ex_py.run({x: xv, w: wv})
        assert calls and not [name for name, _ in calls if "reshape" in name]
    # a fed device array is used in place, so its reshape is a copy into a buffer of the plan
    if ctx is not None:
        import gpumat

        v = ad.Variable("v")
        ex2 = Executor([ad.reshape_op(v, (3, 4)) * 1.0], device=ctx)
        fed = gpumat.array(rand(rng, (12,)).astype(np.float32), ctx)
        (out,) = ex2.run({v: fed}, convert_to_numpy_ret_vals=True)
        assert_float32_close(out, fed.asnumpy().astype(np.float64).reshape(3, 4), "fed")
    # two returned values never share a buffer: a returned value's returned reshape is a copy
    ex3 = Executor([h, r], device=ctx)
    hv3, rv3 = ex3.run({x: xv, w: wv})
    assert not _same_storage(hv3, rv3)
    assert_float32_close(to_numpy(rv3), to_numpy(hv3).reshape(4, 12).astype(np.float64), "copy")


def test_same_shape_sum_to_and_expand_share_their_input_buffer(ctx):
    # a same-shape broadcast's gradients (a sum over nothing, a repeat of nothing) are their
    # input's bytes; a real sum or repeat is computed into a buffer of its own
    rng = np.random.default_rng()
    x, b = ad.Variable("x"), ad.Variable("b")
    h = x * 2.0
    same = ad.sum_to_op(h, x)
    rep = ad.expand_like_op(h, x)
    cols = ad.sum_to_op(h, b)
    wide = ad.expand_like_op(b, x)
    out = [same * 1.0, rep * 1.0, cols * 1.0, wide * 1.0]
    xv, bv = rand(rng, (5, 7)).astype(np.float32), rand(rng, (7,)).astype(np.float32)
    ex = Executor(out, device=ctx)
    got = [to_numpy(v) for v in ex.run({x: xv, b: bv})]
    x64 = 2.0 * xv.astype(np.float64)
    for g, want, what in zip(
        got,
        [x64, x64, x64.sum(0), np.broadcast_to(bv, (5, 7))],
        ["same", "rep", "cols", "wide"],
        strict=True,
    ):
        assert_float32_close(g, want, what)
    arrays = ex.node_to_arr_map
    assert _same_storage(arrays[same], arrays[h]) and _same_storage(arrays[rep], arrays[h])
    assert not _same_storage(arrays[cols], arrays[h])
