"""gpumat.nn: PyTorch-style layers on gpumat tensors.

- :class:`Module` (:mod:`gpumat.nn.module`), :class:`Parameter`, the layers (``Linear``,
  ``Conv2d``, ``MaxPool2d``, ``AvgPool2d``, ``ReLU``, ``Tanh``, ``Sigmoid``, ``Softmax``,
  ``LogSoftmax``, ``Dropout``, ``LayerNorm``, ``RMSNorm``, ``BatchNorm1d``, ``BatchNorm2d``,
  ``Flatten``, ``Identity``, ``Sequential``, ``ModuleList``) and the
  losses (``CrossEntropyLoss``, ``NLLLoss``, ``MSELoss``, ``L1Loss``), one module per kind;
  :mod:`gpumat.nn.functional` (``import gpumat.nn.functional as F``) and :mod:`gpumat.nn.init`.

The graph ops this package used to re-export (``conv2d_op``, ``dropout_op``, ...) are
:mod:`gpumat.graph`'s; ``gpumat.nn.conv2d_op`` still resolves there, with a DeprecationWarning.
"""

import warnings

from gpumat import graph as _graph
from gpumat.nn import functional, init
from gpumat.nn.activation import Dropout, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from gpumat.nn.container import ModuleList, Sequential
from gpumat.nn.conv import Conv2d
from gpumat.nn.linear import Flatten, Identity, Linear
from gpumat.nn.loss import CrossEntropyLoss, L1Loss, MSELoss, NLLLoss
from gpumat.nn.module import Module
from gpumat.nn.normalization import BatchNorm1d, BatchNorm2d, LayerNorm, RMSNorm
from gpumat.nn.parameter import Parameter
from gpumat.nn.pooling import AvgPool2d, MaxPool2d

__all__ = [
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Flatten",
    "Identity",
    "L1Loss",
    "LayerNorm",
    "Linear",
    "LogSoftmax",
    "MSELoss",
    "MaxPool2d",
    "Module",
    "ModuleList",
    "NLLLoss",
    "Parameter",
    "RMSNorm",
    "ReLU",
    "Sequential",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "functional",
    "init",
]


def __getattr__(name: str):
    """The graph ops gpumat.nn used to re-export (``conv2d_op``, ``dropout_op``, ...): each
    is :mod:`gpumat.graph`'s, returned with a DeprecationWarning that says so. AttributeError for
    any other name."""
    if name.endswith("_op") and name in _graph.__all__:
        warnings.warn(
            f"gpumat.nn.{name} is gpumat.graph.{name}: import it from there (gpumat.nn holds the "
            "PyTorch-style layers)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_graph, name)
    raise AttributeError(f"module 'gpumat.nn' has no attribute {name!r}")
