"""gpumat.nn: PyTorch-style layers on gpumat tensors, and the graph ops ``gpumat.nn`` has always
exported (a face: it only re-exports).

- :class:`Module` (:mod:`gpumat.nn.module`), :class:`Parameter`, the layers (``Linear``,
  ``Conv2d``, ``MaxPool2d``, ``AvgPool2d``, ``ReLU``, ``Tanh``, ``Sigmoid``, ``Softmax``,
  ``LogSoftmax``, ``Dropout``, ``Flatten``, ``Identity``, ``Sequential``, ``ModuleList``) and the
  losses (``CrossEntropyLoss``, ``NLLLoss``, ``MSELoss``, ``L1Loss``), one module per kind;
  :mod:`gpumat.nn.functional` (``import gpumat.nn.functional as F``) and :mod:`gpumat.nn.init`.
- The graph ops ``conv2d_op``, ``max_pool2d_op``, ``log_softmax_op``, ``dropout_op``, ... of
  :mod:`gpumat.graph`, where each op lives with its kernel family (their numpy references are
  :mod:`gpumat.reference`).
"""

from gpumat import graph as _graph
from gpumat.graph import conv as _conv
from gpumat.graph import pool as _pool
from gpumat.nn import functional, init
from gpumat.nn.activation import Dropout, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from gpumat.nn.container import ModuleList, Sequential
from gpumat.nn.conv import Conv2d
from gpumat.nn.linear import Flatten, Identity, Linear
from gpumat.nn.loss import CrossEntropyLoss, L1Loss, MSELoss, NLLLoss
from gpumat.nn.module import Module
from gpumat.nn.parameter import Parameter
from gpumat.nn.pooling import AvgPool2d, MaxPool2d

# The graph ops gpumat.nn has always exported (the dlsys course's habit; they live in
# gpumat.graph): every op of the conv and pool families, and these.
_GRAPH_OPS = sorted(
    {n for family in (_conv, _pool) for n in family.__all__ if n.islower()}
    | {
        "broadcast_axis_op",
        "dropout_op",
        "flatten_op",
        "log_softmax_gradient_op",
        "log_softmax_op",
        "mae_loss_gradient_op",
        "mae_loss_op",
        "mse_loss_gradient_op",
        "mse_loss_op",
        "nll_loss_gradient_op",
        "nll_loss_op",
        "reduce_max_gradient_op",
        "reduce_max_op",
        "reduce_mean_op",
        "reduce_sum_op",
        "reshape_op",
        "sigmoid_gradient_op",
        "sigmoid_op",
        "softmax_gradient_op",
        "tanh_gradient_op",
        "tanh_op",
    }
)
globals().update((name, getattr(_graph, name)) for name in _GRAPH_OPS)

__all__ = [
    "AvgPool2d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Flatten",
    "Identity",
    "L1Loss",
    "Linear",
    "LogSoftmax",
    "MSELoss",
    "MaxPool2d",
    "Module",
    "ModuleList",
    "NLLLoss",
    "Parameter",
    "ReLU",
    "Sequential",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "functional",
    "init",
    *_GRAPH_OPS,
]
