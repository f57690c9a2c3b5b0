"""The PyTorch variational auto-encoder example, written our own way.

Follows pytorch/examples ``vae/main.py``: ``VAE`` with ``encode`` (``nn.Linear``, ``F.relu``, two
heads), ``reparameterize`` (``torch.exp(0.5 * logvar)``, ``torch.randn_like``), ``decode``
(``torch.sigmoid``) and ``forward`` taking ``x.view(-1, 784)``; the loss is
``F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction='sum')`` plus the KL term
``-0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())``, trained with ``optim.Adam(lr=1e-3)``
over a shuffled ``DataLoader``; the test pass runs under ``torch.no_grad()``, joins
``torch.cat([data[:n], recon_batch.view(batch_size, 1, 28, 28)[:n]])`` and decodes
``torch.randn(64, latent)`` samples. The original loads torchvision's MNIST (images in [0, 1]) and
saves image grids with ``save_image``; here the images are synthetic class templates plus noise in
[0, 1], made with numpy from a seed, and nothing is saved.
"""

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader, TensorDataset


def make_data(n=128, seed=0):
    """(images (n, 1, 28, 28) float32 in [0, 1], labels (n,) int64) tensors."""
    templates = (np.random.default_rng(1234).random((10, 28, 28)) > 0.7).astype(np.float32)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = 0.8 * templates[labels] + 0.2 * rng.random((n, 28, 28), dtype=np.float32)
    return torch.from_numpy(images[:, None].astype(np.float32)), torch.from_numpy(labels)


class VAE(nn.Module):
    def __init__(self, hidden=64, latent=8):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def build_model():
    return VAE()


def train(model, data, steps, batch_size=32, shuffle=True):
    """Adam steps; the float losses per sample (the original logs ``loss.item() / len(data)``)."""
    loader = DataLoader(TensorDataset(*data), batch_size=batch_size, shuffle=shuffle)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    while len(losses) < steps:
        model.train()
        for batch, _ in loader:
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(batch)
            loss = loss_function(recon_batch, batch, mu, logvar)
            loss.backward()
            optimizer.step()
            losses.append(loss.item() / len(batch))
            if len(losses) == steps:
                break
    return losses


def test(model, data, batch_size=32):
    loader = DataLoader(TensorDataset(*data), batch_size=batch_size)
    model.eval()
    test_loss = 0
    with torch.no_grad():
        for i, (batch, _) in enumerate(loader):
            recon_batch, mu, logvar = model(batch)
            test_loss += loss_function(recon_batch, batch, mu, logvar).item()
            if i == 0:
                n = min(batch.size(0), 8)
                comparison = torch.cat([batch[:n], recon_batch.view(batch_size, 1, 28, 28)[:n]])
                assert comparison.shape == (2 * n, 1, 28, 28)
        sample = model.decode(torch.randn(64, 8)).cpu()
        assert sample.view(64, 1, 28, 28).shape == (64, 1, 28, 28)
    return test_loss / len(loader.dataset)


def main(steps=8):
    torch.manual_seed(1)
    model = build_model()
    losses = train(model, make_data(), steps)
    print(f"loss {losses[0]:.2f} -> {losses[-1]:.2f}; test {test(model, make_data(64, 1)):.2f}")
    return losses


if __name__ == "__main__":
    main()
