"""The eager autograd engine (gpumat.autograd) through Tensor: accumulation, paths summed, the
released graph, version counters of saved values, grad mode, leaves, and the errors PyTorch
users expect (RuntimeError with PyTorch's wording), on every device."""

import numpy as np
import pytest
import torch
from helpers import new_rng, rand

import gpumat
import gpumat.nn.functional as F  # noqa: N812


def leaf(x, ctx, grad=True):
    return gpumat.tensor(x, device=ctx, requires_grad=grad)


def test_paths_are_summed_and_leaves_accumulate(ctx):
    rng, _ = new_rng()
    x0 = rand((3, 4), rng)
    x = leaf(x0, ctx)
    y = (x * x + x * 3.0).sum()  # d/dx = 2x + 3, reached along three paths
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x0 + 3, rtol=1e-6)
    (x * 2.0).sum().backward()  # a second graph adds into .grad
    np.testing.assert_allclose(x.grad.numpy(), 2 * x0 + 5, rtol=1e-6)


def test_gradients_of_shared_inputs_do_not_alias(ctx):
    rng, _ = new_rng()
    a, b = leaf(rand((2, 3), rng), ctx), leaf(rand((2, 3), rng), ctx)
    (a + b).sum().backward()  # add's gradient hands one array to both inputs
    np.testing.assert_array_equal(a.grad.numpy(), np.ones((2, 3)))
    with gpumat.no_grad():
        a.grad.mul_(5.0)
    np.testing.assert_array_equal(b.grad.numpy(), np.ones((2, 3)))


def test_pass_through_gradients_are_handed_on_and_do_not_alias(ctx):
    """A sum to the same shape (the unbroadcast operand of a broadcast add) and a product by 1.0
    (the gradient of clone / contiguous) hand their input on: no kernel, and the leaves' .grad
    still own their arrays."""
    rng, seed = new_rng()
    a0, b0, c0, w0 = rand((4, 3), rng), rand((3,), rng), rand((3, 4), rng), rand((4, 3), rng)
    a, b, c = leaf(a0, ctx), leaf(b0, ctx), leaf(c0, ctx)
    w = gpumat.tensor(w0, device=ctx)
    y = ((a + b) * w).sum() + (c.t().contiguous() * w).sum()
    with gpumat.ops.trace_calls() as calls:
        y.backward()
    names = [name for name, _ in calls]
    assert names.count("sum_to_") == 1, names  # b's alone
    assert not [args for name, args in calls if name == "mul_scalar_" and args[1] == 1.0]
    np.testing.assert_allclose(a.grad.numpy(), w0, rtol=1e-6, err_msg=f"seed {seed}")
    np.testing.assert_allclose(b.grad.numpy(), w0.sum(0), rtol=1e-5, err_msg=f"seed {seed}")
    np.testing.assert_allclose(c.grad.numpy(), w0.T, rtol=1e-6, err_msg=f"seed {seed}")
    with gpumat.no_grad():
        a.grad.mul_(5.0)
    np.testing.assert_allclose(c.grad.numpy(), w0.T, rtol=1e-6, err_msg=f"seed {seed}")
    ((a + b) * w).sum().backward()  # accumulates into a.grad in place, c.grad untouched
    np.testing.assert_allclose(a.grad.numpy(), 6 * w0, rtol=1e-6, err_msg=f"seed {seed}")
    np.testing.assert_allclose(c.grad.numpy(), w0.T, rtol=1e-6, err_msg=f"seed {seed}")


def test_only_leaves_that_require_grad_get_one(ctx):
    rng, _ = new_rng()
    w = leaf(rand((4, 3), rng), ctx)
    x = leaf(rand((2, 4), rng), ctx, grad=False)
    h = x @ w
    assert h.requires_grad and not h.is_leaf and h.grad_fn is not None
    h.sum().backward()
    assert x.grad is None and h.grad is None and w.grad is not None
    assert x.is_leaf and w.is_leaf and w.grad_fn is None


def test_backward_of_a_leaf_and_with_a_gradient(ctx):
    x = leaf([1.0, 2.0], ctx)
    x.backward(gradient=gpumat.tensor([3.0, 4.0], device=ctx))
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])
    y = x * 2.0
    y.backward(gradient=[1.0, 1.0])  # array-likes are accepted
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 6.0])


def test_non_scalar_backward_needs_a_gradient(ctx):
    x = leaf([1.0, 2.0], ctx)
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar"):
        (x * 2.0).backward()
    with pytest.raises(ValueError, match="gradient has shape"):
        (x * 2.0).backward(gradient=gpumat.ones(3, device=ctx))
    with pytest.raises(RuntimeError, match="does not require grad"):
        gpumat.tensor([1.0], device=ctx).backward()


def test_second_backward_through_released_values(ctx):
    x = leaf([0.5, -1.5], ctx)
    y = x.tanh().sum()
    y.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    z = x.tanh().sum()
    z.backward(retain_graph=True)
    z.backward()  # retained once: twice the gradient
    want = 2 * (1 - np.tanh([0.5, -1.5]) ** 2) + (1 - np.tanh([0.5, -1.5]) ** 2)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)


def test_in_place_change_of_a_saved_value_is_an_error(ctx):
    w = leaf([1.0, 2.0], ctx)
    x = gpumat.tensor([3.0, 4.0], device=ctx)
    y = (x * w).sum()  # mul's gradient for w reads x
    x.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an in-place operation.*version 1"):
        y.backward()
    # add's gradient reads no value: changing x is fine (as in PyTorch)
    x2 = gpumat.tensor([3.0, 4.0], device=ctx)
    z = (x2 + w).sum()
    x2.add_(1.0)
    z.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 1.0])


def test_in_place_change_of_an_output_or_a_view(ctx):
    w = leaf([0.5, 1.0], ctx)
    t = w.tanh()  # tanh's gradient reads its output
    with gpumat.no_grad():
        t.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        t.sum().backward()
    x = gpumat.tensor([[1.0, 2.0]], device=ctx)
    y = (x * w).sum()
    v = x.view(-1)  # a view shares the version counter
    v.zero_()
    assert x._vc is v._vc
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.backward()


def test_in_place_on_a_leaf_that_requires_grad(ctx):
    w = leaf([1.0, 2.0], ctx)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w.add_(1.0)
    with gpumat.no_grad():
        w.add_(1.0)
    np.testing.assert_array_equal(w.detach().numpy(), [2.0, 3.0])
    h = w * 2.0
    with pytest.raises(RuntimeError, match="in-place operations on tensors recorded"):
        h.mul_(3.0)


def test_grad_mode(ctx):
    w = leaf([1.0, 2.0], ctx)
    with gpumat.no_grad():
        y = w * 2.0
        assert not gpumat.is_grad_enabled()
        with gpumat.enable_grad():
            z = w * 2.0
    assert gpumat.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None and z.requires_grad

    @gpumat.no_grad()
    def evaluate(t):
        return t * 3.0

    assert not evaluate(w).requires_grad and gpumat.is_grad_enabled()
    with gpumat.set_grad_enabled(False):
        assert not (w * 1.0).requires_grad
    with pytest.raises(TypeError):
        gpumat.set_grad_enabled("no")


def test_detach_and_requires_grad_rules(ctx):
    w = leaf([1.0, 2.0], ctx)
    d = w.detach()
    assert not d.requires_grad and d._data is w._data
    h = w * 2.0
    with pytest.raises(RuntimeError, match="leaf variables"):
        h.requires_grad_(False)
    with pytest.raises(RuntimeError, match="floating point"):
        gpumat.tensor([1, 2], device=ctx).requires_grad_()
    with pytest.raises(RuntimeError, match="detach\\(\\).numpy\\(\\)"):
        w.numpy()
    assert w.detach().numpy().tolist() == [1.0, 2.0]
    assert (w.sum()).item() == 3.0


def test_dtype_shape_and_device_errors_name_the_op(ctx):
    x = gpumat.tensor(np.ones((2, 3), np.float32), device=ctx)
    labels = gpumat.tensor([1, 2], device=ctx)
    with pytest.raises(TypeError, match="relu: expected float32.*int64"):
        labels.relu()
    with pytest.raises(TypeError, match="matmul: expected float32"):
        labels.view(1, 2) @ x
    with pytest.raises(ValueError, match="matmul.*inner dimensions differ.*\\(2, 3\\)"):
        x @ x
    with pytest.raises(ValueError, match="add: shapes \\(2, 3\\) and \\(4,\\)"):
        x + gpumat.ones(4, device=ctx)
    with pytest.raises(ValueError, match="linear: input \\(2, 3\\)"):
        F.linear(x, gpumat.ones(5, 4, device=ctx))
    other = gpumat.emu(0) if ctx.device_type == "cpu" else gpumat.cpu()
    with pytest.raises(ValueError, match="different devices"):
        x + gpumat.ones(2, 3, device=other)
    with pytest.raises(TypeError):
        x + "a"


def test_shapes_that_do_not_broadcast_are_value_errors(ctx):
    a = gpumat.ones(4, 3, device=ctx)
    b = gpumat.ones(2, 1, device=ctx)
    with pytest.raises(ValueError, match=r"add: shapes \(4, 3\) and \(2, 1\) cannot be broadcast"):
        a + b


def test_a_long_chain_needs_no_recursion(ctx):
    x = leaf([1.0], ctx)
    y = x
    for _ in range(3000):
        y = y * 1.0001
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0001**3000], rtol=1e-3)


def test_matches_torch_on_a_small_network(ctx):
    rng, _ = new_rng()
    x, w1, b1, w2 = rand((6, 5), rng), rand((4, 5), rng), rand((4,), rng), rand((3, 4), rng)
    target = rng.integers(0, 3, size=6)

    def run(lib, F_, tensors, tgt):
        xx, a, b, c = tensors
        h = F_.relu(F_.linear(xx, a, b)).tanh()
        out = F_.linear(h, c).log_softmax(1)
        loss = F_.nll_loss(out, tgt) + (h * h).mean() * 0.1
        loss.backward()
        return loss

    g = [leaf(v, ctx) for v in (x, w1, b1, w2)]
    t = [torch.tensor(v, requires_grad=True) for v in (x, w1, b1, w2)]
    lg = run(gpumat, F, g, gpumat.tensor(target, device=ctx))
    lt = run(torch, torch.nn.functional, t, torch.tensor(target))
    assert lg.item() == pytest.approx(lt.item(), rel=1e-5)
    for a, b in zip(g, t, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("lib", ["gpumat", "torch"])
def test_grad_mode_decorators_as_pytorchs(ctx, lib):
    # Defining a function decorated @set_grad_enabled(False) turned autograd off for the thread,
    # and @no_grad() on a generator did not cover its body. The same checks hold for torch.
    m = gpumat if lib == "gpumat" else torch

    def leaf_of(values):
        if lib == "torch":
            return torch.tensor(values, requires_grad=True)
        return gpumat.tensor(values, device=ctx, requires_grad=True)

    w = leaf_of([1.0, 2.0])

    @m.set_grad_enabled(False)
    def frozen(t):
        return t * 2.0, m.is_grad_enabled()

    assert m.is_grad_enabled(), "defining a decorated function changes nothing"
    out, inside = frozen(w)
    assert not inside and not out.requires_grad and m.is_grad_enabled()

    @m.no_grad()
    def batches(t):
        for k in range(3):
            got = yield t * float(k), m.is_grad_enabled()
            assert got == k

    gen = batches(w)
    seen = [next(gen)]
    for k in range(2):
        assert m.is_grad_enabled(), "the caller's mode between resumptions"
        seen.append(gen.send(k))
    assert all(not y.requires_grad and not mode for y, mode in seen)
    with pytest.raises(StopIteration):
        gen.send(2)
    assert m.is_grad_enabled()

    @m.enable_grad()
    def recorded():
        yield (w * 2.0).requires_grad

    with m.no_grad():
        assert next(recorded()) and not m.is_grad_enabled()


def test_backward_refuses_leaves_moved_since_the_forward_pass(ctx, gpu_ctx):
    # Moving the model between forward and backward left .grad labelled with one device and
    # holding another's array; now a RuntimeError before any gradient is accumulated, as PyTorch.
    other = gpu_ctx if ctx != gpu_ctx else gpumat.cpu()
    model = gpumat.nn.Sequential(gpumat.nn.Linear(3, 4), gpumat.nn.ReLU(), gpumat.nn.Linear(4, 2))
    model.to(ctx)
    x = gpumat.tensor(rand((5, 3)), device=ctx)
    loss = model(x).sum()
    model[2].to(other)  # only part of the model moves: nothing may be accumulated anywhere
    with pytest.raises(RuntimeError, match=r"on .* but its gradient would be on .*moved between"):
        loss.backward()
    assert all(p.grad is None for p in model.parameters())
    model.to(ctx)
    model(x).sum().backward()
    assert all(p.grad is not None and p.grad.device == ctx for p in model.parameters())
