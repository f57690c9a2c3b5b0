"""gpumat.nn: PyTorch-style layers on gpumat tensors.

- :class:`Module` (:mod:`gpumat.nn.module`), :class:`Parameter`, the layers (``Linear``,
  ``Conv2d``, ``MaxPool2d``, ``AvgPool2d``, ``AdaptiveAvgPool2d``, ``Embedding``, ``ReLU``,
  ``Tanh``, ``Sigmoid``, ``GELU``, ``SiLU``, ``Softplus``, ``LeakyReLU``, ``ELU``, ``Hardtanh``,
  ``ReLU6``, ``Softmax``, ``LogSoftmax``, ``Dropout``, ``Dropout1d``, ``Dropout2d``,
  ``LayerNorm``, ``RMSNorm``, ``BatchNorm1d``, ``BatchNorm2d``, ``Flatten``, ``Identity``,
  ``LazyLinear``, ``LazyConv2d``, ``LazyBatchNorm1d``, ``LazyBatchNorm2d``, ``Sequential``,
  ``ModuleList``, ``ModuleDict``, ``ParameterList``, ``ParameterDict``), the recurrent layers
  (``RNN``, ``LSTM``, ``GRU``, ``RNNCell``, ``LSTMCell``, ``GRUCell``), attention
  (``MultiheadAttention``, ``TransformerEncoderLayer``, ``TransformerEncoder``,
  ``TransformerDecoderLayer``, ``TransformerDecoder``, ``Transformer``) and the losses
  (``CrossEntropyLoss``, ``NLLLoss``, ``MSELoss``, ``L1Loss``, ``BCELoss``,
  ``BCEWithLogitsLoss``, ``SmoothL1Loss``, ``HuberLoss``, ``KLDivLoss``), one module per kind;
  :mod:`gpumat.nn.functional` (``import gpumat.nn.functional as F``), :mod:`gpumat.nn.init` and
  :mod:`gpumat.nn.utils` (``clip_grad_norm_``, ``clip_grad_value_``).

The graph ops this package used to re-export (``conv2d_op``, ``dropout_op``, ...) are
:mod:`gpumat.graph`'s; ``gpumat.nn.conv2d_op`` still resolves there, with a DeprecationWarning.
"""

import warnings

from gpumat import graph as _graph
from gpumat.nn import functional, init, utils
from gpumat.nn.activation import (
    ELU,
    GELU,
    Dropout,
    Dropout1d,
    Dropout2d,
    Hardtanh,
    LeakyReLU,
    LogSoftmax,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
)
from gpumat.nn.container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from gpumat.nn.conv import Conv2d
from gpumat.nn.lazy import LazyBatchNorm1d, LazyBatchNorm2d, LazyConv2d, LazyLinear
from gpumat.nn.linear import Flatten, Identity, Linear
from gpumat.nn.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from gpumat.nn.module import Module
from gpumat.nn.normalization import BatchNorm1d, BatchNorm2d, LayerNorm, RMSNorm
from gpumat.nn.parameter import Parameter
from gpumat.nn.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from gpumat.nn.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from gpumat.nn.sparse import Embedding
from gpumat.nn.transformer import (
    MultiheadAttention,
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "BCELoss",
    "BCEWithLogitsLoss",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Dropout1d",
    "Dropout2d",
    "ELU",
    "Embedding",
    "Flatten",
    "GRU",
    "GRUCell",
    "GELU",
    "Hardtanh",
    "HuberLoss",
    "Identity",
    "KLDivLoss",
    "LSTM",
    "LSTMCell",
    "L1Loss",
    "LazyBatchNorm1d",
    "LazyBatchNorm2d",
    "LazyConv2d",
    "LazyLinear",
    "LeakyReLU",
    "LayerNorm",
    "Linear",
    "LogSoftmax",
    "MSELoss",
    "MaxPool2d",
    "Module",
    "MultiheadAttention",
    "ModuleDict",
    "ModuleList",
    "NLLLoss",
    "Parameter",
    "ParameterDict",
    "ParameterList",
    "RMSNorm",
    "RNN",
    "RNNBase",
    "RNNCell",
    "RNNCellBase",
    "ReLU",
    "ReLU6",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "SmoothL1Loss",
    "Softmax",
    "Softplus",
    "Tanh",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "functional",
    "init",
    "utils",
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
