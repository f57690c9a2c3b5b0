"""Parameter initialisations, PyTorch's ``torch.nn.init`` (in place, under ``no_grad``).

Each function fills a float32 tensor in place from gpumat's generator (:func:`gpumat.manual_seed`)
and returns it. The formulas are PyTorch's (``torch/nn/init.py``):

- ``calculate_gain``: the recommended gain of a nonlinearity (1 for linear, conv and sigmoid,
  5/3 for tanh, sqrt(2) for ReLU, sqrt(2 / (1 + a**2)) for leaky ReLU of slope a).
- ``kaiming_uniform_`` (He et al., "Delving Deep into Rectifiers", ICCV 2015): U(-b, b) with
  b = gain * sqrt(3 / fan), fan the fan-in (default) or fan-out.
- ``xavier_uniform_`` (Glorot & Bengio, "Understanding the difficulty of training deep
  feedforward neural networks", AISTATS 2010): U(-b, b) with b = gain * sqrt(6 / (fan_in +
  fan_out)); ``xavier_normal_``, ``kaiming_normal_`` the normal counterparts.
- ``trunc_normal_``: N(mean, std**2) truncated to [a, b] by the inverse CDF, as PyTorch's
  (``Phi^-1`` of a uniform draw between Phi(a) and Phi(b), with Giles's float32 erfinv).

fan_in and fan_out of a weight ``(out, in, *kernel)`` are in * prod(kernel) and out * prod(kernel).
The defaults of :class:`gpumat.nn.Linear` and :class:`gpumat.nn.Conv2d` are PyTorch's (its
``torch/nn/modules/linear.py`` and ``conv.py`` ``reset_parameters``): ``kaiming_uniform_(w,
a=sqrt(5))``, which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias U(-1/sqrt(fan_in),
1/sqrt(fan_in)). Same distributions as PyTorch, not the same values (another generator).
"""

from __future__ import annotations

import math

from gpumat.autograd import no_grad
from gpumat.tensor import Tensor, where

__all__ = [
    "calculate_gain",
    "constant_",
    "kaiming_normal_",
    "kaiming_uniform_",
    "normal_",
    "ones_",
    "trunc_normal_",
    "uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "zeros_",
]


def _check(tensor, op: str) -> Tensor:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(tensor).__name__}")
    return tensor


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The gain PyTorch recommends for ``nonlinearity`` (see the module docstring); ``param`` is
    leaky ReLU's negative slope (default 0.01).

    Raises:
        ValueError: an unknown nonlinearity or a bad slope.
    """
    linear = {"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d"}
    if nonlinearity in linear or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"calculate_gain: negative_slope {slope!r} is not a number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight of shape (out, in, *kernel).

    Raises:
        ValueError: fewer than 2 dimensions.
    """
    if tensor.dim() < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
        )
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode {mode!r} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    """Fill with U(a, b) samples."""
    with no_grad():
        return _check(tensor, "uniform_").uniform_(a, b)


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """Fill with N(mean, std**2) samples."""
    with no_grad():
        return _check(tensor, "normal_").normal_(mean, std)


def constant_(tensor: Tensor, val: float) -> Tensor:
    """Fill with ``val``."""
    with no_grad():
        return _check(tensor, "constant_").fill_(val)


def zeros_(tensor: Tensor) -> Tensor:
    """Fill with 0."""
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    """Fill with 1."""
    return constant_(tensor, 1.0)


def kaiming_uniform_(
    tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"
) -> Tensor:
    """Fill with U(-b, b), b = gain * sqrt(3 / fan) (He et al. 2015; see the module docstring).
    A zero-size tensor is left as it is."""
    _check(tensor, "kaiming_uniform_")
    if tensor.numel() == 0:
        return tensor
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(
    tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu"
) -> Tensor:
    """Fill with N(0, std**2), std = gain / sqrt(fan) (He et al. 2015)."""
    _check(tensor, "kaiming_normal_")
    if tensor.numel() == 0:
        return tensor
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode)))


def xavier_uniform_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Fill with U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio 2010)."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(_check(tensor, "xavier_uniform_"))
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    """Fill with N(0, std**2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(_check(tensor, "xavier_normal_"))
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _erfinv(x: Tensor) -> Tensor:
    """erf^-1(x) elementwise for x in (-1, 1), a float32 tensor: Giles, "Approximating the erfinv
    function" (GPU Computing Gems, 2011), single-precision branch (CUDA's erfinvf form), in
    tensor ops."""
    w = -((1.0 - x) * (1.0 + x)).log()
    small = w < 5.0
    ws = w - 2.5
    p = ws * 2.81022636e-08 + 3.43273939e-07
    for c in (
        -3.5233877e-06,
        -4.39150654e-06,
        0.00021858087,
        -0.00125372503,
        -0.00417768164,
        0.246640727,
        1.50140941,
    ):
        p = p * ws + c
    wl = w.clamp(min=5.0).sqrt() - 3.0  # clamped: the small branch's w would give NaN's sqrt
    q = wl * -0.000200214257 + 0.000100950558
    for c in (
        0.00134934322,
        -0.00367342844,
        0.00573950773,
        -0.0076224613,
        0.00943887047,
        1.00167406,
        2.83297682,
    ):
        q = q * wl + c
    return where(small, p, q) * x


def trunc_normal_(
    tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0
) -> Tensor:
    """Fill with N(mean, std**2) truncated to [a, b] (PyTorch's ``trunc_normal_``, its inverse
    CDF method: u ~ U(2 Phi(alpha) - 1, 2 Phi(beta) - 1), x = mean + std sqrt(2) erfinv(u),
    clamped to [a, b]; alpha = (a - mean) / std, beta = (b - mean) / std). Float32 tensors of any
    shape; a zero-size tensor is left as it is.

    Raises:
        TypeError: not a Tensor. ValueError: std <= 0 or a >= b (no interval to sample).
    """
    _check(tensor, "trunc_normal_")
    if not std > 0 or not a < b:
        raise ValueError(f"trunc_normal_: need std > 0 and a < b, got std={std}, a={a}, b={b}")
    if tensor.numel() == 0:
        return tensor

    def cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    with no_grad():
        tensor.uniform_(2 * lo - 1, 2 * hi - 1)
        # Keep u inside (-1, 1): erfinv(+-1) is infinite (the clamp below bounds the result).
        u = tensor.clamp(-1.0 + 2.0**-24, 1.0 - 2.0**-24)
        x = _erfinv(u) * (std * math.sqrt(2.0)) + mean
        return tensor.copy_(x.clamp(a, b))
