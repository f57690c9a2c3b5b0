"""Loss layers: ``CrossEntropyLoss``, ``NLLLoss``, ``MSELoss``, ``L1Loss`` (each calls the
function of :mod:`gpumat.nn.functional` of the same name with its ``reduction``)."""

from __future__ import annotations

from gpumat.nn import functional as F  # noqa: N812 (PyTorch's convention)
from gpumat.nn.module import Module
from gpumat.tensor import Tensor

__all__ = ["CrossEntropyLoss", "L1Loss", "MSELoss", "NLLLoss"]


class _Loss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = F._reduction(reduction, type(self).__name__)

    def extra_repr(self) -> str:
        return "" if self.reduction == "mean" else f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """``F.cross_entropy(input, target, reduction)``: logits (N, C), targets int64 (N,) or float
    rows (N, C)."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.cross_entropy(input, target, self.reduction)


class NLLLoss(_Loss):
    """``F.nll_loss(input, target, reduction)``: log-probabilities (N, C), targets int64 (N,) or
    float rows (N, C)."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.nll_loss(input, target, self.reduction)


class MSELoss(_Loss):
    """``F.mse_loss(input, target, reduction)``."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    """``F.l1_loss(input, target, reduction)``."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return F.l1_loss(input, target, self.reduction)
