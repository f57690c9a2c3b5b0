"""sqrt and its gradient, the pointwise kernel added by the one-declaration recipe
(docs/adding_a_kernel.md): the kernels against float64 numpy on every device with the outputs
poisoned by NaN, IEEE special values bit for bit, the graph op's gradient against float64 central
differences and on every device, ``Tensor.sqrt`` against PyTorch on the CPU, and a step compiled
by ``gpumat.compile`` against the eager one."""

import numpy as np
import pytest
from helpers import EPS32, assert_close, nan_array, new_rng, shape_id
from nn_helpers import check_device_gradients, check_fd_gradients

import gpumat
import gpumat.graph as ad
import gpumat.ops as ops

ULP = EPS32  # 2**-23
# Tails of a 256-thread block, several blocks, and a rank-4 array; the large one spans many grids.
ELEMENTWISE_SHAPES = [(7,), (1, 1), (1, 1031), (513, 257), (2, 3, 4, 5)]
LARGE = (2000, 3000)


def _positive(shape, rng):
    """float32 values over 40 binades (2**-20 .. 2**20), so the roundings of sqrt are exercised."""
    return np.exp2(rng.uniform(-20.0, 20.0, size=shape)).astype(np.float32)


@pytest.mark.parametrize("shape", [*ELEMENTWISE_SHAPES, LARGE], ids=shape_id)
def test_sqrt_is_correctly_rounded(ctx, shape):
    rng, seed = new_rng()
    x = _positive(shape, rng)
    out = nan_array(shape, ctx)
    ops.sqrt(gpumat.array(x, ctx), out)
    # sqrt is correctly rounded on every device, so it equals numpy's float32 sqrt exactly
    np.testing.assert_array_equal(out.asnumpy(), np.sqrt(x), err_msg=f"seed {seed}")
    assert_close(out.asnumpy(), np.sqrt(x.astype(np.float64)), rtol=ULP, atol=0, msg=f"seed {seed}")


@pytest.mark.parametrize("shape", [*ELEMENTWISE_SHAPES, LARGE], ids=shape_id)
def test_sqrt_gradient(ctx, shape):
    rng, seed = new_rng()
    y = _positive(shape, rng)
    dy = rng.uniform(-1.0, 1.0, size=shape).astype(np.float32)
    out = nan_array(shape, ctx)
    ops.sqrt_gradient(gpumat.array(y, ctx), gpumat.array(dy, ctx), out)
    np.testing.assert_array_equal(out.asnumpy(), dy / (np.float32(2) * y), err_msg=f"seed {seed}")
    expected = dy.astype(np.float64) / (2 * y.astype(np.float64))
    assert_close(out.asnumpy(), expected, rtol=ULP, atol=0, msg=f"seed {seed}")


def test_sqrt_special_values_and_in_place(ctx):
    x = np.array([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, 4.0], np.float32)
    a = gpumat.array(x, ctx)
    ops.sqrt(a, a)  # in place
    with np.errstate(invalid="ignore"):
        want = np.sqrt(x)
    np.testing.assert_array_equal(a.asnumpy(), want)
    assert np.signbit(a.asnumpy()[1])  # sqrt(-0) = -0
    y = np.array([0.0, 0.0, -0.0, 1.0], np.float32)
    dy = np.array([1.0, 0.0, 1.0, np.nan], np.float32)
    out = nan_array((4,), ctx)
    ops.sqrt_gradient(gpumat.array(y, ctx), gpumat.array(dy, ctx), out)
    np.testing.assert_array_equal(out.asnumpy(), [np.inf, np.nan, -np.inf, np.nan])


def test_sqrt_reference_matches_ops(ctx):
    rng, _ = new_rng()
    x = _positive((7, 9), rng)
    ref = np.empty_like(x)
    gpumat.reference.sqrt(x, ref)
    out = nan_array((7, 9), ctx)
    ops.sqrt(gpumat.array(x, ctx), out)
    np.testing.assert_array_equal(out.asnumpy(), ref)


def test_sqrt_shape_and_device_errors_name_the_op(ctx):
    a, b = gpumat.empty((3, 4), ctx), gpumat.empty((4, 3), ctx)
    with pytest.raises(ValueError, match=r"sqrt: .*\(3, 4\).*\(4, 3\)"):
        ops.sqrt(a, b)
    with pytest.raises(ValueError, match=r"sqrt_gradient: .*\(3, 4\).*\(4, 3\)"):
        ops.sqrt_gradient(a, b, a)
    with pytest.raises(TypeError):
        ops.sqrt(np.ones((3, 4), np.float32), a)


@pytest.mark.parametrize("shape", [(1, 1), (9, 1), (6, 7), (2, 3, 4)], ids=shape_id)
def test_sqrt_op_gradient_fd_float64(shape):
    rng, _ = new_rng()
    x = rng.uniform(0.2, 3.0, size=shape)
    check_fd_gradients(lambda x: ad.sqrt_op(x), [x], rng)
    check_fd_gradients(lambda x: ad.sqrt_op(ad.sqrt_op(x)), [x], rng)


@pytest.mark.parametrize("shape", [(1, 1), (6, 7), (300, 70)], ids=shape_id)
def test_sqrt_op_on_devices_matches_numpy(ctx, shape):
    rng, _ = new_rng()
    x = rng.uniform(0.1, 3.0, size=shape)  # sqrt needs x > 0
    check_device_gradients(ctx, lambda x: ad.sqrt_op(x), [x], rng)


def test_sqrt_op_names_its_nodes_and_has_no_second_derivative():
    x = ad.Variable("x")
    y = ad.sqrt_op(x)
    assert y.name == "Sqrt(x)"
    (g,) = ad.sqrt_op.gradient(y, ad.oneslike_op(y))
    assert g.op is ad.sqrt_gradient_op and g.name == "SqrtGrad(Sqrt(x),Oneslike(Sqrt(x)))"
    assert all(isinstance(d, ad.Undefined) for d in g.op.gradient(g, ad.oneslike_op(g)))


def test_tensor_sqrt_matches_torch(ctx):
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    x = rng.uniform(0.01, 4.0, size=(5, 6)).astype(np.float32)
    w = rng.uniform(-1.0, 1.0, size=(5, 6)).astype(np.float32)
    t = gpumat.tensor(x, device=ctx, requires_grad=True)
    (t.sqrt() * gpumat.tensor(w, device=ctx)).sum().backward()
    tt = torch.tensor(x, requires_grad=True)
    (tt.sqrt() * torch.tensor(w)).sum().backward()
    got = t.detach().sqrt().numpy()
    np.testing.assert_array_equal(got, np.sqrt(x), f"seed {seed}")  # correctly rounded
    # PyTorch's vectorised CPU sqrt (SLEEF's, 0.5001 ulp) may differ from it by one ulp
    assert_close(got, tt.sqrt().detach().numpy(), rtol=ULP, atol=0, msg=f"seed {seed}")
    assert_close(t.grad.numpy(), tt.grad.numpy(), rtol=2 * ULP, atol=0, msg=f"seed {seed}")
    with pytest.raises(TypeError, match="sqrt"):
        gpumat.tensor([1, 4]).sqrt()  # int64


def test_compiled_sqrt_step_equals_eager(ctx):
    rng, _ = new_rng()
    x = gpumat.tensor(rng.uniform(0.5, 2.0, size=(4, 3)).astype(np.float32), device=ctx)

    def step(w, x):
        w.grad = None
        loss = (w * x).sqrt().sum()
        loss.backward()
        return loss, w.grad

    w0 = rng.uniform(0.5, 2.0, size=(4, 3)).astype(np.float32)
    w_eager = gpumat.tensor(w0, device=ctx, requires_grad=True)
    w_traced = gpumat.tensor(w0, device=ctx, requires_grad=True)
    eager = step(w_eager, x)
    compiled = gpumat.compile(lambda x: step(w_traced, x), fusion=False)
    for _ in range(2):  # the first call traces, the second replays
        traced = compiled(x)
        for e, c in zip(eager, traced, strict=True):
            np.testing.assert_array_equal(c.numpy(), e.detach().numpy())
