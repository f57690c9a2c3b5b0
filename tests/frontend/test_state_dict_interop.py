"""Checkpoints of the front end: gpumat.save(model.state_dict(), path) and
model.load_state_dict(gpumat.load(path)) through safetensors files, round trips with PyTorch both
ways (safetensors.torch), the same outputs from the same weights, and the errors."""

import numpy as np
import pytest
import safetensors.torch
import torch
from helpers import new_rng, rand
from test_nn_modules import Net, TorchNet

import gpumat


def test_gpumat_to_torch(ctx, tmp_path):
    rng, _ = new_rng()
    model = Net().to(ctx).eval()
    path = tmp_path / "net.safetensors"
    gpumat.save(model.state_dict(), path)
    tmodel = TorchNet().eval()
    tmodel.load_state_dict(safetensors.torch.load_file(path))  # strict: names and shapes match
    x = rand((3, 1, 12, 12), rng)
    got = model(gpumat.tensor(x, device=ctx)).detach().numpy()
    np.testing.assert_allclose(got, tmodel(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_torch_to_gpumat(ctx, tmp_path):
    rng, _ = new_rng()
    tmodel = TorchNet().eval()
    path = tmp_path / "torch_net.safetensors"
    safetensors.torch.save_file(tmodel.state_dict(), path)
    model = Net().to(ctx).eval()
    params = list(model.parameters())
    model.load_state_dict(gpumat.load(path, map_location=ctx))
    assert list(model.parameters()) == params  # loaded in place
    for k, v in tmodel.state_dict().items():
        np.testing.assert_array_equal(model.state_dict()[k].numpy(), v.numpy(), err_msg=k)
    x = rand((3, 1, 12, 12), rng)
    got = model(gpumat.tensor(x, device=ctx)).detach().numpy()
    np.testing.assert_allclose(got, tmodel(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_round_trip_and_devices(tmp_path, gpu_ctx):
    model = Net()
    path = tmp_path / "m.safetensors"
    gpumat.save(model.state_dict(), str(path))
    loaded = gpumat.load(path, "emu" if gpu_ctx.device_type == "emu" else gpu_ctx)
    assert all(t.device == gpu_ctx and t.dtype is gpumat.float32 for t in loaded.values())
    other = Net().to(gpu_ctx)
    other.load_state_dict(loaded)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(other.state_dict()[k].numpy(), v.numpy())
    # the older argument order of gpumat.save (path first) still works
    gpumat.save(path, {"w": gpumat.ones(2)})
    assert gpumat.load(path)["w"].tolist() == [1.0, 1.0]


def test_errors(tmp_path):
    path = tmp_path / "x.safetensors"
    with pytest.raises(TypeError, match="state_dict"):
        gpumat.save(Net(), path)
    with pytest.raises(TypeError, match="float32"):
        gpumat.save({"labels": gpumat.tensor([1, 2])}, path)
    with pytest.raises(TypeError, match="file path"):
        gpumat.save({"w": gpumat.ones(1)}, 3)
    gpumat.save({"fc1.weight": gpumat.ones(2, 2)}, path)
    with pytest.raises(ValueError, match="size mismatch for fc1.weight"):
        Net().load_state_dict(gpumat.load(path), strict=False)
    with pytest.raises(ValueError, match="unknown device"):
        gpumat.load(path, map_location="tpu")


def test_a_module_registered_under_two_names_is_listed_under_both(ctx):
    # PyTorch's state_dict lists a shared submodule under every name it is registered by; gpumat
    # listed it once, so such PyTorch checkpoints did not load (missing keys).
    class Shared(gpumat.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = gpumat.nn.Linear(4, 3)
            self.tied = self.encoder
            self.head = gpumat.nn.Sequential(gpumat.nn.ReLU(), gpumat.nn.Linear(3, 2))

        def forward(self, x):
            return self.head(self.tied(x))

    class TorchShared(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = torch.nn.Linear(4, 3)
            self.tied = self.encoder
            self.head = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(3, 2))

        def forward(self, x):
            return self.head(self.tied(x))

    ours, theirs = Shared().to(ctx), TorchShared()
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()})
    for name, value in theirs.state_dict().items():
        np.testing.assert_array_equal(ours.state_dict()[name].numpy(), value.detach().numpy())
    assert len(list(ours.parameters())) == len(list(theirs.parameters())) == 4
    x = rand((5, 4))
    want = theirs(torch.from_numpy(x)).detach().numpy()
    got = ours(gpumat.tensor(x, device=ctx)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
