"""Containers: ``Sequential``, ``ModuleList``."""

from __future__ import annotations

import collections

from gpumat.nn.module import Module

__all__ = ["ModuleList", "Sequential"]


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
