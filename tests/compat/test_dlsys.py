"""gpumat.dlsys: the dlsys course's namespace with its conventions (summed loss gradient, device
types 1/2, memory_plan as a method, node_to_arr_map), checked against float64 numpy references.

The course's own files are not part of the repository; these tests make the same calls: the
``gpu_op`` kernels on device arrays made through ``ndarray``, ``autodiff.softmax_func``,
``a[:] = numpy_array``, ``copyto``, and training MNIST with the course's recipe (lr 1e-3 on the
summed gradient, batch 1000, 10 epochs).
"""

import numpy as np
import pytest
from conftest import HAS_GPU
from helpers import new_rng

import gpumat
import gpumat.autodiff as gad
from gpumat.dlsys import autodiff as ad
from gpumat.dlsys import gpu_op, ndarray


def _dl_ctx(ctx):
    return ndarray.gpu(0) if ctx.device_type == "gpu" else ndarray.cpu(0)


def test_contexts_use_the_seeds_device_types():
    c = ndarray.cpu(0)
    assert c.device_type == 1 and c.device_id == 0 and repr(c) == "cpu(0)"
    assert c == gpumat.cpu() and hash(c) == hash(gpumat.cpu())
    assert not ndarray.is_gpu_ctx(c) and not ndarray.is_gpu_ctx(None)
    assert ndarray.DLContext(0, 2).device_type == 2
    assert ndarray.is_gpu_ctx(ndarray.DLContext(0, 2))
    with pytest.raises(ValueError, match="device_type must be 1"):
        ndarray.DLContext(0, 3)
    with pytest.raises(TypeError, match="device_id must be an int"):
        ndarray.DLContext("0", 1)
    arr = ndarray.array(np.ones((2, 3)), ctx=c)
    assert arr.ctx.device_type == 1 and isinstance(arr, ndarray.NDArray)


@pytest.mark.skipif(HAS_GPU, reason="a GPU is available: gpu(0) is then valid")
def test_gpu_context_without_a_gpu_is_a_clear_error():
    with pytest.raises(gpumat.CudaError, match=r"ndarray.gpu\(0\).*cpu\(0\)"):
        ndarray.gpu(0)


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_GPU, reason="no CUDA device")
def test_gpu_context_with_a_gpu():
    assert ndarray.gpu(0).device_type == 2 and ndarray.gpu(0) == gpumat.gpu(0)


def test_gpu_op_calls_of_the_course_match_float64(ctx):
    rng, _ = new_rng()
    dc = _dl_ctx(ctx)
    x = rng.uniform(-1, 1, (7, 5)).astype(np.float32)
    y = rng.uniform(-1, 1, (7, 5)).astype(np.float32)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    ax, ay, az = ndarray.array(x, ctx=dc), ndarray.array(y, ctx=dc), ndarray.empty((7, 5), ctx=dc)

    gpu_op.array_set(az, 1.0)
    np.testing.assert_array_equal(az.asnumpy(), np.ones((7, 5)))
    big = ndarray.empty((3, 7, 5), ctx=dc)
    gpu_op.broadcast_to(ax, big)
    np.testing.assert_array_equal(big.asnumpy(), np.broadcast_to(x, (3, 7, 5)))
    gpu_op.reduce_sum_axis_zero(big, az)
    np.testing.assert_allclose(az.asnumpy(), 3 * x64, rtol=1e-6)
    gpu_op.matrix_elementwise_add(ax, ay, az)
    np.testing.assert_allclose(az.asnumpy(), x64 + y64, rtol=1e-6, atol=1e-7)
    gpu_op.matrix_elementwise_add_by_const(ax, 0.25, az)
    np.testing.assert_allclose(az.asnumpy(), x64 + 0.25, rtol=1e-6, atol=1e-7)
    gpu_op.matrix_elementwise_multiply(ax, ay, az)
    np.testing.assert_allclose(az.asnumpy(), x64 * y64, rtol=1e-6)
    gpu_op.matrix_elementwise_multiply_by_const(ax, -3.0, az)
    np.testing.assert_allclose(az.asnumpy(), -3 * x64, rtol=1e-6)
    out = ndarray.empty((7, 7), ctx=dc)
    gpu_op.matrix_multiply(ax, False, ay, True, out)
    np.testing.assert_allclose(out.asnumpy(), x64 @ y64.T, rtol=1e-5, atol=1e-6)
    gpu_op.relu(ax, az)
    np.testing.assert_array_equal(az.asnumpy(), np.maximum(x, 0))
    gpu_op.relu_gradient(ax, ay, az)
    np.testing.assert_array_equal(az.asnumpy(), np.where(x > 0, y, 0))
    gpu_op.softmax(ax, az)
    np.testing.assert_allclose(az.asnumpy(), ad.softmax_func(x64), rtol=1e-5)
    labels = ndarray.array(ad.softmax_func(y64), ctx=dc)
    loss = ndarray.empty((1,), ctx=dc)
    gpu_op.softmax_cross_entropy(ax, labels, loss)
    ref = np.mean(-np.sum(ad.softmax_func(y64) * np.log(ad.softmax_func(x64)), axis=1))
    np.testing.assert_allclose(loss.asnumpy(), [ref], rtol=1e-5)


def test_softmax_func_is_stable_and_rejects_non_matrices():
    y = np.array([[1000.0, 1000.0], [-1000.0, 0.0]])
    np.testing.assert_allclose(ad.softmax_func(y), [[0.5, 0.5], [0.0, 1.0]])
    with pytest.raises(ValueError, match="2-D"):
        ad.softmax_func(np.ones(3))


def test_device_arrays_support_slice_assignment_and_copyto(ctx):
    rng, _ = new_rng()
    a = gpumat.empty((4, 3), ctx)
    src = rng.uniform(-1, 1, (4, 3))
    a[:] = src
    np.testing.assert_array_equal(a.asnumpy(), src.astype(np.float32))
    a[...] = 2.0
    np.testing.assert_array_equal(a.asnumpy(), np.full((4, 3), 2.0))
    b = gpumat.array(rng.uniform(-1, 1, (4, 3)), ctx)
    a[:] = b
    np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
    c = b.copyto(ctx)
    assert c is not b and np.array_equal(c.asnumpy(), b.asnumpy())
    d = gpumat.empty((4, 3), ctx)
    assert b.copyto(d) is d and np.array_equal(d.asnumpy(), b.asnumpy())
    with pytest.raises(ValueError, match="shape"):
        a[:] = np.ones((3, 4))
    with pytest.raises(IndexError, match=r"a\[:\]"):
        a[1:] = 0.0
    with pytest.raises(TypeError, match="copyto"):
        b.copyto("gpu")
    with pytest.raises(ValueError, match="shape"):
        b.copyto(gpumat.empty((3, 4), ctx))


def test_graph_helpers_of_the_skeleton():
    x, w = ad.Variable("x"), ad.Variable("w")
    y = ad.matmul_op(x, w)
    z = y + x * 2
    order = []
    ad.topo_sort_dfs(z, set(), order)
    assert order == ad.find_topo_sort([z])
    assert order.index(x) < order.index(y) < order.index(z)
    s = ad.sum_node_list([x, y, z])
    assert s.op is ad.add_op and s.inputs[1] is z
    with pytest.raises(ValueError, match="empty"):
        ad.sum_node_list([])
    assert ad.broadcast_rule((3, 2), (4, 3, 2)) == (4, 3, 2)
    assert ad.broadcast_rule((1,), (5, 1)) == (5, 1)
    with pytest.raises(ValueError, match="cannot broadcast"):
        ad.broadcast_rule((3,), (4,))
    with pytest.raises(TypeError, match="tuple of ints"):
        ad.broadcast_rule([3], (3,))


def _loss_graph(module):
    x, w, y_ = module.Variable("x"), module.Variable("w"), module.Variable("y_")
    loss = module.softmaxcrossentropy_op(module.matmul_op(x, w), y_)
    (grad_w,) = module.gradients(loss, [w])
    return x, w, y_, loss, grad_w


@pytest.mark.parametrize("backend", ["numpy", "cpu"])
def test_loss_gradient_is_summed_here_and_the_mean_in_gpumat_autodiff(backend):
    rng, _ = new_rng()
    n, d, k = 12, 5, 4
    X = rng.uniform(-1, 1, (n, d))
    W = rng.uniform(-1, 1, (d, k))
    Y = np.eye(k)[rng.integers(0, k, n)]
    logits = X @ W
    summed = X.T @ (ad.softmax_func(logits) - Y)  # the dlsys course's dL/dW
    loss_ref = np.mean(-np.sum(Y * np.log(ad.softmax_func(logits)), axis=1))
    ctx = None if backend == "numpy" else ndarray.cpu(0)
    for module, expected in ((ad, summed), (gad, summed / n)):
        x, w, y_, loss, grad_w = _loss_graph(module)
        ex = module.Executor([loss, grad_w], ctx=ctx)
        loss_val, grad_val = ex.run({x: X, w: W, y_: Y}, convert_to_numpy_ret_vals=True)
        np.testing.assert_allclose(np.ravel(loss_val), [loss_ref], rtol=1e-5)
        np.testing.assert_allclose(grad_val, expected, rtol=2e-5, atol=1e-6)


def test_executor_memory_plan_is_a_method_and_fills_node_to_arr_map():
    x, w, y_, loss, grad_w = _loss_graph(ad)
    ex = ad.Executor([loss, grad_w], ctx=ndarray.cpu(0))
    assert ex.node_to_arr_map is None and ex.plan_stats is None
    shapes = {x: (6, 3), w: (3, 2), y_: (6, 2)}
    arrays = ex.memory_plan(shapes)
    assert arrays is not None and set(arrays) == set(ex.topo_order) - set(shapes)
    for node, arr in arrays.items():
        assert arr.shape == ex.node_to_shape_map[node]
    stats = ex.plan_stats
    rng, _ = new_rng()
    ex.run({x: rng.random((6, 3)), w: rng.random((3, 2)), y_: np.eye(2)[[0, 1, 0, 1, 0, 1]]})
    assert ex.plan_stats is stats  # run used the plan memory_plan made
    with pytest.raises(ValueError, match="no value fed"):
        ex.memory_plan({x: (6, 3)})
    with pytest.raises(TypeError, match="keys must be graph nodes"):
        ex.memory_plan({"x": (6, 3)})


def test_executor_rejects_a_string_context():
    x = ad.Variable("x")
    for module in (ad, gad):
        with pytest.raises(TypeError, match="ctx must be None"):
            module.Executor([x], ctx="gpu")


def _course_recipe_accuracy(ctx, epochs=10):
    """Logistic regression as the course trains it: zero init, lr 1e-3 on the summed gradient,
    batch 1000, in order; returns the validation accuracy."""
    from gpumat import datasets

    try:
        (tx, ty), (vx, vy), _ = datasets.load_mnist(progress=False)
    except datasets.DatasetError as exc:  # no cached file and no network
        pytest.skip(f"MNIST unavailable: {exc}")
    X, W, b, y_ = (ad.Variable(n) for n in ("X", "W", "b", "y_"))
    z = ad.matmul_op(X, W)
    y = z + ad.broadcastto_op(b, z)
    loss = ad.softmaxcrossentropy_op(y, y_)
    gW, gb = ad.gradients(loss, [W, b])
    ex = ad.Executor([loss, gW, gb, y], ctx=ctx)
    Wv = ndarray.array(np.zeros((784, 10)), ctx=ctx)
    bv = ndarray.array(np.zeros(10), ctx=ctx)
    Xv, Yv = ndarray.empty((1000, 784), ctx=ctx), ndarray.empty((1000, 10), ctx=ctx)
    for _ in range(epochs):
        for i in range(0, 50000, 1000):
            Xv[:] = tx[i : i + 1000]
            Yv[:] = np.eye(10)[ty[i : i + 1000]]
            _, gWv, gbv, _ = ex.run({X: Xv, y_: Yv, W: Wv, b: bv})
            for p, g in ((Wv, gWv), (bv, gbv)):
                gpu_op.matrix_elementwise_multiply_by_const(g, -1e-3, g)
                gpu_op.matrix_elementwise_add(p, g, p)
    correct = 0
    for i in range(0, 10000, 1000):
        feed = {X: vx[i : i + 1000], y_: np.eye(10)[vy[i : i + 1000]], W: Wv, b: bv}
        pred = ex.run(feed, convert_to_numpy_ret_vals=True)[3]
        correct += int(np.sum(np.argmax(pred, 1) == vy[i : i + 1000]))
    return correct / 10000


@pytest.mark.slow
def test_course_logreg_recipe_reaches_the_courses_accuracy():
    # The course's comment: validation set accuracy=0.928200 (10 epochs, lr 1e-3, summed gradient).
    acc = _course_recipe_accuracy(ndarray.cpu(0))
    assert acc >= 0.92, acc
