"""Stochastic gradient descent, with and without momentum: ``SGD`` and ``MomentumSGD``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpumat import ops
from gpumat.optim.optimizer import Optimizer, check_beta, check_rate, zeros_like

__all__ = ["SGD", "MomentumSGD"]


class SGD(Optimizer):
    """Stochastic gradient descent, PyTorch's ``SGD(params, lr, momentum=0)``.

    Without momentum: ``param <- param - lr * grad`` (Robbins & Monro, 1951; the dlsys course's
    ``W -= lr * grad_W``). With momentum (the heavy ball: Polyak, "Some methods of speeding up
    the convergence of iteration methods", 1964; Sutskever et al., ICML 2013, eq. 1-2 with the
    learning rate factored out of v, as PyTorch writes it): ``v <- momentum * v + grad; param <-
    param - lr * v``, velocities starting at zero (so the first step is ``lr * grad``).

    Args:
        params: the parameters, updated in place: tensors (``model.parameters()``) or arrays
            (``PyGpuMatrix`` on one or more devices, or float numpy arrays; see
            :mod:`gpumat.optim.optimizer`). Array objects are kept: feed these same objects to the
            executor on every step.
        lr: the learning rate, a finite float >= 0 (the step is ``lr`` times the gradient). With
            ``softmaxcrossentropy_op``, whose gradient carries the 1/N of the batch mean,
            ``lr = 1.0`` is the dlsys course's ``lr = 1e-3`` at batch size 1000
            (see :mod:`gpumat.graph.loss`).
        momentum: the velocity's decay, in [0, 1); 0 is plain SGD.

    On a device with every parameter on one device, a step is one ``gpumat.ops.sgd_update`` (or
    ``momentum_sgd_update``) call for all parameters; otherwise one axpy per parameter (three
    kernels with momentum).

    Raises:
        TypeError: a parameter that is neither a tensor nor an array.
        ValueError: ``lr`` negative or not finite, ``momentum`` outside [0, 1).
    """

    _state_names = ("velocity",)

    def __init__(self, params, lr: float, momentum: float = 0.0) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum})

    @property
    def momentum(self) -> float:
        """The velocity's decay (0: plain SGD)."""
        return self.param_groups[0]["momentum"]

    @momentum.setter
    def momentum(self, value) -> None:
        self.param_groups[0]["momentum"] = check_beta(type(self).__name__, "momentum", value)

    @property
    def velocities(self) -> list:
        """The velocity buffers, one per parameter (zero at the start; empty without
        momentum)."""
        return self._ensure_state()["velocity"]

    def _check(self, group: dict) -> dict:
        group = super()._check(group)
        group["momentum"] = check_beta(type(self).__name__, "momentum", group["momentum"])
        return group

    def _new_state(self, arrays: list) -> dict:
        return {"velocity": [zeros_like(p) for p in arrays] if self.momentum else []}

    def _state_tensors(self) -> dict:
        state = self._ensure_state()
        return {f"velocity.{i}": v for i, v in enumerate(state["velocity"])}

    def _state_scalars(self) -> dict:
        if self.momentum == 0 and type(self) is SGD:
            return {"lr": self.lr}
        return {"lr": self.lr, "momentum": self.momentum}

    def _load_state_scalars(self, state: dict) -> None:
        name = type(self).__name__
        lr = check_rate(name, "learning rate", state["lr"])
        momentum = check_beta(name, "momentum", state.get("momentum", 0.0))
        self.lr, self.momentum = lr, momentum

    def _update(self, idx, params, grads, group, state, one_device) -> None:
        lr, mu = group["lr"], group["momentum"]
        if mu == 0:
            if one_device:
                ops.sgd_update(params, grads, lr)
                return
            for p, g in zip(params, grads, strict=True):
                if isinstance(p, np.ndarray):
                    p -= lr * g
                else:
                    ops.axpy(-lr, g, p)
            return
        if not state["velocity"]:  # momentum set after the state was made: start at zero
            arrays = [p._data if self._tensors else p for p in self.params]
            state["velocity"].extend(zeros_like(p) for p in arrays)
        vel = [state["velocity"][i] for i in idx]
        if one_device:
            ops.momentum_sgd_update(params, grads, vel, lr, mu)
            return
        for p, g, v in zip(params, grads, vel, strict=True):
            if isinstance(p, np.ndarray):
                v *= mu
                v += g
                p -= lr * v
            else:
                ops.mul_scalar(v, mu, v)
                ops.add(v, g, v)
                ops.axpy(-lr, v, p)


class MomentumSGD(SGD):
    """:class:`SGD` with momentum 0.9 by default (gpumat's older name; its state dicts say
    ``"MomentumSGD"``).

    Args:
        params, lr: as for :class:`SGD`.
        momentum: in [0, 1), default 0.9.
    """

    def __init__(self, params: Sequence, lr: float, momentum: float = 0.9) -> None:
        super().__init__(params, lr, momentum)

    def _new_state(self, arrays: list) -> dict:
        return {"velocity": [zeros_like(p) for p in arrays]}
