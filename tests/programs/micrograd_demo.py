"""micrograd's demo (a small MLP on two moons, SVM max-margin loss), written with torch tensors.

Follows karpathy/micrograd ``demo.ipynb`` (its ``micrograd.nn`` ``Neuron`` / ``Layer`` / ``MLP``
and training cell), with micrograd's scalar ``Value``s replaced by torch tensors as the notebook's
PyTorch cross-check does: an ``MLP(2, [16, 16, 1])`` of ``Layer`` modules holding
``nn.Parameter(torch.empty(nout, nin).uniform_(-1, 1))`` weights and zero biases
(``random.uniform(-1, 1)`` in micrograd), ``x @ self.w.T + self.b`` with ``.relu()`` except on the
last layer, kept in an ``nn.ModuleList``; labels in {-1, 1} (``y * 2 - 1``); the loss
``(1 + -yb * scores).relu()`` averaged with ``losses.sum() * (1.0 / len(losses))`` plus the L2 term
``alpha * sum((p * p).sum() for p in model.parameters())`` (Python's ``sum`` over tensors);
accuracy ``((yb > 0) == (scores > 0)).float().mean()``; minibatches by a numpy permutation
indexing the tensors (``X[ri]``); and the manual SGD loop ``model.zero_grad()``,
``total_loss.backward()``, ``p.data -= learning_rate * p.grad`` with the decaying rate
``1.0 - 0.9 * k / 100``. The original draws the data with ``sklearn.datasets.make_moons(
n_samples=100, noise=0.1)``; here two moons are made with numpy from a seed.
"""

import numpy as np
import torch
import torch.nn as nn


def make_data(n=100, noise=0.1, seed=1):
    """(X (n, 2) float32, y (n,) float32 in {-1, 1}): sklearn's make_moons, by hand."""
    rng = np.random.default_rng(seed)
    n_out = n // 2
    t_out = np.linspace(0, np.pi, n_out)
    t_in = np.linspace(0, np.pi, n - n_out)
    X = np.concatenate(
        [
            np.stack([np.cos(t_out), np.sin(t_out)], 1),
            np.stack([1 - np.cos(t_in), 1 - np.sin(t_in) - 0.5], 1),
        ]
    )
    X += rng.normal(scale=noise, size=X.shape)
    y = np.concatenate([np.zeros(n_out), np.ones(n - n_out)])
    y = y * 2 - 1
    return torch.tensor(X.astype(np.float32)), torch.tensor(y.astype(np.float32))


class Layer(nn.Module):
    def __init__(self, nin, nout, nonlin=True):
        super().__init__()
        self.w = nn.Parameter(torch.empty(nout, nin).uniform_(-1, 1))
        self.b = nn.Parameter(torch.zeros(nout))
        self.nonlin = nonlin

    def forward(self, x):
        act = x @ self.w.T + self.b
        return act.relu() if self.nonlin else act


class MLP(nn.Module):
    def __init__(self, nin, nouts):
        super().__init__()
        sz = [nin] + nouts
        self.layers = nn.ModuleList(
            [Layer(sz[i], sz[i + 1], nonlin=i != len(nouts) - 1) for i in range(len(nouts))]
        )

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def loss(model, X, y, batch_size=None):
    if batch_size is None:
        Xb, yb = X, y
    else:
        ri = np.random.permutation(X.shape[0])[:batch_size]
        Xb, yb = X[ri], y[ri]
    scores = model(Xb).squeeze(1)
    losses = (1 + -yb * scores).relu()
    data_loss = losses.sum() * (1.0 / len(losses))
    alpha = 1e-4
    reg_loss = alpha * sum((p * p).sum() for p in model.parameters())
    total_loss = data_loss + reg_loss
    accuracy = ((yb > 0) == (scores > 0)).float().mean()
    return total_loss, accuracy.item()


def build_model():
    return MLP(2, [16, 16, 1])


def train(model, data, steps):
    X, y = data
    losses = []
    for k in range(steps):
        total_loss, acc = loss(model, X, y)
        model.zero_grad()
        total_loss.backward()
        learning_rate = 1.0 - 0.9 * k / 100
        for p in model.parameters():
            p.data -= learning_rate * p.grad
        losses.append(total_loss.item())
        if k % 10 == 0:
            print(f"step {k} loss {total_loss.item()}, accuracy {acc * 100}%")
    return losses


def main(steps=40):
    torch.manual_seed(1337)
    np.random.seed(1337)
    model = build_model()
    print(model)
    print("number of parameters", sum(p.numel() for p in model.parameters()))
    return train(model, make_data(), steps)


if __name__ == "__main__":
    main()
