"""examples/mnist_net.py's PyTorch twin: the same network, recipe and images, in PyTorch.

    python examples/mnist_net_torch.py --epochs 1

For comparing gpumat's front end with PyTorch on the same machine: the network and recipe of
pytorch/examples ``mnist/main.py`` (two 3x3 convolutions of 32 and 64 channels, 2x2 max pooling,
dropout 0.25, a dense layer 9216 -> 128, dropout 0.5, a dense layer 128 -> 10, ``log_softmax``
and ``nll_loss``; Adadelta at lr 1.0 on shuffled batches of 64, ``StepLR`` with gamma 0.7, test
batches of 1000), written line for line as ``examples/mnist_net.py`` is, on the images that
``gpumat.datasets.load_mnist`` gives gpumat: the 50,000 training and 10,000 test images of
``mnist.pkl.gz``, grey levels in [0, 1], not normalised. Needs PyTorch (the ``test`` extra
installs its CPU build). ``--compile`` wraps the training step in ``torch.compile``.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: N812 (PyTorch's convention)
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    """examples/mnist_net.py's ``Net`` in PyTorch: (N, 1, 28, 28) images to (N, 10)
    log-probabilities."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = self.dropout2(F.relu(self.fc1(torch.flatten(x, 1))))
        return F.log_softmax(self.fc2(x), dim=1)


def datasets() -> tuple[TensorDataset, TensorDataset]:
    """(train, test) as torch datasets of (image (1, 28, 28) float32, label int64)."""
    # NOTE: imported here, not at the top: bench_frontend's own-process PyTorch rows import Net
    # without loading gpumat (whose libgomp, loaded first, would set PyTorch's wait policy).
    from gpumat.datasets import load_mnist

    (x_train, y_train), _, (x_test, y_test) = load_mnist()

    def as_dataset(x, y):
        images = torch.from_numpy(x.reshape(-1, 1, 28, 28).copy()).float()
        return TensorDataset(images, torch.from_numpy(y.astype("int64")))

    return as_dataset(x_train, y_train), as_dataset(x_test, y_test)


def train_epoch(step, model, loader, device, epoch: int, log_interval: int, dry_run: bool):
    """One epoch of ``step(images, labels)``; prints the loss every ``log_interval`` batches."""
    model.train()
    seen = 0
    for batch, (data, target) in enumerate(loader):
        data, target = data.to(device), target.to(device)
        loss = step(data, target)
        seen += len(data)
        if batch % log_interval == 0:
            print(
                f"Train Epoch: {epoch} [{seen}/{len(loader.dataset)} "
                f"({100.0 * (batch + 1) / len(loader):.0f}%)]\tLoss: {loss.item():.6f}"
            )
            if dry_run:
                break


@torch.no_grad()
def evaluate(model, loader, device) -> tuple[float, int]:
    """(mean test loss, correct predictions) over the loader."""
    model.eval()
    total, correct = 0.0, 0
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        output = model(data)
        total += F.nll_loss(output, target, reduction="sum").item()
        pred = output.argmax(dim=1, keepdim=True)
        correct += pred.eq(target.view_as(pred)).sum().item()
    return total / len(loader.dataset), correct


def main(argv=None) -> dict:
    """Train and test as the options say; returns ``{"epochs": [{"epoch", "train_s",
    "test_loss", "accuracy"}, ...]}`` (training seconds exclude the test)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-size", type=int, default=64, help="training batch (64)")
    parser.add_argument("--test-batch-size", type=int, default=1000, help="test batch (1000)")
    parser.add_argument("--epochs", type=int, default=14, help="epochs (14)")
    parser.add_argument("--lr", type=float, default=1.0, help="Adadelta's learning rate (1.0)")
    parser.add_argument("--gamma", type=float, default=0.7, help="rate decay per epoch (0.7)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (cpu)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the training step")
    parser.add_argument("--seed", type=int, default=1, help="random seed (1)")
    parser.add_argument("--log-interval", type=int, default=100, help="batches between logs")
    parser.add_argument("--dry-run", action="store_true", help="one batch per epoch")
    args = parser.parse_args(argv)

    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    train_set, test_set = datasets()
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=args.test_batch_size)

    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)

    def train_step(data, target):
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        return loss

    step = torch.compile(train_step) if args.compile else train_step
    results = {"epochs": []}
    for epoch in range(1, args.epochs + 1):
        start = time.perf_counter()
        train_epoch(step, model, train_loader, device, epoch, args.log_interval, args.dry_run)
        train_s = time.perf_counter() - start
        test_loss, correct = evaluate(model, test_loader, device)
        n = len(test_loader.dataset)
        print(
            f"\nTest set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{n} "
            f"({100.0 * correct / n:.2f}%); training {train_s:.1f} s\n"
        )
        results["epochs"].append(
            {"epoch": epoch, "train_s": train_s, "test_loss": test_loss, "accuracy": correct / n}
        )
        scheduler.step()
    return results


if __name__ == "__main__":
    main()
