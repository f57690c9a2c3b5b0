"""The PyTorch tutorial "What is torch.nn really?", written our own way, stage by stage.

Follows pytorch/tutorials ``beginner_source/nn_tutorial.py``. Data: ``map(torch.tensor, (x_train,
y_train, x_valid, y_valid))``, ``x_train.shape``, ``y_train.min()`` / ``max()``. Stages (the
``VARIANTS``):

- ``manual``: logistic regression from scratch: ``torch.randn(784, 10) / math.sqrt(784)``,
  ``weights.requires_grad_()``, ``torch.zeros(10, requires_grad=True)``, a hand-written
  ``log_softmax`` (``x - x.exp().sum(-1).log().unsqueeze(-1)``), ``xb @ weights + bias``, the
  negative log-likelihood by advanced indexing ``-input[range(target.shape[0]), target].mean()``,
  ``accuracy`` with ``torch.argmax(out, dim=1)`` and ``(preds == yb).float().mean()``, and the
  update ``weights -= weights.grad * lr`` under ``torch.no_grad()`` then ``weights.grad.zero_()``.
- ``module``: ``Mnist_Logistic(nn.Module)`` holding ``nn.Parameter``s, ``F.cross_entropy``, and
  ``for p in model.parameters(): p -= p.grad * lr`` then ``model.zero_grad()``.
- ``linear``: ``nn.Linear``, ``optim.SGD``, batches by slicing a ``TensorDataset``
  (``train_ds[i * bs : i * bs + bs]``).
- ``cnn``: ``Mnist_CNN`` (three ``nn.Conv2d(kernel_size=3, stride=2, padding=1)``, ``F.relu``,
  ``F.avg_pool2d(xb, 4)``, ``xb.view(-1, xb.size(1))``), ``optim.SGD(momentum=0.9)``, ``get_data``
  with a shuffled ``DataLoader``, ``loss_batch`` / ``fit`` with validation under ``model.eval()``
  and ``torch.no_grad()`` (``zip(*[...])``, ``np.sum(np.multiply(losses, nums)) / np.sum(nums)``).
- ``sequential``: ``nn.Sequential`` with a ``Lambda`` module (``preprocess`` with
  ``x.view(-1, 1, 28, 28)``), ``nn.ReLU``, ``nn.AdaptiveAvgPool2d(1)`` and
  ``Lambda(lambda x: x.view(x.size(0), -1))``, fed by a ``WrappedDataLoader``.

The original downloads the pickled MNIST (``mnist.pkl.gz``: (50000, 784) float32 rows in [0, 1]);
here the rows are synthetic class templates plus noise, made with numpy from a seed.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset

VARIANTS = ("manual", "module", "linear", "cnn", "sequential")
bs = 32
lr = 0.5


def make_data(n=256, seed=0):
    """(x_train, y_train, x_valid, y_valid): (n, 784) float32 rows and int64 labels."""
    templates = (np.random.default_rng(1234).random((10, 784)) > 0.7).astype(np.float32)
    rng = np.random.default_rng(seed)
    arrays = []
    for m in (n, n // 4):
        labels = rng.integers(0, 10, m)
        rows = 0.8 * templates[labels] + 0.2 * rng.random((m, 784), dtype=np.float32)
        arrays += [rows.astype(np.float32), labels]
    return tuple(map(torch.tensor, arrays))


def log_softmax(x):
    return x - x.exp().sum(-1).log().unsqueeze(-1)


def nll(input, target):
    return -input[range(target.shape[0]), target].mean()


def accuracy(out, yb):
    preds = torch.argmax(out, dim=1)
    return (preds == yb).float().mean()


class Mnist_Logistic(nn.Module):
    def __init__(self):
        super().__init__()
        self.weights = nn.Parameter(torch.randn(784, 10) / math.sqrt(784))
        self.bias = nn.Parameter(torch.zeros(10))

    def forward(self, xb):
        return xb @ self.weights + self.bias


class Mnist_CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1)

    def forward(self, xb):
        xb = xb.view(-1, 1, 28, 28)
        xb = F.relu(self.conv1(xb))
        xb = F.relu(self.conv2(xb))
        xb = F.relu(self.conv3(xb))
        xb = F.avg_pool2d(xb, 4)
        return xb.view(-1, xb.size(1))


class Lambda(nn.Module):
    def __init__(self, func):
        super().__init__()
        self.func = func

    def forward(self, x):
        return self.func(x)


def preprocess(x):
    return x.view(-1, 1, 28, 28)


class WrappedDataLoader:
    def __init__(self, dl, func):
        self.dl = dl
        self.func = func

    def __len__(self):
        return len(self.dl)

    def __iter__(self):
        for b in self.dl:
            yield self.func(*b)


def build_model(variant="sequential"):
    if variant == "manual":
        weights = torch.randn(784, 10) / math.sqrt(784)
        weights.requires_grad_()
        return {"weights": weights, "bias": torch.zeros(10, requires_grad=True)}
    if variant == "module":
        return Mnist_Logistic()
    if variant == "linear":
        return nn.Linear(784, 10)
    if variant == "cnn":
        return Mnist_CNN()
    return nn.Sequential(
        Lambda(preprocess),
        nn.Conv2d(1, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 16, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 10, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        Lambda(lambda x: x.view(x.size(0), -1)),
    )


def get_data(train_ds, valid_ds, bs, shuffle=True):
    return (
        DataLoader(train_ds, batch_size=bs, shuffle=shuffle),
        DataLoader(valid_ds, batch_size=bs * 2),
    )


def loss_batch(model, loss_func, xb, yb, opt=None):
    loss = loss_func(model(xb), yb)
    if opt is not None:
        loss.backward()
        opt.step()
        opt.zero_grad()
    return loss.item(), len(xb)


def fit(steps, model, loss_func, opt, train_dl, valid_dl):
    """Trains until ``steps`` batches are done, validating after each pass; the float losses."""
    losses = []
    while len(losses) < steps:
        model.train()
        for xb, yb in train_dl:
            losses.append(loss_batch(model, loss_func, xb, yb, opt)[0])
            if len(losses) == steps:
                break
        model.eval()
        with torch.no_grad():
            val_losses, nums = zip(*[loss_batch(model, loss_func, xb, yb) for xb, yb in valid_dl])  # noqa: B905
        val_loss = np.sum(np.multiply(val_losses, nums)) / np.sum(nums)
        print(len(losses), val_loss)
    return losses


def train(model, data, steps, variant="sequential", shuffle=True):
    x_train, y_train, x_valid, y_valid = data
    n = x_train.shape[0]
    losses = []
    if variant == "manual":
        weights, bias = model["weights"], model["bias"]

        def manual_model(xb):
            return log_softmax(xb @ weights + bias)

        for i in range(steps):
            start_i = (i * bs) % n
            xb, yb = x_train[start_i : start_i + bs], y_train[start_i : start_i + bs]
            loss = nll(manual_model(xb), yb)
            loss.backward()
            with torch.no_grad():
                weights -= weights.grad * lr
                bias -= bias.grad * lr
                weights.grad.zero_()
                bias.grad.zero_()
            losses.append(loss.item())
        print("accuracy", accuracy(manual_model(x_valid), y_valid).item())
        return losses
    loss_func = F.cross_entropy
    if variant == "module":
        for i in range(steps):
            start_i = (i * bs) % n
            pred = model(x_train[start_i : start_i + bs])
            loss = loss_func(pred, y_train[start_i : start_i + bs])
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= p.grad * lr
                model.zero_grad()
            losses.append(loss.item())
        return losses
    train_ds = TensorDataset(x_train, y_train)
    if variant == "linear":
        opt = optim.SGD(model.parameters(), lr=lr)
        for i in range(steps):
            start_i = (i * bs) % n
            xb, yb = train_ds[start_i : start_i + bs]
            loss = loss_func(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        return losses
    train_dl, valid_dl = get_data(train_ds, TensorDataset(x_valid, y_valid), bs, shuffle)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if variant == "sequential":
        train_dl = WrappedDataLoader(train_dl, lambda x, y: (preprocess(x), y))
        valid_dl = WrappedDataLoader(valid_dl, lambda x, y: (preprocess(x), y))
    return fit(steps, model, loss_func, opt, train_dl, valid_dl)


def main(steps=6, variants=VARIANTS):
    torch.manual_seed(0)
    data = make_data()
    x_train, y_train = data[0], data[1]
    print(x_train.shape, y_train.min().item(), y_train.max().item())
    losses = []
    for variant in variants:
        losses += train(build_model(variant), data, steps, variant)
        print(variant, losses[-1])
    return losses


if __name__ == "__main__":
    main()
