"""Adadelta (Zeiler 2012), as PyTorch implements it."""

from __future__ import annotations

import numpy as np

from gpumat import ops
from gpumat.optim.optimizer import Optimizer, check_beta, check_rate, zeros_like

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """Adadelta (Zeiler, "ADADELTA: An Adaptive Learning Rate Method", 2012, Algorithm 1), with
    PyTorch's learning-rate factor. For each parameter, with g its gradient::

        square_avg <- rho * square_avg + (1 - rho) * g^2               (starts at 0)
        delta      <- sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g
        acc_delta  <- rho * acc_delta + (1 - rho) * delta^2           (starts at 0)
        param      <- param - lr * delta

    Args:
        params: tensors or arrays, updated in place (see :class:`gpumat.optim.SGD`).
        lr: the factor on each update, finite and >= 0 (default 1.0, the paper's method).
        rho: the decay of the running averages, in [0, 1] (default 0.9).
        eps: finite, >= 0 (default 1e-6).

    On a device, with every parameter on one device, a step is one
    ``gpumat.ops.adadelta_update_multi`` call (one launch per 32 tensors on CUDA); parameters on
    several devices take one call each; numpy parameters the same formula in their dtype.

    Raises:
        TypeError: a parameter that is neither a tensor nor an array.
        ValueError: lr or eps negative or not finite, rho outside [0, 1].
    """

    _state_names = ("square_avg", "acc_delta")

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6) -> None:
        super().__init__(params, {"lr": lr, "rho": rho, "eps": eps})

    @property
    def rho(self) -> float:
        """The running averages' decay."""
        return self.param_groups[0]["rho"]

    @rho.setter
    def rho(self, value) -> None:
        self.param_groups[0]["rho"] = check_beta("Adadelta", "rho", value, closed=True)

    @property
    def eps(self) -> float:
        """The epsilon under both square roots."""
        return self.param_groups[0]["eps"]

    @eps.setter
    def eps(self, value) -> None:
        self.param_groups[0]["eps"] = check_rate("Adadelta", "eps", value)

    def _check(self, group: dict) -> dict:
        group = super()._check(group)
        group["rho"] = check_beta("Adadelta", "rho", group["rho"], closed=True)
        group["eps"] = check_rate("Adadelta", "eps", group["eps"])
        return group

    def _new_state(self, arrays: list) -> dict:
        return {
            "square_avg": [zeros_like(p) for p in arrays],
            "acc_delta": [zeros_like(p) for p in arrays],
        }

    def _update(self, idx, params, grads, group, state, one_device) -> None:
        lr, rho, eps = group["lr"], group["rho"], group["eps"]
        sq = [state["square_avg"][i] for i in idx]
        acc = [state["acc_delta"][i] for i in idx]
        if one_device:
            ops.adadelta_update_multi(params, grads, sq, acc, lr, rho, eps)
            return
        for p, g, s, a in zip(params, grads, sq, acc, strict=True):
            if isinstance(p, np.ndarray):
                s *= rho
                s += (1.0 - rho) * g * g
                delta = np.sqrt(a + eps) / np.sqrt(s + eps) * g
                a *= rho
                a += (1.0 - rho) * delta * delta
                p -= lr * delta
            else:
                ops.adadelta_update_multi([p], [g], [s], [a], lr, rho, eps)

    def _state_scalars(self) -> dict:
        return {"lr": self.lr, "rho": self.rho, "eps": self.eps}

    def _load_state_scalars(self, state: dict) -> None:
        lr = check_rate("Adadelta", "learning rate", state["lr"])
        rho = check_beta("Adadelta", "rho", state["rho"], closed=True)
        eps = check_rate("Adadelta", "eps", state["eps"])
        self.lr, self.rho, self.eps = lr, rho, eps
