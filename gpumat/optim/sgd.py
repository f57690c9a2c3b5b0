"""Stochastic gradient descent, with and without momentum: ``SGD`` and ``MomentumSGD``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpumat import ops, reference
from gpumat.optim.optimizer import Optimizer, check_beta, check_rate, zeros_like

__all__ = ["SGD", "MomentumSGD"]


class SGD(Optimizer):
    """Stochastic gradient descent, PyTorch's ``SGD(params, lr, momentum=0, dampening=0,
    weight_decay=0, nesterov=False)``, with its formula for each parameter and gradient g::

        g <- g + weight_decay * param                       (coupled L2, if weight_decay)
        v <- momentum * v + (1 - dampening) * g             (v <- g at the parameter's first step)
        g <- g + momentum * v if nesterov else v            (if momentum)
        param <- param - lr * g

    Without momentum: ``param <- param - lr * grad`` (Robbins & Monro, 1951; the dlsys course's
    ``W -= lr * grad_W``). With momentum (the heavy ball: Polyak, "Some methods of speeding up
    the convergence of iteration methods", 1964; Sutskever et al., ICML 2013, eq. 1-2 with the
    learning rate factored out of v, as PyTorch writes it, and its Nesterov form).

    Args:
        params: the parameters, updated in place: tensors (``model.parameters()``), a list of
            parameter-group dicts (``[{"params": ..., "lr": ...}, ...]``; options a group lacks
            come from the arguments here), or arrays (``PyGpuMatrix`` on one or more devices, or
            float numpy arrays; see :mod:`gpumat.optim.optimizer`). Array objects are kept: feed
            these same objects to the executor on every step.
        lr: the learning rate, a finite float >= 0 (the step is ``lr`` times the gradient). With
            ``softmaxcrossentropy_op``, whose gradient carries the 1/N of the batch mean,
            ``lr = 1.0`` is the dlsys course's ``lr = 1e-3`` at batch size 1000
            (see :mod:`gpumat.graph.loss`).
        momentum: the velocity's decay, in [0, 1); 0 is plain SGD.
        dampening: in [0, 1], the factor 1 - dampening on the gradient added to the velocity.
        weight_decay: the L2 penalty's factor, finite and >= 0 (added to the gradient).
        nesterov: Nesterov momentum (needs momentum > 0 and dampening 0).

    On a device with every parameter of a group on one device, a step is one
    ``gpumat.ops.sgd_update`` (or ``momentum_sgd_update``) call per group; otherwise one call
    per parameter.

    Raises:
        TypeError: a parameter that is neither a tensor nor an array, an unknown group option.
        ValueError: ``lr`` or ``weight_decay`` negative or not finite, ``momentum`` outside
            [0, 1), ``dampening`` outside [0, 1], ``nesterov`` without momentum or with
            dampening (PyTorch's message).
    """

    _state_names = ("velocity",)

    def __init__(
        self,
        params,
        lr: float,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
        }
        super().__init__(params, defaults)

    @property
    def momentum(self) -> float:
        """The first group's velocity decay (0: plain SGD)."""
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
        name = type(self).__name__
        group = super()._check(group)
        group["momentum"] = check_beta(name, "momentum", group["momentum"])
        group["dampening"] = check_beta(name, "dampening", group["dampening"], closed=True)
        group["weight_decay"] = check_rate(name, "weight_decay", group["weight_decay"])
        if not isinstance(group["nesterov"], (bool, np.bool_)):
            raise TypeError(f"{name}: nesterov must be a bool, got {group['nesterov']!r}")
        group["nesterov"] = bool(group["nesterov"])
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError(f"{name}: Nesterov momentum requires a momentum and zero dampening")
        return group

    def _uses_momentum(self) -> bool:
        return any(g["momentum"] for g in self.param_groups)

    def _new_state(self, arrays: list) -> dict:
        use = self._uses_momentum()
        return {
            "velocity": [zeros_like(p) for p in arrays] if use else [],
            "started": [False] * len(arrays),
        }

    def _extend_state(self, state: dict, count: int) -> None:
        state["started"].extend([False] * count)

    def _state_tensors(self) -> dict:
        state = self._ensure_state()
        return {f"velocity.{i}": v for i, v in enumerate(state["velocity"])}

    def _state_scalars(self) -> dict:
        out = {"lr": self.lr}
        if not (self.momentum == 0 and type(self) is SGD):
            out["momentum"] = self.momentum
        if self._state is not None and self._state["velocity"]:
            # Which velocities have had their first step (v <- g there, PyTorch's start).
            out["started"] = list(self._state["started"])
        return out

    def _load_state_scalars(self, state: dict) -> None:
        name = type(self).__name__
        lr = check_rate(name, "learning rate", state["lr"])
        momentum = check_beta(name, "momentum", state.get("momentum", 0.0))
        n = len(self.params)
        # Older states lack "started": their velocities came from steps already taken.
        started = [bool(s) for s in state.get("started", [True] * n)]
        if len(started) != n:
            raise ValueError(
                f"{name}.load_state_dict: 'started' has {len(started)} entries for {n} parameters"
            )
        self.lr, self.momentum = lr, momentum
        self._ensure_state()["started"] = started

    def _update(self, idx, params, grads, group, state, one_device) -> None:
        lr, mu, wd = group["lr"], group["momentum"], group["weight_decay"]
        if mu == 0:
            if one_device:
                ops.sgd_update(params, grads, lr, wd)
                return
            for p, g in zip(params, grads, strict=True):
                if isinstance(p, np.ndarray):
                    reference.sgd_update([p], [g], lr, wd)
                else:
                    ops.sgd_update([p], [g], lr, wd)
            return
        if not state["velocity"]:  # momentum set after the state was made: start at zero
            arrays = [p._data if self._tensors else p for p in self.params]
            state["velocity"].extend(zeros_like(p) for p in arrays)
        damp, nesterov = group["dampening"], group["nesterov"]
        started = state["started"]
        vel = [state["velocity"][i] for i in idx]
        # PyTorch's first step sets v = g: from a zero velocity that is the step with dampening 0.
        if damp == 0 or all(started[i] for i in idx):
            calls = [(list(range(len(idx))), damp)]
        else:
            first = [k for k, i in enumerate(idx) if not started[i]]
            rest = [k for k, i in enumerate(idx) if started[i]]
            calls = [(first, 0.0), (rest, damp)] if rest else [(first, 0.0)]
        for ks, d in calls:
            if len(ks) == len(idx):
                ps, gs, vs = params, grads, vel
            else:
                ps, gs, vs = [params[k] for k in ks], [grads[k] for k in ks], [vel[k] for k in ks]
            if one_device:
                ops.momentum_sgd_update(ps, gs, vs, lr, mu, d, wd, nesterov)
                continue
            for p, g, v in zip(ps, gs, vs, strict=True):
                if isinstance(p, np.ndarray):
                    reference.momentum_sgd_update([p], [g], [v], lr, mu, d, wd, nesterov)
                else:
                    ops.momentum_sgd_update([p], [g], [v], lr, mu, d, wd, nesterov)
        for i in idx:
            started[i] = True


class MomentumSGD(SGD):
    """:class:`SGD` with momentum 0.9 by default (gpumat's older name; its state dicts say
    ``"MomentumSGD"``).

    Args:
        params, lr: as for :class:`SGD`.
        momentum: in [0, 1), default 0.9.
        dampening, weight_decay, nesterov: as for :class:`SGD`.
    """

    def __init__(
        self,
        params: Sequence,
        lr: float,
        momentum: float = 0.9,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        super().__init__(params, lr, momentum, dampening, weight_decay, nesterov)

    def _uses_momentum(self) -> bool:
        return True
