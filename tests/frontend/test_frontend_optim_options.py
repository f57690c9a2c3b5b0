"""torch.optim's options in gpumat.optim (weight decay, dampening, Nesterov, AdamW, AMSGrad),
parameter groups, gradient clipping and the learning-rate schedulers against PyTorch, on every
device: trajectories of several steps from the same weights on the same batches, a compiled step
equal to the eager one, and schedules equal to torch's for 40 steps."""

import math

import numpy as np
import pytest
import torch
from helpers import new_rng, rand

import gpumat
import gpumat.nn as nn
import gpumat.nn.functional as F  # noqa: N812
from gpumat.optim import lr_scheduler as ls


def mlp():
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 4))


def torch_mlp():
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))


def twins(ctx):
    model, tmodel = mlp(), torch_mlp()
    tmodel.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    model.to(ctx)
    return model, tmodel


def groups_of(model):
    ps = list(model.parameters())
    return [{"params": ps[:2]}, {"params": ps[2:], "lr": 0.02, "weight_decay": 0.3}]


OPTIONS = {
    "sgd_wd": ("SGD", {"lr": 0.1, "weight_decay": 0.05}),
    "sgd_nesterov": ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True}),
    "sgd_dampening": ("SGD", {"lr": 0.05, "momentum": 0.8, "dampening": 0.3, "weight_decay": 1e-2}),
    "adam_wd": ("Adam", {"lr": 1e-2, "weight_decay": 0.1}),
    "adam_amsgrad": ("Adam", {"lr": 1e-2, "amsgrad": True, "betas": (0.8, 0.9)}),
    "adamw": ("AdamW", {"lr": 1e-2}),
    "adamw_amsgrad": ("AdamW", {"lr": 1e-2, "weight_decay": 0.2, "amsgrad": True}),
}


def run_both(ctx, kind, kw, grouped, steps=6, clip=None):
    rng, seed = new_rng()
    model, tmodel = twins(ctx)
    params = groups_of(model) if grouped else model.parameters()
    tparams = groups_of(tmodel) if grouped else tmodel.parameters()
    opt, topt = getattr(gpumat.optim, kind)(params, **kw), getattr(torch.optim, kind)(tparams, **kw)
    for step in range(steps):
        x, y = rand((10, 6), rng), rng.integers(0, 4, size=10)
        opt.zero_grad()
        loss = F.cross_entropy(model(gpumat.tensor(x, device=ctx)), gpumat.tensor(y, device=ctx))
        loss.backward()
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(y))
        tloss.backward()
        if clip is not None:
            n = nn.utils.clip_grad_norm_(model.parameters(), *clip)
            tn = torch.nn.utils.clip_grad_norm_(tmodel.parameters(), *clip)
            assert n.item() == pytest.approx(tn.item(), rel=1e-5), f"step {step} seed={seed}"
        opt.step()
        topt.step()
        assert loss.item() == pytest.approx(tloss.item(), rel=1e-4), f"step {step}, seed={seed}"
    tp = dict(tmodel.named_parameters())
    for k, p in model.named_parameters():
        np.testing.assert_allclose(
            p.detach().numpy(),
            tp[k].detach().numpy(),
            rtol=1e-4,
            atol=3e-6,
            err_msg=f"{k} seed={seed}",
        )
    return opt


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_options_match_torch(ctx, name, grouped):
    kind, kw = OPTIONS[name]
    run_both(ctx, kind, kw, grouped)


def test_groups_are_editable_between_steps(ctx):
    rng, seed = new_rng()
    model, tmodel = twins(ctx)
    opt = gpumat.optim.AdamW(groups_of(model), lr=1e-2)
    topt = torch.optim.AdamW(groups_of(tmodel), lr=1e-2)
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.3]
    for step in range(5):
        for g, tg in zip(opt.param_groups, topt.param_groups, strict=True):
            g["lr"] = tg["lr"] = 1e-2 / (step + 1)
        x, y = rand((10, 6), rng), rng.integers(0, 4, size=10)
        for m, o, lib in ((model, opt, gpumat), (tmodel, topt, torch)):
            o.zero_grad()
            if lib is gpumat:
                F.cross_entropy(
                    m(gpumat.tensor(x, device=ctx)), gpumat.tensor(y, device=ctx)
                ).backward()
            else:
                torch.nn.functional.cross_entropy(m(torch.tensor(x)), torch.tensor(y)).backward()
            o.step()
    tp = dict(tmodel.named_parameters())
    for k, p in model.named_parameters():
        np.testing.assert_allclose(
            p.detach().numpy(), tp[k].detach().numpy(), rtol=1e-4, atol=3e-6, err_msg=f"seed={seed}"
        )


def test_add_param_group_and_errors(ctx):
    a, b = nn.Linear(3, 2).to(ctx), nn.Linear(2, 2).to(ctx)
    opt = gpumat.optim.SGD(a.parameters(), lr=0.1, momentum=0.9)
    opt.add_param_group({"params": b.parameters(), "lr": 0.01})
    assert len(opt.param_groups) == 2 and opt.param_groups[1]["momentum"] == 0.9
    assert opt.param_groups[1]["lr"] == 0.01
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [a.weight]})
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        gpumat.optim.SGD(a.parameters(), lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        gpumat.optim.SGD(a.parameters(), lr=0.1, momentum=0.9, dampening=0.1, nesterov=True)
    with pytest.raises(ValueError, match="weight_decay"):
        gpumat.optim.AdamW(a.parameters(), weight_decay=-1)
    with pytest.raises(TypeError, match="amsgrad"):
        gpumat.optim.Adam(a.parameters(), amsgrad="yes")
    with pytest.raises(TypeError, match="unknown options"):
        gpumat.optim.Adam([{"params": a.parameters(), "momentum": 0.9}])
    # a group added after some steps starts with zero state
    x = gpumat.tensor(rand((4, 3), new_rng()[0]), device=ctx)
    b(a(x)).sum().backward()
    opt.step()
    c = nn.Linear(2, 1).to(ctx)
    opt.add_param_group({"params": c.parameters()})
    c(b(a(x))).sum().backward()
    opt.step()
    assert len(opt.velocities) == 6


@pytest.mark.parametrize("name", ["sgd_dampening", "adamw_amsgrad"])
def test_state_dict_keeps_groups_and_resumes(ctx, name):
    kind, kw = OPTIONS[name]
    rng, _ = new_rng()
    batches = [(rand((8, 6), rng), rng.integers(0, 4, size=8)) for _ in range(4)]

    def train(model, opt, bs):
        for x, y in bs:
            opt.zero_grad()
            F.cross_entropy(
                model(gpumat.tensor(x, device=ctx)), gpumat.tensor(y, device=ctx)
            ).backward()
            opt.step()

    model = mlp().to(ctx)
    opt = getattr(gpumat.optim, kind)(groups_of(model), **kw)
    train(model, opt, batches[:2])
    saved_model = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    saved = opt.state_dict()
    saved = {**saved, "tensors": {k: v.asnumpy().copy() for k, v in saved["tensors"].items()}}
    train(model, opt, batches[2:])
    model2 = mlp().to(ctx)
    model2.load_state_dict(saved_model)
    opt2 = getattr(gpumat.optim, kind)(groups_of(model2), lr=123.0)
    opt2.load_state_dict(saved)
    assert [g["lr"] for g in opt2.param_groups] == [g["lr"] for g in opt.param_groups]
    train(model2, opt2, batches[2:])
    for (k, p), p2 in zip(model.named_parameters(), model2.parameters(), strict=True):
        np.testing.assert_array_equal(p.detach().numpy(), p2.detach().numpy(), err_msg=k)


@pytest.mark.parametrize("name", ["sgd_nesterov", "adamw_amsgrad"])
def test_compiled_step_equals_eager(ctx, name):
    kind, kw = OPTIONS[name]
    rng, _ = new_rng()
    batches = [(rand((8, 6), rng), rng.integers(0, 4, size=8)) for _ in range(4)]
    results = []
    for compiled in (False, True):
        gpumat.manual_seed(3)
        model = mlp().to(ctx)
        opt = getattr(gpumat.optim, kind)(groups_of(model), **kw)

        def step(x, y, model=model, opt=opt):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss

        fn = gpumat.compile(step) if compiled else step
        losses = [
            fn(gpumat.tensor(x, device=ctx), gpumat.tensor(y, device=ctx)).item()
            for x, y in batches
        ]
        results.append((losses, [p.detach().numpy() for p in model.parameters()]))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6)
    for a, b in zip(results[0][1], results[1][1], strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


# ------------------------------------------------------------------------------------------------
# clipping
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("max_norm", [0.05, 100.0])
def test_clip_grad_norm_matches_torch(ctx, norm_type, max_norm):
    run_both(ctx, "SGD", {"lr": 0.1, "momentum": 0.9}, False, steps=3, clip=(max_norm, norm_type))


def test_clip_grad_norm_edges(ctx):
    lin = nn.Linear(3, 2).to(ctx)
    total = nn.utils.clip_grad_norm_(lin.parameters(), 1.0)
    assert total.item() == 0.0  # no gradients
    lin.weight.grad = gpumat.tensor(np.full((2, 3), np.nan, np.float32), device=ctx)
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_(lin.parameters(), 1.0, error_if_nonfinite=True)
    assert np.isnan(lin.weight.grad.numpy()).all()
    total = nn.utils.clip_grad_norm_(lin.weight, 1.0)
    assert math.isnan(total.item()) and total.shape == () and total.device == lin.weight.device
    with pytest.raises(ValueError, match="clip_grad_norm_: max_norm"):
        nn.utils.clip_grad_norm_(lin.parameters(), -1.0)
    with pytest.raises(ValueError, match="clip_grad_norm_: norm_type"):
        nn.utils.clip_grad_norm_(lin.parameters(), 1.0, norm_type=0)
    with pytest.raises(TypeError, match="clip_grad_norm_"):
        nn.utils.clip_grad_norm_([np.zeros(3)], 1.0)


def test_clip_grad_value_matches_torch(ctx):
    rng, _ = new_rng()
    g = rand((4, 5), rng) * 3
    lin, tlin = nn.Linear(5, 4).to(ctx), torch.nn.Linear(5, 4)
    lin.weight.grad = gpumat.tensor(g, device=ctx)
    tlin.weight.grad = torch.tensor(g)
    nn.utils.clip_grad_value_(lin.parameters(), 0.7)
    torch.nn.utils.clip_grad_value_(tlin.parameters(), 0.7)
    np.testing.assert_array_equal(lin.weight.grad.numpy(), tlin.weight.grad.numpy())
    assert lin.bias.grad is None
    with pytest.raises(ValueError, match="clip_grad_value_"):
        nn.utils.clip_grad_value_(lin.parameters(), float("inf"))
    with pytest.raises(ValueError, match="clip_grad_value_"):
        nn.utils.clip_grad_value_(lin.parameters(), -0.5)


# ------------------------------------------------------------------------------------------------
# schedulers
# ------------------------------------------------------------------------------------------------


def sched_pair(make, kind="SGD", **kw):
    p = [gpumat.tensor([1.0], requires_grad=True), gpumat.tensor([2.0], requires_grad=True)]
    tp = [torch.tensor([1.0], requires_grad=True), torch.tensor([2.0], requires_grad=True)]
    opt = getattr(gpumat.optim, kind)(
        [{"params": [p[0]]}, {"params": [p[1]], "lr": 0.05}], lr=0.1, **kw
    )
    topt = getattr(torch.optim, kind)(
        [{"params": [tp[0]]}, {"params": [tp[1]], "lr": 0.05}], lr=0.1, **kw
    )
    return make(gpumat.optim.lr_scheduler, opt), make(torch.optim.lr_scheduler, topt), opt, topt


SCHEDULES = {
    "cosine": lambda m, o: m.CosineAnnealingLR(o, T_max=10, eta_min=1e-3),
    "lambda": lambda m, o: m.LambdaLR(o, [lambda e: 0.95**e, lambda e: 1 / (e + 1)]),
    "linear": lambda m, o: m.LinearLR(o, start_factor=0.1, end_factor=0.9, total_iters=12),
    "onecycle": lambda m, o: m.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=45),
    "onecycle3": lambda m, o: m.OneCycleLR(
        o,
        max_lr=0.3,
        epochs=5,
        steps_per_epoch=9,
        pct_start=0.25,
        anneal_strategy="linear",
        three_phase=True,
    ),
    "sequential": lambda m, o: m.SequentialLR(
        o,
        [m.LinearLR(o, start_factor=0.01, total_iters=5), m.CosineAnnealingLR(o, T_max=30)],
        milestones=[5],
    ),
    "step": lambda m, o: m.StepLR(o, step_size=4, gamma=0.5),
}


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@pytest.mark.parametrize("kind", ["SGD", "Adam"])
def test_schedules_match_torch(name, kind):
    kw = {"momentum": 0.9} if kind == "SGD" else {}
    s, ts, opt, topt = sched_pair(SCHEDULES[name], kind, **kw)
    for step in range(44):
        assert s.get_last_lr() == ts.get_last_lr(), f"{name} step {step}"
        for g, tg in zip(opt.param_groups, topt.param_groups, strict=True):
            assert g["lr"] == tg["lr"]
            if "betas" in tg:
                assert tuple(g["betas"]) == tuple(tg["betas"])
            if "momentum" in tg:
                assert g["momentum"] == tg["momentum"]
        topt.step()
        s.step()
        ts.step()


def test_schedule_errors():
    p = [gpumat.tensor([1.0], requires_grad=True)]
    opt = gpumat.optim.SGD(p, lr=0.1)
    with pytest.raises(ValueError, match="total_steps"):
        ls.OneCycleLR(opt, max_lr=1.0)
    with pytest.raises(ValueError, match="pct_start"):
        ls.OneCycleLR(opt, max_lr=1.0, total_steps=10, pct_start=2.0)
    with pytest.raises(ValueError, match="momentum or beta1"):
        ls.OneCycleLR(gpumat.optim.Adadelta(p), max_lr=1.0, total_steps=10)
    with pytest.raises(ValueError, match="T_max"):
        ls.CosineAnnealingLR(opt, T_max=0)
    with pytest.raises(ValueError, match="Starting multiplicative factor"):
        ls.LinearLR(opt, start_factor=0)
    with pytest.raises(ValueError, match="milestones"):
        ls.SequentialLR(opt, [ls.StepLR(opt, 2)], milestones=[3])
    with pytest.raises(TypeError, match="callable"):
        ls.LambdaLR(opt, 0.5)
    one = ls.OneCycleLR(gpumat.optim.SGD(p, lr=0.1), max_lr=1.0, total_steps=3)
    for _ in range(3):
        one.step()
    with pytest.raises(ValueError, match="tried to step 4 times"):
        one.step()
