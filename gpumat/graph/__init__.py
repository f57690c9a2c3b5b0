"""gpumat.graph: graph nodes, the ops by kernel family, and reverse-mode gradients.

Build a graph from :func:`Variable` nodes and op helpers, differentiate it with :func:`gradients`,
and run it with :class:`gpumat.runtime.Executor`::

    x, w = Variable("x"), Variable("w")
    loss = reduce_sum_op(relu_op(matmul_op(x, w)), axis=0)
    grad_w, = gradients(loss, [w])

One module per kernel family, each op's forward (``compute``), gradient and shape rule together
(see :mod:`gpumat.graph.node` for the contract): :mod:`~gpumat.graph.elementwise`,
:mod:`~gpumat.graph.activation`, :mod:`~gpumat.graph.layout`, :mod:`~gpumat.graph.strided`,
:mod:`~gpumat.graph.reduce`,
:mod:`~gpumat.graph.matmul`, :mod:`~gpumat.graph.softmax`, :mod:`~gpumat.graph.loss`,
:mod:`~gpumat.graph.conv`, :mod:`~gpumat.graph.pool`, :mod:`~gpumat.graph.sort`,
:mod:`~gpumat.graph.norm`, :mod:`~gpumat.graph.rnn`, :mod:`~gpumat.graph.attention`;
:mod:`~gpumat.graph.reverse_mode` has
:func:`gradients` and :func:`find_topo_sort`. This module re-exports every family's ``__all__``, so
an op added to a family (and to that module's ``__all__``) is here too.
"""

# ruff: noqa: F401, F403 (a face: the names below are re-exported through __all__)
from gpumat.graph import (
    activation,
    attention,
    conv,
    elementwise,
    layout,
    loss,
    matmul,
    norm,
    pool,
    reduce,
    rnn,
    softmax,
    sort,
    strided,
)
from gpumat.graph import index as index_family
from gpumat.graph.activation import *
from gpumat.graph.attention import *
from gpumat.graph.conv import *
from gpumat.graph.elementwise import *
from gpumat.graph.index import *
from gpumat.graph.layout import *
from gpumat.graph.loss import *
from gpumat.graph.matmul import *
from gpumat.graph.node import (
    Attr,
    AxisOp,
    Node,
    Op,
    PlaceholderOp,
    UnaryGradientOp,
    UnaryOp,
    Undefined,
    Variable,
    kernels_for,
    placeholder_op,
)
from gpumat.graph.norm import *
from gpumat.graph.pool import *
from gpumat.graph.reduce import *
from gpumat.graph.reverse_mode import find_topo_sort, gradients
from gpumat.graph.rnn import *
from gpumat.graph.softmax import *
from gpumat.graph.sort import *
from gpumat.graph.strided import *

_FAMILIES = (elementwise, activation, layout, strided, reduce, matmul, softmax, loss, conv, pool)
_FAMILIES += (index_family, sort, norm, rnn, attention)

__all__ = sorted(
    {n for family in _FAMILIES for n in family.__all__}
    | {"Attr", "AxisOp", "Node", "Op", "PlaceholderOp", "UnaryGradientOp", "UnaryOp", "Undefined"}
    | {"Variable", "kernels_for"}
    | {"placeholder_op", "find_topo_sort", "gradients"}
)
