"""The PyTorch tutorials' quickstart (a FashionMNIST MLP), written our own way.

Follows pytorch/tutorials ``beginner_source/basics/quickstart_tutorial.py``: the device from
``torch.accelerator.current_accelerator().type if torch.accelerator.is_available() else "cpu"``;
``NeuralNetwork`` with ``nn.Flatten`` and an ``nn.Sequential`` of ``nn.Linear`` / ``nn.ReLU``;
``nn.CrossEntropyLoss``, ``torch.optim.SGD(model.parameters(), lr=...)``; ``train`` iterates a
``DataLoader`` with ``enumerate``, uses ``len(dataloader.dataset)``, ``X.to(device)``,
``loss.backward(); optimizer.step(); optimizer.zero_grad()``; ``test`` counts
``(pred.argmax(1) == y).type(torch.float).sum().item()`` under ``model.eval()`` and
``torch.no_grad()``; the model is saved with ``torch.save(model.state_dict(), path)`` and
reloaded with ``model.load_state_dict(torch.load(path, weights_only=True))``, and one prediction
indexes a Python list with a 0-d tensor (``classes[pred[0].argmax(0)]``). The original downloads
torchvision's FashionMNIST; here the images are synthetic class templates plus noise, made with
numpy from a seed.
"""

import os
import tempfile

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat"]
classes += ["Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


def make_data(n=256, seed=0):
    templates = (np.random.default_rng(1234).random((10, 28, 28)) > 0.7).astype(np.float32)
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = 0.8 * templates[labels] + 0.2 * rng.random((n, 28, 28), dtype=np.float32)
    return torch.tensor(images[:, None]), torch.tensor(labels)


class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(28 * 28, 64),
            nn.ReLU(),
            nn.Linear(64, 64),
            nn.ReLU(),
            nn.Linear(64, 10),
        )

    def forward(self, x):
        x = self.flatten(x)
        return self.linear_relu_stack(x)


def build_model():
    return NeuralNetwork()


def train(model, data, steps, batch_size=32, lr=5e-2, device="cpu"):
    dataloader = DataLoader(TensorDataset(*data), batch_size=batch_size)
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    size = len(dataloader.dataset)
    losses = []
    while len(losses) < steps:
        model.train()
        for batch, (X, y) in enumerate(dataloader):
            X, y = X.to(device), y.to(device)
            pred = model(X)
            loss = loss_fn(pred, y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            if batch % 4 == 0:
                print(f"loss: {losses[-1]:>7f}  [{(batch + 1) * len(X):>5d}/{size:>5d}]")
            if len(losses) == steps:
                break
    return losses


def test(dataloader, model, loss_fn, device="cpu"):
    size = len(dataloader.dataset)
    num_batches = len(dataloader)
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for X, y in dataloader:
            X, y = X.to(device), y.to(device)
            pred = model(X)
            test_loss += loss_fn(pred, y).item()
            correct += (pred.argmax(1) == y).type(torch.float).sum().item()
    return test_loss / num_batches, correct / size


def main(steps=16):
    torch.manual_seed(0)
    accelerated = torch.accelerator.is_available()
    device = torch.accelerator.current_accelerator().type if accelerated else "cpu"
    model = NeuralNetwork().to(device)
    print(model)
    losses = train(model, make_data(), steps, device=device)
    test_data = make_data(100, seed=1)
    test_loss, accuracy = test(
        DataLoader(TensorDataset(*test_data), batch_size=50), model, nn.CrossEntropyLoss(), device
    )
    print(f"Test Error: Accuracy: {(100 * accuracy):>0.1f}%, Avg loss: {test_loss:>8f}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.pth")
        torch.save(model.state_dict(), path)
        model = NeuralNetwork().to(device)
        model.load_state_dict(torch.load(path, weights_only=True))
    model.eval()
    x, y = test_data[0][0], test_data[1][0]
    with torch.no_grad():
        x = x.to(device)
        pred = model(x)
        predicted, actual = classes[pred[0].argmax(0)], classes[y]
        print(f'Predicted: "{predicted}", Actual: "{actual}"')
    return losses


if __name__ == "__main__":
    main()
