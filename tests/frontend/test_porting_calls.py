"""The calls ported PyTorch programs make that the op tests do not: type promotion in the
operators (int64 with ints stays int64 and exact, a float operand promotes int64 and bool),
``torch.empty(*size)``, ``gpumat.mm``, numpy's ``axis`` / ``keepdims`` names, ``TensorDataset``
slices, ``load(weights_only=)``, ``dropout1d`` / ``dropout2d``; each against PyTorch."""

import numpy as np
import pytest
import torch
from helpers import new_rng

import gpumat
import gpumat.nn as nn
import gpumat.nn.functional as F  # noqa: N812 (PyTorch's convention)
from gpumat.data import TensorDataset


def _same(ours, theirs):
    assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    assert np.array_equal(ours.numpy(), theirs.numpy())


def test_integer_arithmetic_and_promotion_as_pytorch(ctx):
    rng, _ = new_rng()
    iv = rng.integers(-50, 50, (3, 4))
    jv = rng.integers(-50, 50, (4,))
    fv = rng.standard_normal((3, 4)).astype(np.float32)
    mv = rng.random((3, 4)) > 0.5
    i, it = gpumat.tensor(iv, device=ctx), torch.tensor(iv)
    j, jt = gpumat.tensor(jv, device=ctx), torch.tensor(jv)
    f, ft = gpumat.tensor(fv, device=ctx), torch.tensor(fv)
    m, mt = gpumat.tensor(mv, device=ctx), torch.tensor(mv)
    for ours, theirs in [
        (i + 7, it + 7),
        (7 + i, 7 + it),
        (i - 3, it - 3),
        (3 - i, 3 - it),
        (i * -2, it * -2),
        (-i, -it),
        (i + j, it + jt),  # broadcast
        (i - j, it - jt),
        (i * j, it * jt),
        (i + m, it + mt),
        (m * 5, mt * 5),
        (i * 0.5, it * 0.5),  # a float scalar: float32
        (i / 2, it / 2),  # true division: float32
        (f * m, ft * mt),  # the MiniTorch and d2l masks
        (m * f, mt * ft),
        (f + i, ft + it),
        (i - f, it - ft),
    ]:
        _same(ours, theirs)
    assert (i + 7)._range == (int(iv.min()) + 7, int(iv.max()) + 7)  # known: no device read
    data = gpumat.arange(100, device=ctx)
    start = gpumat.randint(0, 90, (3,), device=ctx)
    block = gpumat.stack([data[s : s + 8] for s in start])  # nanoGPT's get_batch
    assert np.array_equal(block.numpy(), start.numpy()[:, None] + np.arange(8))
    big = gpumat.tensor([2**23], device=ctx)
    with pytest.raises(ValueError, match="could pass 2\\*\\*24"):
        big * 4
    x = gpumat.tensor(fv, device=ctx, requires_grad=True)
    (x * m).sum().backward()  # the promoted bool operand takes no gradient
    assert np.array_equal(x.grad.numpy(), mv.astype(np.float32))


def test_empty_has_both_forms():
    t = gpumat.empty(3, 2)
    assert isinstance(t, gpumat.Tensor) and t.shape == (3, 2) and t.dtype == gpumat.float32
    assert gpumat.empty(5, requires_grad=True).requires_grad
    assert gpumat.empty((2, 3), dtype=gpumat.float32).shape == (2, 3)
    assert isinstance(gpumat.empty((2, 3)), gpumat.PyGpuMatrix)  # the array API
    assert isinstance(gpumat.empty((2, 3), gpumat.cpu()), gpumat.PyGpuMatrix)
    w = nn.Parameter(gpumat.empty(4, 3).uniform_(-1, 1))  # micrograd's demo with torch tensors
    assert w.shape == (4, 3) and float(w.abs().max()) <= 1
    with pytest.raises(TypeError, match="empty: only float32"):
        gpumat.empty(2, dtype=gpumat.int64)
    with pytest.raises(ValueError):
        gpumat.empty(-1, 2)


def _near64(got, want, scale, seed):
    """got within a few float32 roundings of the float64 ``want``, relative to ``scale`` (the
    sum of the terms' magnitudes: a sum that cancels keeps only an absolute accuracy)."""
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= 8 * 2.0**-24 * scale), f"seed {seed}: error {err.max():.2e}"


def test_mm_and_numpy_keyword_names():
    rng, seed = new_rng()
    a = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4, 2)).astype(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    got = gpumat.mm(gpumat.tensor(a), gpumat.tensor(b))
    _near64(got.numpy(), a64 @ b64, np.abs(a64) @ np.abs(b64), seed)
    x, xt = gpumat.tensor(a), torch.tensor(a)
    _same(x.argmax(axis=1), xt.argmax(axis=1))
    want, scale = a64.sum(axis=0, keepdims=True), np.abs(a64).sum(axis=0, keepdims=True)
    _near64(x.sum(axis=0, keepdims=True).numpy(), want, scale, seed)
    _near64(gpumat.mean(x, axis=1).numpy(), a64.mean(axis=1), np.abs(a64).mean(axis=1), seed)
    with pytest.raises(TypeError, match="got both 'dim' and 'axis'"):
        x.sum(dim=0, axis=1)


def test_tensor_dataset_takes_slices_and_index_arrays():
    rng, _ = new_rng()
    xv = rng.standard_normal((10, 3)).astype(np.float32)
    yv = rng.integers(0, 4, 10)
    ours = TensorDataset(gpumat.tensor(xv), gpumat.tensor(yv))
    theirs = torch.utils.data.TensorDataset(torch.tensor(xv), torch.tensor(yv))
    for index in (
        slice(2, 7),
        slice(None, None, 3),
        [4, 0, 4],
        np.array([9, 1]),
        gpumat.tensor([3, 2]),
    ):
        tindex = torch.tensor(index.numpy()) if isinstance(index, gpumat.Tensor) else index
        for o, t in zip(ours[index], theirs[tindex], strict=True):
            _same(o, t)
    assert ours[-1][1].item() == yv[-1]
    with pytest.raises(IndexError):
        ours[[10]]
    with pytest.raises(TypeError, match="TensorDataset indices"):
        ours["a"]


def test_load_takes_pytorchs_flags(tmp_path):
    path = tmp_path / "w.safetensors"
    gpumat.save({"w": gpumat.tensor([[1.0, 2.0]])}, str(path))
    for flags in ({"weights_only": True}, {"weights_only": False}, {"mmap": True}):
        assert gpumat.load(str(path), **flags)["w"].tolist() == [[1.0, 2.0]]


@pytest.mark.parametrize("name, shape", [("dropout1d", (4, 6, 5)), ("dropout2d", (4, 6, 3, 5))])
def test_channel_dropout(ctx, name, shape):
    rng, _ = new_rng()
    xv = rng.uniform(1, 2, shape).astype(np.float32)  # no zeros: a zero output is a drop
    x = gpumat.tensor(xv, device=ctx, requires_grad=True)
    y = getattr(F, name)(x, 0.4)
    kept = (y.detach().numpy() != 0).reshape(shape[0], shape[1], -1)
    assert (kept.all(-1) | ~kept.any(-1)).all()  # whole channels kept or dropped
    assert 0 < kept.all(-1).sum() < shape[0] * shape[1]
    np.testing.assert_allclose(
        y.detach().numpy()[kept.reshape(shape)], (xv / 0.6)[kept.reshape(shape)], 1e-6
    )
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), kept.reshape(shape) / 0.6, 1e-6)
    assert getattr(F, name)(x, 0.4, training=False) is x
    module = {"dropout1d": nn.Dropout1d, "dropout2d": nn.Dropout2d}[name](0.4)
    module.eval()
    assert module(x) is x
    with pytest.raises(ValueError, match=f"{name}: expected"):
        getattr(F, name)(x.reshape(-1), 0.4)


def test_lazy_layers_take_their_size_from_the_first_input(ctx):
    rng, _ = new_rng()
    gpumat.manual_seed(3)
    net = nn.Sequential(
        nn.LazyConv2d(4, kernel_size=3, padding=1, device=ctx), nn.ReLU(), nn.Flatten(),
        nn.LazyLinear(5, device=ctx),
    )  # fmt: skip
    ref = torch.nn.Sequential(
        torch.nn.LazyConv2d(4, kernel_size=3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.LazyLinear(5),
    )  # fmt: skip
    assert [tuple(p.shape) for p in net.parameters()] == [(4, 0, 3, 3), (4,), (5, 0), (5,)]
    xv = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    y = net(gpumat.tensor(xv, device=ctx))
    ref(torch.tensor(xv))
    assert type(net[0]) is nn.Conv2d and type(net[3]) is nn.Linear
    assert net[0].in_channels == 3 and net[3].in_features == 144
    assert {k: tuple(v.shape) for k, v in net.state_dict().items()} == {
        k: tuple(v.shape) for k, v in ref.state_dict().items()
    }
    bound = 1 / np.sqrt(144)  # PyTorch's initialisation, drawn once the size is known
    w = net[3].weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    net.load_state_dict({k: gpumat.tensor(v.numpy()) for k, v in ref.state_dict().items()})
    np.testing.assert_allclose(
        net(gpumat.tensor(xv, device=ctx)).detach().numpy(),
        ref(torch.tensor(xv)).detach().numpy(),
        rtol=1e-5,
        atol=1e-5,
    )
    assert y.shape == (2, 5)
    lazy = nn.LazyLinear(3)
    with pytest.raises(RuntimeError, match="run it once before gpumat.compile"):
        gpumat.compile(lambda x: lazy(x))(gpumat.zeros(2, 4))
    with pytest.raises(ValueError, match="LazyConv2d: expected an input of 3 or 4 dims"):
        nn.LazyConv2d(2, 3)(gpumat.zeros(5, 5))
