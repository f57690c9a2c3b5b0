"""The recurrent layers (nn.RNN, nn.LSTM, nn.GRU) and cells (nn.RNNCell, nn.LSTMCell, nn.GRUCell)
against PyTorch's on the CPU from the same weights (torch's state_dict loaded into ours): outputs,
final states, and the gradients of every parameter, the input and the initial state, on the cpu
and emu devices with fresh random inputs and NaN-poisoned allocator caches; several num_layers,
batch_first, bidirectional, proj_size, with and without an initial state, unbatched and zero-size
inputs; dropout between layers; state_dict keys and loading both ways; a compiled step against
the eager one; bad input."""

import numpy as np
import pytest
from frontend_helpers import poison
from helpers import new_rng

import gpumat
import gpumat.nn as nn

torch = pytest.importorskip("torch")

RTOL, ATOL = 2e-5, 2e-6


def _pair(name, *args, **kwargs):
    """A torch layer and ours with torch's weights (a numpy round trip of its state_dict)."""
    tlayer = getattr(torch.nn, name)(*args, **kwargs)
    layer = getattr(nn, name)(*args, **kwargs)
    assert list(layer.state_dict()) == list(tlayer.state_dict())
    layer.load_state_dict({k: gpumat.tensor(v.numpy()) for k, v in tlayer.state_dict().items()})
    return tlayer, layer


def _leaf(x, ctx):
    return gpumat.tensor(x, device=ctx, requires_grad=True), torch.tensor(x, requires_grad=True)


def _flat(out):
    """The output tensors of a layer's or cell's result, flattened: (output, h) or
    (output, (h, c)) or h or (h, c)."""
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _flat(o)]
    return [out]


def _compare(ctx, tlayer, layer, xs, states, seed):
    """Forward both with leaves made from the numpy arrays xs (input) and states, backward
    sum(out * w) with the same random w per output, and compare everything."""
    rng = np.random.default_rng(seed)
    x, tx = _leaf(xs, ctx)
    hs = [_leaf(s, ctx) for s in states]
    state = tuple(h for h, _ in hs)
    tstate = tuple(t for _, t in hs)
    if len(states) == 1:
        state, tstate = state[0], tstate[0]
    args, targs = ((x, state), (tx, tstate)) if states else ((x,), (tx,))
    outs, touts = _flat(layer(*args)), _flat(tlayer(*targs))
    assert len(outs) == len(touts)
    loss, tloss = 0, 0
    for o, t in zip(outs, touts, strict=True):
        assert o.shape == tuple(t.shape)
        assert o.device == x.device
        np.testing.assert_allclose(o.detach().numpy(), t.detach().numpy(), RTOL, ATOL)
        w = rng.uniform(-1, 1, size=o.shape).astype(np.float32)
        loss = loss + (o * gpumat.tensor(w, device=ctx)).sum()
        tloss = tloss + (t * torch.tensor(w)).sum()
    loss.backward()
    tloss.backward()
    named = dict(tlayer.named_parameters())
    for name, p in layer.named_parameters():
        np.testing.assert_allclose(
            p.grad.numpy(), named[name].grad.numpy(), 1e-4, 1e-5, err_msg=name
        )
    leaves = [(x, tx)] + hs
    for g, t in leaves:
        np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), 1e-4, 1e-5)


LAYERS = [
    ("LSTM", {}),
    ("GRU", {}),
    ("RNN", {}),
    ("RNN", {"nonlinearity": "relu"}),
    ("LSTM", {"bidirectional": True}),
    ("GRU", {"bidirectional": True, "bias": False}),
    ("LSTM", {"proj_size": 2}),
]


def _states(name, kw, layers, n, h, rng):
    d = 2 if kw.get("bidirectional") else 1
    hout = kw.get("proj_size") or h
    lead = (layers * d,) if n is None else (layers * d, n)
    shapes = [lead + (hout,)] + ([lead + (h,)] if name == "LSTM" else [])
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


@pytest.mark.parametrize("name,kw", LAYERS, ids=lambda v: str(v))
@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
def test_layers_match_torch(ctx, name, kw, layers, batch_first, with_state):
    rng, seed = new_rng()
    tlayer, layer = _pair(name, 4, 5, layers, batch_first=batch_first, **kw)
    layer.to(ctx)
    seq, n = 3, 2
    x = rng.standard_normal((n, seq, 4) if batch_first else (seq, n, 4)).astype(np.float32)
    states = _states(name, kw, layers, n, 5, rng) if with_state else []
    poison(ctx, [(seq, n, 20), (n, 20), (seq, n, 10), (layers * 2, n, 5)])
    _compare(ctx, tlayer, layer, x, states, seed)


@pytest.mark.parametrize("name,kw", LAYERS[:4], ids=lambda v: str(v))
@pytest.mark.parametrize("with_state", [False, True])
def test_unbatched_input(ctx, name, kw, with_state):
    rng, seed = new_rng()
    tlayer, layer = _pair(name, 3, 4, 2, **kw)
    layer.to(ctx)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    states = _states(name, kw, 2, None, 4, rng) if with_state else []
    _compare(ctx, tlayer, layer, x, states, seed)


@pytest.mark.parametrize("name", ["LSTM", "GRU", "RNN"])
def test_zero_batch(ctx, name):
    rng, seed = new_rng()
    tlayer, layer = _pair(name, 3, 4, 2, batch_first=True)
    layer.to(ctx)
    x = np.zeros((0, 5, 3), np.float32)
    out = layer(gpumat.tensor(x, device=ctx))
    tout = tlayer(torch.tensor(x))
    for o, t in zip(_flat(out), _flat(tout), strict=True):
        assert o.shape == tuple(t.shape)
    _flat(out)[0].sum().backward()
    for p in layer.parameters():
        np.testing.assert_array_equal(p.grad.numpy(), 0)


CELLS = [("LSTMCell", {}), ("GRUCell", {}), ("RNNCell", {}), ("RNNCell", {"nonlinearity": "relu"})]


@pytest.mark.parametrize("name,kw", CELLS, ids=lambda v: str(v))
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("with_state", [False, True])
def test_cells_match_torch(ctx, name, kw, batched, with_state):
    rng, seed = new_rng()
    tcell, cell = _pair(name, 4, 3, bias=True, **kw)
    cell.to(ctx)
    lead = (5,) if batched else ()
    x = rng.standard_normal(lead + (4,)).astype(np.float32)
    k = 2 if name == "LSTMCell" else 1
    states = [rng.standard_normal(lead + (3,)).astype(np.float32) for _ in range(k)]
    _compare(ctx, tcell, cell, x, states if with_state else [], seed)


def test_cells_state_dict_and_init():
    for name, g in [("LSTMCell", 4), ("GRUCell", 3), ("RNNCell", 1)]:
        cell = getattr(nn, name)(6, 16, bias=False)
        assert list(cell.state_dict()) == list(getattr(torch.nn, name)(6, 16, False).state_dict())
        assert cell.weight_ih.shape == (g * 16, 6) and cell.weight_hh.shape == (g * 16, 16)
        assert cell.bias_ih is None


def test_state_dict_keys_and_loading_both_ways(ctx):
    rng, _ = new_rng()
    for name, kw in LAYERS:
        tlayer = getattr(torch.nn, name)(3, 4, 3, **kw)
        layer = getattr(nn, name)(3, 4, 3, **kw).to(ctx)
        sd = layer.state_dict()
        assert list(sd) == list(tlayer.state_dict())
        for k, v in tlayer.state_dict().items():
            assert sd[k].shape == tuple(v.shape), k
        # ours into torch, then the same outputs
        tlayer.load_state_dict({k: torch.tensor(v.numpy()) for k, v in sd.items()})
        x = rng.standard_normal((2, 3, 3)).astype(np.float32)
        got = layer(gpumat.tensor(x, device=ctx))[0].detach().numpy()
        np.testing.assert_allclose(got, tlayer(torch.tensor(x))[0].detach().numpy(), RTOL, ATOL)


def test_init_bounds_and_shapes():
    layer = nn.LSTM(10, 25, 2, bidirectional=True, proj_size=7)
    bound = 1 / 25**0.5
    for name, p in layer.named_parameters():
        v = p.detach().numpy()
        assert np.abs(v).max() <= bound and v.std() > bound / 4, name
    assert layer.weight_ih_l1_reverse.shape == (100, 14)
    assert layer.weight_hh_l0.shape == (100, 7) and layer.weight_hr_l0.shape == (7, 25)
    assert len(layer.all_weights) == 4 and len(layer.all_weights[0]) == 5
    assert "num_layers=2" in repr(layer) and "proj_size=7" in repr(layer)


def test_dropout_between_layers(ctx):
    # p = 1 zeroes the first layer's output in training mode, deterministically, in both libraries
    rng, seed = new_rng()
    for name in ["LSTM", "GRU"]:
        tlayer, layer = _pair(name, 3, 4, 2, dropout=1.0)
        layer.to(ctx)
        x = rng.standard_normal((4, 2, 3)).astype(np.float32)
        _compare(ctx, tlayer, layer, x, [], seed)
        layer.eval(), tlayer.eval()
        got = layer(gpumat.tensor(x, device=ctx))[0].detach().numpy()
        np.testing.assert_allclose(got, tlayer(torch.tensor(x))[0].detach().numpy(), RTOL, ATOL)
    with pytest.warns(UserWarning, match="num_layers=1"):
        nn.GRU(3, 4, dropout=0.5)


def test_compiled_step_equals_eager(ctx):
    rng, _ = new_rng()
    x = gpumat.tensor(rng.standard_normal((4, 3, 5)).astype(np.float32), device=ctx)
    for name in ["LSTM", "GRU", "RNN"]:
        layer = getattr(nn, name)(5, 6, 2).to(ctx)

        def step(x, layer=layer):
            layer.zero_grad()
            out = layer(x)[0]
            loss = (out * out).sum()
            loss.backward()
            return [loss] + [p.grad for p in layer.parameters()]

        eager = [t.detach().numpy() for t in step(x)]
        compiled = gpumat.compile(step, fusion=False)
        for _ in range(2):
            for e, c in zip(eager, compiled(x), strict=True):
                np.testing.assert_allclose(c.numpy(), e, 1e-6, 1e-6)


def test_bad_input():
    lstm = nn.LSTM(4, 5, 2)
    with pytest.raises(ValueError, match=r"LSTM: input must be \(L, N, 4\).*got \(3, 2, 6\)"):
        lstm(gpumat.randn(3, 2, 6))
    with pytest.raises(ValueError, match="LSTM: input must be"):
        lstm(gpumat.randn(3, 2, 2, 4))
    with pytest.raises(TypeError, match="LSTM: input must be float32"):
        lstm(gpumat.tensor(np.ones((3, 2, 4), np.int64)))
    with pytest.raises(TypeError, match="LSTM: input must be a Tensor"):
        lstm(np.ones((3, 2, 4), np.float32))
    with pytest.raises(ValueError, match=r"LSTM: h_0 has shape \(1, 2, 5\), expected \(2, 2, 5\)"):
        lstm(gpumat.randn(3, 2, 4), (gpumat.randn(1, 2, 5), gpumat.randn(2, 2, 5)))
    with pytest.raises(ValueError, match=r"LSTM: c_0 has shape \(2, 3, 5\), expected \(2, 2, 5\)"):
        lstm(gpumat.randn(3, 2, 4), (gpumat.randn(2, 2, 5), gpumat.randn(2, 3, 5)))
    with pytest.raises(TypeError, match="LSTM: hx must be a tuple"):
        lstm(gpumat.randn(3, 2, 4), gpumat.randn(2, 2, 5))
    with pytest.raises(ValueError, match=r"GRU: hx has shape \(2, 5\), expected \(1, 2, 5\)"):
        nn.GRU(4, 5)(gpumat.randn(3, 2, 4), gpumat.randn(2, 5))
    with pytest.raises(TypeError, match="RNN: hx must be float32"):
        nn.RNN(4, 5)(gpumat.randn(3, 2, 4), gpumat.tensor(np.ones((1, 2, 5), np.int64)))
    with pytest.raises(ValueError, match="RNN: nonlinearity"):
        nn.RNN(4, 5, nonlinearity="sigmoid")
    with pytest.raises(ValueError, match="GRU: dropout"):
        nn.GRU(4, 5, 2, dropout=1.5)
    with pytest.raises(ValueError, match="GRU: proj_size is an LSTM option"):
        nn.GRU(4, 5, proj_size=2)
    with pytest.raises(ValueError, match="LSTM: proj_size"):
        nn.LSTM(4, 5, proj_size=5)
    with pytest.raises(ValueError, match="num_layers"):
        nn.LSTM(4, 5, 0)
    with pytest.raises(TypeError, match="LSTM: parameters are float32"):
        nn.LSTM(4, 5, dtype=gpumat.int64)
    cell = nn.LSTMCell(4, 5)
    with pytest.raises(ValueError, match=r"LSTMCell: input must be \(N, 4\).*got \(3, 5\)"):
        cell(gpumat.randn(3, 5))
    with pytest.raises(ValueError, match=r"LSTMCell: c has shape \(2, 5\), expected \(3, 5\)"):
        cell(gpumat.randn(3, 4), (gpumat.randn(3, 5), gpumat.randn(2, 5)))
    with pytest.raises(TypeError, match="GRUCell: input must be float32"):
        nn.GRUCell(4, 5)(gpumat.tensor(np.ones((3, 4), np.int64)))
    with pytest.raises(ValueError, match=r"RNNCell: hx has shape \(5,\), expected \(3, 5\)"):
        nn.RNNCell(4, 5)(gpumat.randn(3, 4), gpumat.randn(5))
