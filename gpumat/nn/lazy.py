"""Lazy layers (PyTorch's ``torch/nn/modules/lazy.py`` idea): ``LazyLinear``, ``LazyConv2d``,
``LazyBatchNorm1d`` and ``LazyBatchNorm2d`` take their input size from the first input they see,
as d2l's networks are written.

Until the first call, the weight is a parameter with a 0-size input dim (``(out, 0)``,
``(out, 0, kh, kw)``, or ``(0,)`` with the batch norms' buffers) and ``in_features`` /
``in_channels`` / ``num_features`` is 0. The first ``forward`` sets the
size from the input, gives the same parameter objects their full shape, draws them with the
layer's ``reset_parameters`` (PyTorch's initialisation) and turns the module into the plain
layer (``LazyLinear`` becomes ``Linear``, PyTorch's ``cls_to_become``). Make the optimizer after
that first call (d2l runs one batch through the network first): an optimizer made earlier holds
the 0-size shapes.
"""

from __future__ import annotations

from gpumat.autograd import current_trace
from gpumat.creation import zeros
from gpumat.dtypes import float32
from gpumat.nn.conv import Conv2d
from gpumat.nn.linear import Linear
from gpumat.nn.normalization import BatchNorm1d, BatchNorm2d
from gpumat.nn.parameter import Parameter
from gpumat.tensor import Tensor

__all__ = ["LazyBatchNorm1d", "LazyBatchNorm2d", "LazyConv2d", "LazyLinear"]


def _materialize(module, param: Tensor, shape: tuple) -> None:
    """Give ``param`` (a parameter or buffer: the same object, so references to it stay valid)
    zeros of ``shape``."""
    if current_trace() is not None:
        raise RuntimeError(
            f"{type(module).__name__}: a lazy layer takes its size from its first input; run it "
            "once before gpumat.compile traces it"
        )
    fresh = zeros(*shape, device=param.device)
    param._fill(fresh._data, float32, param.device)
    if isinstance(param, Parameter):
        param.requires_grad = True


def _input_size(module, input: Tensor, dim: int, ranks: tuple) -> int:  # noqa: A002
    if not isinstance(input, Tensor):
        raise TypeError(f"{type(module).__name__}: expected a Tensor, got {type(input).__name__}")
    if input.ndim not in ranks:
        raise ValueError(
            f"{type(module).__name__}: expected an input of {' or '.join(map(str, ranks))} dims, "
            f"got shape {tuple(input.shape)}"
        )
    return input.shape[dim]


class LazyLinear(Linear):
    """``Linear`` whose ``in_features`` is input.shape[-1] of the first input.

    Args:
        out_features, bias, device, dtype: as :class:`Linear`.

    Raises:
        as :class:`Linear`; RuntimeError: the first call inside a ``gpumat.compile`` trace.
    """

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__(0, out_features, bias, device, dtype)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        n = _input_size(self, input, -1, range(1, 33))
        _materialize(self, self.weight, (self.out_features, n))
        self.in_features = n
        self.reset_parameters()
        self.__class__ = Linear
        return self.forward(input)


class LazyConv2d(Conv2d):
    """``Conv2d`` whose ``in_channels`` is the channel count of the first input ((N, C, H, W)
    or (C, H, W)).

    Args:
        out_channels: as :class:`Conv2d`'s, and so are the other arguments (kernel_size,
            stride, padding, dilation, groups, bias, padding_mode, device, dtype).

    Raises:
        as :class:`Conv2d`; RuntimeError: the first call inside a ``gpumat.compile`` trace.
    """

    def __init__(
        self,
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
        super().__init__(
            1, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode,
            device, dtype,
        )  # fmt: skip
        _materialize(self, self.weight, (out_channels, 0, *self.kernel_size))
        self.in_channels = 0

    def reset_parameters(self) -> None:
        """Draw the parameters (nothing to draw before the input size is known)."""
        if self.in_channels:
            super().reset_parameters()

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        c = _input_size(self, input, -3, (3, 4))
        _materialize(self, self.weight, (self.out_channels, c, *self.kernel_size))
        self.in_channels = c
        self.reset_parameters()
        self.__class__ = Conv2d
        return self.forward(input)


class _LazyBatchNorm:
    """The lazy batch norms' shared steps: zero-size parameters and buffers at construction,
    their full size (C,) from the first input's channel dim."""

    _becomes: type = BatchNorm1d

    def _lazy_init(self) -> None:
        for t in (self.weight, self.bias, self.running_mean, self.running_var):
            if t is not None:
                _materialize(self, t, (0,))
        self.num_features = 0

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        self._check_input_dim(input)
        c = _input_size(self, input, 1, self._ranks)
        for t in (self.weight, self.bias, self.running_mean, self.running_var):
            if t is not None:
                _materialize(self, t, (c,))
        self.num_features = c
        self.reset_parameters()
        self.__class__ = self._becomes
        return self.forward(input)


class LazyBatchNorm1d(_LazyBatchNorm, BatchNorm1d):
    """``BatchNorm1d`` whose ``num_features`` is the channel count (dim 1) of the first input.

    Args:
        eps, momentum, affine, track_running_stats, device, dtype: as :class:`BatchNorm1d`.

    Raises:
        as :class:`BatchNorm1d`; RuntimeError: the first call inside a ``gpumat.compile`` trace.
    """

    _becomes = BatchNorm1d

    def __init__(
        self, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None,
        dtype=None,
    ) -> None:  # fmt: skip
        BatchNorm1d.__init__(self, 1, eps, momentum, affine, track_running_stats, device, dtype)
        self._lazy_init()


class LazyBatchNorm2d(_LazyBatchNorm, BatchNorm2d):
    """``BatchNorm2d`` whose ``num_features`` is the channel count (dim 1) of the first input.

    Args:
        eps, momentum, affine, track_running_stats, device, dtype: as :class:`BatchNorm2d`.

    Raises:
        as :class:`BatchNorm2d`; RuntimeError: the first call inside a ``gpumat.compile`` trace.
    """

    _becomes = BatchNorm2d

    def __init__(
        self, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None,
        dtype=None,
    ) -> None:  # fmt: skip
        BatchNorm2d.__init__(self, 1, eps, momentum, affine, track_running_stats, device, dtype)
        self._lazy_init()
