"""Dense layers: ``Linear``, ``Identity``, ``Flatten``."""

from __future__ import annotations

import math

from gpumat.devices import as_device
from gpumat.dtypes import as_dtype, float32
from gpumat.nn import functional as F  # noqa: N812 (PyTorch's convention)
from gpumat.nn import init
from gpumat.nn.module import Module
from gpumat.tensor import Tensor

__all__ = ["Flatten", "Identity", "Linear"]


def _positive(value, what: str, op: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{op}: {what} must be an int >= 0, got {value!r}")
    return value


def _factory(op: str, device, dtype):
    if dtype is not None and as_dtype(dtype, op) is not float32:
        raise TypeError(f"{op}: parameters are float32, got dtype {dtype!r}")
    return as_device(device, op)


class Linear(Module):
    """``y = x @ weight.T + bias``: x (*, in_features) -> (*, out_features).

    Args:
        in_features, out_features: ints >= 0.
        bias: learn a bias (out_features,).
        device: where the parameters live (default the host); dtype: float32 only.

    Parameters: ``weight`` (out_features, in_features) and ``bias`` (out_features,), PyTorch's
    layout, initialised as PyTorch's ``Linear.reset_parameters`` (``torch/nn/modules/linear.py``):
    ``kaiming_uniform_(weight, a=sqrt(5))``, i.e. U(-1/sqrt(in), 1/sqrt(in)), and bias U(-b, b)
    with b = 1/sqrt(in) (0 when in_features is 0).

    Raises:
        ValueError: negative or non-int sizes. TypeError: a dtype other than float32.
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None
    ) -> None:
        super().__init__()
        device = _factory("Linear", device, dtype)
        self.in_features = _positive(in_features, "in_features", "Linear")
        self.out_features = _positive(out_features, "out_features", "Linear")
        self._weight_and_bias((out_features, in_features), bias, device)

    def reset_parameters(self) -> None:
        """Draw the parameters again (PyTorch's initialisation, above)."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class Identity(Module):
    """Returns its input (a placeholder layer); arguments are accepted and ignored."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__()

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return input


class Flatten(Module):
    """Axes ``start_dim`` (default 1: keep the batch axis) to ``end_dim`` merged into one."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        if not isinstance(input, Tensor):
            raise TypeError(f"Flatten: expected a Tensor, got {type(input).__name__}")
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
