"""The dlsys course's ``autodiff`` names over gpumat's graph and executor (a face: it only
re-exports).

``Variable``, the op helpers (``matmul_op``, ``relu_op``, ``softmaxcrossentropy_op``, ...),
``gradients``, ``find_topo_sort`` and ``Executor``, as the course's scripts import them, plus every
graph op of :mod:`gpumat.graph` (convolution, pooling, losses, ...). New code imports
:mod:`gpumat.graph` and :mod:`gpumat.runtime` directly; gpumat's own modules never import this one.
``add_by_const_op`` and ``mul_by_const_op`` are kept here as aliases of the course's
``add_byconst_op`` and ``mul_byconst_op``.
"""

from gpumat.dlsys.autodiff import Executor  # the course's Executor(eval_node_list, ctx=None)
from gpumat.graph import *  # noqa: F403
from gpumat.graph import __all__ as _graph_all
from gpumat.graph import add_byconst_op, mul_byconst_op

add_by_const_op = add_byconst_op
mul_by_const_op = mul_byconst_op

__all__ = [*_graph_all, "Executor", "add_by_const_op", "mul_by_const_op"]
