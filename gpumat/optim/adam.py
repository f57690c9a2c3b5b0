"""Adam (Kingma & Ba, ICLR 2015)."""

from __future__ import annotations

import numpy as np

from gpumat import ops
from gpumat.optim.optimizer import Optimizer, check_beta, check_rate, zeros_like

__all__ = ["Adam"]


class Adam(Optimizer):
    """Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015, Algorithm 1).

    For step t = 1, 2, ... and each parameter, with g its gradient::

        m <- beta1 m + (1 - beta1) g            (first moment, starts at 0)
        v <- beta2 v + (1 - beta2) g^2          (second moment, starts at 0)
        param <- param - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

    The bias corrections 1 - beta^t undo the moments' zero start. This is Algorithm 1 as printed
    (eps added to the corrected sqrt(v), as PyTorch does); the paper's defaults are lr = 1e-3,
    betas = (0.9, 0.999), eps = 1e-8. ``t`` counts the optimizer's steps (PyTorch counts per
    parameter: the same unless some parameter has no gradient in some step).

    Args:
        params: tensors or arrays, updated in place (see :class:`gpumat.optim.SGD`).
        lr: the step size, finite and >= 0 (may be changed between steps).
        betas: (beta1, beta2), each in [0, 1).
        eps: finite, >= 0.

    On a device, with every parameter on one device, a step is one ``gpumat.ops.adam_update_multi``
    call for all parameters; parameters spread over several devices take one
    ``gpumat.ops.adam_update`` kernel each; numpy parameters the same formula in their dtype.

    Raises:
        TypeError: a parameter that is neither a tensor nor an array.
        ValueError: lr or eps negative or not finite, a beta outside [0, 1).
    """

    _state_names = ("m", "v")

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8) -> None:
        self.t = 0
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps})

    @property
    def betas(self) -> tuple:
        """(beta1, beta2)."""
        return self.param_groups[0]["betas"]

    @betas.setter
    def betas(self, value) -> None:
        self.param_groups[0]["betas"] = self._betas(value)

    @property
    def eps(self) -> float:
        """The denominator's epsilon."""
        return self.param_groups[0]["eps"]

    @eps.setter
    def eps(self, value) -> None:
        self.param_groups[0]["eps"] = check_rate("Adam", "eps", value)

    @property
    def m(self) -> list:
        """The first moments, one per parameter."""
        return self._ensure_state()["m"]

    @property
    def v(self) -> list:
        """The second moments, one per parameter."""
        return self._ensure_state()["v"]

    def _betas(self, value) -> tuple:
        try:
            b1, b2 = value
        except (TypeError, ValueError):
            raise TypeError(f"Adam: betas must be a pair of numbers, got {value!r}") from None
        return (check_beta("Adam", "beta1", b1), check_beta("Adam", "beta2", b2))

    def _check(self, group: dict) -> dict:
        group = super()._check(group)
        group["betas"] = self._betas(group["betas"])
        group["eps"] = check_rate("Adam", "eps", group["eps"])
        return group

    def _new_state(self, arrays: list) -> dict:
        return {"m": [zeros_like(p) for p in arrays], "v": [zeros_like(p) for p in arrays]}

    def _update(self, idx, params, grads, group, state, one_device) -> None:
        # t advances only once the update was accepted: a step rejected for a shape or device
        # mismatch changes no state.
        t, lr, eps = self.t + 1, group["lr"], group["eps"]
        b1, b2 = group["betas"]
        m = [state["m"][i] for i in idx]
        v = [state["v"][i] for i in idx]
        if one_device:
            ops.adam_update_multi(params, grads, m, v, lr, b1, b2, eps, t)
            self.t = t
            return
        self.t = t
        for p, g, mi, vi in zip(params, grads, m, v, strict=True):
            if isinstance(p, np.ndarray):
                mi *= b1
                mi += (1.0 - b1) * g
                vi *= b2
                vi += (1.0 - b2) * g * g
                m_hat = mi / (1.0 - b1**t)
                v_hat = vi / (1.0 - b2**t)
                p -= lr * m_hat / (np.sqrt(v_hat) + eps)
            else:
                ops.adam_update(p, g, mi, vi, lr, b1, b2, eps, t)

    def _state_scalars(self) -> dict:
        return {"lr": self.lr, "betas": list(self.betas), "eps": self.eps, "t": self.t}

    def _load_state_scalars(self, state: dict) -> None:
        # Every value is checked before any is set, so a bad state changes nothing.
        lr = check_rate("Adam", "learning rate", state["lr"])
        betas = self._betas(state["betas"])
        eps = check_rate("Adam", "eps", state["eps"])
        t = state["t"]
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise ValueError(f"Adam.load_state_dict: step count t must be an int >= 0, got {t!r}")
        self.lr, self.betas, self.eps, self.t = lr, betas, eps, t
