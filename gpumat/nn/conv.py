"""Convolution layers: ``Conv2d``."""

from __future__ import annotations

import math

from gpumat._checks import as_pair
from gpumat.nn import functional as F  # noqa: N812 (PyTorch's convention)
from gpumat.nn import init
from gpumat.nn.linear import _factory
from gpumat.nn.module import Module
from gpumat.tensor import Tensor

__all__ = ["Conv2d"]


class Conv2d(Module):
    """2-D convolution over (N, C, H, W) images: (N, in_channels, H, W) ->
    (N, out_channels, OH, OW), OH = (H + 2*ph - KH) // sh + 1 (cross-correlation, zero padding).

    Args:
        in_channels, out_channels: ints >= 1.
        kernel_size: an int or (kh, kw).
        stride: an int or a pair (default 1); padding: an int, a pair, "valid" or "same"
            (stride 1, odd kernels).
        dilation, groups: 1 only (gpumat's kernels have neither; other values: ValueError).
        bias: learn a bias (out_channels,).
        padding_mode: "zeros" only. device: where the parameters live; dtype: float32 only.

    Parameters: ``weight`` (out_channels, in_channels, kh, kw) and ``bias`` (out_channels,),
    initialised as PyTorch's ``_ConvNd.reset_parameters`` (``torch/nn/modules/conv.py``):
    ``kaiming_uniform_(weight, a=sqrt(5))`` and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
    fan_in = in_channels * kh * kw.

    Raises:
        ValueError: sizes < 1, unsupported options. TypeError: non-int sizes.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        dilation=1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        device = _factory("Conv2d", device, dtype)
        for what, v in (("in_channels", in_channels), ("out_channels", out_channels)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"Conv2d: {what} must be an int >= 1, got {v!r}")
        if padding_mode != "zeros":
            raise ValueError(f"Conv2d: padding_mode must be 'zeros', got {padding_mode!r}")
        if as_pair(dilation, "dilation", "Conv2d") != (1, 1) or groups != 1:
            raise ValueError("Conv2d: gpumat's convolution has no dilation or groups (use 1)")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = as_pair(kernel_size, "kernel_size", "Conv2d")
        self.stride = as_pair(stride, "stride", "Conv2d")
        self.padding = (
            padding if isinstance(padding, str) else as_pair(padding, "padding", "Conv2d")
        )
        if min(self.kernel_size) < 1 or min(self.stride) < 1:
            raise ValueError(
                f"Conv2d: kernel_size and stride must be >= 1, got {self.kernel_size} and "
                f"{self.stride}"
            )
        self._weight_and_bias((out_channels, in_channels, *self.kernel_size), bias, device)

    def reset_parameters(self) -> None:
        """Draw the parameters again (PyTorch's initialisation, above)."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_channels * self.kernel_size[0] * self.kernel_size[1]
            bound = 1 / math.sqrt(fan_in)
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self) -> str:
        text = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding not in ((0, 0), "valid"):
            text += f", padding={self.padding}"
        return text + ("" if self.bias is not None else ", bias=False")
