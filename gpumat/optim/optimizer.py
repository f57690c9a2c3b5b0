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

Hyper-parameters live in ``param_groups``, a list of dicts with ``"params"`` and the
hyper-parameters, as PyTorch's: ``params`` may be a list of such dicts (each group's missing
options from the optimizer's defaults) and :meth:`Optimizer.add_param_group` adds one, so
per-group learning rates and weight decay work, and learning-rate schedulers
(:mod:`gpumat.optim.lr_scheduler`) write each group's ``"lr"``. The first group's values are also
attributes (``opt.lr``). Values set through ``param_groups`` are checked at the next step. A step
is one multi-tensor call per group (per group and device when parameters are spread).
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


def _param_list(name: str, params) -> list:
    """The checked parameters of one group: tensors, or arrays (not a mix)."""
    if params is None or isinstance(params, (str, bytes, np.ndarray, Mapping)):
        raise TypeError(
            f"{name}: params must be an iterable of tensors (model.parameters()) or of arrays, "
            f"got {type(params).__name__}"
        )
    if isinstance(params, Tensor):
        params = [params]  # a group's "params" may be one tensor, as PyTorch's
    try:
        params = list(params)
    except TypeError:
        raise TypeError(
            f"{name}: params must be an iterable of tensors or arrays, got {type(params).__name__}"
        ) from None
    tensors = bool(params) and isinstance(params[0], Tensor)
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
    return params


def _param_groups(name: str, params) -> list:
    """The parameter groups (dicts with a "params" list) from a list of tensors or arrays, or a
    list of group dicts."""
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
    if not params:
        raise ValueError(f"{name}: optimizer got an empty parameter list")
    if not isinstance(params[0], Mapping):
        return [{"params": params}]
    for i, g in enumerate(params):
        if not isinstance(g, Mapping):
            raise TypeError(f"{name}: parameter group {i} is a {type(g).__name__}, expected a dict")
    return [dict(g) for g in params]


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
        self.defaults = dict(defaults)
        self.param_groups: list = []
        self._state: dict | None = None
        self._tensors = None
        for group in _param_groups(name, params):
            self.add_param_group(group)
        if not self._tensors:
            # Arrays: the state exists from the start (the executor API's optimizers always had
            # their buffers), and a step is one multi-tensor call when one device holds them all.
            ps = self.params
            self._one_device = not any(isinstance(p, np.ndarray) for p in ps) and (
                len({p.device for p in ps}) == 1
            )
            self._ensure_state()

    def add_param_group(self, param_group: dict) -> None:
        """Add a parameter group (PyTorch's ``Optimizer.add_param_group``): a dict with
        ``"params"`` (tensors, or arrays for an array optimizer) and any of the optimizer's
        options; the missing ones are the defaults given at construction. Its state (momentum,
        moments) starts at zero.

        Raises:
            TypeError: not a dict, an option the optimizer does not have, parameters of another
                kind than the other groups'.
            ValueError: no ``"params"``, an empty group, a parameter already in a group, or an
                option out of range.
        """
        name = type(self).__name__
        if not isinstance(param_group, Mapping):
            raise TypeError(
                f"{name}.add_param_group: expected a dict, got {type(param_group).__name__}"
            )
        group = dict(param_group)
        if "params" not in group:
            raise ValueError(f"{name}: the parameter group has no 'params'")
        params = _param_list(name, group.pop("params"))
        if not params:
            raise ValueError(f"{name}: optimizer got an empty parameter list")
        # initial_lr is the schedulers' key (a group saved from a scheduled optimizer has it).
        unknown = set(group) - set(self.defaults) - {"initial_lr"}
        if unknown:
            raise TypeError(f"{name}: unknown options in the parameter group: {sorted(unknown)}")
        tensors = isinstance(params[0], Tensor)
        if self._tensors is not None and tensors != self._tensors:
            raise TypeError(
                f"{name}.add_param_group: the other groups hold "
                f"{'tensors' if self._tensors else 'arrays'}; this one does not"
            )
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in params):
            raise ValueError(f"{name}: some parameters appear in more than one parameter group")
        new = {"params": params, **self.defaults, **group}
        self._check(dict(new))  # out-of-range options fail here, not at the first step
        self._tensors = tensors
        self.param_groups.append(new)

    # ---------------------------------------------------------------- hyper-parameters

    @property
    def params(self) -> list:
        """The parameters (tensors or arrays) of every group, in order (the index of a
        parameter's state buffers)."""
        groups = self.param_groups
        if len(groups) == 1:
            return groups[0]["params"]
        return [p for g in groups for p in g["params"]]

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
        state = self._state
        if state is None:
            arrays = [p._data if self._tensors else p for p in self.params]
            state = self._state = self._new_state(arrays)
        elif self._state_names and len(state[self._state_names[0]]) < len(self.params):
            # A group added after the state was made: its buffers start at zero.
            arrays = [p._data if self._tensors else p for p in self.params]
            new = arrays[len(state[self._state_names[0]]) :]
            for kind in self._state_names:
                if state[kind]:  # a kind in use has one buffer per parameter
                    state[kind].extend(zeros_like(p) for p in new)
            self._extend_state(state, len(new))
        return state

    def _extend_state(self, state: dict, count: int) -> None:
        """Extend the state's non-buffer lists for ``count`` parameters of an added group."""

    def _group_hyper(self) -> list:
        """Each group's options (without its parameters), for :meth:`state_dict`."""
        return [
            {k: list(v) if isinstance(v, tuple) else v for k, v in g.items() if k != "params"}
            for g in self.param_groups
        ]

    def _load_group_hyper(self, groups) -> list:
        """Each group's options from :meth:`state_dict`'s ``"param_groups"``, checked (set by
        the caller once every other check passed)."""
        name = type(self).__name__
        if not isinstance(groups, Sequence) or len(groups) != len(self.param_groups):
            raise ValueError(
                f"{name}.load_state_dict: the state has {len(groups)} parameter groups, this "
                f"optimizer {len(self.param_groups)}"
            )
        checked = []
        for own, given in zip(self.param_groups, groups, strict=True):
            new = {**own, **{k: v for k, v in dict(given).items() if k != "params"}}
            checked.append(self._check(dict(new)))
        return checked

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
            dict: ``"type"``, the class name; the first group's hyper-parameters and the
            counters the optimizer has (``"lr"``, and ``"momentum"``, ``"betas"``, ``"eps"``,
            ``"t"``, ``"rho"``); ``"param_groups"``, every group's options (without its
            parameters);
            ``"tensors"``, key -> array. The tensors are the optimizer's own live buffers
            (``PyGpuMatrix`` or numpy, float32, one per parameter and kind: ``"velocity.<i>"``
            for SGD with momentum, ``"m.<i>"`` and ``"v.<i>"`` for Adam, ``"square_avg.<i>"``
            and ``"acc_delta.<i>"`` for Adadelta), not copies: save them before the next
            :meth:`step`. This is the form
            :func:`gpumat.checkpoint.save_training_state` stores.
        """
        tensors = self._state_tensors()  # makes the state first (its scalars read it)
        return {
            "type": self._state_type(),
            **self._state_scalars(),
            "param_groups": self._group_hyper(),
            "tensors": tensors,
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
        given = dict(state.get("tensors", {}))
        st = self._ensure_state()
        for kind in self._state_names:
            # A kind the saved options used (momentum, amsgrad) but this optimizer's do not yet:
            # its buffers are made here, as the loaded options will need them.
            if not st[kind] and f"{kind}.0" in given:
                arrays = [p._data if self._tensors else p for p in self.params]
                st[kind].extend(zeros_like(p) for p in arrays)
        own = self._state_tensors()
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
        groups = None
        if "param_groups" in state:  # absent from the state of older versions
            groups = self._load_group_hyper(state["param_groups"])
        self._load_state_scalars(state)  # checks every value before setting any
        for group, new in zip(self.param_groups, groups or (), strict=False):
            group.update({k: v for k, v in new.items() if k != "params"})
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
        """:meth:`apply_gradients` for :func:`gpumat.compile`'s steps, with one multi-tensor call
        per group.

        The parameters at ``idx`` were fed to the step's executor, which checked that they are
        on its device, and ``grads`` are its buffers there: no per-step device check is needed
        here (the native call checks devices, shapes and aliasing again before it writes).
        """
        params = self.params
        self._apply(idx, [params[i]._data for i in idx], grads, compiled=True)
        for i in idx:
            params[i]._vc.value += 1

    def _apply(self, idx: list, arrays: list, grads: list, compiled: bool = False) -> None:
        """One update of the parameter arrays at positions ``idx`` (ascending), group by group,
        each with its checked hyper-parameters. Every group's options are checked before any
        parameter changes; a later group's shape or device error leaves the earlier groups
        updated (gradients from ``.grad`` always have their parameter's shape)."""
        name = type(self).__name__
        groups = self.param_groups
        if len(grads) != len(arrays):
            _check_grads(name, arrays, grads)  # raises: the count differs
        if len(groups) == 1:
            parts = [(groups[0], idx, arrays, grads)]
        else:
            parts, k, end = [], 0, 0
            for g in groups:
                end += len(g["params"])
                j = k
                while j < len(idx) and idx[j] < end:
                    j += 1
                if j > k:
                    parts.append((g, idx[k:j], arrays[k:j], grads[k:j]))
                k = j
        checked = [self._check(dict(g)) for g, _, _, _ in parts]
        state = self._state if self._state is not None else self._ensure_state()
        if self._state_names and len(state[self._state_names[0]]) < len(self.params):
            state = self._ensure_state()  # a group was added
        for (_, i, a, gr), hyper in zip(parts, checked, strict=True):
            self._apply_group(i, a, gr, hyper, state, compiled)
        self._finish_step()

    def _apply_group(self, idx, arrays, grads, group, state, compiled) -> None:
        if compiled:
            one_device = True
        elif not self._tensors:
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

    def _finish_step(self) -> None:
        """Called once every group is updated (Adam advances its step count)."""

    def _update(self, idx, params, grads, group, state, one_device) -> None:
        raise NotImplementedError(f"{type(self).__name__}._update")

    def __repr__(self) -> str:
        scalars = self._state_scalars()
        hyper = ", ".join(
            f"{k}={tuple(v) if isinstance(v, list) else v}" for k, v in scalars.items() if k != "t"
        )
        return f"{type(self).__name__}({len(self.params)} params, {hyper})"
