"""gpumat.optim over model.parameters(): SGD (with and without momentum), Adam and Adadelta against
torch.optim from the same initial weights on the same batches (a few steps agree within float32
bounds), StepLR's rates against torch's (bit for bit), state dicts that resume training bit for
bit, zero_grad, skipped parameters and closures, on every device."""

import numpy as np
import pytest
import torch
from helpers import new_rng, rand

import gpumat
import gpumat.nn as nn
import gpumat.nn.functional as F  # noqa: N812
from gpumat.optim.lr_scheduler import StepLR


def mlp():
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 4))


def torch_mlp():
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))


OPTIMIZERS = {
    "sgd": (lambda p: gpumat.optim.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1)),
    "sgd_momentum": (
        lambda p: gpumat.optim.SGD(p, lr=0.05, momentum=0.9),
        lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    ),
    "adam": (
        lambda p: gpumat.optim.Adam(p, lr=1e-2, betas=(0.8, 0.99), eps=1e-7),
        lambda p: torch.optim.Adam(p, lr=1e-2, betas=(0.8, 0.99), eps=1e-7),
    ),
    "adadelta": (
        lambda p: gpumat.optim.Adadelta(p, lr=1.0),
        lambda p: torch.optim.Adadelta(p, lr=1.0),
    ),
    "adadelta_rho": (
        lambda p: gpumat.optim.Adadelta(p, lr=0.5, rho=0.7, eps=1e-5),
        lambda p: torch.optim.Adadelta(p, lr=0.5, rho=0.7, eps=1e-5),
    ),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_steps_match_torch(ctx, name):
    make, make_torch = OPTIMIZERS[name]
    rng, seed = new_rng()
    model, tmodel = mlp(), torch_mlp()
    tmodel.load_state_dict({k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()})
    model.to(ctx)
    opt, topt = make(model.parameters()), make_torch(tmodel.parameters())
    for step in range(5):
        x, y = rand((10, 6), rng), rng.integers(0, 4, size=10)
        opt.zero_grad()
        loss = F.cross_entropy(model(gpumat.tensor(x, device=ctx)), gpumat.tensor(y, device=ctx))
        loss.backward()
        opt.step()
        topt.zero_grad()
        tloss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(y))
        tloss.backward()
        topt.step()
        assert loss.item() == pytest.approx(tloss.item(), rel=1e-4), f"step {step}, seed={seed}"
    tparams = dict(tmodel.named_parameters())
    for k, p in model.named_parameters():
        np.testing.assert_allclose(
            p.detach().numpy(),
            tparams[k].detach().numpy(),
            rtol=1e-4,
            atol=2e-6,
            err_msg=f"{name} {k} on {ctx} (seed={seed})",
        )


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_state_dict_resumes_bit_for_bit(ctx, name):
    make, _ = OPTIMIZERS[name]
    rng, _ = new_rng()
    batches = [(rand((8, 6), rng), rng.integers(0, 4, size=8)) for _ in range(6)]
    a = mlp().to(ctx)
    b = mlp().to(ctx)
    b.load_state_dict(a.state_dict())
    opt_a, opt_b = make(a.parameters()), make(b.parameters())

    def step(model, opt, x, y):
        opt.zero_grad()
        out = model(gpumat.tensor(x, device=ctx))
        F.cross_entropy(out, gpumat.tensor(y, device=ctx)).backward()
        opt.step()

    for x, y in batches[:3]:
        step(a, opt_a, x, y)
        step(b, opt_b, x, y)
    # a new model and optimizer take over b's state in the middle of training
    c = mlp().to(ctx)
    c.load_state_dict(b.state_dict())
    opt_c = make(c.parameters())
    opt_c.load_state_dict(opt_b.state_dict())
    for x, y in batches[3:]:
        step(a, opt_a, x, y)
        step(c, opt_c, x, y)
    for (k, p), q in zip(a.named_parameters(), c.parameters(), strict=True):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy(), err_msg=k)
    with pytest.raises(ValueError, match="state is of a"):
        gpumat.optim.SGD(c.parameters(), lr=0.1).load_state_dict({"type": "Adam", "tensors": {}})


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")
def test_step_lr_matches_torch_bit_for_bit():
    p = [nn.Parameter(gpumat.zeros(1))]
    tp = [torch.nn.Parameter(torch.zeros(1))]
    opt = gpumat.optim.Adadelta(p, lr=1.0)
    topt = torch.optim.Adadelta(tp, lr=1.0)
    sched = StepLR(opt, step_size=1, gamma=0.7)
    tsched = torch.optim.lr_scheduler.StepLR(topt, step_size=1, gamma=0.7)
    sched2 = StepLR(gpumat.optim.SGD(p, lr=0.3), step_size=3, gamma=0.1)
    tsched2 = torch.optim.lr_scheduler.StepLR(torch.optim.SGD(tp, lr=0.3), step_size=3, gamma=0.1)
    for _ in range(12):
        assert opt.param_groups[0]["lr"] == topt.param_groups[0]["lr"]
        assert sched.get_last_lr() == tsched.get_last_lr()
        assert sched2.get_last_lr() == tsched2.get_last_lr()
        sched.step()
        tsched.step()
        sched2.step()
        tsched2.step()
    assert opt.lr == topt.param_groups[0]["lr"]
    restored = StepLR(gpumat.optim.SGD(p, lr=1.0), step_size=1, gamma=0.7)
    restored.load_state_dict(sched.state_dict())
    assert restored.last_epoch == sched.last_epoch
    with pytest.raises(ValueError):
        StepLR(opt, step_size=0)
    with pytest.raises(TypeError):
        StepLR(object(), step_size=1)


def test_zero_grad_skipped_parameters_and_closures(ctx):
    w = nn.Parameter(gpumat.tensor([1.0, 2.0], device=ctx))
    unused = nn.Parameter(gpumat.tensor([5.0], device=ctx))
    opt = gpumat.optim.SGD([w, unused], lr=0.5, momentum=0.5)

    def closure():
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.item() == 5.0
    np.testing.assert_allclose(w.detach().numpy(), [0.0, 0.0])  # w - 0.5 * 2w
    assert unused.grad is None and unused.item() == 5.0  # no gradient: not updated
    assert w._version == 1  # the update is an in-place change
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 0.0])
    opt.zero_grad()
    assert w.grad is None
    assert "momentum=0.5" in repr(opt)
    opt.param_groups[0]["lr"] = -1.0  # checked at the next step
    w.grad = gpumat.ones(2, device=ctx)
    with pytest.raises(ValueError, match="learning rate"):
        opt.step()


def test_parameter_list_errors():
    with pytest.raises(ValueError, match="empty parameter list"):
        gpumat.optim.SGD([], lr=0.1)
    with pytest.raises(TypeError, match="parameter 1"):
        gpumat.optim.Adam([nn.Parameter(gpumat.zeros(2)), np.zeros(2)])
    with pytest.raises(TypeError, match="float32"):
        gpumat.optim.SGD([gpumat.tensor([1, 2])], lr=0.1)
    w = nn.Parameter(gpumat.zeros(2))
    with pytest.raises(ValueError, match="non-leaf"):
        gpumat.optim.SGD([w * 2.0], lr=0.1)
    with pytest.raises(ValueError, match="more than once"):
        gpumat.optim.SGD([w, w], lr=0.1)
    with pytest.raises(TypeError, match="step\\(\\)"):
        gpumat.optim.SGD([w], lr=0.1).step([w])
    group = gpumat.optim.Adam([{"params": [w], "lr": 0.5}])
    assert group.lr == 0.5
    with pytest.raises(ValueError, match="empty parameter list"):
        gpumat.optim.Adam([{"params": [w]}, {"params": []}])
    with pytest.raises(ValueError, match="more than one parameter group"):
        gpumat.optim.Adam([{"params": [w]}, {"params": [w]}])
    with pytest.raises(ValueError, match="rho"):
        gpumat.optim.Adadelta([w], rho=1.5)
