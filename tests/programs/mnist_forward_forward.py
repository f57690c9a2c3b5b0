"""Geoffrey Hinton's forward-forward algorithm on MNIST-shaped data, written our own way.

Follows pytorch/examples ``mnist_forward_forward/main.py``: ``overlay_y_on_x`` writes the label
into the first ten pixels (``x.clone()``, ``x_[:, :10] *= 0.0``, advanced-index assignment
``x_[range(n), y] = x.max()``), ``get_y_neg`` draws wrong labels (``torch.randint``,
``torch.tensor(list)[...]``, ``.item()``), each ``Layer`` subclasses ``nn.Linear`` (passing
``device``/``dtype`` on), holds its own ``torch.optim.Adam`` and ``nn.ReLU``, normalises with
``x.norm(2, 1, keepdim=True)``, computes ``torch.mm(x, self.weight.T) + self.bias.unsqueeze(0)``
and trains on ``torch.log1p(torch.exp(torch.cat([...]))).mean()`` of the goodness
``h.pow(2).mean(1)``, returning ``.detach()``-ed outputs; ``Net.predict`` sums goodness lists with
Python's ``sum``, ``torch.cat``s them and takes ``argmax(1)``; the error is
``1.0 - net.predict(x).eq(y).float().mean().item()``. The original loads torchvision's MNIST
flattened by ``Lambda(lambda x: torch.flatten(x))``; here the images are synthetic class templates
plus noise, made with numpy from a seed (flattened with ``torch.flatten`` as the original does).
"""

import argparse

import numpy as np
import torch
import torch.nn as nn
from torch.optim import Adam

args = argparse.Namespace(lr=0.03, threshold=2.0, epochs=10, log_interval=10)


def make_data(n=200, seed=0):
    """(x (n, 784) float32, y (n,) int64) tensors: class templates plus noise, normalised."""
    templates = (np.random.default_rng(1234).random((10, 28, 28)) > 0.7).astype(np.float32)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = 0.8 * templates[labels] + 0.2 * rng.random((n, 28, 28), dtype=np.float32)
    images = torch.from_numpy(((images - 0.1307) / 0.3081).astype(np.float32))
    x = torch.stack([torch.flatten(image) for image in images])
    return x, torch.tensor(labels)


def get_y_neg(y):
    y_neg = y.clone()
    for idx, y_samp in enumerate(y):
        allowed_indices = list(range(10))
        allowed_indices.remove(y_samp.item())
        pick = torch.randint(len(allowed_indices), size=(1,))
        y_neg[idx] = torch.tensor(allowed_indices)[pick].item()
    return y_neg


def overlay_y_on_x(x, y, classes=10):
    x_ = x.clone()
    x_[:, :classes] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=args.lr)
        self.threshold = args.threshold
        self.num_epochs = args.epochs
        self.losses = []

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):
        for _ in range(self.num_epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            margins = torch.cat([-g_pos + self.threshold, g_neg - self.threshold])
            loss = torch.log1p(torch.exp(margins)).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            self.losses.append(loss.item())
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


class Net(torch.nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.layers = []  # a plain list, as the original: each layer trains on its own
        for d in range(len(dims) - 1):
            self.layers = self.layers + [Layer(dims[d], dims[d + 1])]

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness = goodness + [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        goodness_per_label = torch.cat(goodness_per_label, 1)
        return goodness_per_label.argmax(1)

    def train(self, x_pos, x_neg):
        h_pos, h_neg = x_pos, x_neg
        for layer in self.layers:
            h_pos, h_neg = layer.train(h_pos, h_neg)


def build_model():
    return Net([784, 64, 64])


def train(model, data, steps):
    """``steps`` Adam steps per layer; the float losses, layer after layer."""
    x, y = data
    x_pos = overlay_y_on_x(x, y)
    x_neg = overlay_y_on_x(x, get_y_neg(y))
    for layer in model.layers:
        layer.num_epochs = steps
    model.train(x_pos, x_neg)
    return [loss for layer in model.layers for loss in layer.losses]


def main(steps=10):
    torch.manual_seed(1)
    x, y = make_data()
    net = build_model()
    losses = train(net, (x, y), steps)
    print("train error:", 1.0 - net.predict(x).eq(y).float().mean().item())
    x_te, y_te = make_data(100, seed=1)
    print("test error:", 1.0 - net.predict(x_te).eq(y_te).float().mean().item())
    return losses


if __name__ == "__main__":
    main()
