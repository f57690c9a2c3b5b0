"""The Module API modern training loops use, against torch.nn: ModuleDict, ParameterList,
ParameterDict, buffers (persistent or not), tied weights, apply's order, traversal, requires_grad_,
load_state_dict(strict=False), and nn.init's distributions (fans, gains, trunc_normal_)."""

import math

import numpy as np
import pytest
import torch
from helpers import new_rng, rand

import gpumat
import gpumat.nn as nn


def tiny_gpt(lib):
    """nanoGPT's skeleton: a ModuleDict of embeddings and a ModuleList of blocks, the lm head
    tied to the token embedding's weight, a non-persistent buffer and a persistent one."""

    class Block(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = lib.nn.Linear(4, 4)
            self.scale = lib.nn.ParameterList(
                [lib.nn.Parameter(lib.ones(4)), lib.nn.Parameter(lib.zeros(4))]
            )
            self.register_buffer("mask", lib.ones(3, 3), persistent=False)

    class Model(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = lib.nn.ModuleDict(
                dict(wte=lib.nn.Linear(4, 6, bias=False), h=lib.nn.ModuleList([Block(), Block()]))
            )
            self.lm_head = lib.nn.Linear(4, 6, bias=False)
            self.transformer.wte.weight = self.lm_head.weight
            self.extra = lib.nn.ParameterDict({"alpha": lib.nn.Parameter(lib.ones(2))})
            self.register_buffer("steps", lib.zeros(1))

    return Model()


def test_keys_and_names_match_torch(ctx):
    m, tm = tiny_gpt(gpumat), tiny_gpt(torch)
    m.to(ctx)
    assert list(m.state_dict()) == list(tm.state_dict())
    assert [k for k, _ in m.named_parameters()] == [k for k, _ in tm.named_parameters()]
    assert [k for k, _ in m.named_parameters(remove_duplicate=False)] == [
        k for k, _ in tm.named_parameters(remove_duplicate=False)
    ]
    assert [k for k, _ in m.named_buffers()] == [k for k, _ in tm.named_buffers()]
    assert [k for k, _ in m.named_modules()] == [k for k, _ in tm.named_modules()]
    assert [k for k, _ in m.named_children()] == [k for k, _ in tm.named_children()]
    assert len(list(m.parameters())) == len(list(tm.parameters()))
    assert "transformer.h.0.mask" not in m.state_dict()
    assert all(b.device == ctx for b in m.buffers())


def test_tied_weight_is_one_parameter_with_summed_gradients(ctx):
    m = tiny_gpt(gpumat).to(ctx)
    assert m.transformer.wte.weight is m.lm_head.weight
    rng, _ = new_rng()
    x = gpumat.tensor(rand((3, 4), rng), device=ctx)
    (m.transformer.wte(x).sum() + 2 * m.lm_head(x).sum()).backward()
    xs = x.numpy().sum(0)
    np.testing.assert_allclose(m.lm_head.weight.grad.numpy(), 3 * np.tile(xs, (6, 1)), rtol=1e-5)
    sd = m.state_dict()
    np.testing.assert_array_equal(
        sd["lm_head.weight"].numpy(), sd["transformer.wte.weight"].numpy()
    )


def test_load_state_dict_strict_false_reports_keys():
    m, tm = tiny_gpt(gpumat), tiny_gpt(torch)
    sd = {k: v.detach().numpy() for k, v in tm.state_dict().items()}
    sd["unknown.weight"] = np.zeros(2, np.float32)
    del sd["extra.alpha"]
    res = m.load_state_dict(sd, strict=False)
    tres = tm.load_state_dict({k: torch.tensor(v) for k, v in sd.items()}, strict=False)
    assert res.missing_keys == tres.missing_keys == ["extra.alpha"]
    assert res.unexpected_keys == tres.unexpected_keys == ["unknown.weight"]
    np.testing.assert_array_equal(
        m.lm_head.weight.detach().numpy(), tm.lm_head.weight.detach().numpy()
    )
    with pytest.raises(ValueError, match="Missing key"):
        m.load_state_dict(sd)


def test_apply_order_and_requires_grad():
    m, tm = tiny_gpt(gpumat), tiny_gpt(torch)
    seen, tseen = [], []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    tm.apply(lambda mod: tseen.append(type(mod).__name__))
    assert seen == tseen
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())


def test_containers():
    d = nn.ModuleDict({"a": nn.Linear(2, 3)})
    d["b"] = nn.Tanh()
    d.update([("c", nn.ReLU())])
    assert list(d) == ["a", "b", "c"] and "b" in d and len(d) == 3
    assert isinstance(d.pop("b"), nn.Tanh) and list(d.keys()) == ["a", "c"]
    with pytest.raises(TypeError):
        d["x"] = 3
    with pytest.raises(KeyError):
        d["keys"] = nn.ReLU()
    pl = nn.ParameterList([gpumat.zeros(2)])
    pl.append(nn.Parameter(gpumat.ones(3)))
    assert isinstance(pl[0], nn.Parameter) and pl[-1].shape == (3,) and len(pl) == 2
    assert [k for k, _ in pl.named_parameters()] == ["0", "1"]
    with pytest.raises(TypeError):
        pl.append("x")
    with pytest.raises(IndexError):
        pl[2]
    pd = nn.ParameterDict({"w": gpumat.zeros(2)})
    pd["v"] = gpumat.ones(1)
    assert list(pd.keys()) == ["w", "v"] and isinstance(pd["v"], nn.Parameter)
    with pytest.raises(TypeError):
        pd["u"] = 1.0


# ------------------------------------------------------------------------------------------------
# init
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn, kwargs, std",
    [
        ("xavier_uniform_", {"gain": 2.0}, 2.0 * math.sqrt(2.0 / (120 * 9 + 80 * 9))),
        ("xavier_normal_", {}, math.sqrt(2.0 / (120 * 9 + 80 * 9))),
        ("kaiming_uniform_", {"a": 0.1}, math.sqrt(2.0 / 1.01) / math.sqrt(120 * 9)),
        ("kaiming_normal_", {"mode": "fan_out", "nonlinearity": "relu"}, math.sqrt(2.0 / (80 * 9))),
        ("normal_", {"mean": 0.5, "std": 0.02}, 0.02),
        ("uniform_", {"a": -0.3, "b": 0.1}, 0.4 / math.sqrt(12)),
        ("trunc_normal_", {"std": 0.5, "a": -0.4, "b": 0.6}, None),
    ],
)
def test_init_statistics_match_torch(ctx, fn, kwargs, std):
    w = gpumat.zeros(80, 120, 3, 3, device=ctx)
    getattr(nn.init, fn)(w, **kwargs)
    x = w.numpy().astype(np.float64).ravel()
    t = torch.empty(80, 120, 3, 3)
    getattr(torch.nn.init, fn)(t, **kwargs)
    tx = t.numpy().astype(np.float64).ravel()
    # both against each other: means and spreads within sampling error (86,400 samples)
    s = tx.std()
    if std is not None:
        assert s == pytest.approx(std, rel=0.02)
    assert x.std() == pytest.approx(s, rel=0.02)
    assert x.mean() == pytest.approx(tx.mean(), abs=0.02 * s + 1e-9)
    half = (std or 0.0) * math.sqrt(3)  # a uniform's half width from its std
    bounds = {
        "xavier_uniform_": (-half, half),
        "kaiming_uniform_": (-half, half),
        "uniform_": (-0.3, 0.1),
        "trunc_normal_": (-0.4, 0.6),
    }.get(fn)
    if bounds is not None:  # the bounded ones stay inside their interval
        assert bounds[0] - 1e-6 <= x.min() and x.max() <= bounds[1] + 1e-6


def test_trunc_normal_bounds_and_shape(ctx):
    w = gpumat.zeros(1000, device=ctx)
    nn.init.trunc_normal_(w, mean=1.0, std=2.0, a=0.9, b=1.0)  # a narrow slice of the tail
    x = w.numpy()
    assert np.isfinite(x).all() and x.min() >= 0.9 and x.max() <= 1.0
    # uniform-ish within a narrow window near the mean
    assert x.mean() == pytest.approx(0.95, abs=0.01)
    nn.init.trunc_normal_(gpumat.zeros(0, 3, device=ctx))
    with pytest.raises(ValueError, match="trunc_normal_"):
        nn.init.trunc_normal_(w, a=1.0, b=0.0)
    for fn in (nn.init.zeros_, nn.init.ones_):
        fn(w)
    nn.init.constant_(w, 0.25)
    assert (w.numpy() == 0.25).all()
