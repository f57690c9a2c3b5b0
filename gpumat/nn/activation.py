"""Activation layers: ``ReLU``, ``Tanh``, ``Sigmoid``, ``GELU``, ``SiLU``, ``Softplus``,
``LeakyReLU``, ``ELU``, ``Hardtanh``, ``ReLU6``, ``Softmax``, ``LogSoftmax``, and ``Dropout``."""

from __future__ import annotations

from gpumat._checks import as_probability
from gpumat.nn import functional as F  # noqa: N812 (PyTorch's convention)
from gpumat.nn.module import Module
from gpumat.tensor import Tensor

__all__ = [
    "ELU",
    "GELU",
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "Hardtanh",
    "LeakyReLU",
    "LogSoftmax",
    "ReLU",
    "ReLU6",
    "SiLU",
    "Sigmoid",
    "Softmax",
    "Softplus",
    "Tanh",
]


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


class GELU(Module):
    """GELU elementwise, exact (``approximate='none'``) or its tanh approximation (``'tanh'``);
    see :func:`gpumat.nn.functional.gelu`.

    Raises:
        ValueError: ``approximate`` not 'none' or 'tanh'.
    """

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.gelu(input, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class SiLU(Module):
    """x * sigmoid(x) elementwise (:func:`gpumat.nn.functional.silu`). ``inplace`` is accepted
    and ignored."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.silu(input)


class Softplus(Module):
    """log(1 + exp(beta x)) / beta elementwise, x above ``threshold`` (PyTorch's rule; see
    :func:`gpumat.nn.functional.softplus`)."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class LeakyReLU(Module):
    """x where x > 0, else negative_slope * x (:func:`gpumat.nn.functional.leaky_relu`).
    ``inplace`` is accepted and ignored."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.leaky_relu(input, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class ELU(Module):
    """x where x > 0, else alpha (exp(x) - 1) (:func:`gpumat.nn.functional.elu`). ``inplace``
    is accepted and ignored."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.elu(input, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class Hardtanh(Module):
    """min(max(x, min_val), max_val) elementwise (:func:`gpumat.nn.functional.hardtanh`).
    ``inplace`` is accepted and ignored."""

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.hardtanh(input, self.min_val, self.max_val)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}"


class ReLU6(Hardtanh):
    """min(max(x, 0), 6) elementwise: ``Hardtanh(0, 6)``."""

    def __init__(self, inplace: bool = False) -> None:
        super().__init__(0.0, 6.0, inplace)


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


class Dropout1d(Dropout):
    """Channel dropout of (N, C, L) input in training mode (:func:`F.dropout1d
    <gpumat.nn.functional.dropout1d>`); the identity in eval mode."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout1d(input, self.p, self.training)


class Dropout2d(Dropout):
    """Channel dropout of (N, C, H, W) input in training mode (:func:`F.dropout2d
    <gpumat.nn.functional.dropout2d>`); the identity in eval mode."""

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.dropout2d(input, self.p, self.training)
