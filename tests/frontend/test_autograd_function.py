"""gpumat.autograd.Function, PyTorch's custom-function API: gradients against float64 finite
differences of numpy references and against the same Function written for torch (CPU), eagerly
and in compiled steps (which must equal the eager step), on every device; ctx (saved tensors,
needs_input_grad, attributes, materialized gradients); and the errors PyTorch users expect."""

import numpy as np
import pytest
import torch
from frontend_helpers import fd_gradient
from helpers import new_rng, rand

import gpumat
from gpumat.autograd import Function

# ------------------------------------------------------------------------------------------------
# The functions, written once for both libraries: make(Base) subclasses gpumat's or torch's
# Function with the same bodies (tensor methods and operators both libraries have).


def make_exp(base):
    class MyExp(base):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad_out):
            (y,) = ctx.saved_tensors
            return grad_out * y

    return MyExp


def make_mul_add(base):
    """x * w + x, where w does not require a gradient; backward returns one anyway (ignored)."""

    class MulAdd(base):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            ctx.seen_needs = ctx.needs_input_grad
            return x * w + x

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            assert ctx.needs_input_grad == (True, False)
            return g * (w + 1.0), g * x

    return MulAdd


def make_scale(base):
    """k * tanh(x) with a number and a string among the arguments (their gradients: None)."""

    class Scale(base):
        @staticmethod
        def forward(ctx, x, k, tag):
            assert tag == "scale"
            ctx.k = k
            y = x.tanh()
            ctx.save_for_backward(y)
            return y * k

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * (1.0 - y * y) * ctx.k, None, None

    return Scale


def make_two_outputs(base):
    """(x * y, tanh(x)): backward gets one gradient per output."""

    class TwoOut(base):
        @staticmethod
        def forward(ctx, x, y):
            t = x.tanh()
            ctx.save_for_backward(x, y, t)
            return x * y, t

        @staticmethod
        def backward(ctx, ga, gb):
            x, y, t = ctx.saved_tensors
            return ga * y + gb * (1.0 - t * t), ga * x

    return TwoOut


def make_straight_through(base):
    """relu forward, identity backward: a gradient that is not the forward's derivative."""

    class StraightThrough(base):
        @staticmethod
        def forward(ctx, x):
            return x.relu()

        @staticmethod
        def backward(ctx, g):
            return g * 1.0

    return StraightThrough


def _tanh_d(x):
    return 1.0 - np.tanh(x) ** 2


# name: (make, input shapes, which inputs require a gradient, extra args, numpy reference of each
# output, or None where the gradient is not the derivative)
CASES = {
    "exp": (make_exp, [(3, 4)], [True], (), lambda x: [np.exp(x)]),
    "mul_add": (make_mul_add, [(2, 5), (2, 5)], [True, False], (), lambda x, w: [x * w + x]),
    "scale": (make_scale, [(4, 3)], [True], (2.5, "scale"), lambda x: [2.5 * np.tanh(x)]),
    "two_outputs": (
        make_two_outputs,
        [(3, 2), (3, 2)],
        [True, True],
        (),
        lambda x, y: [x * y, np.tanh(x)],
    ),
    "straight_through": (make_straight_through, [(5,)], [True], (), None),
}


def _call(fn, tensors, extra):
    """fn.apply on the tensors then the extra arguments; always a tuple of outputs."""
    out = fn.apply(*tensors, *extra)
    return out if isinstance(out, tuple) else (out,)


def _loss(outs, weights):
    total = None
    for o, r in zip(outs, weights, strict=True):
        term = (o * r).sum()
        total = term if total is None else total + term
    return total


def _data(name, rng):
    make, shapes, grads, extra, ref = CASES[name]
    xs = [rand(s, rng) for s in shapes]
    n_out = 2 if name == "two_outputs" else 1
    out_shape = shapes[0]
    rs = [rand(out_shape, rng) for _ in range(n_out)]
    return xs, rs


def _torch_grads(name, xs, rs):
    make, shapes, grads, extra, ref = CASES[name]
    tt = [torch.tensor(x, requires_grad=g) for x, g in zip(xs, grads, strict=True)]
    outs = _call(make(torch.autograd.Function), tt, extra)
    _loss(outs, [torch.tensor(r) for r in rs]).backward()
    return [o.detach().numpy() for o in outs], [t.grad for t in tt]


@pytest.mark.parametrize("name", sorted(CASES))
def test_eager_gradients_match_finite_differences_and_torch(ctx, name):
    make, shapes, grads, extra, ref = CASES[name]
    rng, seed = new_rng()
    xs, rs = _data(name, rng)
    msg = f"{name} on {ctx} (seed={seed})"
    fn = make(Function)
    ts = [gpumat.tensor(x, device=ctx, requires_grad=g) for x, g in zip(xs, grads, strict=True)]
    outs = _call(fn, ts, extra)
    assert all(o.requires_grad and o.grad_fn is not None and not o.is_leaf for o in outs), msg
    _loss(outs, [gpumat.tensor(r, device=ctx) for r in rs]).backward()

    t_outs, t_grads = _torch_grads(name, xs, rs)
    for o, want in zip(outs, t_outs, strict=True):
        np.testing.assert_allclose(o.detach().numpy(), want, rtol=1e-5, atol=1e-6, err_msg=msg)
    if ref is not None:
        for o, want in zip(outs, ref(*[x.astype(np.float64) for x in xs]), strict=True):
            np.testing.assert_allclose(o.detach().numpy(), want, rtol=1e-5, atol=1e-6)

        def scalar(*v):
            return sum(float(np.sum(o * r)) for o, r in zip(ref(*v), rs, strict=True))

        fd = fd_gradient(lambda *v: np.array(scalar(*v)), xs, np.array(1.0))
    for i, (t, g, tg) in enumerate(zip(ts, grads, t_grads, strict=True)):
        if not g:
            assert t.grad is None and tg is None, f"{msg}: input {i} gets no gradient"
            continue
        got = t.grad.numpy()
        np.testing.assert_allclose(got, tg.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"{msg} d{i}")
        if ref is not None:
            np.testing.assert_allclose(got, fd[i], rtol=1e-3, atol=1e-4, err_msg=f"{msg} fd d{i}")


@pytest.mark.parametrize("fusion", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_step_equals_eager(ctx, name, fusion):
    make, shapes, grads, extra, ref = CASES[name]
    rng, seed = new_rng()
    fn = make(Function)
    w = gpumat.nn.Parameter(gpumat.tensor(rand(shapes[0], rng), device=ctx))

    def step(*args):
        # The function's first input is computed in the step (x * w), so its gradient reaches a
        # parameter through the Function and through an ordinary op.
        tensors = [args[0] * w, *args[1 : len(shapes)]]
        rs = args[len(shapes) :]
        loss = _loss(_call(fn, tensors, extra), rs)
        loss.backward()
        return loss

    compiled = gpumat.compile(step, fusion=fusion)
    for i in range(3):
        xs, rs = _data(name, rng)
        msg = f"{name} step {i} on {ctx}, fusion={fusion} (seed={seed})"
        results = []
        for run in (step, compiled):
            w.grad = None
            args = [
                gpumat.tensor(x, device=ctx, requires_grad=g)
                for x, g in zip(xs, grads, strict=True)
            ]
            args[0].requires_grad = False  # args[0] * w is the function's input
            loss = run(*args, *[gpumat.tensor(r, device=ctx) for r in rs])
            results.append((loss.item(), w.grad.numpy(), [a.grad for a in args]))
        (le, lw, la), (lc, cw, ca) = results
        if fusion:
            assert lc == pytest.approx(le, rel=1e-5, abs=1e-6), msg
            np.testing.assert_allclose(cw, lw, rtol=1e-5, atol=1e-6, err_msg=msg)
        else:
            assert lc == le, msg
            np.testing.assert_array_equal(cw, lw, err_msg=msg)
        for a, b in zip(la, ca, strict=True):
            assert (a is None) == (b is None), msg
            if a is not None:
                np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-5, atol=1e-6)
    assert compiled.traces == 1
    want_mode = "compiled" if ctx.device_type == "cpu" else "cuda-graph"
    assert compiled.schedule_report.mode == want_mode, str(compiled.schedule_report)


def test_backward_is_called_once_with_all_output_gradients(ctx):
    rng, _ = new_rng()
    calls = []

    class Pair(Function):
        @staticmethod
        def forward(ctx_, x):
            return x * 2.0, x * 3.0

        @staticmethod
        def backward(ctx_, ga, gb):
            calls.append((ga.numpy(), gb.numpy()))
            return ga * 2.0 + gb * 3.0

    x = gpumat.tensor(rand((4,), rng), device=ctx, requires_grad=True)
    r = rand((4,), rng)
    a, b = Pair.apply(x)
    (a * gpumat.tensor(r, device=ctx)).sum().backward()  # b gets no gradient: zeros
    assert len(calls) == 1
    np.testing.assert_array_equal(calls[0][0], r)
    np.testing.assert_array_equal(calls[0][1], np.zeros(4, np.float32))
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * r, rtol=1e-6)


def test_materialize_grads_off_and_non_tensor_outputs(ctx):
    rng, _ = new_rng()
    seen = []

    class Tagged(Function):
        @staticmethod
        def forward(ctx_, x):
            ctx_.set_materialize_grads(False)
            return x * 2.0, "tag", x * 3.0

        @staticmethod
        def backward(ctx_, ga, gtag, gb):
            seen.append((ga is None, gtag is None, gb is None))
            return ga * 2.0

    x = gpumat.tensor(rand((3,), rng), device=ctx, requires_grad=True)
    a, tag, b = Tagged.apply(x)
    assert tag == "tag" and not b.is_leaf
    a.sum().backward()
    assert seen == [(False, True, True)]
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 2.0), rtol=1e-6)


def test_non_differentiable_outputs(ctx):
    rng, _ = new_rng()
    seen = []

    class WithIndex(Function):
        @staticmethod
        def forward(ctx_, x):
            y, i = x * 2.0, x.argmax(0)
            m = x * 0.5
            ctx_.mark_non_differentiable(m)
            return y, i, m

        @staticmethod
        def backward(ctx_, gy, gi, gm):
            seen.append(gm.numpy())
            return gy * 2.0

    x = gpumat.tensor(rand((4,), rng), device=ctx, requires_grad=True)
    y, i, m = WithIndex.apply(x)
    assert y.requires_grad and not i.requires_grad and not m.requires_grad
    assert i.dtype == gpumat.int64
    y.sum().backward()
    np.testing.assert_array_equal(seen[0], np.zeros(4, np.float32))
    np.testing.assert_allclose(x.grad.numpy(), np.full(4, 2.0))


def test_ctx_attributes_needs_input_grad_kwargs_and_setup_context(ctx):
    rng, _ = new_rng()
    x = gpumat.tensor(rand((2, 3), rng), device=ctx, requires_grad=True)
    c = gpumat.tensor(rand((2, 3), rng), device=ctx)
    seen = {}

    class Split(Function):
        @staticmethod
        def forward(a, b, k=1.0):
            return a * b * k

        @staticmethod
        def setup_context(ctx_, inputs, output):
            a, b, k = inputs
            ctx_.save_for_backward(b)
            ctx_.k = k
            seen["needs"] = ctx_.needs_input_grad

        @staticmethod
        def backward(ctx_, g):
            (b,) = ctx_.saved_tensors
            return g * b * ctx_.k, None, None

    y = Split.apply(x, c, k=3.0)
    assert seen["needs"] == (True, False, False)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3.0 * c.numpy(), rtol=1e-6)
    # Without grad mode, or without an input that requires a gradient: nothing is recorded.
    with gpumat.no_grad():
        assert not Split.apply(x, c, k=3.0).requires_grad
    assert seen["needs"] == (False, False, False)
    assert not Split.apply(c, c).requires_grad


def test_gradients_accumulate_with_other_paths_and_retain_graph(ctx):
    rng, _ = new_rng()
    MyExp = make_exp(Function)
    x0 = rand((3,), rng)
    x = gpumat.tensor(x0, device=ctx, requires_grad=True)
    y = MyExp.apply(x) + x * 2.0 + MyExp.apply(x)
    y.sum().backward(retain_graph=True)
    want = 2 * np.exp(x0.astype(np.float64)) + 2.0
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * want, rtol=1e-5)
    with pytest.raises(RuntimeError, match="second time"):
        y.sum().backward()


def test_in_place_change_of_a_saved_tensor_is_an_error(ctx):
    rng, _ = new_rng()
    MyExp, MulAdd = make_exp(Function), make_mul_add(Function)
    x = gpumat.tensor(rand((3,), rng), device=ctx, requires_grad=True)
    y = MyExp.apply(x)
    with gpumat.no_grad():
        y.mul_(2.0)  # y is the saved output (the same storage and version counter)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation.*MyExp"):
        y.sum().backward()
    w = gpumat.tensor(rand((3,), rng), device=ctx)
    z = MulAdd.apply(x, w)
    w.add_(1.0)  # a saved input
    with pytest.raises(RuntimeError, match="version 1; expected version 0"):
        z.sum().backward()


def test_saved_tensors_are_released_by_backward(ctx):
    rng, _ = new_rng()
    keep = {}

    class Keep(Function):
        @staticmethod
        def forward(ctx_, x):
            ctx_.save_for_backward(x)
            keep["ctx"] = ctx_
            return x * 2.0

        @staticmethod
        def backward(ctx_, g):
            return g * 2.0

    x = gpumat.tensor(rand((3,), rng), device=ctx, requires_grad=True)
    Keep.apply(x).sum().backward(retain_graph=True)
    assert keep["ctx"].saved_tensors[0] is x
    y = Keep.apply(x)
    y.sum().backward()
    with pytest.raises(RuntimeError, match="second time"):
        keep["ctx"].saved_tensors  # noqa: B018
    with pytest.raises(RuntimeError, match="second time"):
        y.sum().backward()


def test_forward_returning_an_input_makes_a_new_tensor(ctx):
    rng, _ = new_rng()

    class Ident(Function):
        @staticmethod
        def forward(ctx_, x):
            return x

        @staticmethod
        def backward(ctx_, g):
            return g * 3.0

    x = gpumat.tensor(rand((3,), rng), device=ctx, requires_grad=True)
    y = Ident.apply(x)
    assert y is not x and x.is_leaf and not y.is_leaf
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 3.0))


# ------------------------------------------------------------------------------------------------
# Errors


def _simple(backward=None, forward=None):
    class Bad(Function):
        pass

    Bad.forward = staticmethod(forward or (lambda ctx_, x, k=2.0: x * k))
    if backward is not None:
        Bad.backward = staticmethod(backward)
    return Bad


def test_forward_errors(ctx):
    x = gpumat.ones(2, 3, device=ctx, requires_grad=True)
    MyExp = make_exp(Function)
    for value in (3.0, [x], None, np.ones(2)):
        with pytest.raises(TypeError, match="Bad.forward must return a Tensor"):
            _simple(forward=lambda ctx_, x, v=value: v).apply(x)
    with pytest.raises(RuntimeError, match=r"MyExp.apply\(\.\.\.\)"):
        MyExp()(x)
    with pytest.raises(RuntimeError, match="not instantiated"):
        MyExp(x)
    with pytest.raises(NotImplementedError, match="forward"):
        Function.apply(x)
    with pytest.raises(TypeError, match="Bad.apply"):
        _simple().apply(x, k=1.0, nope=2)
    with pytest.raises(ZeroDivisionError):
        _simple(forward=lambda ctx_, x: 1 / 0).apply(x)
    with pytest.raises(TypeError, match="save_for_backward can only save tensors"):
        _simple(forward=lambda ctx_, x: ctx_.save_for_backward(x, 3) or x).apply(x)


@pytest.mark.parametrize(
    ("backward", "error", "pattern"),
    [
        (lambda c, g: (g,), RuntimeError, r"BadBackward .*incorrect number.*expected 2, got 1"),
        (lambda c, g: (g, g), RuntimeError, r"different than None at index 1.*not a Tensor"),
        (lambda c, g: (g.sum(), None), RuntimeError, r"BadBackward.*index 0 .*\(\) .*\(2, 3\)"),
        (lambda c, g: (3.0, None), TypeError, "float as the gradient at index 0"),
        (lambda c, g: (g.long(), None), TypeError, "expected dtype float32"),
        (lambda c, g: (g, None, g), RuntimeError, "incorrect number"),
        (lambda c, g: 1 / 0, ZeroDivisionError, "division"),
        (None, NotImplementedError, "backward"),
    ],
    ids=["too_few", "non_tensor_arg", "shape", "number", "dtype", "too_many", "raises", "missing"],
)
def test_backward_errors(ctx, backward, error, pattern):
    x = gpumat.ones(2, 3, device=ctx, requires_grad=True)
    y = _simple(backward).apply(x, 2.0)
    with pytest.raises(error, match=pattern):
        y.sum().backward()


def test_backward_results_torch_allows(ctx):
    x = gpumat.ones(2, 3, device=ctx, requires_grad=True)
    c = gpumat.ones(2, 3, device=ctx)
    # Trailing Nones; a gradient (of any shape) for an input that requires none is ignored.
    _simple(lambda c_, g: (g * 2.0, None, None)).apply(x, 2.0).sum().backward()
    Two = _simple(lambda c_, g: (g, gpumat.ones(7)), forward=lambda ctx_, a, b: a * b)
    Two.apply(x, c).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((2, 3), 3.0))


def test_compile_errors_name_the_function(ctx):
    x = gpumat.tensor(rand((3,)), device=ctx, requires_grad=True)
    Reads = _simple(forward=lambda ctx_, x: x * float(x.sum().item()))
    with pytest.raises(RuntimeError) as info:
        gpumat.compile(lambda t: Reads.apply(t).sum().backward())(x)
    assert any("Bad.forward" in note for note in info.value.__notes__)
    BadGrad = _simple(lambda c, g: (g.sum(), None))
    with pytest.raises(RuntimeError, match="index 0"):
        gpumat.compile(lambda t: BadGrad.apply(t).sum().backward())(x)
    Raises = _simple(lambda c, g: 1 / 0)
    with pytest.raises(ZeroDivisionError) as info:
        gpumat.compile(lambda t: Raises.apply(t).sum().backward())(x)
    assert any("Bad.backward" in note for note in info.value.__notes__)
