"""Optimizers that update parameters in place from gradient values.

Parameters are the arrays fed to an :class:`~gpumat.runtime.Executor` for the parameter
variables; gradients are the values it returns for ``gradients(loss, params)``. On a device
backend both are ``PyGpuMatrix`` arrays on the same device and the update runs there with no copy
to or from the host: when every parameter is on one device a step is one multi-tensor call for all
parameters (``gpumat.ops.sgd_update``, ``momentum_sgd_update``, ``adam_update_multi``: one launch
per 32 tensors on CUDA); on the numpy backend both are numpy arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gpumat import ops
from gpumat.arrays import empty, is_device_array

__all__ = ["SGD", "Adam", "MomentumSGD"]


def _check_params(name: str, params: Sequence) -> list:
    params = list(params)
    for i, p in enumerate(params):
        if not (isinstance(p, np.ndarray) or is_device_array(p)):
            raise TypeError(
                f"{name}: parameter {i} is a {type(p).__name__}, "
                "expected PyGpuMatrix or numpy array"
            )
        if isinstance(p, np.ndarray) and p.dtype.kind != "f":
            raise TypeError(
                f"{name}: parameter {i} has dtype {p.dtype}; in-place updates need a float array"
            )
    return params


def _check_rate(name: str, what: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: {what} must be a finite number >= 0, got {value!r}")
    return value


def _check_beta(name: str, what: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"{name}: {what} must be in [0, 1), got {value!r}")
    return value


def _zeros_like(p):
    """A zero array with p's shape, on p's device (numpy for numpy parameters)."""
    if isinstance(p, np.ndarray):
        return np.zeros_like(p)
    z = empty(p.shape, p.ctx)
    ops.array_set(z, 0.0)
    return z


def _on_one_device(params: list) -> bool:
    """True when every parameter is a device array and all are on one device (one multi-tensor
    call can then update them all)."""
    if not params or any(isinstance(p, np.ndarray) for p in params):
        return False
    return len({p.ctx for p in params}) == 1


def _check_grads(name: str, params: list, grads: Sequence) -> list:
    """The gradients as a list, checked against the parameters (count, kind, numpy shapes)."""
    grads = list(grads)
    if len(grads) != len(params):
        raise ValueError(f"{name}.step: got {len(grads)} gradients for {len(params)} parameters")
    for i, (p, g) in enumerate(zip(params, grads, strict=True)):
        if isinstance(p, np.ndarray):
            if not isinstance(g, np.ndarray):
                raise TypeError(
                    f"{name}.step: parameter {i} is a numpy array but its gradient is a "
                    f"{type(g).__name__}"
                )
            if g.shape != p.shape:
                raise ValueError(
                    f"{name}.step: gradient {i} has shape {g.shape}, its parameter {p.shape}"
                )
        elif not is_device_array(g):
            raise TypeError(
                f"{name}.step: parameter {i} is a PyGpuMatrix on {p.ctx} but its gradient is a "
                f"{type(g).__name__}; run the executor on {p.ctx} so gradients stay on the device"
            )
    return grads


class _Optimizer:
    """What every optimizer here shares: the checked parameter list and the learning rate, which
    may be changed between steps (``opt.lr = ...``). Errors name the optimizer's class."""

    def __init__(self, params: Sequence, lr: float) -> None:
        self.params = _check_params(type(self).__name__, params)
        self.lr = lr
        # Decided once: a step is one multi-tensor ops call when every parameter is on one device.
        self._one_device = _on_one_device(self.params)

    def _update_all(self, update, grads: Sequence) -> bool:
        """Run ``update(grads)``, one multi-tensor ``gpumat.ops`` call over every parameter, when
        they are all on one device; True if it ran, False to take the per-parameter path.

        The native call checks the gradients (count, kind, shape, device) before it writes
        anything, so the Python checks run only when it refuses, to raise their clearer
        message (a step costs one native call and no per-parameter Python).
        """
        if not self._one_device:
            return False
        try:
            update(grads)
        except (TypeError, ValueError):
            _check_grads(type(self).__name__, self.params, grads)
            raise
        return True

    @property
    def lr(self) -> float:
        """The learning rate (a finite float >= 0)."""
        return self._lr

    @lr.setter
    def lr(self, value: float) -> None:
        self._lr = _check_rate(type(self).__name__, "learning rate", value)

    # ---- state for checkpoints (gpumat.checkpoint.save_training_state)

    def _state_scalars(self) -> dict:
        return {"lr": self._lr}

    def _load_state_scalars(self, state: dict) -> None:
        self.lr = state["lr"]

    def _state_tensors(self) -> dict:
        return {}

    def state_dict(self) -> dict:
        """The optimizer's state, as PyTorch's ``Optimizer.state_dict`` in spirit.

        Returns:
            ``{"type": class name, <hyper-parameters and counters: "lr", and "momentum" /
            "betas", "eps", "t">, "tensors": {key: array}}``. The tensors are the optimizer's own
            live buffers (``PyGpuMatrix`` or numpy, float32, one per parameter and kind:
            ``"velocity.<i>"`` for MomentumSGD, ``"m.<i>"`` and ``"v.<i>"`` for Adam, none for
            SGD), not copies: save them before the next :meth:`step`.
        """
        return {
            "type": type(self).__name__,
            **self._state_scalars(),
            "tensors": self._state_tensors(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a :meth:`state_dict` (tensors as numpy or device arrays) in place.

        The buffers keep their identity and device; values are copied into them, and the
        hyper-parameters and step counter are set from ``state``.

        Raises:
            ValueError: ``state`` belongs to another optimizer class, or its tensors' names or
                shapes differ from this optimizer's (another model or parameter order).
        """
        name = type(self).__name__
        if state.get("type") != name:
            raise ValueError(f"{name}.load_state_dict: the state is of a {state.get('type')!r}")
        own, given = self._state_tensors(), dict(state.get("tensors", {}))
        if set(own) != set(given):
            raise ValueError(
                f"{name}.load_state_dict: state tensors {sorted(given)} differ from this "
                f"optimizer's {sorted(own)}"
            )
        for key, dst in own.items():
            src = given[key]
            src = src.asnumpy() if is_device_array(src) else np.asarray(src)
            if tuple(src.shape) != tuple(dst.shape):
                raise ValueError(
                    f"{name}.load_state_dict: tensor {key!r} has shape {tuple(src.shape)}, "
                    f"this optimizer's {tuple(dst.shape)}"
                )
        self._load_state_scalars(state)  # checks every value before setting any
        for key, dst in own.items():
            src = given[key]
            src = src.asnumpy() if is_device_array(src) else np.asarray(src)
            if isinstance(dst, np.ndarray):
                dst[...] = src
            else:
                dst.copyfrom(src)


class SGD(_Optimizer):
    """Plain stochastic gradient descent: ``param <- param - lr * grad`` for each parameter.

    Args:
        params: the parameters, updated in place: all ``PyGpuMatrix`` (float32, on one or more
            devices) or all float numpy arrays (numpy backend). The objects are kept, so feed these
            same objects to the executor on every step.
        lr: the learning rate, a finite float >= 0 (the step is ``lr`` times the gradient, in the
            parameters' units per gradient unit). It may be changed between steps
            (``opt.lr = ...``).
            With ``softmaxcrossentropy_op``, whose gradient carries the 1/N of the batch mean,
            ``lr = 1.0`` is the dlsys course's ``lr = 1e-3`` at batch size 1000
            (see :mod:`gpumat.graph.loss`).

    Raises:
        TypeError: a parameter is neither a numpy array nor a ``PyGpuMatrix``.
        ValueError: ``lr`` is negative or not finite.

    Source: Robbins & Monro (1951); the update is the dlsys course's ``W -= lr * grad_W``.
    """

    def step(self, grads: Sequence) -> None:
        """Apply one update, ``params[i] -= lr * grads[i]``, in place.

        Args:
            grads: one gradient per parameter, in the same order, each of its parameter's shape and
                kind: a ``PyGpuMatrix`` on the parameter's device (the update is
                ``gpumat.ops.axpy(-lr, grad, param)``, asynchronous on CUDA) or a numpy array for a
                numpy parameter. Gradient buffers returned by an executor may be passed directly:
                they are read before the next run overwrites them. When every parameter is on
                one device the update is a single ``gpumat.ops.sgd_update`` call (one
                multi-tensor launch), else one axpy per parameter.

        Raises:
            ValueError: the number of gradients differs from the number of parameters, or a
                gradient's shape (or device) differs from its parameter's.
            TypeError: a gradient's kind differs from its parameter's (a numpy gradient for a device
                parameter would need a host-to-device copy per step: run the executor on the
                parameters' device instead).
        """
        grads = list(grads)
        lr = self._lr
        if self._update_all(lambda gs: ops.sgd_update(self.params, gs, lr), grads):
            return
        grads = _check_grads("SGD", self.params, grads)
        for p, g in zip(self.params, grads, strict=True):
            if isinstance(p, np.ndarray):
                p -= self._lr * g
            else:
                ops.axpy(-self._lr, g, p)

    def __repr__(self) -> str:
        return f"SGD({len(self.params)} params, lr={self._lr})"


class MomentumSGD(_Optimizer):
    """SGD with momentum (the heavy ball): ``v <- momentum * v + grad; param <- param - lr * v``.

    This is PyTorch's ``SGD(momentum=...)`` form (Polyak, "Some methods of speeding up the
    convergence of iteration methods", 1964; Sutskever et al., "On the importance of
    initialization and momentum in deep learning", ICML 2013, eq. 1-2 with the learning rate
    factored out of v). With a constant ``lr`` it takes the same steps as ``v <- mu v - lr g;
    param <- param + v``; the step size at steady state is ``lr / (1 - momentum)`` times the
    gradient. The velocities start at zero.

    Args:
        params: the parameters, updated in place: ``PyGpuMatrix`` arrays or float numpy arrays
            (as for :class:`SGD`). Feed these same objects to the executor on every step.
        lr: the learning rate, finite and >= 0 (may be changed between steps).
        momentum: the velocity's decay, in [0, 1); 0 is plain SGD.

    On a device, with every parameter on one device, a step is one
    ``gpumat.ops.momentum_sgd_update`` call for all parameters (one launch per 32 tensors on
    CUDA), with no host copies; parameters spread over several devices take three kernels each
    (``v *= momentum``, ``v += grad``, ``param -= lr * v``). The numpy path runs the same formula
    in the parameters' dtype.

    Raises:
        TypeError: a parameter is neither a numpy array nor a ``PyGpuMatrix``.
        ValueError: ``lr`` negative or not finite, ``momentum`` outside [0, 1).
    """

    def __init__(self, params: Sequence, lr: float, momentum: float = 0.9) -> None:
        super().__init__(params, lr)
        self.momentum = _check_beta("MomentumSGD", "momentum", momentum)
        self.velocities = [_zeros_like(p) for p in self.params]

    def step(self, grads: Sequence) -> None:
        """One update of every parameter from its gradient (same order, kind and shape as the
        parameters; device gradients may be an executor's returned buffers).

        Raises ValueError for a wrong number of gradients or a shape mismatch, TypeError for a
        gradient of another kind than its parameter (as :meth:`SGD.step`).
        """
        grads = list(grads)
        mu, lr = self.momentum, self._lr
        if self._update_all(
            lambda gs: ops.momentum_sgd_update(self.params, gs, self.velocities, lr, mu), grads
        ):
            return
        grads = _check_grads("MomentumSGD", self.params, grads)
        for p, g, v in zip(self.params, grads, self.velocities, strict=True):
            if isinstance(p, np.ndarray):
                v *= mu
                v += g
                p -= lr * v
            else:
                ops.matrix_elementwise_multiply_by_const(v, mu, v)
                ops.matrix_elementwise_add(v, g, v)
                ops.axpy(-lr, v, p)

    def _state_scalars(self) -> dict:
        return {"lr": self._lr, "momentum": self.momentum}

    def _load_state_scalars(self, state: dict) -> None:
        lr = _check_rate("MomentumSGD", "learning rate", state["lr"])
        self.momentum = _check_beta("MomentumSGD", "momentum", state["momentum"])
        self.lr = lr

    def _state_tensors(self) -> dict:
        return {f"velocity.{i}": v for i, v in enumerate(self.velocities)}

    def __repr__(self) -> str:
        return f"MomentumSGD({len(self.params)} params, lr={self._lr}, momentum={self.momentum})"


class Adam(_Optimizer):
    """Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015, Algorithm 1).

    For step t = 1, 2, ... and each parameter, with g its gradient::

        m <- beta1 m + (1 - beta1) g            (first moment, starts at 0)
        v <- beta2 v + (1 - beta2) g^2          (second moment, starts at 0)
        param <- param - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

    The bias corrections 1 - beta^t undo the moments' zero start. This is Algorithm 1 as printed
    (eps added to the corrected sqrt(v), as PyTorch does); the paper's defaults are lr = 1e-3,
    betas = (0.9, 0.999), eps = 1e-8.

    Args:
        params: the parameters, updated in place (``PyGpuMatrix`` or float numpy arrays).
        lr: the step size, finite and >= 0 (may be changed between steps).
        betas: (beta1, beta2), each in [0, 1).
        eps: finite, >= 0.

    On a device, with every parameter on one device, a step is one ``gpumat.ops.adam_update_multi``
    call for all parameters (one launch per 32 tensors on CUDA; each element read and written
    once); parameters spread over several devices take one ``gpumat.ops.adam_update`` kernel each.
    On numpy the same formula runs in the parameters' dtype. ``t`` counts the steps taken.

    Raises:
        TypeError: a parameter is neither a numpy array nor a ``PyGpuMatrix``.
        ValueError: lr or eps negative or not finite, a beta outside [0, 1).
    """

    def __init__(
        self,
        params: Sequence,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        super().__init__(params, lr)
        b1, b2 = betas
        self.betas = (_check_beta("Adam", "beta1", b1), _check_beta("Adam", "beta2", b2))
        self.eps = _check_rate("Adam", "eps", eps)
        self.t = 0
        self.m = [_zeros_like(p) for p in self.params]
        self.v = [_zeros_like(p) for p in self.params]

    def step(self, grads: Sequence) -> None:
        """One Adam update of every parameter (gradients as for :meth:`MomentumSGD.step`)."""
        grads = list(grads)
        # On one device t advances only once adam_update_multi accepted the step: a step
        # rejected for a shape or device mismatch changes no state.
        t, lr, eps = self.t + 1, self._lr, self.eps
        b1, b2 = self.betas
        if self._update_all(
            lambda gs: ops.adam_update_multi(self.params, gs, self.m, self.v, lr, b1, b2, eps, t),
            grads,
        ):
            self.t = t
            return
        grads = _check_grads("Adam", self.params, grads)
        self.t = t
        for p, g, m, v in zip(self.params, grads, self.m, self.v, strict=True):
            if isinstance(p, np.ndarray):
                m *= b1
                m += (1.0 - b1) * g
                v *= b2
                v += (1.0 - b2) * g * g
                m_hat = m / (1.0 - b1**t)
                v_hat = v / (1.0 - b2**t)
                p -= lr * m_hat / (np.sqrt(v_hat) + eps)
            else:
                ops.adam_update(p, g, m, v, lr, b1, b2, eps, t)

    def _state_scalars(self) -> dict:
        return {"lr": self._lr, "betas": list(self.betas), "eps": self.eps, "t": self.t}

    def _load_state_scalars(self, state: dict) -> None:
        # Every value is checked before any is set, so a bad state changes nothing.
        lr = _check_rate("Adam", "learning rate", state["lr"])
        b1, b2 = state["betas"]
        betas = (_check_beta("Adam", "beta1", b1), _check_beta("Adam", "beta2", b2))
        eps = _check_rate("Adam", "eps", state["eps"])
        t = state["t"]
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise ValueError(f"Adam.load_state_dict: step count t must be an int >= 0, got {t!r}")
        self.lr, self.betas, self.eps, self.t = lr, betas, eps, t

    def _state_tensors(self) -> dict:
        out = {f"m.{i}": m for i, m in enumerate(self.m)}
        out.update({f"v.{i}": v for i, v in enumerate(self.v)})
        return out

    def __repr__(self) -> str:
        return f"Adam({len(self.params)} params, lr={self._lr}, betas={self.betas}, eps={self.eps})"
