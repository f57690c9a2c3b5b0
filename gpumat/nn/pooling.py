"""Pooling layers: ``MaxPool2d``, ``AvgPool2d``, ``AdaptiveAvgPool2d``."""

from __future__ import annotations

from gpumat.nn import functional as F  # noqa: N812 (PyTorch's convention)
from gpumat.nn.module import Module
from gpumat.tensor import Tensor

__all__ = ["AdaptiveAvgPool2d", "AvgPool2d", "MaxPool2d"]


class MaxPool2d(Module):
    """The max over each window: (N, C, H, W) -> (N, C, OH, OW) (see
    :func:`gpumat.nn.functional.max_pool2d`). ``stride`` defaults to ``kernel_size``."""

    def __init__(
        self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode
        F._pool_args("MaxPool2d", dilation, ceil_mode, return_indices)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        stride = self.kernel_size if self.stride is None else self.stride
        return f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}"


class AvgPool2d(Module):
    """The mean over each window, padding counted as zeros (see
    :func:`gpumat.nn.functional.avg_pool2d`)."""

    def __init__(
        self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        if ceil_mode or not count_include_pad:
            raise ValueError(
                "AvgPool2d: ceil_mode=True and count_include_pad=False are not supported"
            )

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        stride = self.kernel_size if self.stride is None else self.stride
        return f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Adaptive average pooling to ``output_size`` (an int, or a pair whose None entries keep the
    input's size): (N, C, H, W) -> (N, C, OH, OW) (see
    :func:`gpumat.nn.functional.adaptive_avg_pool2d`)."""

    def __init__(self, output_size) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
