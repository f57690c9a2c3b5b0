"""``gpumat.nn.Parameter``: a tensor that a :class:`gpumat.nn.Module` registers as a parameter."""

from __future__ import annotations

from gpumat.creation import zeros
from gpumat.tensor import Tensor

__all__ = ["Parameter"]


class Parameter(Tensor):
    """A leaf tensor that a module registers when it is assigned as an attribute (PyTorch's
    ``torch.nn.Parameter``): it appears in ``parameters()`` and ``state_dict()`` and, by default,
    requires a gradient.

    Args:
        data: the tensor whose storage (and version counter) the parameter takes over (shared,
            not copied); default an empty float32 tensor of shape (0,).
        requires_grad: default True.

    Raises:
        TypeError: ``data`` is not a Tensor. RuntimeError: ``requires_grad`` for a non-float32
            tensor.
    """

    def __init__(self, data: Tensor | None = None, requires_grad: bool = True) -> None:
        if data is None:
            data = zeros(0)
        if not isinstance(data, Tensor):
            raise TypeError(f"Parameter: data must be a Tensor, got {type(data).__name__}")
        data._concrete("Parameter")
        self._fill(data._data, data._dtype, data._device, data._range, data._vc)
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()
