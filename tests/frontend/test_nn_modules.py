"""gpumat.nn: Module registration, traversal, modes, devices and state dicts; the layers against
torch with the same weights (values and gradients); PyTorch's default initialisations."""

import collections
import math

import numpy as np
import pytest
import torch
from helpers import new_rng, rand

import gpumat
import gpumat.nn as nn
import gpumat.nn.functional as F  # noqa: N812


class Net(nn.Module):
    """The PyTorch MNIST example's network (examples/mnist_net.py), on small images: 12x12."""

    def __init__(self, fc_in: int = 256) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(fc_in, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = self.dropout2(F.relu(self.fc1(gpumat.flatten(x, 1))))
        return F.log_softmax(self.fc2(x), dim=1)


class TorchNet(torch.nn.Module):
    def __init__(self, fc_in: int = 256) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 8, 3, 1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = torch.nn.Dropout(0.25)
        self.dropout2 = torch.nn.Dropout(0.5)
        self.fc1 = torch.nn.Linear(fc_in, 32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x):
        tf = torch.nn.functional
        x = tf.relu(self.conv2(tf.relu(self.conv1(x))))
        x = self.dropout1(tf.max_pool2d(x, 2))
        x = self.dropout2(tf.relu(self.fc1(torch.flatten(x, 1))))
        return tf.log_softmax(self.fc2(x), dim=1)


def copy_to_torch(model, tmodel):
    sd = {k: torch.tensor(v.numpy()) for k, v in model.state_dict().items()}
    tmodel.load_state_dict(sd)


def test_names_layouts_and_order_match_torch():
    g, t = Net(), TorchNet()
    assert [(k, v.shape) for k, v in g.state_dict().items()] == [
        (k, tuple(v.shape)) for k, v in t.state_dict().items()
    ]
    assert [n for n, _ in g.named_parameters()] == [n for n, _ in t.named_parameters()]
    assert [n for n, _ in g.named_children()] == [n for n, _ in t.named_children()]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in g.parameters())
    assert len(list(g.modules())) == 7 and "fc1" in dir(g)
    assert "Linear(in_features=256, out_features=32, bias=True)" in repr(g)


@pytest.mark.parametrize("layer", ["linear", "conv"])
def test_default_initialisation_is_pytorchs(layer):
    gpumat.manual_seed(3)
    m = nn.Linear(400, 300) if layer == "linear" else nn.Conv2d(16, 64, 5)
    fan_in = 400 if layer == "linear" else 16 * 25
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform_(a=sqrt(5)) is U(+-1/sqrt(fan_in))
    w = m.weight.detach().numpy()
    b = m.bias.detach().numpy()
    for values in (w, b):
        assert np.abs(values).max() <= bound
    # U(-b, b): mean 0, variance b^2/3; 120,000 (102,400) draws give ~0.5% errors
    assert abs(w.mean()) < 0.02 * bound
    assert abs(w.var() / (bound**2 / 3) - 1) < 0.03
    assert np.abs(b).max() > 0.9 * bound
    gpumat.manual_seed(3)
    again = nn.Linear(400, 300) if layer == "linear" else nn.Conv2d(16, 64, 5)
    np.testing.assert_array_equal(again.weight.detach().numpy(), w)


def test_forward_and_backward_match_torch_with_the_same_weights(ctx):
    rng, seed = new_rng()
    g, t = Net(), TorchNet()
    copy_to_torch(g, t)
    g.to(ctx).eval()  # eval: dropout is the identity in both
    t.eval()
    x = rand((4, 1, 12, 12), rng)
    y = rng.integers(0, 10, size=4)
    out = g(gpumat.tensor(x, device=ctx))
    loss = F.nll_loss(out, gpumat.tensor(y, device=ctx))
    loss.backward()
    tout = t(torch.tensor(x))
    tloss = torch.nn.functional.nll_loss(tout, torch.tensor(y))
    tloss.backward()
    msg = f"seed={seed}"
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    assert loss.item() == pytest.approx(tloss.item(), rel=1e-5), msg
    tgrads = dict(t.named_parameters())
    for name, p in g.named_parameters():
        np.testing.assert_allclose(
            p.grad.numpy(), tgrads[name].grad.numpy(), rtol=1e-3, atol=1e-5, err_msg=name
        )


def test_layers_as_modules_match_torch(ctx):
    rng, _ = new_rng()
    x = rand((2, 3, 6, 6), rng)
    pairs = [
        (nn.MaxPool2d(2), torch.nn.MaxPool2d(2)),
        (nn.AvgPool2d(3, stride=1, padding=1), torch.nn.AvgPool2d(3, stride=1, padding=1)),
        (nn.ReLU(), torch.nn.ReLU()),
        (nn.Tanh(), torch.nn.Tanh()),
        (nn.Sigmoid(), torch.nn.Sigmoid()),
        (nn.Flatten(), torch.nn.Flatten()),
        (nn.Softmax(1), torch.nn.Softmax(1)),
        (nn.LogSoftmax(dim=1), torch.nn.LogSoftmax(dim=1)),
        (nn.Identity(), torch.nn.Identity()),
        (nn.Sequential(nn.ReLU(), nn.Flatten()), torch.nn.Sequential(torch.nn.ReLU(),
                                                                      torch.nn.Flatten())),
    ]  # fmt: skip
    for g, t in pairs:
        got = g(gpumat.tensor(x, device=ctx)).numpy()
        np.testing.assert_allclose(got, t(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)
    a, b = rand((5, 4), rng), rand((5, 4), rng)
    for g, t in [(nn.MSELoss(), torch.nn.MSELoss()), (nn.L1Loss(reduction="sum"),
                 torch.nn.L1Loss(reduction="sum"))]:  # fmt: skip
        got = g(gpumat.tensor(a, device=ctx), gpumat.tensor(b, device=ctx)).item()
        assert got == pytest.approx(t(torch.tensor(a), torch.tensor(b)).item(), rel=1e-5)
    labels = rng.integers(0, 4, size=5)
    for g, t in [(nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()),
                 (nn.NLLLoss(), torch.nn.NLLLoss())]:  # fmt: skip
        got = g(gpumat.tensor(a, device=ctx), gpumat.tensor(labels, device=ctx)).item()
        assert got == pytest.approx(t(torch.tensor(a), torch.tensor(labels)).item(), rel=1e-5)


def test_train_eval_and_dropout_modes(ctx):
    m = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).to(ctx)
    x = gpumat.ones(4, 8, device=ctx)
    assert m.training and m[1].training
    m.eval()
    assert not m.training and not m[1].training
    np.testing.assert_array_equal(m(x).detach().numpy(), m[0](x).detach().numpy())
    m.train()
    y = m(x).detach().numpy()
    assert (y == 0).any()
    with pytest.raises(TypeError):
        m.train("yes")


def test_to_moves_parameters_in_place(gpu_ctx):
    m = Net()
    params = list(m.parameters())
    before = {k: v.numpy() for k, v in m.state_dict().items()}
    m(gpumat.ones(1, 1, 12, 12)).sum().backward()
    assert m.to(gpu_ctx) is m
    assert list(m.parameters()) == params  # the same objects: optimizers keep them
    assert all(p.device == gpu_ctx and p.grad.device == gpu_ctx for p in params)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    m.to("cpu")
    assert all(p.device == gpumat.cpu() for p in m.parameters())
    with pytest.raises(TypeError, match="float32"):
        m.to(gpumat.int64)


def test_zero_grad_and_requires_grad():
    m = nn.Linear(3, 2)
    m(gpumat.ones(1, 3)).sum().backward()
    m.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(m.weight.grad.numpy(), np.zeros((2, 3)))
    m.zero_grad()
    assert m.weight.grad is None
    m.requires_grad_(False)
    assert not m(gpumat.ones(1, 3)).requires_grad


def test_load_state_dict_checks_before_copying():
    m = nn.Linear(3, 2)
    sd = m.state_dict()
    w0 = sd["weight"].numpy().copy()
    bad = collections.OrderedDict(weight=np.zeros((2, 3), np.float32), bias=np.zeros(5))
    with pytest.raises(ValueError, match="size mismatch for bias"):
        m.load_state_dict(bad)
    np.testing.assert_array_equal(m.weight.detach().numpy(), w0)  # nothing copied
    with pytest.raises(ValueError, match="Missing key.*bias"):
        m.load_state_dict({"weight": np.ones((2, 3), np.float32)})
    with pytest.raises(ValueError, match="Unexpected key.*extra"):
        m.load_state_dict({**sd, "extra": np.ones(1)})
    result = m.load_state_dict({"weight": np.ones((2, 3), np.float32)}, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == []
    np.testing.assert_array_equal(m.weight.detach().numpy(), np.ones((2, 3)))
    with pytest.raises(TypeError):
        m.load_state_dict([1, 2])


def test_registration_rules():
    class Bare(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(gpumat.ones(2))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Bare()
    m = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="parameter 'weight'"):
        m.weight = gpumat.ones(2, 2)
    m.register_buffer("steps", gpumat.zeros(1))
    assert "steps" in m.state_dict()
    m.register_buffer("scratch", gpumat.zeros(1), persistent=False)
    assert "scratch" not in m.state_dict()
    with pytest.raises(KeyError):
        m.register_parameter("a.b", None)
    with pytest.raises(NotImplementedError, match="forward"):
        nn.Module()(1)
    with pytest.raises(ValueError, match="dilation"):
        nn.Conv2d(1, 2, 3, dilation=2)
    with pytest.raises(ValueError):
        nn.Dropout(1.5)
