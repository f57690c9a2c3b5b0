"""Adam (Kingma & Ba, ICLR 2015) and AdamW (Loshchilov & Hutter, ICLR 2019)."""

from __future__ import annotations

import numpy as np

from gpumat import ops, reference
from gpumat.optim.optimizer import Optimizer, check_beta, check_rate, zeros_like

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015, Algorithm 1),
    PyTorch's ``Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    amsgrad=False)``.

    For step t = 1, 2, ... and each parameter, with g its gradient::

        g <- g + weight_decay * param           (coupled L2, as torch.optim.Adam)
        m <- beta1 m + (1 - beta1) g            (first moment, starts at 0)
        v <- beta2 v + (1 - beta2) g^2          (second moment, starts at 0)
        v_max <- max(v_max, v); use v_max for v below   (amsgrad: Reddi et al., ICLR 2018)
        param <- param - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

    The bias corrections 1 - beta^t undo the moments' zero start. This is Algorithm 1 as printed
    (eps added to the corrected sqrt(v), as PyTorch does); the paper's defaults are lr = 1e-3,
    betas = (0.9, 0.999), eps = 1e-8. ``t`` counts the optimizer's steps (PyTorch counts per
    parameter: the same unless some parameter has no gradient in some step).

    Args:
        params: tensors, parameter-group dicts or arrays, updated in place (see
            :class:`gpumat.optim.SGD`).
        lr: the step size, finite and >= 0 (may be changed between steps).
        betas: (beta1, beta2), each in [0, 1).
        eps, weight_decay: finite, >= 0.
        amsgrad: keep the running maximum of v (AMSGrad).

    On a device, with every parameter of a group on one device, a step is one
    ``gpumat.ops.adam_update_multi`` call per group; parameters spread over several devices take
    one call each; numpy parameters the same formula in their dtype.

    Raises:
        TypeError: a parameter that is neither a tensor nor an array, a non-bool amsgrad.
        ValueError: lr, eps or weight_decay negative or not finite, a beta outside [0, 1).
    """

    _state_names = ("m", "v", "max_v")
    _decoupled = False

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
    ) -> None:
        self.t = 0
        defaults = {
            "lr": lr,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
        }
        super().__init__(params, defaults)

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
        self.param_groups[0]["eps"] = check_rate(type(self).__name__, "eps", value)

    @property
    def m(self) -> list:
        """The first moments, one per parameter."""
        return self._ensure_state()["m"]

    @property
    def v(self) -> list:
        """The second moments, one per parameter."""
        return self._ensure_state()["v"]

    def _betas(self, value) -> tuple:
        name = type(self).__name__
        try:
            b1, b2 = value
        except (TypeError, ValueError):
            raise TypeError(f"{name}: betas must be a pair of numbers, got {value!r}") from None
        return (check_beta(name, "beta1", b1), check_beta(name, "beta2", b2))

    def _check(self, group: dict) -> dict:
        name = type(self).__name__
        group = super()._check(group)
        group["betas"] = self._betas(group["betas"])
        group["eps"] = check_rate(name, "eps", group["eps"])
        group["weight_decay"] = check_rate(name, "weight_decay", group["weight_decay"])
        if not isinstance(group["amsgrad"], (bool, np.bool_)):
            raise TypeError(f"{name}: amsgrad must be a bool, got {group['amsgrad']!r}")
        group["amsgrad"] = bool(group["amsgrad"])
        return group

    def _new_state(self, arrays: list) -> dict:
        ams = any(g["amsgrad"] for g in self.param_groups)
        return {
            "m": [zeros_like(p) for p in arrays],
            "v": [zeros_like(p) for p in arrays],
            "max_v": [zeros_like(p) for p in arrays] if ams else [],
        }

    def _update(self, idx, params, grads, group, state, one_device) -> None:
        # t advances only once every group is updated (_finish_step): a step rejected for a
        # shape or device mismatch changes no counter.
        t, lr, eps, wd = self.t + 1, group["lr"], group["eps"], group["weight_decay"]
        b1, b2 = group["betas"]
        m = [state["m"][i] for i in idx]
        v = [state["v"][i] for i in idx]
        max_v = []
        if group["amsgrad"]:
            if not state["max_v"]:  # amsgrad set after the state was made: start at zero
                arrays = [p._data if self._tensors else p for p in self.params]
                state["max_v"].extend(zeros_like(p) for p in arrays)
            max_v = [state["max_v"][i] for i in idx]
        dec = self._decoupled
        if one_device:
            ops.adam_update_multi(params, grads, m, v, lr, b1, b2, eps, t, wd, dec, max_v)
            return
        for k, p in enumerate(params):
            args = ([p], [grads[k]], [m[k]], [v[k]], lr, b1, b2, eps, t, wd, dec)
            mx = [max_v[k]] if max_v else []
            if isinstance(p, np.ndarray):
                reference.adam_update_multi(*args, mx)
            else:
                ops.adam_update_multi(*args, mx)

    def _finish_step(self) -> None:
        self.t += 1

    def _state_tensors(self) -> dict:
        state = self._ensure_state()
        return {f"{kind}.{i}": b for kind in self._state_names for i, b in enumerate(state[kind])}

    def _state_scalars(self) -> dict:
        return {"lr": self.lr, "betas": list(self.betas), "eps": self.eps, "t": self.t}

    def _load_state_scalars(self, state: dict) -> None:
        # Every value is checked before any is set, so a bad state changes nothing.
        name = type(self).__name__
        lr = check_rate(name, "learning rate", state["lr"])
        betas = self._betas(state["betas"])
        eps = check_rate(name, "eps", state["eps"])
        t = state["t"]
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise ValueError(f"{name}.load_state_dict: step count t must be an int >= 0, got {t!r}")
        self.lr, self.betas, self.eps, self.t = lr, betas, eps, t


class AdamW(Adam):
    """AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", ICLR 2019,
    Algorithm 2), PyTorch's ``AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
    weight_decay=1e-2, amsgrad=False)``: Adam whose weight decay shrinks the parameter directly
    instead of entering the gradient (so the moments never see it)::

        param <- param * (1 - lr * weight_decay)
        then Adam's step (with amsgrad as there) from the unchanged gradient

    The decay is scaled by lr (PyTorch's form; the paper's schedule multiplier is the lr's).

    Args:
        params, lr, betas, eps, amsgrad: as for :class:`Adam`.
        weight_decay: finite, >= 0 (default 1e-2, PyTorch's).

    On a device one ``gpumat.ops.adam_update_multi`` call per group (``decoupled=True``).

    Raises:
        as :class:`Adam`.
    """

    _decoupled = True

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas=(0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)
