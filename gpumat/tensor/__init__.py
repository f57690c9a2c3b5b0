"""``gpumat.Tensor``: a value on a device with PyTorch's methods, eager autograd and tracing.

A tensor is a :class:`gpumat.PyGpuMatrix` (float32, row-major, on ``gpumat.cpu()``,
``gpumat.emu(i)`` or ``gpumat.gpu(i)``) with a dtype, a version counter and, when it takes part
in a recorded computation, a :mod:`gpumat.graph` node. Each op builds the graph node the graph API
builds (``matmul_op``, ``relu_op``, ...) and runs its kernel at once through
:func:`gpumat.autograd.run_node`; ``backward()`` differentiates with the ops' own ``gradient``
methods (:mod:`gpumat.autograd`). Names, argument orders and semantics are PyTorch's, so a PyTorch
program ports by replacing ``torch`` with ``gpumat``.

Dtypes (:mod:`gpumat.dtypes`): float32, and int64 and bool held as exact integers in float32
storage; an int64 tensor knows the range of its values, so ``nll_loss`` checks class indices
without reading the device, and ``sum`` refuses what could round. The range is kept with the
storage (``_range``), so a write through any view or alias counts for all of them, and writes
convert floats as PyTorch does (toward zero into int64, ``!= 0`` into bool).

Broadcasting (``+ - * / ==`` and the other binary ops between tensors of two shapes): numpy's
rules in any rank, by :func:`gpumat.graph.strided.broadcast_binary_op`. A Python number is a
constant (``x * 2``, ``1 - x``). Views (indexing, ``permute``, ``expand``, ...): copies of their
region kept in step with their base, ``gpumat.tensor._views``.

Errors follow the house rules: shape, dtype and device mismatches are ValueError / TypeError naming
the op and the shapes; autograd misuse (``backward`` on a non-scalar without ``gradient``, a second
``backward`` through released values, a value changed in place since the graph read it, an in-place
op on a leaf that requires a gradient) is RuntimeError with PyTorch's wording.

Under :func:`gpumat.compile` a step is traced (:class:`Trace`): the same ops build nodes over
placeholders and produce symbolic tensors (shape, dtype and device, no value), which the compiler
hands to the executor.

Where the code is: the class, with construction, host values, autograd, devices and dtypes, and
``apply_op``, in ``gpumat/tensor/_tensor.py``; its other methods by topic beside it: operators and
math (``_arithmetic.py``), reductions (``_reductions.py``), shapes (``_layout.py``), in-place
ops (``_inplace.py``), indexing, views and joining (``_views.py``) and sorting
(``_sorting.py``), added to the class when this package is imported.
"""

from __future__ import annotations

import functools
import types

# as_device and the underscored helpers: imported from here by gpumat.creation and the tests.
from gpumat.devices import as_device  # noqa: F401
from gpumat.graph.node import TENSOR_METHODS
from gpumat.tensor._arithmetic import ArithmeticMethods, _pointwise, matmul, where
from gpumat.tensor._index import IndexMethods
from gpumat.tensor._inplace import InplaceMethods
from gpumat.tensor._layout import LayoutMethods
from gpumat.tensor._reductions import ReductionMethods
from gpumat.tensor._sorting import SortingMethods
from gpumat.tensor._tensor import (  # noqa: F401
    Tensor,
    _copy_of,
    _filled,
    _from_host,
    _is_number,
    _size_args,
    apply_op,
)
from gpumat.tensor._views import (  # noqa: F401
    ViewMethods,
    cat,
    concat,
    concatenate,
    meshgrid,
    stack,
)

__all__ = ["Tensor", "apply_op", "cat", "concat", "concatenate", "meshgrid", "stack", "where"]


def _add_methods(methods: type) -> None:
    """Give Tensor the functions of a topic class's body, as if they were written in Tensor's."""
    for name, value in vars(methods).items():
        if not isinstance(value, types.FunctionType):
            continue  # the class's own attributes (and the __hash__ = None its __eq__ implies)
        if name in vars(Tensor):
            raise RuntimeError(f"Tensor.{name}: defined by Tensor and by {methods.__name__}")
        value.__qualname__ = f"Tensor.{value.__name__}"  # what errors and reprs name
        setattr(Tensor, name, value)


# Added, not inherited: the topic classes use Tensor itself, so they are defined after it.
for _methods in (
    ArithmeticMethods,
    ReductionMethods,
    LayoutMethods,
    InplaceMethods,
    ViewMethods,
    SortingMethods,
):
    _add_methods(_methods)
_add_methods(IndexMethods)  # index_select, gather, scatter_add, masked_select, nonzero, ...


def _numpy_names(method):
    """``method`` also taking numpy's keyword names ``axis`` and ``keepdims`` for ``dim`` and
    ``keepdim``, as PyTorch's methods do (``x.argmax(axis=1)``, d2l's spelling)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        for numpy_name, name in (("axis", "dim"), ("keepdims", "keepdim")):
            if numpy_name in kwargs:
                if name in kwargs:
                    raise TypeError(f"{method.__name__}: got both {name!r} and {numpy_name!r}")
                kwargs[name] = kwargs.pop(numpy_name)
        return method(self, *args, **kwargs)

    return wrapper


for _name in (
    "sum", "mean", "max", "min", "argmax", "argmin", "amax", "amin", "prod", "var", "std",
    "norm", "logsumexp", "cumsum", "any", "all", "softmax", "log_softmax", "sort", "argsort",
    "topk", "squeeze", "unsqueeze",
):  # fmt: skip
    if hasattr(Tensor, _name):
        setattr(Tensor, _name, _numpy_names(getattr(Tensor, _name)))


# The pointwise methods (relu, tanh, sigmoid, exp, log, sqrt, ...): one per graph op that names one,
# and its in-place form (exp_, ...).
def _pointwise_inplace(name: str):
    def method(self: Tensor) -> Tensor:
        return self._replaced(f"{name}_", getattr(self, name))

    method.__name__ = f"{name}_"
    method.__qualname__ = f"Tensor.{name}_"
    method.__doc__ = f"``{name}()`` in place."
    return method


for _op in TENSOR_METHODS:
    setattr(Tensor, _op.tensor_method, _pointwise(_op.tensor_method, _op, _op.tensor_doc))
    setattr(Tensor, f"{_op.tensor_method}_", _pointwise_inplace(_op.tensor_method))


# Their public home, whatever file holds them: reprs, pickles and the API reference name it.
Tensor.__module__ = apply_op.__module__ = matmul.__module__ = where.__module__ = __name__
cat.__module__ = stack.__module__ = meshgrid.__module__ = __name__  # concat, concatenate: cat
