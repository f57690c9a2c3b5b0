"""Eager backward's replayed gradient evaluations (gpumat._grad_plans): a node whose structure
backward has met before is differentiated by replaying what it did then. Replays must give the
first evaluation's bits with the same kernels, still refuse changed and released values, tell
aliased and partly required inputs apart, keep no tensor alive, and hold up across threads."""

import gc
import threading
import weakref

import numpy as np
import pytest
from helpers import new_rng, rand

import gpumat
import gpumat.nn.functional as F  # noqa: N812
from gpumat import _grad_plans


@pytest.fixture(autouse=True)
def _no_plans():
    _grad_plans.clear()
    yield
    _grad_plans.clear()


def _count_replays(monkeypatch) -> list:
    replays = []
    run = _grad_plans.GradPlan.run

    def counted(self, node, grad_value, device):
        handed = run(self, node, grad_value, device)
        replays.append(handed is not None)
        return handed

    monkeypatch.setattr(_grad_plans.GradPlan, "run", counted)
    return replays


def _step(ctx, x0, w0, b0, v0, labels):
    """A small network touching the replayed paths: linear (matmul with a bias and a sum to the
    bias), relu, a broadcast product, a reshape, a value used twice, cross-entropy."""
    x = gpumat.tensor(x0, device=ctx)
    w = gpumat.tensor(w0, device=ctx, requires_grad=True)
    b = gpumat.tensor(b0, device=ctx, requires_grad=True)
    v = gpumat.tensor(v0, device=ctx, requires_grad=True)
    h = F.relu(F.linear(x, w, b)) * v
    h = (h * h).reshape(h.shape[0], -1)
    loss = F.cross_entropy(h, gpumat.tensor(labels, device=ctx))
    with gpumat.ops.trace_calls() as calls:
        loss.backward()
    return [t.grad.numpy() for t in (w, b, v)], [name for name, _ in calls]


def test_replays_give_the_first_evaluations_bits_with_the_same_kernels(ctx, monkeypatch):
    rng, seed = new_rng()
    x0, w0, b0, v0 = rand((5, 7), rng), rand((6, 7), rng), rand((6,), rng), rand((6,), rng)
    labels = rng.integers(0, 6, 5)
    replays = _count_replays(monkeypatch)
    first, first_calls = _step(ctx, x0, w0, b0, v0, labels)
    assert not any(replays) and _grad_plans.count() > 0
    second, second_calls = _step(ctx, x0, w0, b0, v0, labels)
    assert replays and all(replays), replays
    assert second_calls == first_calls
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=f"seed {seed}")
    # and the gradients are right: float64 numpy
    x, w, b, v = (a.astype(np.float64) for a in (x0, w0, b0, v0))
    z = x @ w.T + b
    r = np.maximum(z, 0) * v
    h = r * r
    p = np.exp(h - h.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dh = (p - np.eye(6)[labels]) / 5
    dr = 2 * r * dh
    dv = (dr * np.maximum(z, 0)).sum(0)
    dz = dr * v * (z > 0)
    want = [dz.T @ x, dz.sum(0), dv]
    for got, ref in zip(second, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=1e-7, err_msg=f"seed {seed}")


def test_replays_still_refuse_changed_and_released_values(ctx):
    def graph():
        w = gpumat.tensor([1.0, 2.0], device=ctx, requires_grad=True)
        x = gpumat.tensor([3.0, 4.0], device=ctx)
        return w, x, (x * w).sum()

    w, _, y = graph()
    y.backward()  # records mul's and sum's plans
    assert _grad_plans.count() > 0
    w, x, y = graph()
    x.mul_(2.0)  # mul's gradient for w reads x
    with pytest.raises(RuntimeError, match="modified by an in-place operation.*version 1"):
        y.backward()
    w, x, y = graph()
    y.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [3.0, 4.0])
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()
    w, x, y = graph()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [6.0, 8.0])


def test_aliased_and_partly_required_inputs_are_told_apart(ctx):
    rng, seed = new_rng()
    a0, b0 = rand((3, 4), rng), rand((3, 4), rng)
    a64, b64 = a0.astype(np.float64), b0.astype(np.float64)
    close = dict(rtol=1e-5, atol=1e-7, err_msg=f"seed {seed}")
    for _ in range(2):  # the second time from plans
        a = gpumat.tensor(a0, device=ctx, requires_grad=True)
        b = gpumat.tensor(b0, device=ctx, requires_grad=True)
        (a * a).sum().backward()
        (a * b).sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), 2 * a64 + b64, **close)
        np.testing.assert_allclose(b.grad.numpy(), a64, **close)
        c = gpumat.tensor(b0, device=ctx)  # needs no gradient: only a's is made
        (a * c).sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), 2 * a64 + 2 * b64, **close)
        (c * a).sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), 2 * a64 + 3 * b64, **close)


def test_plans_keep_no_tensor_alive(ctx):
    rng, _ = new_rng()
    x = gpumat.tensor(rand((4, 5), rng), device=ctx)
    w = gpumat.tensor(rand((3, 5), rng), device=ctx, requires_grad=True)
    out = F.linear(x, w).tanh()
    out.sum().backward()
    assert _grad_plans.count() > 0
    for plan in _grad_plans.plans():
        for template, *_ in plan.steps:
            assert template.inputs == [] and template.saved is None
    refs = [weakref.ref(t) for t in (x, w, out)]
    del x, w, out
    gc.collect()
    assert [r() for r in refs] == [None, None, None]


def test_replays_from_several_threads(ctx):
    rng, seed = new_rng()
    shapes = [(4, 6, 3), (5, 2, 7), (3, 3, 3), (6, 4, 2)]
    data = [(rand((n, k), rng), rand((m, k), rng), rand((m,), rng)) for n, k, m in shapes]

    def grads(x0, w0, b0):
        x = gpumat.tensor(x0, device=ctx)
        w = gpumat.tensor(w0, device=ctx, requires_grad=True)
        b = gpumat.tensor(b0, device=ctx, requires_grad=True)
        F.gelu(F.linear(x, w, b)).square().mean().backward()
        return w.grad.numpy(), b.grad.numpy()

    want = [grads(*d) for d in data]
    errors = []

    def work(k):
        try:
            for _ in range(15):
                got = grads(*data[k])
                for g, r in zip(got, want[k], strict=True):
                    np.testing.assert_array_equal(g, r, err_msg=f"seed {seed}")
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k % 4,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
