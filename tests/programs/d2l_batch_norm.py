"""Dive into Deep Learning's batch normalization chapter, written our own way.

Follows d2l-ai/d2l-en ``chapter_convolutional-modern/batch-norm.md`` (PyTorch tab): the
from-scratch ``batch_norm`` function (``torch.is_grad_enabled()`` choosing the moving statistics,
``X.mean(dim=0)`` for 2-D input and ``X.mean(dim=(0, 2, 3), keepdim=True)`` for 4-D,
``((X - mean) ** 2).mean(...)``, ``torch.sqrt(var + eps)``, the moving averages returned as
``.data``), the ``BatchNorm`` module (``nn.Parameter(torch.ones(shape))`` / ``torch.zeros``,
moving statistics as plain tensor attributes moved with ``.to(X.device)`` when
``self.moving_mean.device != X.device``) inside LeNet (``VARIANTS`` ``scratch``), and the concise
version with ``nn.LazyBatchNorm2d`` / ``nn.LazyBatchNorm1d`` (``concise``); both between
``nn.LazyConv2d`` / ``nn.LazyLinear`` layers and ``nn.Sigmoid``, trained by d2l's
``Classifier`` / ``Trainer`` idioms (``F.cross_entropy``, ``torch.optim.SGD``, ``loss.backward()``
and ``optim.step()`` inside ``torch.no_grad()``, ``init_cnn`` with ``nn.init.xavier_uniform_``).
The learned ``gamma.reshape((-1,))`` and ``beta.reshape((-1,))`` of the first layer are printed.
The original loads FashionMNIST through torchvision; here the images are synthetic class templates
plus noise, made with numpy from a seed.
"""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

VARIANTS = ("scratch", "concise")


def make_data(n=256, seed=0):
    """(X (n + n // 4, 1, 28, 28) float32, y int64): the first n train, the rest validate."""
    templates = (np.random.default_rng(1234).random((10, 28, 28)) > 0.7).astype(np.float32)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n + n // 4)
    images = 0.8 * templates[labels] + 0.2 * rng.random((len(labels), 28, 28), dtype=np.float32)
    return torch.tensor(images[:, None].astype(np.float32)), torch.tensor(labels), n


def get_tensorloader(data, train, batch_size=32, shuffle=True):
    X, y, num_train = data
    indices = slice(0, num_train) if train else slice(num_train, None)
    tensors = tuple(a[indices] for a in (X, y))
    dataset = TensorDataset(*tensors)
    return DataLoader(dataset, batch_size, shuffle=train and shuffle)


def init_cnn(module):
    if type(module) == nn.Linear or type(module) == nn.Conv2d:  # noqa: E721 (d2l's test)
        nn.init.xavier_uniform_(module.weight)


class Classifier(nn.Module):
    def __init__(self, lr=0.1):
        super().__init__()
        self.lr = lr

    def forward(self, X):
        return self.net(X)

    def loss(self, Y_hat, Y, averaged=True):
        Y_hat = Y_hat.reshape((-1, Y_hat.shape[-1]))
        Y = Y.reshape((-1,))
        return F.cross_entropy(Y_hat, Y, reduction="mean" if averaged else "none")

    def accuracy(self, Y_hat, Y, averaged=True):
        Y_hat = Y_hat.reshape((-1, Y_hat.shape[-1]))
        preds = Y_hat.argmax(axis=1).type(Y.dtype)
        compare = (preds == Y.reshape(-1)).type(torch.float32)
        return compare.mean() if averaged else compare

    def training_step(self, batch):
        return self.loss(self(*batch[:-1]), batch[-1])

    def validation_step(self, batch):
        Y_hat = self(*batch[:-1])
        return self.loss(Y_hat, batch[-1]).item(), self.accuracy(Y_hat, batch[-1]).item()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), self.lr)

    def apply_init(self, inputs, init=None):
        self.forward(*inputs)
        if init is not None:
            self.net.apply(init)

    def layer_summary(self, X_shape):
        X = torch.randn(*X_shape)
        for layer in self.net:
            X = layer(X)
            print(layer.__class__.__name__, "output shape:\t", X.shape)


def batch_norm(X, gamma, beta, moving_mean, moving_var, eps, momentum):
    if not torch.is_grad_enabled():
        X_hat = (X - moving_mean) / torch.sqrt(moving_var + eps)
    else:
        assert len(X.shape) in (2, 4)
        if len(X.shape) == 2:
            mean = X.mean(dim=0)
            var = ((X - mean) ** 2).mean(dim=0)
        else:
            mean = X.mean(dim=(0, 2, 3), keepdim=True)
            var = ((X - mean) ** 2).mean(dim=(0, 2, 3), keepdim=True)
        X_hat = (X - mean) / torch.sqrt(var + eps)
        moving_mean = (1.0 - momentum) * moving_mean + momentum * mean
        moving_var = (1.0 - momentum) * moving_var + momentum * var
    Y = gamma * X_hat + beta
    return Y, moving_mean.data, moving_var.data


class BatchNorm(nn.Module):
    def __init__(self, num_features, num_dims):
        super().__init__()
        shape = (1, num_features) if num_dims == 2 else (1, num_features, 1, 1)
        self.gamma = nn.Parameter(torch.ones(shape))
        self.beta = nn.Parameter(torch.zeros(shape))
        self.moving_mean = torch.zeros(shape)
        self.moving_var = torch.ones(shape)

    def forward(self, X):
        if self.moving_mean.device != X.device:
            self.moving_mean = self.moving_mean.to(X.device)
            self.moving_var = self.moving_var.to(X.device)
        Y, self.moving_mean, self.moving_var = batch_norm(
            X, self.gamma, self.beta, self.moving_mean, self.moving_var, eps=1e-5, momentum=0.1
        )
        return Y


class BNLeNetScratch(Classifier):
    def __init__(self, lr=0.1, num_classes=10):
        super().__init__(lr)
        self.net = nn.Sequential(
            nn.LazyConv2d(6, kernel_size=5),
            BatchNorm(6, num_dims=4),
            nn.Sigmoid(),
            nn.AvgPool2d(kernel_size=2, stride=2),
            nn.LazyConv2d(16, kernel_size=5),
            BatchNorm(16, num_dims=4),
            nn.Sigmoid(),
            nn.AvgPool2d(kernel_size=2, stride=2),
            nn.Flatten(),
            nn.LazyLinear(120),
            BatchNorm(120, num_dims=2),
            nn.Sigmoid(),
            nn.LazyLinear(84),
            BatchNorm(84, num_dims=2),
            nn.Sigmoid(),
            nn.LazyLinear(num_classes),
        )


class BNLeNet(Classifier):
    def __init__(self, lr=0.1, num_classes=10):
        super().__init__(lr)
        self.net = nn.Sequential(
            nn.LazyConv2d(6, kernel_size=5),
            nn.LazyBatchNorm2d(),
            nn.Sigmoid(),
            nn.AvgPool2d(kernel_size=2, stride=2),
            nn.LazyConv2d(16, kernel_size=5),
            nn.LazyBatchNorm2d(),
            nn.Sigmoid(),
            nn.AvgPool2d(kernel_size=2, stride=2),
            nn.Flatten(),
            nn.LazyLinear(120),
            nn.LazyBatchNorm1d(),
            nn.Sigmoid(),
            nn.LazyLinear(84),
            nn.LazyBatchNorm1d(),
            nn.Sigmoid(),
            nn.LazyLinear(num_classes),
        )


def build_model(variant="scratch"):
    model = (BNLeNetScratch if variant == "scratch" else BNLeNet)(lr=0.5)
    model.apply_init([torch.zeros(2, 1, 28, 28)], init_cnn)
    return model


def fit(model, data, steps, shuffle=True):
    """d2l's Trainer.fit_epoch, looped until ``steps`` updates; the float losses."""
    optim = model.configure_optimizers()
    losses = []
    while len(losses) < steps:
        model.train()
        for batch in get_tensorloader(data, True, shuffle=shuffle):
            loss = model.training_step(batch)
            optim.zero_grad()
            with torch.no_grad():
                loss.backward()
                optim.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
        model.eval()
        for batch in get_tensorloader(data, False):
            with torch.no_grad():
                model.validation_step(batch)
    return losses


def train(model, data, steps, variant="scratch", shuffle=True):
    return fit(model, data, steps, shuffle)


def main(steps=8, variants=VARIANTS):
    torch.manual_seed(0)
    data = make_data()
    losses = []
    for variant in variants:
        model = build_model(variant)
        losses += train(model, data, steps, variant)
        with torch.no_grad():
            val = [model.validation_step(b) for b in get_tensorloader(data, False)]
        print(f"{variant}: loss {losses[-1]:.4f}, valid acc {np.mean([a for _, a in val]):.2f}")
        if variant == "scratch":
            print(model.net[1].gamma.reshape((-1,)), model.net[1].beta.reshape((-1,)))
    return losses


if __name__ == "__main__":
    main()
