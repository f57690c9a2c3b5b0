"""gpumat.compile never replays a trace wrongly: its guards and eager semantics.

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
    np.testing.assert_allclose(
        got.detach().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=msg
    )


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
    a, b, opt_a, opt_b = twins(ctx, lambda p: gpumat.optim.SGD(p, lr=0.1), autoencoder)
    eager = train_step(a, opt_a, F.mse_loss)
    compiled = gpumat.compile(train_step(b, opt_b, F.mse_loss))
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


def twins(ctx, make_opt=lambda p: gpumat.optim.SGD(p, lr=0.1, momentum=0.9), build=mlp):
    """Two models made by ``build`` with equal parameters on ``ctx``, and an optimizer each."""
    a, b = build(), build()
    b.load_state_dict(a.state_dict())
    a.to(ctx)
    b.to(ctx)
    return a, b, make_opt(a.parameters()), make_opt(b.parameters())


def train_step(model, opt, loss_fn=F.cross_entropy):
    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
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


# --------------------------------------------------------------------------- Python state
# Each scenario runs twice from one seed, its step compiled and eager, changing Python state
# between calls; the losses and the parameters must agree (compiled vs eager).

G_MODEL = None
G_OPT = None
G_SCALE = 0.5
G_TABLE = None
G_CALLS = 0


def global_step(x, y):
    G_OPT.zero_grad()
    loss = F.cross_entropy(G_MODEL(x) * G_SCALE, y)
    loss.backward()
    G_OPT.step()
    return loss


def scaled(v):
    return v * G_SCALE  # a helper the step calls reads a global too


def run_scenario(scenario, wrap, seed, ctx):
    rng = np.random.default_rng(seed)
    gpumat.manual_seed(seed % 2**31)
    model = mlp().to(ctx)
    opt = gpumat.optim.SGD(model.parameters(), lr=0.1)
    batches = [
        (t(rng, (4, 6), ctx), gpumat.tensor(rng.integers(0, 3, 4), device=ctx)) for _ in range(4)
    ]
    losses = scenario(model, opt, batches, wrap, rng, ctx)
    return [float(v) for v in losses], [p.detach().numpy() for p in model.parameters()]


def replace_a_parameter(model, opt, batches, wrap, rng, ctx):
    step = wrap(train_step(model, opt))
    losses = [step(*batches[0]).item()]
    model[2].weight = nn.Parameter(t(rng, (3, 8), ctx))  # the optimizer keeps the old one
    losses.append(step(*batches[1]).item())
    opt.param_groups[0]["params"] = list(model.parameters())  # now it trains the new one
    losses += [step(*b).item() for b in batches[2:]]
    return losses


def rebind_the_global_optimizer(model, opt, batches, wrap, rng, ctx):
    global G_MODEL, G_OPT, G_SCALE
    G_MODEL, G_OPT, G_SCALE = model, opt, 0.5
    step = wrap(global_step)
    losses = [step(*batches[0]).item()]
    G_OPT = gpumat.optim.SGD(model.parameters(), lr=0.0)  # frozen weights
    losses += [step(*batches[1]).item(), step(*batches[2]).item()]
    G_SCALE = 2.0  # a global float
    losses.append(step(*batches[3]).item())
    return losses


def rebind_a_closure_variable(model, opt, batches, wrap, rng, ctx):
    factor = 0.5

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x) * factor, y)
        loss.backward()
        opt.step()
        return loss

    compiled = wrap(step)
    losses = [compiled(*batches[0]).item()]
    factor = 3.0
    losses.append(compiled(*batches[1]).item())
    model = mlp().to(ctx)  # the closure's model: another network, not trained by opt
    losses += [compiled(*b).item() for b in batches[2:]]
    return losses


class Scaled(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.scale = 1.5

    def forward(self, x):
        return self.inner(x) * self.scale


def change_a_module_attribute(model, opt, batches, wrap, rng, ctx):
    net = Scaled(model)
    step = wrap(train_step(net, opt))
    losses = [step(*batches[0]).item()]
    net.scale = 0.25
    losses.append(step(*batches[1]).item())
    model.eval()
    losses.append(step(*batches[2]).item())
    model.train()
    with gpumat.no_grad():
        losses.append(wrap(lambda x, y: F.cross_entropy(net(x), y))(*batches[3]).item())
    return losses


def numpy_values(model, opt, batches, wrap, rng, ctx):
    global G_TABLE
    G_TABLE = rand((3,), rng)

    def step(x, y, weights):
        opt.zero_grad()
        out = model(x) * gpumat.tensor(weights, device=ctx) + gpumat.tensor(G_TABLE, device=ctx)
        loss = F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        return scaled(loss)

    compiled = wrap(step)
    weights = rand((3,), rng)
    losses = [compiled(*batches[0], weights).item()]
    weights *= 2.0  # a numpy argument changed in place
    losses.append(compiled(*batches[1], weights).item())
    G_TABLE[1] = 7.0  # a global numpy array changed in place
    losses.append(compiled(*batches[2], weights).item())
    return losses


def lr_changes(model, opt, batches, wrap, rng, ctx):
    sched = gpumat.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.1)

    def step(x, y):
        loss = train_step(model, opt)(x, y)
        sched.step()  # inside the step: the learning rate changes every other call
        return loss

    compiled = wrap(step)
    losses = [compiled(*b).item() for b in batches[:3]]
    opt.lr = 0.05  # outside the step: the next update uses it
    losses.append(compiled(*batches[3]).item())
    return [*losses, opt.lr, sched.last_epoch]


def a_counter_the_step_changes(model, opt, batches, wrap, rng, ctx):
    global G_CALLS
    G_CALLS = 0

    def step(x):
        global G_CALLS
        G_CALLS += 1
        return (model(x) * float(G_CALLS)).sum()

    compiled = wrap(gpumat.no_grad()(step))
    return [compiled(batches[i % 4][0]).item() for i in range(10)] + [G_CALLS]


class Trainer:
    def __init__(self, model, opt):
        self.model, self.opt, self.temperature, self.steps = model, opt, 2.0, 0

    def step(self, x, y):
        self.opt.zero_grad()
        loss = F.cross_entropy(self.model(x) / self.temperature, y)
        loss.backward()
        self.opt.step()
        return loss


def a_bound_methods_object(model, opt, batches, wrap, rng, ctx):
    trainer = Trainer(model, opt)
    step = wrap(trainer.step)
    losses = [step(*batches[0]).item()]
    trainer.steps += 1  # not read by the step: no effect either way
    trainer.temperature = 0.5
    losses.append(step(*batches[1]).item())
    trainer.opt = gpumat.optim.SGD(model.parameters(), lr=0.0)
    losses += [step(*b).item() for b in batches[2:]]
    return losses


SCENARIOS = {
    f.__name__: f
    for f in (
        a_bound_methods_object,
        replace_a_parameter,
        rebind_the_global_optimizer,
        rebind_a_closure_variable,
        change_a_module_attribute,
        numpy_values,
        lr_changes,
        a_counter_the_step_changes,
    )
}


@pytest.mark.filterwarnings("ignore:gpumat.compile")
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_python_state_is_guarded(ctx, name):
    _, seed = new_rng()
    scenario = SCENARIOS[name]
    got_losses, got_params = run_scenario(scenario, gpumat.compile, seed, ctx)
    want_losses, want_params = run_scenario(scenario, lambda f: f, seed, ctx)
    msg = f"{name} on {ctx} (seed={seed})"
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-5, atol=1e-6, err_msg=msg)
    for got, want in zip(got_params, want_params, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=msg)


def test_hyper_parameters_are_read_by_every_call(ctx):
    """A learning rate changed between calls (a scheduler outside the step) is used by the next
    update without tracing again."""
    rng, seed = new_rng()
    model, twin, opt, twin_opt = twins(ctx, lambda p: gpumat.optim.Adam(p, lr=1e-2))
    step, eager = gpumat.compile(train_step(model, opt)), train_step(twin, twin_opt)
    scheds = [gpumat.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5) for o in (opt, twin_opt)]
    for i in range(4):
        x, y = t(rng, (4, 6), ctx), gpumat.tensor(rng.integers(0, 3, 4), device=ctx)
        got, want = step(x, y), eager(x, y)
        assert got.item() == pytest.approx(want.item(), rel=1e-5), f"step {i} (seed={seed})"
        for s in scheds:
            s.step()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        close(p.detach(), q.detach(), f"seed={seed}")
    assert step.traces == 1


# --------------------------------------------------------------------------- the cache limit


def test_traces_stop_at_the_cache_size_limit(ctx):
    """Different float arguments each call: eight traces, one warning, then eager calls (the
    traces made are still replayed), every result equal to eager's."""
    rng, seed = new_rng()
    w = t(rng, (4, 3), ctx)

    def f(x, scale):
        return (x @ w * scale).tanh()

    compiled = gpumat.compile(f)
    x = t(rng, (2, 4), ctx)
    scales = rng.uniform(0.5, 2.0, 20)
    with pytest.warns(UserWarning, match=r"cache_size_limit \(8\)") as caught:
        for s in [*scales, *scales[:3]]:
            close(compiled(x, float(s)), f(x, float(s)), f"scale {s} on {ctx} (seed={seed})")
    assert len([w for w in caught if "cache_size_limit" in str(w.message)]) == 1
    assert compiled.traces == gpumat.compiler.cache_size_limit == 8
    assert sum(len(v) for v in compiled._cache.values()) == 8


def test_the_cache_size_limit_is_read_at_each_call(ctx, monkeypatch):
    rng, seed = new_rng()
    monkeypatch.setattr(gpumat.compiler, "cache_size_limit", 2)
    compiled = gpumat.compile(lambda x, s: x * s)
    x = t(rng, (3,), ctx)
    with pytest.warns(UserWarning, match="run eagerly"):
        for s in (1.5, 2.5, 3.5, 4.5):
            close(compiled(x, s), x * s, f"seed={seed}")
    assert compiled.traces == 2


# --------------------------------------------------------------------------- threads


@pytest.mark.parametrize("first_call", ["main_thread", "concurrent"])
def test_calls_from_two_threads_get_their_own_results(gpu_ctx, first_call):
    """Each thread's arguments are staged in its own buffers: no call sees another's inputs."""
    import threading

    rng, seed = new_rng()
    w = t(rng, (16, 8), gpu_ctx)

    @gpumat.compile
    @gpumat.no_grad()
    def infer(x):
        return (x @ w).tanh() * 2.0

    inputs = [[t(rng, (32, 16), gpu_ctx) for _ in range(3)] for _ in range(2)]
    wants = [[(x @ w).tanh() * 2.0 for x in xs] for xs in inputs]
    barrier = threading.Barrier(2)
    if first_call == "main_thread":
        infer(inputs[0][0])
        # Each thread's first replay waits in the executor until both have staged their input:
        # shared staging buffers would then hold one thread's input for both.
        run, waited = infer.executor.run, set()

        def run_after_both_staged(*args, **kwargs):
            if threading.get_ident() not in waited:
                waited.add(threading.get_ident())
                barrier.wait(timeout=60)
            return run(*args, **kwargs)

        infer.executor.run = run_after_both_staged
    errors = []

    def work(k):
        try:
            if first_call == "concurrent":
                barrier.wait(timeout=60)
            for _ in range(15):
                for x, want in zip(inputs[k], wants[k], strict=True):
                    close(infer(x), want, f"thread {k} on {gpu_ctx} (seed={seed})")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[0]
    assert infer.traces == 1


# --------------------------------------------------------------------------- dtypes, results


def test_dtype_conversions_inside_a_step(ctx):
    """one_hot(y).float() as a regression target, eq(...).long() as a count."""
    rng, seed = new_rng()
    model, twin, opt, twin_opt = twins(ctx)

    def make(m, o):
        def step(x, y):
            o.zero_grad()
            out = m(x)
            loss = F.mse_loss(out, F.one_hot(y, 3).float())
            loss.backward()
            o.step()
            hits = out.argmax(dim=1).eq(y).long().sum()
            return loss, hits, y.float() * 0.5

        return step

    compiled, eager = gpumat.compile(make(model, opt)), make(twin, twin_opt)
    for i in range(3):
        x, y = t(rng, (6, 6), ctx), gpumat.tensor(rng.integers(0, 3, 6), device=ctx)
        (lc, hc, fc), (le, he, fe) = compiled(x, y), eager(x, y)
        msg = f"step {i} on {ctx} (seed={seed})"
        assert lc.item() == pytest.approx(le.item(), rel=1e-5), msg
        assert hc.dtype == he.dtype == gpumat.int64 and hc.item() == he.item(), msg
        assert fc.dtype == gpumat.float32
        close(fc, fe, msg)
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        close(p.detach(), q.detach(), f"seed={seed}")
    with pytest.raises(RuntimeError, match="no value yet"):
        gpumat.compile(lambda v: (v * 2.0).long())(t(rng, (3,), ctx))  # through the host


def test_returned_parameters_and_arguments_are_the_objects_eager_returns(ctx):
    """Returning a parameter, or an argument unchanged, returns that very tensor (as eagerly
    and as torch.compile): the updated parameter, still requiring a gradient."""
    rng, seed = new_rng()
    model, twin, opt, twin_opt = twins(ctx)

    def make(m, o):
        def step(x, y):
            loss = train_step(m, o)(x, y)
            return loss, m[0].weight, x, {"y": y}

        return step

    compiled, eager = gpumat.compile(make(model, opt)), make(twin, twin_opt)
    for i in range(2):
        x, y = t(rng, (4, 6), ctx), gpumat.tensor(rng.integers(0, 3, 4), device=ctx)
        got, want = compiled(x, y), eager(x, y)
        msg = f"step {i} on {ctx} (seed={seed})"
        assert got[1] is model[0].weight and want[1] is twin[0].weight, msg
        assert got[1].requires_grad and want[1].requires_grad
        close(got[1].detach(), want[1].detach(), msg)
        assert got[2] is x and want[2] is x and got[3]["y"] is y and want[3]["y"] is y, msg


# --------------------------------------------------------------------------- aliasing x compile
# Every aliasing pattern of three tensor arguments (and of nested ones, views and a parameter),
# called in a random order, each twice, forward only and forward-backward: compiled == eager.

PATTERNS = {
    "distinct": (0, 1, 2),
    "first_two": (0, 0, 1),
    "last_two": (0, 1, 1),
    "outer_two": (0, 1, 0),
    "all_three": (0, 0, 0),
    "parameter": (0, "w", 1),
    "parameter_twice": ("w", 0, "w"),
}


def three(a, b, c, w):
    return ((a * 2.0 + b) * c.tanh() + w).sum(dim=1)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_aliasing_patterns_in_any_order(ctx, backward):
    rng, seed = new_rng()
    w = nn.Parameter(t(rng, (3, 4), ctx))
    xs = [t(rng, (3, 4), ctx, requires_grad=backward) for _ in range(3)]

    def f(a, nested):
        b, c = nested[0], nested[1]["c"]
        if not backward:
            return three(a, b, c, w)
        for v in (a, b, c, w):
            v.grad = None
        loss = three(a, b, c, w).sum()
        loss.backward()
        return loss

    compiled = gpumat.compile(f if backward else gpumat.no_grad()(f))
    eager = f if backward else gpumat.no_grad()(f)
    order = [name for name in sorted(PATTERNS) for _ in range(2)]
    rng.shuffle(order)
    for name in order:
        a, b, c = [w if i == "w" else xs[i] for i in PATTERNS[name]]
        got = compiled(a, (b, {"c": c}))
        got_grads = [None if v.grad is None else v.grad.numpy() for v in (*xs, w)]
        want = eager(a, (b, {"c": c}))
        msg = f"{name}, backward={backward} on {ctx} (seed={seed})"
        close(got, want, msg)
        for g, v in zip(got_grads, (*xs, w), strict=True):
            if v.grad is None:
                assert g is None, msg
            else:
                np.testing.assert_allclose(g, v.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=msg)
    assert compiled.traces == len(PATTERNS)


def test_views_of_one_tensor_as_arguments(ctx):
    """Two views sharing storage are two arguments (values compared, not identities)."""
    rng, seed = new_rng()
    x, y = t(rng, (2, 6), ctx), t(rng, (2, 6), ctx)
    f = gpumat.no_grad()(lambda a, b: a.reshape(3, 4) * 2.0 - b)
    compiled = gpumat.compile(f)
    for a, b in ((x, x.reshape(3, 4)), (x, y.reshape(3, 4)), (y, x.view(3, 4))):
        close(compiled(a, b), f(a, b), f"on {ctx} (seed={seed})")


def test_an_argument_with_a_gradient_history_is_refused(ctx):
    """A view of a leaf that requires a gradient, passed to a step: its gradient belongs to the
    leaf, through a graph recorded outside the step, which the trace cannot extend."""
    rng, _ = new_rng()
    x = t(rng, (2, 3), ctx, requires_grad=True)

    def f(v):
        loss = (v * 3.0).sum()
        loss.backward()
        return loss

    with pytest.raises(RuntimeError, match="gradient history"):
        gpumat.compile(f)(x.reshape(6))
    assert x.grad is None
    with gpumat.no_grad():  # without recording it is an input like any other
        close(gpumat.compile(lambda v: v * 3.0)(x.reshape(6)), x.detach().reshape(6) * 3.0)
