"""Dive into Deep Learning's LeNet, written our own way.

Follows d2l-ai/d2l-en ``chapter_convolutional-neural-networks/lenet.md`` (PyTorch tab) and the
``d2l.Classifier`` / ``d2l.Trainer`` it trains with: ``nn.Sequential`` of ``nn.LazyConv2d(6,
kernel_size=5, padding=2)``, ``nn.Sigmoid``, ``nn.AvgPool2d(kernel_size=2, stride=2)``,
``nn.Flatten`` and ``nn.LazyLinear`` layers; ``init_cnn`` applies ``nn.init.xavier_uniform_`` to
every ``nn.Linear`` / ``nn.Conv2d`` (``type(module) == ...``) through ``apply_init`` (one forward
pass to materialise the lazy layers, then ``self.net.apply``); ``layer_summary`` runs
``torch.randn(*shape)`` through ``for layer in self.net`` printing ``layer.__class__.__name__`` and
``X.shape``. The classifier's loss reshapes (``Y_hat.reshape((-1, Y_hat.shape[-1]))``,
``Y.reshape((-1,))``) into ``F.cross_entropy(..., reduction='mean')``, its accuracy is
``(Y_hat.argmax(axis=1).type(Y.dtype) == Y.reshape(-1)).type(torch.float32).mean()``; the
trainer uses ``torch.optim.SGD(self.parameters(), self.lr)``, calls ``loss.backward()`` and
``optim.step()`` inside ``torch.no_grad()`` as d2l's ``fit_epoch`` does, and validates under
``model.eval()``. Data come as d2l's ``get_tensorloader`` makes them (index tensors with a slice,
``TensorDataset``, ``DataLoader(..., shuffle=train)``). The original loads FashionMNIST through
torchvision; here the images are synthetic class templates plus noise, made with numpy from a seed.
"""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


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


class LeNet(Classifier):
    def __init__(self, lr=0.1, num_classes=10):
        super().__init__(lr)
        self.net = nn.Sequential(
            nn.LazyConv2d(6, kernel_size=5, padding=2),
            nn.Sigmoid(),
            nn.AvgPool2d(kernel_size=2, stride=2),
            nn.LazyConv2d(16, kernel_size=5),
            nn.Sigmoid(),
            nn.AvgPool2d(kernel_size=2, stride=2),
            nn.Flatten(),
            nn.LazyLinear(120),
            nn.Sigmoid(),
            nn.LazyLinear(84),
            nn.Sigmoid(),
            nn.LazyLinear(num_classes),
        )


def build_model():
    model = LeNet(lr=0.5)
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


def train(model, data, steps, shuffle=True):
    return fit(model, data, steps, shuffle)


def main(steps=8):
    torch.manual_seed(0)
    model = build_model()
    model.layer_summary((1, 1, 28, 28))
    data = make_data()
    losses = train(model, data, steps)
    with torch.no_grad():
        val = [model.validation_step(b) for b in get_tensorloader(data, False)]
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, valid acc {np.mean([a for _, a in val]):.2f}")
    return losses


if __name__ == "__main__":
    main()
