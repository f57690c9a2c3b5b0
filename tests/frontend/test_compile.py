"""gpumat.compile: a compiled step equals the eager step (bit for bit without fusion, to float32
rounding with it), retraces on a new signature or a changed module mode, allocates no device
memory in its steady state, runs as one CUDA graph on the emulated device, and refuses what it
cannot trace with a clear error, on every device."""

import numpy as np
import pytest
from helpers import new_rng, rand

import gpumat
import gpumat.nn as nn
import gpumat.nn.functional as F  # noqa: N812


class SmallCNN(nn.Module):
    """The MNIST example's layers (without dropout) on 10x10 images."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1, padding=1)
        self.fc1 = nn.Linear(8 * 4 * 4, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = F.max_pool2d(x, 2)
        x = F.relu(self.fc1(gpumat.flatten(x, 1)))
        return F.log_softmax(self.fc2(x), dim=1)


class TinyAttention(nn.Module):
    """Views a compiled step replays as strided copies (``as_strided``) and their gradients as
    strided writes (``as_strided_scatter``): the heads of one q, k, v projection, a causal
    attention, the sequence flipped (negative strides), two positions sliced out."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.proj = nn.Linear(8, 5)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, 2, c // 2).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, c).flip(1)
        return self.proj(y[:, 0] + y[:, -2])


def mlp():
    return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                         nn.Linear(16, 5))  # fmt: skip


MODELS = {
    "mlp_sgd_ce": (mlp, (8, 12), lambda p: gpumat.optim.SGD(p, lr=0.1, momentum=0.9), "ce"),
    "mlp_adam_mse": (mlp, (8, 12), lambda p: gpumat.optim.Adam(p, lr=1e-2), "mse"),
    "cnn_adadelta_nll": (SmallCNN, (4, 1, 10, 10), lambda p: gpumat.optim.Adadelta(p), "nll"),
    "attention_views_adamw_mse": (
        TinyAttention,
        (3, 6, 8),
        lambda p: gpumat.optim.AdamW(p, lr=1e-2),
        "mse",
    ),
}


def make_step(model, opt, loss_kind):
    def step(x, y):
        opt.zero_grad()
        out = model(x)
        if loss_kind == "ce":
            loss = F.cross_entropy(out, y)
        elif loss_kind == "nll":
            loss = F.nll_loss(out, y)
        else:
            loss = F.mse_loss(out, y)
        loss.backward()
        opt.step()
        return loss

    return step


def batches(rng, in_shape, loss_kind, n):
    out = []
    for _ in range(n):
        x = rand(in_shape, rng)
        if loss_kind == "mse":
            y = rand((in_shape[0], 5), rng)
        else:
            y = rng.integers(0, 5 if loss_kind == "ce" else 10, size=in_shape[0])
        out.append((x, y))
    return out


def twin_models(build, ctx, make_opt):
    a, b = build(), build()
    b.load_state_dict(a.state_dict())
    a.to(ctx)
    b.to(ctx)
    return a, b, make_opt(a.parameters()), make_opt(b.parameters())


@pytest.mark.parametrize("fusion", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_compiled_equals_eager(ctx, name, fusion):
    build, in_shape, make_opt, loss_kind = MODELS[name]
    rng, seed = new_rng()
    eager_model, comp_model, eager_opt, comp_opt = twin_models(build, ctx, make_opt)
    eager = make_step(eager_model, eager_opt, loss_kind)
    compiled = gpumat.compile(make_step(comp_model, comp_opt, loss_kind), fusion=fusion)
    for i, (x, y) in enumerate(batches(rng, in_shape, loss_kind, 4)):
        xs, ys = gpumat.tensor(x, device=ctx), gpumat.tensor(y, device=ctx)
        le, lc = eager(xs, ys), compiled(xs, ys)
        msg = f"{name} step {i} on {ctx}, fusion={fusion} (seed={seed})"
        assert not lc.requires_grad and lc.device == ctx
        if fusion:
            assert lc.item() == pytest.approx(le.item(), rel=1e-5, abs=1e-6), msg
        else:
            assert lc.item() == le.item(), msg
    assert compiled.traces == 1
    for (k, p), q in zip(eager_model.named_parameters(), comp_model.parameters(), strict=True):
        got, want = q.detach().numpy(), p.detach().numpy()
        if fusion:
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{msg} {k}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{msg} {k}")
        np.testing.assert_allclose(
            q.grad.numpy(), p.grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=f"{msg} {k}.grad"
        )
    report = compiled.schedule_report
    want_mode = "compiled" if ctx.device_type == "cpu" else "cuda-graph"
    assert report.mode == want_mode, str(report)


def test_a_new_shape_traces_again_and_modes_are_guarded(ctx):
    model = nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.5))
    opt = gpumat.optim.SGD(model.to(ctx).parameters(), lr=0.1)
    step = gpumat.compile(make_step(model, opt, "mse"))
    x8, y8 = gpumat.ones(8, 4, device=ctx), gpumat.zeros(8, 3, device=ctx)
    x3, y3 = gpumat.ones(3, 4, device=ctx), gpumat.zeros(3, 3, device=ctx)
    step(x8, y8)
    step(x8, y8)
    assert step.traces == 1
    step(x3, y3)
    assert step.traces == 2
    step(x8, y8)
    assert step.traces == 2
    model.eval()  # dropout off: the traced step must not be replayed
    step(x8, y8)
    assert step.traces == 3
    model.train()
    step(x8, y8)
    assert step.traces == 3


def test_dropout_draws_fresh_masks_each_call(ctx):
    gpumat.manual_seed(0)
    drop = gpumat.compile(lambda x: F.dropout(x, 0.5))
    x = gpumat.ones(16, 16, device=ctx)
    a, b = drop(x).numpy(), drop(x).numpy()
    assert set(np.unique(a)) <= {0.0, 2.0} and not np.array_equal(a, b)


def test_steady_state_allocates_no_device_memory(ctx):
    rng, _ = new_rng()
    model, _, opt, _ = twin_models(mlp, ctx, lambda p: gpumat.optim.Adam(p, lr=1e-3))
    step = gpumat.compile(make_step(model, opt, "ce"))
    data = batches(rng, (8, 12), "ce", 3)
    data = [(gpumat.tensor(x, device=ctx), gpumat.tensor(y, device=ctx)) for x, y in data]
    for x, y in data:
        step(x, y)
    before = gpumat.memory_stats(ctx)["device_malloc_calls"]
    for _ in range(5):
        for x, y in data:
            step(x, y)
    assert gpumat.memory_stats(ctx)["device_malloc_calls"] == before


def test_gradients_and_inference_functions(ctx):
    rng, _ = new_rng()
    w = nn.Parameter(gpumat.tensor(rand((3, 4), rng), device=ctx))

    @gpumat.compile
    def grads(x):
        w.grad = None
        loss = (x @ w).tanh().sum()
        loss.backward()
        return loss, {"twice": loss * 2.0}

    x = gpumat.tensor(rand((2, 3), rng), device=ctx)
    loss, extra = grads(x)
    g = w.grad.numpy()
    w.grad = None
    eager = (x @ w).tanh().sum()
    eager.backward()
    np.testing.assert_allclose(g, w.grad.numpy(), rtol=1e-6)
    assert extra["twice"].item() == pytest.approx(2 * loss.item())

    @gpumat.compile
    @gpumat.no_grad()
    def predict(x):
        return (x @ w).argmax(dim=1)

    np.testing.assert_array_equal(predict(x).numpy(), (x @ w).argmax(dim=1).numpy())


def test_what_cannot_be_traced_is_an_error(ctx):
    w = nn.Parameter(gpumat.ones(3, device=ctx))
    x = gpumat.ones(3, device=ctx)
    opt = gpumat.optim.SGD([w], lr=0.1)

    with pytest.raises(RuntimeError, match="has no value yet"):
        gpumat.compile(lambda t: (t * w).sum().item())(x)
    with pytest.raises(RuntimeError, match="in-place ops are not traced"):
        gpumat.compile(lambda t: t.mul_(2.0))(x)
    with pytest.raises(RuntimeError, match="random tensor made inside"):
        gpumat.compile(lambda t: t + gpumat.rand(3, device=ctx))(x)
    with pytest.raises(TypeError, match="returns tensors"):
        gpumat.compile(lambda t: 3.0)(x)

    def reads_after_update(t):
        opt.zero_grad()
        (t * w).sum().backward()
        opt.step()
        return w * 2.0

    with pytest.raises(RuntimeError, match="after optimizer.step"):
        gpumat.compile(reads_after_update)(x)

    w.grad = gpumat.ones(3, device=ctx)  # left over from an eager step

    def accumulates(t):
        (t * w).sum().backward()
        return None

    # Adding to a .grad computed outside the step was refused here; it now accumulates, as
    # eagerly (tests/frontend/test_compile_guards.py has the cases).
    gpumat.compile(accumulates)(x)
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 2.0, 2.0])
    with pytest.raises(TypeError):
        gpumat.compile(3)
    with pytest.raises(TypeError):
        gpumat.compile(lambda t: t, fusion="yes")


def test_class_indices_are_checked_on_every_call(ctx):
    w = nn.Parameter(gpumat.ones(4, 3, device=ctx))
    step = gpumat.compile(lambda x, y: F.cross_entropy(x @ w, y))
    x = gpumat.ones(2, 4, device=ctx)
    step(x, gpumat.tensor([0, 2], device=ctx))
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        step(x, gpumat.tensor([3, 1], device=ctx))
    assert step.traces == 1


def test_each_call_rewrites_grad_and_a_graph_that_read_it_sees_the_change(ctx):
    """A call writes the parameters' .grad in place (the executor's gradient buffers, the
    tensors of the last call reused): the values are this call's gradients, and a graph that
    read an earlier .grad refuses to backward (its version advanced), never a wrong gradient."""
    rng, _ = new_rng()
    model, twin, opt, twin_opt = twin_models(mlp, ctx, lambda p: gpumat.optim.SGD(p, lr=0.1))
    step = gpumat.compile(make_step(model, opt, "ce"))
    eager = make_step(twin, twin_opt, "ce")
    data = [
        (gpumat.tensor(x, device=ctx), gpumat.tensor(y, device=ctx))
        for x, y in batches(rng, (8, 12), "ce", 3)
    ]
    step(*data[0])
    eager(*data[0])
    w = model[0].weight
    a = gpumat.tensor(rand(w.shape, rng), device=ctx, requires_grad=True)
    product = (a * w.grad).sum()  # reads this call's gradient for a's gradient
    for x, y in data[1:]:
        step(x, y)
        eager(x, y)
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-6)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        product.backward()


def test_returned_tensors_are_copies_that_later_calls_leave_alone(ctx):
    # Each call returns new tensors copied out of the step's buffers (float32 and int64): the
    # next call rewrites those buffers, never a tensor an earlier call returned.
    rng, seed = new_rng()
    w = gpumat.tensor(rand((6, 4), rng), device=ctx)

    @gpumat.compile
    @gpumat.no_grad()
    def infer(x):
        h = (x @ w).tanh()
        return h, h.argmax(dim=1), h.sum()

    xs = [gpumat.tensor(rand((5, 6), rng), device=ctx) for _ in range(3)]
    got = [infer(x) for x in xs]
    for x, (h, idx, total) in zip(xs, got, strict=True):
        want = np.tanh(x.numpy().astype(np.float64) @ w.numpy().astype(np.float64))
        np.testing.assert_allclose(h.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=f"seed={seed}")
        assert idx.dtype == gpumat.int64 and h.device == ctx and not h.requires_grad
        np.testing.assert_array_equal(idx.numpy(), want.argmax(axis=1))
        assert total.item() == pytest.approx(want.sum(), rel=1e-5, abs=1e-5)
    assert infer.traces == 1


def test_linear_is_one_kernel_and_a_following_relu_fuses_into_it(ctx):
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    x0, w0, b0, g0 = rand((5, 3, 4), rng), rand((6, 4), rng), rand((6,), rng), rand((5, 3, 6), rng)
    x, w, b = (gpumat.tensor(a, device=ctx, requires_grad=True) for a in (x0, w0, b0))
    with gpumat.ops.trace_calls() as calls:
        y = F.linear(x, w, b)
    assert [name for name, _ in calls] == ["matmul_bias_"]  # the bias with the product
    (y * gpumat.tensor(g0, device=ctx)).sum().backward()
    xt, wt, bt = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x0, w0, b0))
    yt = torch.nn.functional.linear(xt, wt, bt)
    (yt * torch.tensor(g0, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    for got, want in ((x, xt), (w, wt), (b, bt)):
        np.testing.assert_allclose(
            got.grad.numpy(), want.grad.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}"
        )
    model = mlp().to(ctx)  # Linear, ReLU, Linear, Tanh, Linear
    step = gpumat.compile(make_step(model, gpumat.optim.SGD(model.parameters(), lr=0.1), "ce"))
    xb, yb = batches(rng, (8, 12), "ce", 1)[0]
    step(gpumat.tensor(xb, device=ctx), gpumat.tensor(yb, device=ctx))
    assert step.fusion_report.rules["dense_relu"] == 1  # the first layer and its ReLU
    assert step.fusion_report.rules["dense"] == 0  # F.linear's layers are dense already


def test_a_trace_on_one_thread_leaves_other_threads_eager(ctx):
    """current_trace answers per thread (its fast path counts the threads tracing): while one
    thread traces a step, another's ops run eagerly, and when the trace ends none is left."""
    import threading

    from gpumat import autograd

    rng, seed = new_rng()
    x0 = rand((3, 4), rng)
    inside, release = threading.Event(), threading.Event()

    def f(x):
        y = (x * 2.0).sum()
        inside.set()
        release.wait(30)
        return y

    step = gpumat.compile(f)
    result = {}
    worker = threading.Thread(
        target=lambda: result.setdefault("y", step(gpumat.tensor(x0, device=ctx)).item())
    )
    worker.start()
    assert inside.wait(30)
    assert autograd.current_trace() is None
    eager = gpumat.tensor(x0, device=ctx) * 3.0  # runs now, on this thread
    np.testing.assert_allclose(eager.numpy(), x0 * 3.0, rtol=1e-6, err_msg=f"seed {seed}")
    release.set()
    worker.join(30)
    assert result["y"] == pytest.approx(float((x0.astype(np.float64) * 2).sum()), rel=1e-5)
    assert autograd._threads_tracing == 0 and autograd.current_trace() is None
