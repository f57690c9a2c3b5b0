"""gpumat.compile never replays a trace wrongly: the guards of issue 41.

Each test compares a compiled function with the same function run eagerly, on fresh random inputs,
after changing what the first trace specialised on: the aliasing of its arguments, the ``.grad``
its leaves hold, the Python state it reads (modules, parameters, optimizers, globals, numpy
values), the thread that calls it, a failure of its first call, the number of signatures
(``gpumat.compiler.cache_size_limit``), dtype conversions and returned parameters or arguments.
"""

import numpy as np
import pytest
from helpers import new_rng, rand

import gpumat
import gpumat.nn as nn
import gpumat.nn.functional as F  # noqa: N812


def t(rng, shape, ctx, requires_grad=False):
    """A fresh random float32 tensor (entries never zero)."""
    return gpumat.tensor(rand(shape, rng), device=ctx, requires_grad=requires_grad)


def close(got, want, msg=""):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6, err_msg=msg)


# --------------------------------------------------------------------------- argument aliasing


def two_args(a, b):
    return (a * 2.0 + b).tanh() * b


# (patterns of successive calls: which arguments are the same tensor, distinct alias patterns)
ALIAS_CASES = {
    "same_then_distinct": ([(0, 0), (0, 1)], 2),
    "distinct_then_same": ([(0, 1), (0, 0)], 2),
    "same_then_other_same": ([(0, 0), (1, 1)], 1),
    "distinct_then_swapped": ([(0, 1), (1, 0), (0, 0)], 2),
}


@pytest.mark.parametrize("case", sorted(ALIAS_CASES))
def test_argument_aliasing_is_guarded(ctx, case):
    rng, seed = new_rng()
    xs = [t(rng, (3, 4), ctx) for _ in range(2)]
    f = gpumat.compile(two_args)
    patterns, traces = ALIAS_CASES[case]
    for pattern in patterns:
        args = [xs[i] for i in pattern]
        close(f(*args), two_args(*args), f"{case} {pattern} on {ctx} (seed={seed})")
    assert f.traces == traces


def autoencoder():
    return nn.Sequential(nn.Linear(6, 3), nn.Tanh(), nn.Linear(3, 6))


def test_autoencoder_step_on_clean_then_noisy_inputs(ctx):
    """step(x, x) then step(noisy, x): the second call's loss is the denoising loss, as eagerly."""
    rng, seed = new_rng()
    a, b = autoencoder(), autoencoder()
    b.load_state_dict(a.state_dict())
    a.to(ctx)
    b.to(ctx)
    opts = [gpumat.optim.SGD(m.parameters(), lr=0.1) for m in (a, b)]

    def make(model, opt):
        def step(inp, target):
            opt.zero_grad()
            loss = F.mse_loss(model(inp), target)
            loss.backward()
            opt.step()
            return loss

        return step

    eager, compiled = make(a, opts[0]), gpumat.compile(make(b, opts[1]))
    for i in range(3):
        x = t(rng, (5, 6), ctx)
        noisy = t(rng, (5, 6), ctx)
        for args in ((x, x), (noisy, x)):
            want, got = eager(*args), compiled(*args)
            msg = f"step {i} aliased={args[0] is args[1]} on {ctx} (seed={seed})"
            assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6), msg
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        close(q.detach(), p.detach())
    assert compiled.traces == 2


def test_an_argument_that_is_also_a_parameter_the_step_reads(ctx):
    """f(w) where the step also reads the global parameter w: gradients of both uses go to w;
    then f(z) for another tensor z: z's gradient and w's are separate, as eagerly."""
    rng, seed = new_rng()
    w = nn.Parameter(t(rng, (4,), ctx))

    def f(v):
        w.grad = None
        v.grad = None
        loss = (v * w * 3.0).sum()
        loss.backward()
        return loss

    compiled = gpumat.compile(f)
    z = t(rng, (4,), ctx, requires_grad=True)
    for arg in (w, z, w):
        got = compiled(arg)
        got_grads = [g.grad.numpy() for g in (w, arg)]
        want = f(arg)
        msg = f"argument is w: {arg is w} on {ctx} (seed={seed})"
        assert got.item() == pytest.approx(want.item(), rel=1e-5), msg
        np.testing.assert_allclose(got_grads[0], w.grad.numpy(), rtol=1e-5, err_msg=msg)
        np.testing.assert_allclose(got_grads[1], arg.grad.numpy(), rtol=1e-5, err_msg=msg)


# --------------------------------------------------------------------------- a failed first call


def mlp():
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def twins(ctx, make_opt=lambda p: gpumat.optim.SGD(p, lr=0.1, momentum=0.9)):
    a, b = mlp(), mlp()
    b.load_state_dict(a.state_dict())
    a.to(ctx)
    b.to(ctx)
    return a, b, make_opt(a.parameters()), make_opt(b.parameters())


def train_step(model, opt):
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def test_a_failed_first_call_changes_nothing(ctx, monkeypatch):
    """The executor runs out of memory on the first call: no .grad is left a traced placeholder,
    the optimizer makes no state, eager training goes on, and the next call traces again."""
    rng, seed = new_rng()
    model, twin, opt, twin_opt = twins(ctx)
    real = gpumat.compiler.Executor

    class FullDevice(real):
        def run(self, *args, **kwargs):
            raise MemoryError("out of memory on the device (simulated)")

    monkeypatch.setattr(gpumat.compiler, "Executor", FullDevice)
    step = gpumat.compile(train_step(model, opt))
    x, y = t(rng, (4, 6), ctx), gpumat.tensor(rng.integers(0, 3, 4), device=ctx)
    with pytest.raises(MemoryError):
        step(x, y)
    assert all(p.grad is None for p in model.parameters())
    assert opt._state is None and step.traces == 0
    # Eager backward works without zero_grad(), and so does the next compiled call.
    F.cross_entropy(model(x), y).backward()
    F.cross_entropy(twin(x), y).backward()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        close(p.grad, q.grad, f"seed={seed}")
    monkeypatch.setattr(gpumat.compiler, "Executor", real)
    eager = train_step(twin, twin_opt)
    for _ in range(2):
        x, y = t(rng, (4, 6), ctx), gpumat.tensor(rng.integers(0, 3, 4), device=ctx)
        got, want = step(x, y), eager(x, y)
        assert got.item() == pytest.approx(want.item(), rel=1e-5), f"seed={seed}"
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        close(p.detach(), q.detach(), f"seed={seed}")
    assert step.traces == 1


# --------------------------------------------------------------------------- .grad as eagerly


def test_an_inputs_grad_accumulates_over_calls(ctx):
    rng, seed = new_rng()
    w = t(rng, (3, 4), ctx)

    def f(x):
        loss = (x @ w).tanh().sum()
        loss.backward()
        return loss

    compiled = gpumat.compile(f)
    xc = t(rng, (2, 3), ctx, requires_grad=True)
    xe = xc.detach().requires_grad_()
    for i in range(3):
        compiled(xc)
        f(xe)
        close(xc.grad, xe.grad, f"call {i} on {ctx} (seed={seed})")
    xc.grad = None
    xe.grad = None
    compiled(xc)
    f(xe)
    close(xc.grad, xe.grad, f"after grad = None on {ctx} (seed={seed})")


def test_gradient_accumulation_over_micro_batches(ctx):
    """zero_grad(); two compiled forward-backward micro-steps; optimizer.step() outside."""
    rng, seed = new_rng()
    model, twin, opt, twin_opt = twins(ctx)

    def micro(m):
        def step(x, y):
            loss = F.cross_entropy(m(x), y) * 0.5
            loss.backward()
            return loss

        return step

    compiled, eager = gpumat.compile(micro(model)), micro(twin)
    for r in range(3):
        opt.zero_grad()
        twin_opt.zero_grad()
        for _ in range(2):
            x, y = t(rng, (4, 6), ctx), gpumat.tensor(rng.integers(0, 3, 4), device=ctx)
            compiled(x, y)
            eager(x, y)
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            close(p.grad, q.grad, f"round {r} on {ctx} (seed={seed})")
        opt.step()
        twin_opt.step()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        close(p.detach(), q.detach(), f"parameters on {ctx} (seed={seed})")
    assert compiled.traces == 2  # .grad None, then .grad holding the first micro-batch's


@pytest.mark.parametrize("zero", ["none", "set_to_none", "zeros"])
def test_a_whole_step_keeps_grad_semantics(ctx, zero):
    """A step that never zeroes the gradients accumulates them (its updates use the running
    sums); zero_grad() replaces them; zero_grad(set_to_none=False) zeroes the same tensors."""
    rng, seed = new_rng()
    model, twin, opt, twin_opt = twins(ctx)

    def make(m, o):
        def step(x, y):
            if zero != "none":
                o.zero_grad(set_to_none=zero == "set_to_none")
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            o.step()
            return loss

        return step

    compiled, eager = gpumat.compile(make(model, opt)), make(twin, twin_opt)
    for i in range(4):
        x, y = t(rng, (4, 6), ctx), gpumat.tensor(rng.integers(0, 3, 4), device=ctx)
        before = [p.grad for p in model.parameters()]
        got, want = compiled(x, y), eager(x, y)
        msg = f"step {i}, zero={zero} on {ctx} (seed={seed})"
        assert got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-6), msg
        for p, q, g in zip(model.parameters(), twin.parameters(), before, strict=True):
            close(p.grad, q.grad, msg)
            close(p.detach(), q.detach(), msg)
            if zero in ("none", "zeros") and g is not None:
                assert p.grad is g, msg  # accumulated or zeroed in place, as eagerly


def test_a_compiled_optimizer_step_reads_the_gradients_of_the_call(ctx):
    """Gradients computed eagerly, the update compiled: each call uses the current .grad."""
    rng, seed = new_rng()
    model, twin, opt, twin_opt = twins(ctx, lambda p: gpumat.optim.Adam(p, lr=1e-2))
    update = gpumat.compile(opt.step)
    for i in range(3):
        x, y = t(rng, (4, 6), ctx), gpumat.tensor(rng.integers(0, 3, 4), device=ctx)
        for m, o in ((model, opt), (twin, twin_opt)):
            o.zero_grad()
            F.cross_entropy(m(x), y).backward()
        update()
        twin_opt.step()
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            close(p.detach(), q.detach(), f"step {i} on {ctx} (seed={seed})")
    assert update.traces == 1
