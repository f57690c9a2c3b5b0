"""The dlsys course's MLP-ResNet (homework 2), written our own way against PyTorch's API.

Follows dlsyscourse/hw2 ``apps/mlp_resnet.py`` (the functions students fill in, written here with
``torch.nn`` where the course uses needle): ``ResidualBlock`` is ``nn.Sequential(Residual(
nn.Sequential(nn.Linear, norm(hidden_dim), nn.ReLU(), nn.Dropout(drop_prob), nn.Linear,
norm(dim))), nn.ReLU())`` with a ``Residual`` module of our own (needle's ``nn.Residual``: ``fn(x)
+ x``) and ``norm=nn.BatchNorm1d`` passed as a class; ``MLPResNet`` is ``nn.Sequential(nn.Linear,
nn.ReLU(), *[ResidualBlock(...) for _ in range(num_blocks)], nn.Linear)``; ``epoch`` switches
``model.train()`` / ``model.eval()`` on whether an optimiser is given, uses
``nn.CrossEntropyLoss`` (needle's ``SoftmaxLoss``), ``opt.zero_grad()`` (needle's ``reset_grad``),
and counts errors on ``out.detach().numpy().argmax(axis=1) != y.numpy()``; ``train_mnist`` uses
``torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)`` over a shuffled
``DataLoader`` of (batch, 784) rows. The original reads the MNIST idx files with its own
``MNISTDataset``; here the rows are synthetic class templates plus noise, made with numpy from a
seed.
"""

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def make_data(n=256, seed=0):
    templates = (np.random.default_rng(1234).random((10, 784)) > 0.7).astype(np.float32)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    rows = 0.8 * templates[labels] + 0.2 * rng.random((n, 784), dtype=np.float32)
    return torch.from_numpy(rows.astype(np.float32)), torch.from_numpy(labels)


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


def ResidualBlock(dim, hidden_dim, norm=nn.BatchNorm1d, drop_prob=0.1):
    return nn.Sequential(
        Residual(
            nn.Sequential(
                nn.Linear(dim, hidden_dim),
                norm(hidden_dim),
                nn.ReLU(),
                nn.Dropout(drop_prob),
                nn.Linear(hidden_dim, dim),
                norm(dim),
            )
        ),
        nn.ReLU(),
    )


def MLPResNet(
    dim, hidden_dim=100, num_blocks=3, num_classes=10, norm=nn.BatchNorm1d, drop_prob=0.1
):
    return nn.Sequential(
        nn.Linear(dim, hidden_dim),
        nn.ReLU(),
        *[ResidualBlock(hidden_dim, hidden_dim // 2, norm, drop_prob) for _ in range(num_blocks)],
        nn.Linear(hidden_dim, num_classes),
    )


def epoch(dataloader, model, opt=None, losses=None, max_steps=None):
    """(error rate, mean loss) over one pass; with ``opt`` a training pass."""
    if opt is not None:
        model.train()
    else:
        model.eval()
    loss_fn = nn.CrossEntropyLoss()
    errors, total_loss, count = 0, 0.0, 0
    for X, y in dataloader:
        out = model(X)
        loss = loss_fn(out, y)
        if opt is not None:
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        errors += np.sum(out.detach().numpy().argmax(axis=1) != y.numpy())
        total_loss += loss.item() * X.shape[0]
        count += X.shape[0]
        if max_steps is not None and len(losses) == max_steps:
            break
    return errors / count, total_loss / count


def build_model(drop_prob=0.1):
    return MLPResNet(784, hidden_dim=32, num_blocks=2, drop_prob=drop_prob)


def train(model, data, steps, batch_size=32, lr=0.001, weight_decay=0.001, shuffle=True):
    loader = DataLoader(TensorDataset(*data), batch_size=batch_size, shuffle=shuffle)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    while len(losses) < steps:
        epoch(loader, model, opt, losses, max_steps=steps)
    return losses


def main(steps=16):
    torch.manual_seed(0)
    np.random.seed(4)
    model = build_model()
    losses = train(model, make_data(), steps)
    test_err, test_loss = epoch(DataLoader(TensorDataset(*make_data(100, 1)), batch_size=50), model)
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}; test error {test_err:.2f}, {test_loss:.4f}")
    return losses


if __name__ == "__main__":
    main()
