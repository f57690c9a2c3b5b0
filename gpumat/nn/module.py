"""``gpumat.nn.Module``: the base class of layers and models, PyTorch's ``torch.nn.Module``.

A module holds parameters (:class:`gpumat.nn.Parameter`), buffers (tensors saved in the state
dict without gradients) and submodules, registered by assigning them as attributes, and computes
in ``forward``; calling the module calls ``forward``. The state dict maps dotted names to
tensors in PyTorch's layout (``fc1.weight`` (out, in), ``conv1.weight`` (out, in, kh, kw),
``fc1.bias``), so a state dict saved from gpumat loads into the same network written in PyTorch,
and back (:func:`gpumat.save`, :func:`gpumat.load`).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Mapping

import numpy as np

from gpumat._core import PyGpuMatrix
from gpumat.autograd import current_trace, no_grad, reset_grad
from gpumat.creation import zeros
from gpumat.devices import as_device
from gpumat.dtypes import as_dtype, float32
from gpumat.graph.node import shape_str
from gpumat.nn.parameter import Parameter
from gpumat.tensor import Tensor

__all__ = ["Module"]

_IncompatibleKeys = collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Module:
    """Base class of every layer and model (PyTorch's ``torch.nn.Module``).

    Subclasses call ``super().__init__()`` first, assign parameters and submodules as attributes
    and define ``forward``. Attributes: ``training`` (True after construction; ``train()`` and
    ``eval()`` set it here and in every submodule: dropout reads it).

    Raises (assignments): AttributeError when a parameter or module is assigned before
    ``Module.__init__`` ran; TypeError when a registered parameter or module name gets a value of
    another kind (None is allowed).
    """

    def __init__(self) -> None:
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", {})

    # ---------------------------------------------------------------- registration

    def _registry(self, name: str):
        d = self.__dict__.get(name)
        if d is None:
            raise AttributeError(
                f"cannot assign parameters, buffers or modules before Module.__init__() call "
                f"({type(self).__name__} must call super().__init__() first)"
            )
        return d

    def _forget(self, name: str) -> None:
        for registry in ("_parameters", "_buffers", "_modules"):
            self.__dict__.get(registry, {}).pop(name, None)
        self.__dict__.pop(name, None)

    def __setattr__(self, name: str, value) -> None:
        params = self.__dict__.get("_parameters")
        modules = self.__dict__.get("_modules")
        buffers = self.__dict__.get("_buffers")
        if isinstance(value, Parameter):
            self._registry("_parameters")
            self._forget(name)
            value._name = name
            params[name] = value
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                    "(gpumat.nn.Parameter or None expected)"
                )
            params[name] = None
        elif isinstance(value, Module):
            self._registry("_modules")
            self._forget(name)
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as child module '{name}' "
                    "(gpumat.nn.Module or None expected)"
                )
            modules[name] = None
        elif buffers is not None and name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                    "(gpumat.Tensor or None expected)"
                )
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str):
        # Only called when normal lookup fails: registered values live in the registries.
        d = self.__dict__
        for registry in ("_parameters", "_buffers", "_modules"):
            if registry in d and name in d[registry]:
                return d[registry][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for registry in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(registry, {}):
                del self.__dict__[registry][name]
                return
        object.__delattr__(self, name)

    def _check_name(self, name, what: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"{what} name should be a string, got {type(name).__name__}")
        if not name or "." in name:
            raise KeyError(f"{what} name can't be empty or contain '.', got {name!r}")
        if hasattr(self, name) and name not in self._parameters and name not in self._buffers:
            if name not in self._modules:
                raise KeyError(f"attribute '{name}' already exists")

    def _weight_and_bias(self, weight_shape: tuple, bias: bool, device) -> None:
        """Zero ``weight`` of ``weight_shape`` and ``bias`` (weight_shape[0],) parameters on
        ``device`` (or no bias), then the layer's ``reset_parameters``: the dense and conv layers'
        start."""
        self.weight = Parameter(zeros(*weight_shape, device=device))
        if bias:
            self.bias = Parameter(zeros(weight_shape[0], device=device))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (a Parameter or None) under ``name``.

        Raises:
            TypeError: not a Parameter or None, or a non-str name. KeyError: an empty or dotted
                name, or one taken by another attribute.
        """
        self._registry("_parameters")
        self._check_name(name, "parameter")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                "(gpumat.nn.Parameter or None required)"
            )
        self._forget(name)
        if param is not None:
            param._name = name
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register ``tensor`` as a buffer: moved by ``to()``, saved in the state dict when
        ``persistent``, never a parameter.

        Raises:
            TypeError: not a Tensor or None. KeyError: as for :meth:`register_parameter`.
        """
        self._registry("_buffers")
        self._check_name(name, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(
                f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                "(gpumat.Tensor or None required)"
            )
        self._forget(name)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent.discard(name)
        else:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Register ``module`` (a Module or None) as the child ``name``.

        Raises:
            TypeError: not a Module or None. KeyError: as for :meth:`register_parameter`.
        """
        self._registry("_modules")
        self._check_name(name, "module")
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    # ---------------------------------------------------------------- running

    def forward(self, *args, **kwargs):
        """The computation; every subclass defines it."""
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function'
        )

    def __call__(self, *args, **kwargs):
        trace = current_trace()
        if trace is not None:
            trace.guard_module(self)
        return self.forward(*args, **kwargs)

    # ---------------------------------------------------------------- traversal

    def named_modules(
        self, memo: set | None = None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator:
        """(dotted name, module) for this module ("") and every submodule, depth first in
        registration order, each once (every path to it with ``remove_duplicate=False``)."""
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                yield from module.named_modules(
                    memo, f"{prefix}.{name}" if prefix else name, remove_duplicate
                )

    def modules(self) -> Iterator:
        """This module and every submodule."""
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator:
        """(name, module) of the direct children."""
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self) -> Iterator:
        """The direct children."""
        for _, m in self.named_children():
            yield m

    def _named(
        self, registry: str, prefix: str, recurse: bool, remove_duplicate: bool = True
    ) -> Iterator:
        seen = set()
        modules = (
            self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
            if recurse
            else [(prefix, self)]
        )
        for module_prefix, module in modules:
            for name, value in getattr(module, registry).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield (f"{module_prefix}.{name}" if module_prefix else name), value

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator:
        """(dotted name, parameter) for every parameter, in registration order: a shared
        (tied) parameter once, under its first name, unless ``remove_duplicate=False``."""
        return self._named("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator:
        """Every parameter, in registration order (what optimizers take)."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator:
        """(dotted name, buffer) for every buffer (persistent or not), each once unless
        ``remove_duplicate=False``."""
        return self._named("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator:
        """Every buffer."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn) -> Module:
        """Call ``fn(module)`` for every submodule (children first) and this module; returns
        self."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # ---------------------------------------------------------------- modes and devices

    def train(self, mode: bool = True) -> Module:
        """Set training mode here and in every submodule (dropout is active); returns self.

        Raises:
            TypeError: ``mode`` is not a bool.
        """
        if not isinstance(mode, bool):
            raise TypeError(f"train: mode is expected to be boolean, got {mode!r}")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        """``train(False)``: evaluation mode (dropout is the identity); returns self."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set ``requires_grad`` of every parameter; returns self."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of every parameter: to None (default, as PyTorch) or to zeros."""
        for p in self.parameters():
            reset_grad(p, set_to_none)

    def to(self, *args, **kwargs) -> Module:
        """Move every parameter and buffer to a device, in place: ``to(device)`` (a
        ``gpumat.Device`` or a name such as ``"cuda"``, ``"emu"``); a dtype, if given, must be
        float32. The parameters stay the same objects (their storage moves), so an optimizer made
        before keeps them; their gradients move too. Returns self.

        Raises:
            TypeError / ValueError: a bad device, or a dtype other than float32.
        """
        device = kwargs.pop("device", None)
        dt = kwargs.pop("dtype", None)
        if kwargs:
            raise TypeError(f"to(): unexpected arguments {sorted(kwargs)}")
        for a in args:
            if isinstance(a, str) and a in ("float32", "float"):
                dt = a
            elif isinstance(a, (type, np.dtype)) or type(a).__name__ == "dtype":
                dt = a
            else:
                device = a
        if dt is not None and as_dtype(dt, "Module.to") is not float32:
            raise TypeError(f"Module.to: parameters are float32, cannot convert to {dt}")
        if device is None:
            return self
        device = as_device(device, "Module.to")
        with no_grad():
            for t in [*self.parameters(), *self.buffers()]:
                t._concrete("Module.to")
                if t.device != device:
                    t.data = t.to(device)
                    if t.grad is not None:
                        t._grad = t.grad.to(device)
        return self

    def cpu(self) -> Module:
        """``to("cpu")``."""
        return self.to("cpu")

    def cuda(self, device: int = 0) -> Module:
        """``to(gpumat.gpu(device))``."""
        return self.to(f"cuda:{int(device)}")

    # ---------------------------------------------------------------- state dict

    def state_dict(self, destination=None, prefix: str = "", keep_vars: bool = False) -> dict:
        """Every parameter and persistent buffer by dotted name (``fc1.weight``), in
        registration order, as tensors sharing the storage (detached unless ``keep_vars``):
        PyTorch's names and layouts; a submodule registered under several names appears under
        each, as in PyTorch.

        Returns:
            An ordered dict name -> Tensor (``destination`` if given).
        """
        out = collections.OrderedDict() if destination is None else destination

        # Every path to a module, as PyTorch's recursion: a submodule registered under two names
        # is listed under both (PyTorch checkpoints of such networks hold both); only a module
        # that contains itself is cut, where PyTorch would recurse without end.
        def visit(module, base: str, ancestors: frozenset) -> None:
            for name, p in module._parameters.items():
                if p is not None:
                    out[base + name] = p if keep_vars else p.detach()
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistent:
                    out[base + name] = b if keep_vars else b.detach()
            for name, child in module._modules.items():
                if child is not None and id(child) not in ancestors:
                    visit(child, f"{base}{name}.", ancestors | {id(child)})

        visit(self, f"{prefix.rstrip('.')}." if prefix.rstrip(".") else "", frozenset({id(self)}))
        return out

    def load_state_dict(self, state_dict: Mapping, strict: bool = True):
        """Copy ``state_dict``'s values into the parameters and buffers of the same names, in
        place (the tensors keep their identity, device and dtype: an int64 or bool buffer takes
        the values as ``Tensor.copy_`` converts them, floats truncated toward zero
        into int64, as PyTorch's ``load_state_dict``).

        Args:
            state_dict: name -> value: a Tensor (any device), a numpy array or a
                ``PyGpuMatrix``, of the parameter's shape (e.g. from :func:`gpumat.load`,
                ``model.state_dict()``, or ``safetensors`` files written by PyTorch).
            strict: the names must match exactly (else ValueError); with False, missing and
                unexpected names are returned instead.

        Returns:
            ``(missing_keys, unexpected_keys)`` (a named tuple of lists).

        Raises:
            TypeError: ``state_dict`` is not a mapping, or a value is not numeric.
            ValueError: names differ (``strict``), a shape differs, or a value for an int64
                buffer is NaN, infinite or beyond 2**24 in magnitude. Nothing is copied unless
                every check passes.
        """
        if not isinstance(state_dict, Mapping):
            raise TypeError(
                f"load_state_dict: expected a mapping of names to tensors, got "
                f"{type(state_dict).__name__}"
            )
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append(f"Missing key(s) in state_dict: {missing}")
            if unexpected:
                parts.append(f"Unexpected key(s) in state_dict: {unexpected}")
            raise ValueError(
                f"Error(s) in loading state_dict for {type(self).__name__}: " + "; ".join(parts)
            )
        sources = {}
        for name, dst in own.items():
            if name not in state_dict:
                continue
            src = state_dict[name]
            if isinstance(src, Tensor):
                src._concrete("load_state_dict")
                shape = src.shape
            elif isinstance(src, PyGpuMatrix):
                shape = src.shape
            else:
                src = np.asarray(src)
                if src.dtype.kind not in "biuf":
                    raise TypeError(f"load_state_dict: {name!r} holds non-numeric data")
                shape = src.shape
            if tuple(shape) != dst.shape:
                raise ValueError(
                    f"size mismatch for {name}: copying a param with shape {shape_str(shape)} "
                    f"from checkpoint, the shape in current model is {shape_str(dst.shape)}"
                )
            dst._concrete("load_state_dict")
            if dst.dtype is not float32:
                # Converted (and checked) before anything is copied, as Tensor.copy_ converts.
                src = dst._converted(src, f"load_state_dict: {name!r}")
            sources[name] = src
        with no_grad():
            for name, src in sources.items():
                dst = own[name]
                bounds = src._range if dst.dtype is not float32 else None
                data = src._data if isinstance(src, Tensor) else src
                dst._data.copyfrom(data)
                dst._changed(bounds)  # a new version, and the range every alias of dst reads
        return _IncompatibleKeys(missing, unexpected)

    # ---------------------------------------------------------------- printing

    def extra_repr(self) -> str:
        """The module's own settings for ``repr`` (layers override it)."""
        return ""

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        if extra:
            lines.extend(extra.split("\n"))
        for name, module in self._modules.items():
            text = repr(module).replace("\n", "\n  ")
            lines.append(f"({name}): {text}")
        if not lines:
            return f"{type(self).__name__}()"
        if len(lines) == 1 and not self._modules:
            return f"{type(self).__name__}({lines[0]})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self):
        keys = set(super().__dir__())
        for registry in ("_parameters", "_buffers", "_modules"):
            keys |= set(self.__dict__.get(registry, {}))
        return sorted(keys)
