"""Containers: ``Sequential``, ``ModuleList``, ``ModuleDict``, ``ParameterList``,
``ParameterDict`` (PyTorch's ``torch/nn/modules/container.py``: the same registration names, so
state-dict keys match)."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping

from gpumat.nn.module import Module
from gpumat.nn.parameter import Parameter
from gpumat.tensor import Tensor

__all__ = ["ModuleDict", "ModuleList", "ParameterDict", "ParameterList", "Sequential"]


class Sequential(Module):
    """Modules called in order, each on the previous one's output: ``Sequential(m1, m2, ...)``
    (children named "0", "1", ...) or ``Sequential(OrderedDict(name=module, ...))``.
    Indexing gives a child (or a Sequential of a slice); ``len`` counts them.

    Raises:
        TypeError: an argument that is not a Module.
    """

    def __init__(self, *args) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], collections.OrderedDict):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def forward(self, input):  # noqa: A002
        for module in self._modules.values():
            input = module(input)  # noqa: A001
        return input

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        modules = list(self._modules.items())
        if isinstance(idx, slice):
            return Sequential(collections.OrderedDict(modules[idx]))
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise TypeError(f"Sequential indices must be ints or slices, got {idx!r}")
        if not -len(modules) <= idx < len(modules):
            raise IndexError(f"index {idx} is out of range for {len(modules)} modules")
        return modules[idx][1]

    def append(self, module: Module) -> Sequential:
        """Add ``module`` at the end; returns self."""
        self.add_module(str(len(self._modules)), module)
        return self


class ModuleList(Module):
    """A list of modules, registered as children "0", "1", ... (indexable, iterable, ``len``)."""

    def __init__(self, modules=None) -> None:
        super().__init__()
        for module in modules or ():
            self.append(module)

    def append(self, module: Module) -> ModuleList:
        """Add ``module`` at the end; returns self."""
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules) -> ModuleList:
        """Add each of ``modules``; returns self."""
        for module in modules:
            self.append(module)
        return self

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        modules = list(self._modules.values())
        if isinstance(idx, slice):
            return ModuleList(modules[idx])
        return modules[idx]


def _pairs(what: str, items) -> list:
    """(key, value) pairs from a mapping or an iterable of pairs (PyTorch's ``update`` input)."""
    if isinstance(items, Mapping):
        return list(items.items())
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise TypeError(
            f"{what}.update should be called with an iterable of key/value pairs, got "
            f"{type(items).__name__}"
        )
    out = []
    for j, pair in enumerate(items):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Iterable):
            raise TypeError(f"{what} update sequence element #{j} should be a pair")
        pair = tuple(pair)
        if len(pair) != 2:
            raise ValueError(
                f"{what} update sequence element #{j} has length {len(pair)}; 2 is required"
            )
        out.append(pair)
    return out


class ModuleDict(Module):
    """Modules by name, registered as children under their keys (PyTorch's ``nn.ModuleDict``:
    insertion order kept; state-dict keys ``<key>.<param>``). Supports ``d[key]``,
    ``d[key] = module``, ``del d[key]``, ``in``, ``len``, iteration over keys, ``keys()``,
    ``items()``, ``values()``, ``update()``, ``pop()``, ``clear()``.

    Args:
        modules: a mapping or an iterable of (name, module) pairs (optional).

    Raises:
        TypeError: a value that is not a Module, a non-str key. KeyError: an empty or dotted
            key, or one that names an attribute of the class (``keys``, ``training``...).
    """

    def __init__(self, modules=None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key) -> bool:
        return key in self._modules

    def keys(self):
        """The names, in insertion order."""
        return self._modules.keys()

    def items(self):
        """(name, module) pairs."""
        return self._modules.items()

    def values(self):
        """The modules."""
        return self._modules.values()

    def update(self, modules) -> None:
        """Add or replace modules from a mapping or (name, module) pairs."""
        for key, module in _pairs("ModuleDict", modules):
            self[key] = module

    def pop(self, key: str) -> Module:
        """Remove ``key`` and return its module (KeyError if absent)."""
        v = self[key]
        del self[key]
        return v

    def clear(self) -> None:
        """Remove every module."""
        self._modules.clear()


def _as_parameter(value):
    # PyTorch wraps a plain tensor assigned to a ParameterList/Dict as a Parameter.
    if isinstance(value, Tensor) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


class ParameterList(Module):
    """A list of parameters registered as "0", "1", ... (PyTorch's ``nn.ParameterList``; a plain
    Tensor is wrapped as a :class:`Parameter`, the storage shared). Indexable (ints, slices),
    iterable, ``len``, ``append``, ``extend``, ``l[i] = p``.

    Raises:
        TypeError: an element that is not a Tensor. IndexError: an index out of range.
    """

    def __init__(self, values=None) -> None:
        super().__init__()
        for v in values or ():
            self.append(v)

    def _index(self, idx: int) -> str:
        if isinstance(idx, bool) or not isinstance(idx, int):
            raise TypeError(f"ParameterList indices must be ints or slices, got {idx!r}")
        n = len(self._parameters)
        if not -n <= idx < n:
            raise IndexError(f"index {idx} is out of range for {n} parameters")
        return str(idx % n)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList(list(self._parameters.values())[idx])
        return self._parameters[self._index(idx)]

    def __setitem__(self, idx: int, value) -> None:
        self.register_parameter(self._index(idx), self._checked(value))

    def _checked(self, value):
        value = _as_parameter(value)
        if not isinstance(value, Parameter):
            raise TypeError(
                f"ParameterList: expected a Tensor or Parameter, got {type(value).__name__}"
            )
        return value

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    def append(self, value) -> ParameterList:
        """Add a parameter at the end; returns self."""
        self.register_parameter(str(len(self._parameters)), self._checked(value))
        return self

    def extend(self, values) -> ParameterList:
        """Add each of ``values``; returns self."""
        for v in values:
            self.append(v)
        return self

    def extra_repr(self) -> str:
        return "\n".join(
            f"({k}): Parameter containing: [{p.dtype} of size {tuple(p.shape)}]"
            for k, p in self._parameters.items()
        )


class ParameterDict(Module):
    """Parameters by name (PyTorch's ``nn.ParameterDict``; a plain Tensor is wrapped as a
    :class:`Parameter`), in insertion order: ``d[key]``, ``d[key] = p``, ``del d[key]``, ``in``,
    ``len``, iteration over keys, ``keys()``, ``items()``, ``values()``, ``update()``, ``pop()``.

    Raises:
        TypeError: a value that is not a Tensor, a non-str key. KeyError: as
            :meth:`Module.register_parameter`.
    """

    def __init__(self, parameters=None) -> None:
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str):
        return self._parameters[key]

    def __setitem__(self, key: str, value) -> None:
        value = _as_parameter(value)
        if not isinstance(value, Parameter):
            raise TypeError(
                f"ParameterDict: expected a Tensor or Parameter, got {type(value).__name__}"
            )
        self.register_parameter(key, value)

    def __delitem__(self, key: str) -> None:
        del self._parameters[key]

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters)

    def __contains__(self, key) -> bool:
        return key in self._parameters

    def keys(self):
        """The names, in insertion order."""
        return self._parameters.keys()

    def items(self):
        """(name, parameter) pairs."""
        return self._parameters.items()

    def values(self):
        """The parameters."""
        return self._parameters.values()

    def update(self, parameters) -> None:
        """Add or replace parameters from a mapping or (name, tensor) pairs."""
        for key, value in _pairs("ParameterDict", parameters):
            self[key] = value

    def pop(self, key: str):
        """Remove ``key`` and return its parameter (KeyError if absent)."""
        v = self[key]
        del self[key]
        return v
