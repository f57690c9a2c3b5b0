"""Normalisation layers: ``LayerNorm``, ``RMSNorm``, ``BatchNorm1d``, ``BatchNorm2d``.

PyTorch's classes (``torch/nn/modules/normalization.py`` and ``batchnorm.py``): their
arguments, defaults, parameters (ones and zeros), buffers and state_dict keys, over
:func:`gpumat.nn.functional.layer_norm`, ``rms_norm`` and ``batch_norm``.
"""

from __future__ import annotations

from gpumat._checks import as_real
from gpumat.autograd import no_grad
from gpumat.creation import ones, tensor, zeros
from gpumat.dtypes import int64
from gpumat.nn import functional as F  # noqa: N812 (PyTorch's convention)
from gpumat.nn import init
from gpumat.nn.linear import _factory
from gpumat.nn.module import Module
from gpumat.nn.parameter import Parameter
from gpumat.tensor import Tensor

__all__ = ["BatchNorm1d", "BatchNorm2d", "LayerNorm", "RMSNorm"]


def _flag(value, what: str, op: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {what} must be a bool, got {value!r}")
    return value


class LayerNorm(Module):
    """Layer normalisation over the trailing dims ``normalized_shape`` (Ba, Kiros & Hinton 2016):
    input ``(*, *normalized_shape)`` -> the same shape; see :func:`gpumat.nn.functional.layer_norm`.

    Args:
        normalized_shape: an int or a sequence of ints >= 1.
        eps: added to the variance (1e-5).
        elementwise_affine: learn ``weight`` (ones) and, with ``bias``, ``bias`` (zeros), both of
            shape normalized_shape; PyTorch's initialisation.
        device: where the parameters live (default the host); dtype: float32 only.

    Raises:
        TypeError / ValueError: a bad normalized_shape, eps, flag or dtype.
    """

    def __init__(
        self,
        normalized_shape,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        device = _factory("LayerNorm", device, dtype)
        self.normalized_shape = F._normalized_shape(normalized_shape, "LayerNorm")
        self.eps = as_real(eps, "eps", "LayerNorm")
        self.elementwise_affine = _flag(elementwise_affine, "elementwise_affine", "LayerNorm")
        if self.elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, device=device))
            if _flag(bias, "bias", "LayerNorm"):
                self.bias = Parameter(zeros(self.normalized_shape, device=device))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        """weight to ones and bias to zeros (PyTorch's)."""
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


class RMSNorm(Module):
    """RMS normalisation over the trailing dims ``normalized_shape`` (Zhang & Sennrich 2019):
    x / sqrt(mean(x**2) + eps) * weight; see :func:`gpumat.nn.functional.rms_norm`.

    Args:
        normalized_shape: an int or a sequence of ints >= 1.
        eps: added to the mean square; None (default) is torch.finfo(float32).eps, as PyTorch's.
        elementwise_affine: learn ``weight`` (ones) of shape normalized_shape.
        device, dtype: as :class:`LayerNorm`.
    """

    def __init__(
        self,
        normalized_shape,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        device = _factory("RMSNorm", device, dtype)
        self.normalized_shape = F._normalized_shape(normalized_shape, "RMSNorm")
        self.eps = None if eps is None else as_real(eps, "eps", "RMSNorm")
        self.elementwise_affine = _flag(elementwise_affine, "elementwise_affine", "RMSNorm")
        if self.elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, device=device))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self) -> None:
        """weight to ones (PyTorch's)."""
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


class _BatchNorm(Module):
    """PyTorch's ``_BatchNorm``: parameters ``weight`` (ones) and ``bias`` (zeros) of
    (num_features,) when ``affine``; buffers ``running_mean`` (zeros), ``running_var`` (ones) and
    ``num_batches_tracked`` (int64 0-d, 0) when ``track_running_stats``, in PyTorch's order and
    state_dict keys. Training mode normalises by the batch's statistics and updates the running
    ones (``momentum``; None: the cumulative average, 1 / num_batches_tracked); eval mode uses the
    running statistics (the batch's when they are not tracked)."""

    _ranks: tuple = ()

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        op = type(self).__name__
        device = _factory(op, device, dtype)
        if isinstance(num_features, bool) or not isinstance(num_features, int) or num_features < 1:
            raise ValueError(f"{op}: num_features must be an int >= 1, got {num_features!r}")
        self.num_features = num_features
        self.eps = as_real(eps, "eps", op)
        self.momentum = None if momentum is None else as_real(momentum, "momentum", op)
        self.affine = _flag(affine, "affine", op)
        self.track_running_stats = _flag(track_running_stats, "track_running_stats", op)
        if self.affine:
            self.weight = Parameter(ones(num_features, device=device))
            self.bias = Parameter(zeros(num_features, device=device))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if self.track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, device=device))
            self.register_buffer("running_var", ones(num_features, device=device))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=int64, device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        """running_mean to zeros, running_var to ones, num_batches_tracked to 0."""
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        """The running statistics reset, weight to ones and bias to zeros (PyTorch's)."""
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def _check_input_dim(self, input) -> None:  # noqa: A002
        if isinstance(input, Tensor) and len(input.shape) not in self._ranks:
            ranks = " or ".join(f"{r}D" for r in self._ranks)
            raise ValueError(
                f"{type(self).__name__}: expected {ranks} input (got {len(input.shape)}D input)"
            )

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        self._check_input_dim(input)
        factor = 0.0 if self.momentum is None else self.momentum
        count = self.training and self.track_running_stats
        if count:
            F._refuse_running_update_in_trace(type(self).__name__)
            tracked = int(self.num_batches_tracked.item()) + 1
            if self.momentum is None:  # the cumulative moving average
                factor = 1.0 / tracked
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        keep = not self.training or self.track_running_stats
        out = F.batch_norm(
            input,
            self.running_mean if keep else None,
            self.running_var if keep else None,
            self.weight,
            self.bias,
            use_batch,
            factor,
            self.eps,
        )
        if count:  # after batch_norm's checks: a refused input changes nothing
            with no_grad():
                self.num_batches_tracked.fill_(tracked)  # int64 holds integers to 2**24 exactly
        return out

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    """Batch normalisation (Ioffe & Szegedy 2015) of (N, C) or (N, C, L) input per channel C =
    num_features; see :class:`_BatchNorm` and :func:`gpumat.nn.functional.batch_norm`.

    Args:
        num_features: C. eps: 1e-5. momentum: 0.1 (None: cumulative average). affine: learn
            weight and bias. track_running_stats: keep running_mean / running_var. device,
            dtype: as :class:`LayerNorm`.

    Raises:
        ValueError: input of another rank (forward), num_features < 1; as batch_norm's.
    """

    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of (N, C, H, W) input per channel C = num_features; arguments and
    errors as :class:`BatchNorm1d`."""

    _ranks = (4,)
