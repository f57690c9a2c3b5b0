"""The optimizers' base class: parameters, hyper-parameters, multi-tensor updates, state.

An optimizer updates parameters in place, in one of two modes, chosen by what it is given:

- **Tensors** (``model.parameters()``, :class:`gpumat.Tensor` leaves): PyTorch's interface.
  ``step()`` reads each parameter's ``.grad`` (parameters whose gradient is None are skipped),
  ``zero_grad()`` resets them; ``step(closure)`` calls the closure (under grad mode) first and
  returns its loss. The state (momentum, moments) is made at the first step, on each parameter's
  device. Inside a step compiled by :func:`gpumat.compile`, ``step()`` records the update, which
  the compiled step runs after its graph.
- **Arrays** (``PyGpuMatrix`` or float numpy arrays: the parameters fed to a
  :class:`gpumat.runtime.Executor`): ``step(grads)`` takes the gradient values the executor
  returns, one per parameter in order (:func:`gpumat.train.fit` and :mod:`gpumat.distributed` use
  this form).

On a device, when every parameter is on one device, a step is one multi-tensor kernel call for all
parameters (``gpumat.ops.sgd_update``, ``momentum_sgd_update``, ``adam_update_multi``,
``adadelta_update_multi``: one launch per 32 tensors on CUDA); parameters spread over devices take
one call each; numpy parameters are updated with numpy in their dtype.

Hyper-parameters live in ``param_groups`` (one group: gpumat optimizers take a single group), a
list of one dict with ``"params"`` and the hyper-parameters, as PyTorch's, so learning-rate
schedulers (:mod:`gpumat.optim.lr_scheduler`) work on them; they are also attributes (``opt.lr``).
Values set through ``param_groups`` are checked at the next step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from gpumat import ops
from gpumat.arrays import empty, is_device_array
from gpumat.autograd import current_trace, enable_grad, reset_grad
from gpumat.dtypes import float32
from gpumat.tensor import Tensor

__all__ = ["Optimizer"]


def check_rate(name: str, what: str, value) -> float:
    """``value`` as a float, finite and >= 0; ValueError naming the optimizer otherwise."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: {what} must be a number, got {value!r}") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: {what} must be a finite number >= 0, got {value!r}")
    return value


def check_beta(name: str, what: str, value, closed: bool = False) -> float:
    """``value`` as a float in [0, 1) (or [0, 1] when ``closed``); ValueError otherwise."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: {what} must be a number, got {value!r}") from None
    if not (0.0 <= value <= 1.0 if closed else 0.0 <= value < 1.0):
        raise ValueError(f"{name}: {what} must be in [0, 1{']' if closed else ')'}, got {value!r}")
    return value


def zeros_like(p):
    """A zero array with p's shape, on p's device (numpy for numpy parameters)."""
    if isinstance(p, np.ndarray):
        return np.zeros_like(p)
    z = empty(p.shape, p.device)
    ops.fill(z, 0.0)
    return z


def _param_list(name: str, params) -> tuple[list, dict]:
    """(parameters, hyper-parameter overrides) from a list of tensors or arrays, or a list
    holding one parameter group dict."""
    if params is None or isinstance(params, (str, bytes, Tensor, np.ndarray, Mapping)):
        raise TypeError(
            f"{name}: params must be an iterable of tensors (model.parameters()) or of arrays, "
            f"got {type(params).__name__}"
        )
    try:
        params = list(params)
    except TypeError:
        raise TypeError(
            f"{name}: params must be an iterable of tensors or arrays, got {type(params).__name__}"
        ) from None
    overrides: dict = {}
    if params and isinstance(params[0], Mapping):
        if len(params) != 1:
            raise ValueError(
                f"{name}: gpumat optimizers take one parameter group, got {len(params)}"
            )
        group = dict(params[0])
        if "params" not in group:
            raise ValueError(f"{name}: the parameter group has no 'params'")
        params, overrides = _param_list(name, group.pop("params"))[0], group
    if not params:
        raise ValueError(f"{name}: optimizer got an empty parameter list")
    tensors = isinstance(params[0], Tensor)
    for i, p in enumerate(params):
        if tensors:
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"{name}: parameter {i} is a {type(p).__name__}; the others are Tensors"
                )
            if p.dtype is not float32:
                raise TypeError(f"{name}: parameter {i} is {p.dtype}; parameters are float32")
            if not p.is_leaf:
                raise ValueError(f"{name}: can't optimize a non-leaf Tensor (parameter {i})")
        elif not (isinstance(p, np.ndarray) or is_device_array(p)):
            raise TypeError(
                f"{name}: parameter {i} is a {type(p).__name__}, expected a Tensor, a PyGpuMatrix "
                "or a numpy array"
            )
        elif isinstance(p, np.ndarray) and p.dtype.kind != "f":
            raise TypeError(
                f"{name}: parameter {i} has dtype {p.dtype}; in-place updates need a float array"
            )
    if len({id(p) for p in params}) != len(params):
        raise ValueError(f"{name}: some parameters appear more than once")
    return params, overrides


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
                f"{name}.step: parameter {i} is a PyGpuMatrix on {p.device} but its gradient is a "
                f"{type(g).__name__}; run the executor on {p.device} so gradients stay on the "
                "device"
            )
    return grads


class Optimizer:
    """Base class of gpumat's optimizers (see the module docstring for the two modes).

    Subclasses define ``_check(group)`` (the hyper-parameters, checked), ``_new_state(arrays)``
    (their buffers, one list per kind, aligned with the parameters), ``_state_names`` and
    ``_update(idx, params, grads, hyper, one_device)``.

    Attributes:
        param_groups: ``[{"params": [...], <hyper-parameters>}]``.
        defaults: the hyper-parameters given at construction.

    Raises (construction): TypeError for parameters that are neither all tensors nor all arrays,
    a non-float parameter, or a non-iterable; ValueError for an empty list, a repeated parameter,
    a non-leaf tensor, or hyper-parameters out of range.
    """

    _state_names: tuple = ()

    def __init__(self, params, defaults: dict) -> None:
        name = type(self).__name__
        params, overrides = _param_list(name, params)
        unknown = set(overrides) - set(defaults)
        if unknown:
            raise TypeError(f"{name}: unknown options in the parameter group: {sorted(unknown)}")
        self.defaults = dict(defaults)
        self.param_groups = [{"params": params, **defaults, **overrides}]
        self._check(self.param_groups[0])
        self._tensors = isinstance(params[0], Tensor)
        self._state: dict | None = None
        if not self._tensors:
            # Arrays: the state exists from the start (the executor API's optimizers always had
            # their buffers), and a step is one multi-tensor call when one device holds them all.
            self._one_device = not any(isinstance(p, np.ndarray) for p in params) and (
                len({p.device for p in params}) == 1
            )
            self._ensure_state()

    # ---------------------------------------------------------------- hyper-parameters

    @property
    def params(self) -> list:
        """The parameters (tensors or arrays), in order."""
        return self.param_groups[0]["params"]

    @property
    def lr(self) -> float:
        """The learning rate (a finite float >= 0; may be changed between steps)."""
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value) -> None:
        self.param_groups[0]["lr"] = check_rate(type(self).__name__, "learning rate", value)

    def _check(self, group: dict) -> dict:
        """The group's hyper-parameters, checked and converted (subclasses extend)."""
        group["lr"] = check_rate(type(self).__name__, "learning rate", group["lr"])
        return group

    # ---------------------------------------------------------------- state

    def _new_state(self, arrays: list) -> dict:
        return {}

    def _ensure_state(self) -> dict:
        if self._state is None:
            arrays = [p._data if self._tensors else p for p in self.params]
            self._state = self._new_state(arrays)
        return self._state

    def _state_tensors(self) -> dict:
        state = self._ensure_state()
        return {
            f"{kind}.{i}": buf for kind in self._state_names for i, buf in enumerate(state[kind])
        }

    def _state_scalars(self) -> dict:
        return {"lr": self.lr}

    def _load_state_scalars(self, state: dict) -> None:
        self.lr = state["lr"]

    def state_dict(self) -> dict:
        """The optimizer's state, enough to resume training.

        Returns:
            dict: ``"type"``, the class name; the hyper-parameters and counters the optimizer
            has (``"lr"``, and ``"momentum"``, ``"betas"``, ``"eps"``, ``"t"``, ``"rho"``);
            ``"tensors"``, key -> array. The tensors are the optimizer's own live buffers
            (``PyGpuMatrix`` or numpy, float32, one per parameter and kind: ``"velocity.<i>"``
            for SGD with momentum, ``"m.<i>"`` and ``"v.<i>"`` for Adam, ``"square_avg.<i>"``
            and ``"acc_delta.<i>"`` for Adadelta), not copies: save them before the next
            :meth:`step`. This is the form
            :func:`gpumat.checkpoint.save_training_state` stores.
        """
        return {
            "type": self._state_type(),
            **self._state_scalars(),
            "tensors": self._state_tensors(),
        }

    def _state_type(self) -> str:
        return type(self).__name__

    def load_state_dict(self, state: dict) -> None:
        """Restore a :meth:`state_dict` (tensors as numpy or device arrays) in place.

        The buffers keep their identity and device; values are copied into them, and the
        hyper-parameters and step counter are set from ``state``.

        Raises:
            TypeError: ``state`` is not a mapping.
            ValueError: ``state`` belongs to another optimizer class, or its tensors' names or
                shapes differ from this optimizer's (another model or parameter order).
        """
        name = type(self).__name__
        if not isinstance(state, Mapping):
            raise TypeError(f"{name}.load_state_dict: expected a dict, got {type(state).__name__}")
        if state.get("type") != self._state_type():
            raise ValueError(f"{name}.load_state_dict: the state is of a {state.get('type')!r}")
        own, given = self._state_tensors(), dict(state.get("tensors", {}))
        if set(own) != set(given):
            raise ValueError(
                f"{name}.load_state_dict: state tensors {sorted(given)} differ from this "
                f"optimizer's {sorted(own)}"
            )
        sources = {}
        for key, dst in own.items():
            src = given[key]
            if isinstance(src, Tensor):
                src = src._data
            src = src.asnumpy() if is_device_array(src) else np.asarray(src)
            if tuple(src.shape) != tuple(dst.shape):
                raise ValueError(
                    f"{name}.load_state_dict: tensor {key!r} has shape {tuple(src.shape)}, "
                    f"this optimizer's {tuple(dst.shape)}"
                )
            sources[key] = src
        self._load_state_scalars(state)  # checks every value before setting any
        for key, dst in own.items():
            if isinstance(dst, np.ndarray):
                dst[...] = sources[key]
            else:
                dst.copyfrom(sources[key])

    # ---------------------------------------------------------------- steps

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the parameters' gradients: to None (default, as PyTorch) or to zeros. Array
        parameters have no ``.grad`` (their gradients are the executor's values): a no-op."""
        if self._tensors:
            for p in self.params:
                reset_grad(p, set_to_none)

    def step(self, grads_or_closure=None):
        """One update of every parameter.

        Tensors: ``step()`` reads each parameter's ``.grad`` (skipping those that are None);
        ``step(closure)`` first calls ``closure()`` under grad mode and returns its result.
        Arrays: ``step(grads)``, one gradient per parameter in order, each of its parameter's
        shape and kind (a ``PyGpuMatrix`` on its device, or numpy for numpy parameters; an
        executor's returned buffers may be passed directly).

        Raises:
            ValueError: a wrong number of gradients, a shape or device mismatch (the state is
                unchanged), or hyper-parameters in ``param_groups`` out of range.
            TypeError: a gradient of another kind than its parameter, a non-float32 gradient, a
                list of gradients given to a tensor optimizer or none to an array one.
        """
        name = type(self).__name__
        if not self._tensors:
            if grads_or_closure is None or callable(grads_or_closure):
                raise TypeError(
                    f"{name}.step: this optimizer updates arrays; pass their gradients, step(grads)"
                )
            grads = list(grads_or_closure)
            self._apply(list(range(len(self.params))), list(self.params), grads)
            return None
        loss = None
        if grads_or_closure is not None:
            if not callable(grads_or_closure):
                raise TypeError(
                    f"{name}.step: this optimizer reads the parameters' .grad; call step() (or "
                    "step(closure))"
                )
            with enable_grad():
                loss = grads_or_closure()
        trace = current_trace()
        if trace is not None:
            trace.record_step(self, self.params)
            return loss
        idx, grads = [], []
        for i, p in enumerate(self.params):
            g = p._grad
            if g is None:
                continue
            g._concrete(f"{name}.step")
            idx.append(i)
            grads.append(g._data)
        if idx:
            self.apply_gradients(idx, grads)
        return loss

    def apply_gradients(self, idx: list, grads: list) -> None:
        """Update the tensor parameters at positions ``idx`` from gradient arrays ``grads``
        (``PyGpuMatrix``, one per position): the update of :meth:`step`, which compiled steps
        call with their gradient buffers. Each parameter's version counter advances."""
        params = self.params
        self._apply(idx, [params[i]._data for i in idx], grads)
        for i in idx:
            params[i]._vc.value += 1

    def _apply_compiled(self, idx: list, grads: list) -> None:
        """:meth:`apply_gradients` for :func:`gpumat.compile`'s steps, with one multi-tensor call.

        The parameters at ``idx`` were fed to the step's executor, which checked that they are
        on its device, and ``grads`` are its buffers there: no per-step device check is needed
        here (the native call checks devices, shapes and aliasing again before it writes).
        """
        params = self.param_groups[0]["params"]
        arrays = [params[i]._data for i in idx]
        group = self._check(dict(self.param_groups[0]))
        state = self._state if self._state is not None else self._ensure_state()
        try:
            self._update(idx, arrays, grads, group, state, True)
        except (TypeError, ValueError):
            _check_grads(type(self).__name__, arrays, grads)
            raise
        for i in idx:
            params[i]._vc.value += 1

    def _apply(self, idx: list, arrays: list, grads: list) -> None:
        """One update of the parameter arrays at positions ``idx`` (checked hyper-parameters)."""
        group = self._check(dict(self.param_groups[0]))
        state = self._ensure_state()
        if not self._tensors:
            one_device = self._one_device
        elif arrays:
            c0 = arrays[0].device
            one_device = True
            for a in arrays:  # a plain loop: this runs every step
                device = a.device
                if device is not c0 and device != c0:
                    one_device = False
                    break
        else:
            one_device = False
        if one_device:
            try:
                self._update(idx, arrays, grads, group, state, True)
            except (TypeError, ValueError):
                # The native call checks everything before it writes; re-check in Python for
                # the clearer message, else re-raise its own.
                _check_grads(type(self).__name__, arrays, grads)
                raise
            return
        grads = _check_grads(type(self).__name__, arrays, grads)
        self._update(idx, arrays, grads, group, state, False)

    def _update(self, idx, params, grads, group, state, one_device) -> None:
        raise NotImplementedError(f"{type(self).__name__}._update")

    def __repr__(self) -> str:
        scalars = self._state_scalars()
        hyper = ", ".join(
            f"{k}={tuple(v) if isinstance(v, list) else v}" for k, v in scalars.items() if k != "t"
        )
        return f"{type(self).__name__}({len(self.params)} params, {hyper})"
