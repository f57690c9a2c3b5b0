"""Activation layers: ``ReLU``, ``Tanh``, ``Sigmoid``, ``Softmax``, ``LogSoftmax``, and
``Dropout``."""

from __future__ import annotations

from gpumat._checks import as_probability
from gpumat.nn import functional as F  # noqa: N812 (PyTorch's convention)
from gpumat.nn.module import Module
from gpumat.tensor import Tensor

__all__ = ["Dropout", "LogSoftmax", "ReLU", "Sigmoid", "Softmax", "Tanh"]


class ReLU(Module):
    """max(x, 0) elementwise. ``inplace`` is accepted and ignored."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.relu(input)


class Tanh(Module):
    """tanh elementwise."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.tanh(input)


class Sigmoid(Module):
    """1 / (1 + exp(-x)) elementwise."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.sigmoid(input)


class Softmax(Module):
    """Softmax along ``dim``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """Log-softmax along ``dim`` (log-sum-exp: finite for finite inputs)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.log_softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Dropout(Module):
    """Inverted dropout with probability ``p`` in training mode; the identity in eval mode (see
    :func:`gpumat.nn.functional.dropout`).

    Raises:
        TypeError / ValueError: ``p`` not a number in [0, 1].
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        self.p = as_probability(p, "Dropout")
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout(input, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"
