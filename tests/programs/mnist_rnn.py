"""The PyTorch MNIST LSTM classifier example, written our own way.

Follows pytorch/examples ``mnist_rnn/main.py``: ``Net`` with ``nn.LSTM(input_size=28,
hidden_size=..., batch_first=True)``, ``nn.BatchNorm1d``, two ``nn.Dropout2d``, two ``nn.Linear``;
``forward`` reshapes with ``input.reshape(-1, 28, 28)``, unpacks
``output, hidden = self.rnn(input)``, takes the last step ``output[:, -1, :]`` and ends with
``F.log_softmax(..., dim=1)``; training is
``F.nll_loss`` with ``optim.Adadelta`` and ``StepLR``, the test pass sums
``F.nll_loss(..., reduction='sum').item()`` and counts ``pred.eq(target.view_as(pred))``. The
original loads torchvision's normalised MNIST; here the images are synthetic class templates plus
noise, made with numpy from a seed.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


def make_data(n=128, seed=0):
    templates = (np.random.default_rng(1234).random((10, 28, 28)) > 0.7).astype(np.float32)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = 0.8 * templates[labels] + 0.2 * rng.random((n, 28, 28), dtype=np.float32)
    images = (images - 0.1307) / 0.3081
    return torch.from_numpy(images[:, None].astype(np.float32)), torch.tensor(labels)


class Net(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.rnn = nn.LSTM(input_size=28, hidden_size=hidden, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(hidden)
        self.dropout1 = nn.Dropout2d(0.25)
        self.dropout2 = nn.Dropout2d(0.5)
        self.fc1 = nn.Linear(hidden, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, input):
        input = input.reshape(-1, 28, 28)
        output, hidden = self.rnn(input)
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = F.relu(self.fc1(output))
        output = self.dropout2(output)
        output = self.fc2(output)
        return F.log_softmax(output, dim=1)


def build_model():
    return Net()


def train(model, data, steps, batch_size=32, lr=0.1):
    loader = DataLoader(TensorDataset(*data), batch_size=batch_size)
    optimizer = optim.Adadelta(model.parameters(), lr=lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    losses = []
    while len(losses) < steps:
        model.train()
        for batch, target in loader:
            optimizer.zero_grad()
            output = model(batch)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
        scheduler.step()
    return losses


def test(model, data):
    loader = DataLoader(TensorDataset(*data), batch_size=50)
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for batch, target in loader:
            output = model(batch)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    return test_loss / len(loader.dataset), correct


def main(steps=8):
    torch.manual_seed(1)
    model = build_model()
    losses = train(model, make_data(), steps)
    test_loss, correct = test(model, make_data(100, 1))
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; test {test_loss:.3f}, {correct}/100")
    return losses


if __name__ == "__main__":
    main()
