"""MiniTorch Module 4's MNIST network, written our own way against PyTorch's API.

Follows minitorch/minitorch ``project/run_mnist_multiclass.py`` and the Module 4 functions it uses
(``minitorch/nn.py``: ``tile``, ``avgpool2d``, ``max``, ``softmax``/``logsoftmax``, ``dropout``),
with minitorch's tensor calls replaced by torch's: parameters ``RParam`` =
``nn.Parameter(0.1 * (torch.rand(shape) - 0.5))``; ``Linear`` stores (in, out) weights and computes
``(x.view(batch, in_size) @ self.weights.view(in_size, out_size)).view(batch, out_size) + bias``;
``Conv2d`` is ``F.conv2d(F.pad(input, (0, kw - 1, 0, kh - 1)), self.weights) + self.bias`` with a
(out, 1, 1) bias (minitorch's convolution keeps the input's size, anchored at the top left);
``tile`` reshapes with ``contiguous().view`` and ``permute``; ``avgpool2d`` is ``tile`` then
``mean(4)``;
``logsoftmax`` subtracts the ``max(dim, keepdim=True)`` before ``exp().sum(dim).log()``;
``dropout`` multiplies by the comparison ``torch.rand(input.shape) > rate`` (no rescaling, as
minitorch's); the loss is minitorch's one-hot negative log-likelihood ``-(out * y).sum(1) /
y.shape[0]`` summed and ``view(1)``-ed before ``backward()``, with ``x.requires_grad_(True)`` and
``y.requires_grad_(True)`` on the batch, trained by ``torch.optim.SGD`` over ``BATCH`` slices of
Python lists turned into tensors with ``torch.tensor``. The original reads MNIST with
``python-mnist`` (``mndata.load_training()``: lists of 784 ints); here the images are synthetic
class templates plus noise, made with numpy from a seed, kept as Python lists as the original's.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
C = 10
H, W = 28, 28


def RParam(*shape):
    r = 0.1 * (torch.rand(shape) - 0.5)
    return nn.Parameter(r)


def tile(input, kernel):
    batch, channel, height, width = input.shape
    kh, kw = kernel
    new_height, new_width = height // kh, width // kw
    x = input.contiguous().view(batch, channel, height, new_width, kw)
    x = x.permute(0, 1, 3, 2, 4).contiguous()
    x = x.view(batch, channel, new_width, new_height, kh * kw)
    return x.permute(0, 1, 3, 2, 4).contiguous(), new_height, new_width


def avgpool2d(input, kernel):
    batch, channel = input.shape[:2]
    x, new_height, new_width = tile(input, kernel)
    return x.mean(4).view(batch, channel, new_height, new_width)


def logsoftmax(input, dim):
    m = input.max(dim, keepdim=True)[0]
    return input - ((input - m).exp().sum(dim, keepdim=True).log() + m)


def dropout(input, rate, ignore=False):
    if ignore or rate == 0.0:
        return input
    return input * (torch.rand(input.shape) > rate)


class Linear(nn.Module):
    def __init__(self, in_size, out_size):
        super().__init__()
        self.weights = RParam(in_size, out_size)
        self.bias = RParam(out_size)
        self.out_size = out_size

    def forward(self, x):
        batch, in_size = x.shape
        return (x.view(batch, in_size) @ self.weights.view(in_size, self.out_size)).view(
            batch, self.out_size
        ) + self.bias


class Conv2d(nn.Module):
    def __init__(self, in_channels, out_channels, kh, kw):
        super().__init__()
        self.weights = RParam(out_channels, in_channels, kh, kw)
        self.bias = RParam(out_channels, 1, 1)

    def forward(self, input):
        kh, kw = self.weights.shape[2:]
        # minitorch's conv2d keeps the input's size, the kernel anchored at each pixel's top left
        return F.conv2d(F.pad(input, (0, kw - 1, 0, kh - 1)), self.weights) + self.bias


class Network(nn.Module):
    def __init__(self, rate=0.25):
        super().__init__()
        self.conv1 = Conv2d(1, 4, 3, 3)
        self.conv2 = Conv2d(4, 8, 3, 3)
        self.linear1 = Linear(392, 64)
        self.linear2 = Linear(64, C)
        self.rate = rate

    def forward(self, x):
        x = self.conv1(x).relu()
        x = self.conv2(x).relu()
        x = avgpool2d(x, (4, 4))
        x = self.linear1(x.view(BATCH, 392)).relu()
        x = dropout(x, self.rate, not self.training)
        x = self.linear2(x)
        return logsoftmax(x, dim=1)


def make_data(n=128, seed=0):
    """(X, ys): n images as nested lists (H, W) and one-hot label lists, as make_mnist's."""
    templates = (np.random.default_rng(1234).random((10, H, W)) > 0.7).astype(np.float32)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = 0.8 * templates[labels] + 0.2 * rng.random((n, H, W), dtype=np.float32)
    ys = []
    for y in labels:
        vals = [0.0] * 10
        vals[y] = 1.0
        ys.append(vals)
    return images.tolist(), ys


def build_model(rate=0.25):
    return Network(rate)


def train(model, data, steps, learning_rate=0.05):
    X_train, y_train = data
    n_training_samples = len(X_train)
    optim = torch.optim.SGD(model.parameters(), learning_rate)
    losses = []
    while len(losses) < steps:
        model.train()
        for example_num in range(0, n_training_samples, BATCH):
            if n_training_samples - example_num <= BATCH:
                continue
            y = torch.tensor(y_train[example_num : example_num + BATCH])
            x = torch.tensor(X_train[example_num : example_num + BATCH])
            x.requires_grad_(True)
            y.requires_grad_(True)
            out = model.forward(x.view(BATCH, 1, H, W)).view(BATCH, C)
            prob = (out * y).sum(1)
            loss = -(prob / y.shape[0]).sum()
            optim.zero_grad()
            loss.view(1).backward()
            optim.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
    return losses


def main(steps=12):
    torch.manual_seed(0)
    model = build_model()
    losses = train(model, make_data(), steps)
    X_val, y_val = make_data(64, seed=1)
    model.eval()
    correct = 0
    for val_example_num in range(0, len(X_val), BATCH):
        x = torch.tensor(X_val[val_example_num : val_example_num + BATCH])
        y = torch.tensor(y_val[val_example_num : val_example_num + BATCH])
        out = model.forward(x.view(BATCH, 1, H, W)).view(BATCH, C)
        correct += (out.argmax(1) == y.argmax(1)).sum().item()
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}; valid {correct}/{len(X_val)}")
    return losses


if __name__ == "__main__":
    main()
