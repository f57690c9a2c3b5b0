"""Optimizers that update parameters in place from gradient values.

Parameters are the arrays fed to an :class:`~gpumat.executor.Executor` for the parameter
variables; gradients are the values it returns for ``gradients(loss, params)``. On a device
backend both are ``PyGpuMatrix`` arrays on the same device and the update is one ``axpy`` kernel
per parameter, with no copy to or from the host; on the numpy backend both are numpy arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = ["SGD"]


def _is_device_array(value) -> bool:
    return not isinstance(value, np.ndarray) and hasattr(value, "asnumpy") and hasattr(value, "ctx")


class SGD:
    """Plain stochastic gradient descent: ``param <- param - lr * grad`` for each parameter.

    Args:
        params: the parameters, updated in place: all ``PyGpuMatrix`` (float32, on one or more
            devices) or all float numpy arrays (numpy backend). The objects are kept, so feed these
            same objects to the executor on every step.
        lr: the learning rate, a finite float >= 0 (the step is ``lr`` times the gradient, in the
            parameters' units per gradient unit). It may be changed between steps
            (``opt.lr = ...``).
            With ``softmaxcrossentropy_op``, whose gradient carries the 1/N of the batch mean,
            ``lr = 1.0`` is the seed assignment's ``lr = 1e-3`` at batch size 1000
            (see ``gpumat.autodiff``).

    Raises:
        TypeError: a parameter is neither a numpy array nor a ``PyGpuMatrix``.
        ValueError: ``lr`` is negative or not finite.

    Source: Robbins & Monro (1951); the update is the seed assignment's ``W -= lr * grad_W``.
    """

    def __init__(self, params: Sequence, lr: float) -> None:
        self.params = list(params)
        for i, p in enumerate(self.params):
            if not (isinstance(p, np.ndarray) or _is_device_array(p)):
                raise TypeError(
                    f"SGD: parameter {i} is a {type(p).__name__}, "
                    "expected a PyGpuMatrix or a numpy array"
                )
            if isinstance(p, np.ndarray) and p.dtype.kind != "f":
                raise TypeError(
                    f"SGD: parameter {i} has dtype {p.dtype}; in-place updates need a float array"
                )
        self.lr = lr

    @property
    def lr(self) -> float:
        """The learning rate (a float >= 0)."""
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        value = float(value)
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"SGD: learning rate must be a finite number >= 0, got {value!r}")
        self._lr = value

    def step(self, grads: Sequence) -> None:
        """Apply one update, ``params[i] -= lr * grads[i]``, in place.

        Args:
            grads: one gradient per parameter, in the same order, each of its parameter's shape and
                kind: a ``PyGpuMatrix`` on the parameter's device (the update is
                ``gpumat.ops.axpy(-lr, grad, param)``, asynchronous on CUDA) or a numpy array for a
                numpy parameter. Gradient buffers returned by an executor may be passed directly:
                they are read before the next run overwrites them.

        Raises:
            ValueError: the number of gradients differs from the number of parameters, or a
                gradient's shape (or device) differs from its parameter's.
            TypeError: a gradient's kind differs from its parameter's (a numpy gradient for a device
                parameter would need a host-to-device copy per step: run the executor on the
                parameters' device instead).
        """
        grads = list(grads)
        if len(grads) != len(self.params):
            raise ValueError(
                f"SGD.step: got {len(grads)} gradients for {len(self.params)} parameters"
            )
        ops = None
        for i, (p, g) in enumerate(zip(self.params, grads, strict=True)):
            if isinstance(p, np.ndarray):
                if not isinstance(g, np.ndarray):
                    raise TypeError(
                        f"SGD.step: parameter {i} is a numpy array but its gradient is a "
                        f"{type(g).__name__}"
                    )
                if g.shape != p.shape:
                    raise ValueError(
                        f"SGD.step: gradient {i} has shape {g.shape}, its parameter {p.shape}"
                    )
                p -= self._lr * g
            else:
                if not _is_device_array(g):
                    raise TypeError(
                        f"SGD.step: parameter {i} is a PyGpuMatrix on {p.ctx} but its gradient "
                        f"is a {type(g).__name__}; run the executor on {p.ctx} so gradients stay "
                        "on the device"
                    )
                if ops is None:
                    from gpumat import ops
                # Shapes and devices are checked in C++ (ValueError naming axpy and the shapes).
                ops.axpy(-self._lr, g, p)

    def __repr__(self) -> str:
        return f"SGD({len(self.params)} params, lr={self._lr})"
