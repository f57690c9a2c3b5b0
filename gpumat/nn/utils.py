"""Gradient clipping, PyTorch's ``torch.nn.utils.clip_grad_norm_`` and ``clip_grad_value_``.

``clip_grad_norm_`` runs two multi-tensor kernels per device: :func:`gpumat.ops.total_norm_multi`
(the norm of every gradient together, one launch per 32 gradients plus one to finish on CUDA) and
:func:`gpumat.ops.clip_scale_multi` (the scale, which reads the norm on the device: no copy to the
host unless ``error_if_nonfinite``).
"""

from __future__ import annotations

import math

import numpy as np

from gpumat import ops
from gpumat.arrays import empty
from gpumat.autograd import no_grad
from gpumat.dtypes import float32
from gpumat.tensor import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def _grads(op: str, parameters) -> list:
    """The gradients (not None) of ``parameters`` (a Tensor or an iterable of tensors)."""
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    try:
        parameters = list(parameters)
    except TypeError:
        raise TypeError(
            f"{op}: parameters must be a Tensor or an iterable of tensors, got "
            f"{type(parameters).__name__}"
        ) from None
    grads = []
    for i, p in enumerate(parameters):
        if not isinstance(p, Tensor):
            raise TypeError(f"{op}: parameter {i} is a {type(p).__name__}, expected a Tensor")
        g = p.grad
        if g is not None:
            g._concrete(op)
            grads.append(g)
    return grads


def _number(op: str, what: str, value) -> float:
    if isinstance(value, bool):
        raise TypeError(f"{op}: {what} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {what} must be a number, got {value!r}") from None


def clip_grad_norm_(
    parameters,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach=None,
) -> Tensor:
    """Scale the gradients of ``parameters`` in place so that their total norm (the norm of all
    of them as one vector) is at most ``max_norm``: each is multiplied by ``min(1, max_norm /
    (total_norm + 1e-6))``, PyTorch's formula (``torch/nn/utils/clip_grad.py``).

    Args:
        parameters: a Tensor or an iterable of tensors (``model.parameters()``); those whose
            ``.grad`` is None are skipped.
        max_norm: the largest norm kept, finite and >= 0.
        norm_type: p of the p-norm, > 0; ``float('inf')`` (or ``'inf'``) for the largest
            absolute value.
        error_if_nonfinite: raise when the total norm is NaN or infinite (reads it back from
            the device).
        foreach: accepted for PyTorch's signature; gpumat always uses the multi-tensor kernels.

    Returns:
        The total norm before clipping, a 0-d float32 tensor on the gradients' device (0 when no
        parameter has a gradient, on the CPU).

    Raises:
        TypeError: a parameter that is not a Tensor, a non-number max_norm or norm_type.
        ValueError: max_norm negative or not finite, norm_type <= 0 or NaN.
        RuntimeError: the total norm is not finite and ``error_if_nonfinite`` (nothing scaled).
    """
    op = "clip_grad_norm_"
    max_norm = _number(op, "max_norm", max_norm)
    norm_type = _number(op, "norm_type", norm_type)
    if not math.isfinite(max_norm) or max_norm < 0:
        raise ValueError(f"{op}: max_norm must be a finite number >= 0, got {max_norm}")
    if not norm_type > 0:
        raise ValueError(f"{op}: norm_type must be > 0 (inf for the max norm), got {norm_type}")
    grads = _grads(op, parameters)
    if not grads:
        return Tensor(0.0)
    by_device: dict = {}
    for g in grads:
        by_device.setdefault(g._device, []).append(g)
    norms = {}
    for device, gs in by_device.items():
        out = empty((1,), device)
        ops.total_norm_multi([g._data for g in gs], norm_type, out)
        norms[device] = out
    first = grads[0]._device
    if len(norms) == 1:
        total = norms[first]
    else:  # the devices' norms combined on the host (rare: a model split across devices)
        values = np.array([float(n.asnumpy()[0]) for n in norms.values()], np.float64)
        if norm_type == math.inf:
            value = np.nan if np.isnan(values).any() else values.max()
        else:
            value = np.sum(values**norm_type) ** (1.0 / norm_type)
        for device in norms:
            norms[device].copyfrom(np.array([value], np.float32))
        total = norms[first]
    result = Tensor._make(total, float32, first).reshape(())
    if error_if_nonfinite and not math.isfinite(float(total.asnumpy()[0])):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, "
            "so it cannot be clipped. To disable this error and scale the gradients by the "
            "non-finite norm anyway, set `error_if_nonfinite=False`"
        )
    with no_grad():
        for device, gs in by_device.items():
            ops.clip_scale_multi([g._data for g in gs], norms[device], max_norm)
            for g in gs:
                g._changed()
    return result


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient of ``parameters`` in place to [-clip_value, clip_value] (PyTorch's
    ``clip_grad_value_``; one clamp kernel per gradient). Parameters without a gradient are
    skipped.

    Args:
        parameters: a Tensor or an iterable of tensors.
        clip_value: a finite number >= 0 (PyTorch clamps to an empty interval for a negative
            one; gpumat refuses it).
        foreach: accepted for PyTorch's signature.

    Raises:
        TypeError: a parameter that is not a Tensor, a non-number clip_value.
        ValueError: clip_value negative or not finite.
    """
    op = "clip_grad_value_"
    clip_value = _number(op, "clip_value", clip_value)
    if not math.isfinite(clip_value) or clip_value < 0:
        raise ValueError(f"{op}: clip_value must be a finite number >= 0, got {clip_value}")
    bound = clip_value
    with no_grad():
        for g in _grads(op, parameters):
            g.clamp_(-bound, bound)
