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

from gpumat.graph import (
    add_channel_bias_op,
    avg_pool2d_gradient_op,
    avg_pool2d_op,
    broadcast_axis_op,
    conv1d_gradient_filter_op,
    conv1d_gradient_input_op,
    conv1d_op,
    conv2d_gradient_filter_op,
    conv2d_gradient_input_op,
    conv2d_op,
    conv_output_size,
    dropout_op,
    flatten_op,
    log_softmax_gradient_op,
    log_softmax_op,
    mae_loss_gradient_op,
    mae_loss_op,
    max_pool2d_gradient_op,
    max_pool2d_op,
    mse_loss_gradient_op,
    mse_loss_op,
    nll_loss_gradient_op,
    nll_loss_op,
    reduce_max_gradient_op,
    reduce_max_op,
    reduce_mean_op,
    reduce_sum_channels_op,
    reduce_sum_op,
    reshape_op,
    sigmoid_gradient_op,
    sigmoid_op,
    softmax_gradient_op,
    tanh_gradient_op,
    tanh_op,
)
from gpumat.nn import functional, init
from gpumat.nn.activation import Dropout, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from gpumat.nn.container import ModuleList, Sequential
from gpumat.nn.conv import Conv2d
from gpumat.nn.linear import Flatten, Identity, Linear
from gpumat.nn.loss import CrossEntropyLoss, L1Loss, MSELoss, NLLLoss
from gpumat.nn.module import Module
from gpumat.nn.parameter import Parameter
from gpumat.nn.pooling import AvgPool2d, MaxPool2d

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
    "add_channel_bias_op",
    "avg_pool2d_gradient_op",
    "avg_pool2d_op",
    "broadcast_axis_op",
    "conv1d_gradient_filter_op",
    "conv1d_gradient_input_op",
    "conv1d_op",
    "conv2d_gradient_filter_op",
    "conv2d_gradient_input_op",
    "conv2d_op",
    "conv_output_size",
    "dropout_op",
    "flatten_op",
    "log_softmax_gradient_op",
    "log_softmax_op",
    "mae_loss_gradient_op",
    "mae_loss_op",
    "max_pool2d_gradient_op",
    "max_pool2d_op",
    "mse_loss_gradient_op",
    "mse_loss_op",
    "nll_loss_gradient_op",
    "nll_loss_op",
    "reduce_max_gradient_op",
    "reduce_max_op",
    "reduce_mean_op",
    "reduce_sum_channels_op",
    "reduce_sum_op",
    "reshape_op",
    "sigmoid_gradient_op",
    "sigmoid_op",
    "softmax_gradient_op",
    "tanh_gradient_op",
    "tanh_op",
]
