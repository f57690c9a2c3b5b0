"""int64 and bool tensors keep the range of their values with the storage.

Class-index checks (cross_entropy, nll_loss, one_hot), integer sums and a compiled step's range
guards read the bounds a tensor's values lie in instead of reading the device. Every tensor over
one storage (views, detach(), .data, Parameter, a module's buffer) shares those bounds, so a write
through any of them (fill_, zero_, copy_, load_state_dict, nn.init) is seen by all the others;
values written into int64 storage are converted as PyTorch converts them (floats truncate toward
zero, bool is != 0) or refused with a ValueError naming the op, never stored as non-integers.

Each write path is written once for both libraries (``L`` is ``G``, gpumat, or ``T``, torch), so
the values it leaves and the losses over them are compared with torch's CPU result on fresh random
inputs.
"""

import types

import numpy as np
import pytest
import torch
from helpers import new_rng, rand

import gpumat
import gpumat.nn as nn
import gpumat.nn.functional as F  # noqa: N812

G = types.SimpleNamespace(lib=gpumat, nn=nn, F=F)
T = types.SimpleNamespace(lib=torch, nn=torch.nn, F=torch.nn.functional)

N, C = 4, 5  # targets (N,) over C classes; N = 4 for the (2, 2) views


def _tensor(L, values, ctx):
    if L is G:
        return gpumat.tensor(values, device=ctx)
    return torch.tensor(values)


def _module(L, buf):
    m = L.nn.Module()
    m.register_buffer("idx", buf)
    return m


# Writes of one number into an int64 or bool tensor y, through y or an alias of it.
SCALAR_WRITES = {
    "fill_": lambda L, y, v: y.fill_(v),
    "view.fill_": lambda L, y, v: y.view(2, 2).fill_(v),
    "reshape.fill_": lambda L, y, v: y.reshape(-1).fill_(v),
    "unsqueeze.fill_": lambda L, y, v: y.unsqueeze(0).fill_(v),
    "detach.fill_": lambda L, y, v: y.detach().fill_(v),
    "data.fill_": lambda L, y, v: y.data.fill_(v),
    "Parameter.fill_": lambda L, y, v: L.nn.Parameter(y, requires_grad=False).fill_(v),
    "init.constant_": lambda L, y, v: L.nn.init.constant_(y.view(-1), v),
}

# Writes of an (N,) array of values (int64, or float32 for the conversions).
ARRAY_WRITES = {
    "copy_": lambda L, y, a, ctx: y.copy_(_tensor(L, a, ctx)),
    "view.copy_": lambda L, y, a, ctx: y.view(2, 2).copy_(_tensor(L, a, ctx).view(2, 2)),
    "detach.copy_": lambda L, y, a, ctx: y.detach().copy_(_tensor(L, a, ctx)),
    "data.copy_": lambda L, y, a, ctx: y.data.copy_(_tensor(L, a, ctx)),
    "Parameter.copy_": lambda L, y, a, ctx: L.nn.Parameter(y, requires_grad=False).copy_(
        _tensor(L, a, ctx)
    ),
    "copy_(list)": lambda L, y, a, ctx: y.copy_(a.tolist()) if L is G else y.copy_(torch.tensor(a)),
    "load_state_dict": lambda L, y, a, ctx: _module(L, y).load_state_dict(
        {"idx": _tensor(L, a, ctx)}
    ),
    "load_state_dict(numpy)": lambda L, y, a, ctx: _module(L, y).load_state_dict(
        {"idx": a if L is G else torch.from_numpy(a)}
    ),
}


def _aliases(L, y):
    """Tensors over y's storage, made before a write."""
    return {
        "self": y,
        "view": y.view(-1),
        "reshape": y.reshape(2, 2).reshape(N),
        "detach": y.detach(),
        "data": y.data,
        "Parameter": L.nn.Parameter(y, requires_grad=False),
    }


def _class_ops(L, x):
    return {
        "cross_entropy": lambda t: L.F.cross_entropy(x, t),
        "nll_loss": lambda t: L.F.nll_loss(x.log_softmax(1), t),
        "one_hot": lambda t: L.F.one_hot(t, C),
    }


# ------------------------------------------------------------------------------------------------
# Out-of-range class indices written through any alias are refused through every alias


@pytest.mark.parametrize("bad", [C + 4, -1])
@pytest.mark.parametrize("path", list(SCALAR_WRITES))
def test_scalar_write_out_of_range_refused_by_every_alias(ctx, path, bad):
    rng, seed = new_rng()
    x = gpumat.tensor(rand((N, C), rng), device=ctx)
    y = gpumat.tensor(rng.integers(0, C, N), device=ctx)
    aliases = _aliases(G, y)
    SCALAR_WRITES[path](G, y, bad)
    for name, t in aliases.items():
        assert t.tolist() == [bad] * N, f"{path} -> {name} (seed={seed})"
        for op, f in _class_ops(G, x).items():
            with pytest.raises(IndexError, match=f"{op}: Target {bad} is out of bounds"):
                f(t)


@pytest.mark.parametrize("bad", [C + 4, -1])
@pytest.mark.parametrize("path", list(ARRAY_WRITES))
def test_array_write_out_of_range_refused_by_every_alias(ctx, path, bad):
    rng, seed = new_rng()
    x = gpumat.tensor(rand((N, C), rng), device=ctx)
    y = gpumat.tensor(rng.integers(0, C, N), device=ctx)
    a = rng.integers(0, C, N)
    a[rng.integers(N)] = bad
    aliases = _aliases(G, y)
    ARRAY_WRITES[path](G, y, a, ctx)
    for name, t in aliases.items():
        assert t.tolist() == a.tolist(), f"{path} -> {name} (seed={seed})"
        for op, f in _class_ops(G, x).items():
            with pytest.raises(IndexError, match=f"{op}: Target {bad} is out of bounds"):
                f(t)


def test_data_assignment_shares_the_new_storage_range(ctx):
    """After a.data = b, a is a tensor over b's storage: writes through b (or its views) show in
    a's range, and writes through a in b's."""
    x = gpumat.tensor(rand((N, C)), device=ctx)
    a = gpumat.tensor([0, 1, 2, 1], device=ctx)
    b = gpumat.tensor([1, 1, 0, 0], device=ctx)
    a.data = b
    b.view(2, 2).fill_(7)
    assert a.tolist() == [7] * N
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        F.cross_entropy(x, a)
    a.zero_()
    assert F.one_hot(b).shape == (N, 1)  # width max + 1 = 1, as torch's
    assert torch.nn.functional.one_hot(torch.tensor(b.tolist())).shape == (N, 1)


# ------------------------------------------------------------------------------------------------
# In-range writes: values, losses, one_hot widths and sums as torch's, through every alias


def _start(rng):
    """Values before a write, the largest class among them: the values written are smaller, so
    a range left stale shows as a one_hot one class too wide."""
    start = rng.integers(0, C, N)
    start[rng.integers(N)] = C - 1
    return start


def _compare_with_torch(ctx, ours, theirs, x, seed, what):
    """Each alias (made before the write) against torch's: values, losses, one_hot, sum."""
    gx = gpumat.tensor(x, device=ctx)
    tx = torch.tensor(x)
    for (name, g), t in zip(ours.items(), theirs.values(), strict=True):
        msg = f"{what} -> {name} (seed={seed})"
        assert g.tolist() == t.tolist(), msg
        for op in ("cross_entropy", "nll_loss"):
            got = _class_ops(G, gx)[op](g).item()
            want = _class_ops(T, tx)[op](t).item()
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{op} {msg}")
        # num_classes=-1: the width is the largest index + 1, so a stale range shows here
        np.testing.assert_array_equal(F.one_hot(g).numpy(), T.F.one_hot(t).numpy(), err_msg=msg)
        assert g.sum().item() == t.sum().item(), msg


@pytest.mark.parametrize("fraction", [0.0, 0.75])
@pytest.mark.parametrize("path", list(SCALAR_WRITES))
def test_scalar_write_in_range_matches_torch(ctx, path, fraction):
    """fill_ of an int64 tensor truncates a float toward zero (3.75 -> 3, -0.75 -> 0)."""
    rng, seed = new_rng()
    x = rand((N, C), rng)
    start = _start(rng)
    v = int(rng.integers(0, C - 1))
    value = v + fraction if v else -fraction  # -0.75 truncates to 0: in range (a floor: -1)
    y, ty = gpumat.tensor(start, device=ctx), torch.tensor(start)
    ours, theirs = _aliases(G, y), _aliases(T, ty)
    SCALAR_WRITES[path](G, y, value)
    SCALAR_WRITES[path](T, ty, value)
    _compare_with_torch(ctx, ours, theirs, x, seed, f"{path}({value})")


@pytest.mark.parametrize("floats", [False, True])
@pytest.mark.parametrize("path", list(ARRAY_WRITES))
def test_array_write_in_range_matches_torch(ctx, path, floats):
    """copy_ and load_state_dict of float32 values into int64 truncate toward zero, as torch's
    (0.5 -> 0, 1.7 -> 1, -0.6 -> 0)."""
    rng, seed = new_rng()
    x = rand((N, C), rng)
    start = _start(rng)
    a = rng.integers(0, C - 1, N)
    if floats:
        frac = rng.uniform(0.05, 0.95, N)
        a = np.where(a == 0, -frac, a + frac).astype(np.float32)
    y, ty = gpumat.tensor(start, device=ctx), torch.tensor(start)
    ours, theirs = _aliases(G, y), _aliases(T, ty)
    ARRAY_WRITES[path](G, y, a, ctx)
    ARRAY_WRITES[path](T, ty, a, None)
    assert y.dtype is gpumat.int64 and ty.dtype == torch.int64
    np.testing.assert_array_equal(y.float().numpy(), ty.float().numpy())  # no 0.5 stored
    _compare_with_torch(ctx, ours, theirs, x, seed, f"{path}({a.tolist()})")


def test_zero_narrows_the_range_of_every_alias(ctx):
    y = gpumat.tensor([0, 4, 2, 1], device=ctx)
    view = y.view(-1)
    y.detach().zero_()
    assert F.one_hot(view).shape == (N, 1)
    assert view._range == y._range == (0, 0)


# ------------------------------------------------------------------------------------------------
# Values int64 storage cannot hold: a ValueError naming the op, nothing written


@pytest.mark.parametrize(
    "path, write, match",
    [
        ("fill_ nan", lambda y, ctx: y.view(-1).fill_(float("nan")), "fill_"),
        ("fill_ inf", lambda y, ctx: y.detach().fill_(float("-inf")), "fill_"),
        ("fill_ 2**24+1", lambda y, ctx: y.fill_(2**24 + 1), "fill_"),
        ("fill_ 1e30", lambda y, ctx: y.fill_(1e30), "fill_"),
        (
            "copy_ nan",
            lambda y, ctx: y.view(-1).copy_(gpumat.tensor([0.0, float("nan"), 1.0, 2.0])),
            "copy_",
        ),
        (
            "copy_ 3e7",
            lambda y, ctx: y.detach().copy_(gpumat.tensor([0.0, 3e7, 1.0, 2.0], device=ctx)),
            "copy_",
        ),
        ("copy_ list 2**25", lambda y, ctx: y.copy_([0, 2**25, 1, 2]), "copy_"),
        ("copy_ list inf", lambda y, ctx: y.copy_([0.5, float("inf"), 1, 2]), "copy_"),
        (
            "load_state_dict nan",
            lambda y, ctx: _module(G, y).load_state_dict(
                {"idx": np.array([0, np.nan, 1, 2], np.float32)}
            ),
            "load_state_dict: 'idx'",
        ),
        (
            "load_state_dict 2**25",
            lambda y, ctx: _module(G, y).load_state_dict(
                {"idx": gpumat.tensor([0.0, 2.0**25, 1.0, 2.0], device=ctx)}
            ),
            "load_state_dict: 'idx'",
        ),
        (
            "load_state_dict int 2**25",
            lambda y, ctx: _module(G, y).load_state_dict({"idx": np.array([0, 2**25, 1, 2])}),
            "load_state_dict: 'idx'",
        ),
    ],
)
def test_values_int64_cannot_hold_are_refused(ctx, path, write, match):
    y = gpumat.tensor([0, 1, 2, 1], device=ctx)
    view, version = y.view(2, 2), y._version
    with pytest.raises(ValueError, match=match):
        write(y, ctx)
    assert y.tolist() == [0, 1, 2, 1] and y._version == version, path
    assert view._range == (0, 2), path


def test_load_state_dict_checks_every_value_before_copying(ctx):
    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("a", gpumat.tensor([0, 1], device=ctx))
            self.register_buffer("b", gpumat.tensor([2, 3], device=ctx))

    m = Two()
    with pytest.raises(ValueError, match="load_state_dict: 'b'"):
        m.load_state_dict({"a": np.array([4.5, 4.0]), "b": np.array([np.inf, 0.0])})
    assert m.a.tolist() == [0, 1] and m.b.tolist() == [2, 3]
    assert m.a._range == (0, 1)


# ------------------------------------------------------------------------------------------------
# bool tensors: 0 or 1 through every write path, as torch's


@pytest.mark.parametrize(
    "path",
    ["fill_ 0.5", "fill_ 0.0", "fill_ nan", "copy_ int64", "copy_ float", "load_state_dict"],
)
def test_bool_writes_match_torch(ctx, path):
    rng, seed = new_rng()
    ints = rng.integers(-3, 8, N)
    floats = np.where(rng.random(N) < 0.5, 0.0, rng.uniform(-2, 2, N)).astype(np.float32)
    for L, t in ((G, gpumat.tensor([True, False, False, True], device=ctx)),
                 (T, torch.tensor([True, False, False, True]))):  # fmt: skip
        view = t.view(2, 2)
        if path.startswith("fill_"):
            t.detach().fill_(float(path.split()[1]))
        elif path == "copy_ int64":
            t.view(-1).copy_(_tensor(L, ints, ctx))
        elif path == "copy_ float":
            t.data.copy_(_tensor(L, floats, ctx))
        else:
            _module(L, t).load_state_dict({"idx": _tensor(L, floats, ctx)})
        if L is G:
            got = (t.tolist(), view.float().tolist(), view.sum().item(), t.long().sum().item())
        else:
            want = (t.tolist(), view.float().tolist(), view.sum().item(), t.long().sum().item())
    assert got == want, f"{path} (seed={seed})"


# ------------------------------------------------------------------------------------------------
# In-place arithmetic on integers is refused, and leaves values and ranges as they were


@pytest.mark.parametrize(
    "op",
    ["add_", "sub_", "mul_", "add_ tensor", "mul_ tensor", "+=", "*=", "uniform_", "normal_"],
)
@pytest.mark.parametrize("dtype", ["int64", "bool"])
def test_inplace_arithmetic_on_integers_is_refused(ctx, op, dtype):
    y = gpumat.tensor([0, 1, 1, 0], dtype=dtype, device=ctx)
    alias = y.view(2, 2)
    version, bounds = y._version, y._range

    def run():
        nonlocal alias
        if op == "add_":
            alias.add_(7)
        elif op == "sub_":
            alias.sub_(-7)
        elif op == "mul_":
            alias.mul_(7.5)
        elif op == "add_ tensor":
            y.add_(gpumat.ones(N, device=ctx))
        elif op == "mul_ tensor":
            y.mul_(gpumat.full((N,), 7.0, device=ctx))
        elif op == "+=":
            alias += 7
        elif op == "*=":
            alias *= 7
        else:
            getattr(y, op)()

    with pytest.raises(TypeError, match="float32"):
        run()
    assert y.tolist() == gpumat.tensor([0, 1, 1, 0], dtype=dtype).tolist()
    assert y._version == version and y._range == bounds == (0, 1)


# ------------------------------------------------------------------------------------------------
# Integer sums: the bound comes from the storage's range


@pytest.mark.parametrize("path", ["view.fill_", "detach.fill_", "Parameter.fill_"])
def test_sum_refuses_what_could_round_after_a_write_through_an_alias(ctx, path):
    y = gpumat.tensor([0, 1, 2, 1], device=ctx)
    SCALAR_WRITES[path](G, y, 2**23)
    with pytest.raises(ValueError, match="2\\*\\*24"):
        y.sum()


# ------------------------------------------------------------------------------------------------
# A write that declares no range: the values are read from the device, never a stale range


def test_a_write_that_declares_no_range_is_measured(ctx):
    """The protocol a raw writer follows (the optimizers' updates): write the storage, then
    advance the version. The range of every alias is then read from the device when needed."""
    y = gpumat.tensor([0, 1, 2, 1], device=ctx)
    view = y.view(2, 2)
    gpumat.ops.fill(y._data, 9.0)
    y._vc.value += 1
    with pytest.raises(IndexError, match="Target 9 is out of bounds"):
        F.cross_entropy(gpumat.tensor(rand((N, C)), device=ctx), y)
    assert view._range == (9, 9)
    gpumat.ops.fill(y._data, 0.5)
    y._vc.value += 1
    with pytest.raises(ValueError, match="holds 0.5"):
        F.one_hot(view.reshape(-1), C)


# ------------------------------------------------------------------------------------------------
# gpumat.compile: the guards on int64 arguments read the storage's range


COMPILED_WRITES = {
    "view.fill_": lambda y, ctx: y.view(2, 2).fill_(9),
    "detach.copy_": lambda y, ctx: y.detach().copy_(gpumat.tensor([0, 9, 1, 2], device=ctx)),
    "Parameter.fill_": lambda y, ctx: nn.Parameter(y, requires_grad=False).fill_(9),
    "load_state_dict": lambda y, ctx: _module(G, y).load_state_dict(
        {"idx": np.array([0.5, 9.9, 1.0, 2.0], np.float32)}
    ),
}


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("path", list(COMPILED_WRITES))
def test_compiled_step_checks_arguments_written_through_an_alias(ctx, path, loss):
    rng, seed = new_rng()
    w = nn.Parameter(gpumat.tensor(rand((N, C), rng), device=ctx))
    fn = getattr(F, loss)
    step = gpumat.compile(lambda x, y: fn((x @ w).log_softmax(1), y))
    x = gpumat.tensor(rand((N, N), rng), device=ctx)
    y = gpumat.tensor(rng.integers(0, C, N), device=ctx)
    step(x, y)
    COMPILED_WRITES[path](y, ctx)
    with pytest.raises(IndexError, match=f"{loss}: Target 9 is out of bounds"):
        step(x, y)
    good = rng.integers(0, C, N)
    y.view(-1).copy_(good.astype(np.float32) + 0.5)  # truncated to good
    with gpumat.no_grad():
        want = fn((x @ w).log_softmax(1), gpumat.tensor(good, device=ctx)).item()
    assert step(x, y).item() == pytest.approx(want, rel=1e-5), f"{path} (seed={seed})"
    assert step.traces == 1


def test_compiled_sum_guard_reads_the_storage_range(ctx):
    step = gpumat.compile(lambda y: y.sum())
    y = gpumat.tensor([0, 1, 2, 1], device=ctx)
    assert step(y).item() == 4
    y.detach().fill_(2**23)
    with pytest.raises(ValueError, match="sum"):
        step(y)


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_compiled_step_checks_a_target_it_reads_directly(ctx, loss):
    # The targets are a global of the step, not an argument: their range is checked every call.
    rng, seed = new_rng()
    w = nn.Parameter(gpumat.tensor(rand((N, C), rng), device=ctx))
    targets = gpumat.tensor(rng.integers(0, C, N), device=ctx)
    fn = getattr(F, loss)
    step = gpumat.compile(lambda x: fn((x @ w).log_softmax(1), targets))
    x = gpumat.tensor(rand((N, N), rng), device=ctx)
    step(x)
    targets.fill_(9)
    with pytest.raises(IndexError, match=f"{loss}: Target 9 is out of bounds"):
        step(x)
    good = rng.integers(0, C, N)
    targets.copy_(gpumat.tensor(good, device=ctx))
    with gpumat.no_grad():
        want = fn((x @ w).log_softmax(1), gpumat.tensor(good, device=ctx)).item()
    assert step(x).item() == pytest.approx(want, rel=1e-5), f"seed={seed}"


def test_compiled_sum_checks_a_tensor_it_reads_directly(ctx):
    y = gpumat.tensor([0, 1, 2, 1], device=ctx)
    step = gpumat.compile(lambda: y.sum())
    assert step().item() == 4
    y.fill_(2**23)
    with pytest.raises(ValueError, match="sum"):
        step()
