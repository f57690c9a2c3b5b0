"""The PyTorch MNIST example's convolutional network, written our own way.

Follows pytorch/examples ``mnist/main.py``: ``Net`` (two ``nn.Conv2d``, ``F.relu``,
``F.max_pool2d``, two ``nn.Dropout``, ``torch.flatten(x, 1)``, two ``nn.Linear``,
``F.log_softmax``), trained with ``F.nll_loss``, ``optim.Adadelta`` and ``StepLR``, batches from
``torch.utils.data.DataLoader``, and a test pass under ``model.eval()`` / ``torch.no_grad()`` with
``F.nll_loss(..., reduction='sum').item()``, ``output.argmax(dim=1, keepdim=True)`` and
``pred.eq(target.view_as(pred)).sum().item()``; ``torch.accelerator`` and ``torch.device`` pick the
device. The original loads torchvision's MNIST (normalised 1x28x28 images); here the images are
synthetic: ten random class templates plus noise, made with numpy from a seed.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


def make_data(n=256, seed=0):
    """(images (n, 1, 28, 28) float32, labels (n,) int64) as tensors: templates plus noise."""
    templates = (np.random.default_rng(1234).random((10, 28, 28)) > 0.7).astype(np.float32)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = 0.8 * templates[labels] + 0.2 * rng.random((n, 28, 28), dtype=np.float32)
    images = (images - 0.1307) / 0.3081  # the original's Normalize
    return torch.from_numpy(images[:, None].astype(np.float32)), torch.tensor(labels)


class Net(nn.Module):
    def __init__(self, c1=8, c2=16):
        super().__init__()
        self.conv1 = nn.Conv2d(1, c1, 3, 1)
        self.conv2 = nn.Conv2d(c1, c2, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(c2 * 12 * 12, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def build_model():
    return Net()


def train(model, data, steps, batch_size=32, lr=1.0, device="cpu"):
    """Adadelta steps over the loader's batches (StepLR after each pass); the float losses."""
    loader = DataLoader(TensorDataset(*data), batch_size=batch_size)
    optimizer = optim.Adadelta(model.parameters(), lr=lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    losses = []
    while len(losses) < steps:
        model.train()
        for data_batch, target in loader:
            data_batch, target = data_batch.to(device), target.to(device)
            optimizer.zero_grad()
            output = model(data_batch)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
        scheduler.step()
    return losses


def test(model, data, device="cpu"):
    """(mean test loss, correct count)."""
    loader = DataLoader(TensorDataset(*data), batch_size=100)
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for data_batch, target in loader:
            data_batch, target = data_batch.to(device), target.to(device)
            output = model(data_batch)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    return test_loss / len(loader.dataset), correct


def main(steps=16):
    torch.manual_seed(1)
    use_accel = torch.accelerator.is_available()
    device = torch.accelerator.current_accelerator() if use_accel else torch.device("cpu")
    model = Net().to(device)
    losses = train(model, make_data(), steps, device=device)
    test_loss, correct = test(model, make_data(200, seed=1), device)
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}; test loss {test_loss:.4f}, {correct}/200")
    return losses


if __name__ == "__main__":
    main()
