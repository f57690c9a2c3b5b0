"""gpumat.optim.SGD: in-place updates on numpy and device arrays, errors, and a training loop that
keeps parameters on the device and matches the numpy reference step for step."""

import numpy as np
import pytest
from conftest import DEVICE_PARAMS, make_ctx
from nn_helpers import rand64 as rand

import gpumat.autodiff as ad
from gpumat.optim import SGD
from gpumat.runtime import Executor


@pytest.fixture(params=DEVICE_PARAMS)
def device_ctx(request):
    """gpumat.cpu() or gpumat.gpu(0)."""
    return make_ctx(request.param)


def test_sgd_updates_numpy_arrays_in_place():
    rng = np.random.default_rng()
    p = [rand(rng, (3, 4)), rand(rng, (5,)).astype(np.float32)]
    g = [rand(rng, (3, 4)), rand(rng, (5,)).astype(np.float32)]
    before = [x.copy() for x in p]
    objs = [id(x) for x in p]
    opt = SGD(p, lr=0.3)
    opt.step(g)
    assert [id(x) for x in opt.params] == objs
    np.testing.assert_allclose(p[0], before[0] - 0.3 * g[0], rtol=1e-15)
    np.testing.assert_allclose(p[1], before[1] - np.float32(0.3) * g[1], rtol=1e-6)
    assert p[1].dtype == np.float32


def test_sgd_updates_device_arrays_in_place(device_ctx):
    import gpumat

    rng = np.random.default_rng()
    host = [rand(rng, (7, 3)).astype(np.float32), rand(rng, (3,)).astype(np.float32)]
    grads = [rand(rng, (7, 3)).astype(np.float32), rand(rng, (3,)).astype(np.float32)]
    params = [gpumat.array(h, device_ctx) for h in host]
    same = list(params)
    opt = SGD(params, lr=0.25)
    opt.step([gpumat.array(g, device_ctx) for g in grads])
    opt.lr = 0.5
    opt.step([gpumat.array(g, device_ctx) for g in grads])
    for p, s, h, g in zip(params, same, host, grads, strict=True):
        assert p is s
        np.testing.assert_allclose(p.asnumpy(), h - 0.25 * g - 0.5 * g, rtol=1e-6, atol=1e-6)


def test_sgd_errors(device_ctx):
    import gpumat

    p = gpumat.array(np.zeros((2, 3), dtype=np.float32), device_ctx)
    opt = SGD([p], lr=0.1)
    with pytest.raises(ValueError, match="2 gradients for 1 parameters"):
        opt.step([p, p])
    with pytest.raises(TypeError, match="gradients stay on the device"):
        opt.step([np.zeros((2, 3), dtype=np.float32)])
    with pytest.raises(ValueError):  # axpy checks shapes in C++
        opt.step([gpumat.array(np.zeros((3, 2), dtype=np.float32), device_ctx)])
    with pytest.raises(TypeError, match="numpy array but its gradient"):
        SGD([np.zeros(3)], lr=0.1).step([p])


def test_sgd_argument_checks():
    with pytest.raises(ValueError, match="learning rate"):
        SGD([np.zeros(2)], lr=-1.0)
    with pytest.raises(ValueError, match="learning rate"):
        SGD([np.zeros(2)], lr=float("nan"))
    with pytest.raises(TypeError, match="parameter 0"):
        SGD([[1.0, 2.0]], lr=0.1)
    with pytest.raises(TypeError, match="float array"):
        SGD([np.zeros(2, dtype=np.int64)], lr=0.1)
    with pytest.raises(ValueError, match="shape"):
        SGD([np.zeros(2)], lr=0.1).step([np.zeros(3)])
    assert "lr=0.1" in repr(SGD([np.zeros(2)], lr=0.1))


def test_training_on_device_matches_numpy_reference(device_ctx):
    """Logistic regression, 20 SGD steps with parameters kept on the device, against the same steps
    on the numpy backend in float64."""
    import gpumat

    rng = np.random.default_rng()
    n, d, c = 64, 20, 5
    x, w, b, y_ = (ad.Variable(s) for s in ("x", "W", "b", "y_"))
    z = ad.matmul_op(x, w)
    loss = ad.softmaxcrossentropy_op(z + ad.broadcastto_op(b, z), y_)
    nodes = [loss, *ad.gradients(loss, [w, b])]
    # Labels from a linear teacher, so that there is something to learn.
    teacher = rng.normal(size=(d, c))
    xs = [rng.normal(size=(n, d)).astype(np.float32) for _ in range(20)]
    batches = [(xb, np.eye(c, dtype=np.float32)[np.argmax(xb @ teacher, axis=1)]) for xb in xs]
    w0, b0 = (0.1 * rng.normal(size=(d, c))).astype(np.float32), np.zeros(c, dtype=np.float32)

    ref_params = [w0.astype(np.float64), b0.astype(np.float64)]
    ref_opt, ref_ex = SGD(ref_params, lr=0.5), Executor(nodes)
    dev_params = [gpumat.array(w0, device_ctx), gpumat.array(b0, device_ctx)]
    dev_opt, dev_ex = SGD(dev_params, lr=0.5), Executor(nodes, device=device_ctx)
    ref_losses, dev_losses = [], []
    for xb, yb in batches:
        loss_val, *grads = ref_ex.run(
            {x: xb.astype(np.float64), y_: yb, w: ref_params[0], b: ref_params[1]}
        )
        ref_opt.step(grads)
        ref_losses.append(loss_val[0])
        loss_val, *grads = dev_ex.run({x: xb, y_: yb, w: dev_params[0], b: dev_params[1]})
        dev_opt.step(grads)
        dev_losses.append(loss_val.asnumpy()[0])
    np.testing.assert_allclose(dev_losses, ref_losses, rtol=1e-4)
    np.testing.assert_allclose(dev_params[0].asnumpy(), ref_params[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dev_params[1].asnumpy(), ref_params[1], rtol=1e-4, atol=1e-5)
    assert np.mean(ref_losses[-5:]) < np.mean(ref_losses[:5])  # it learns
