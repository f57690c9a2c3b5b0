"""gpumat.optim: optimizers that update parameters in place, and learning-rate schedules.

:class:`SGD` (with ``momentum``, ``dampening``, ``weight_decay``, ``nesterov``; :class:`MomentumSGD`
is SGD with momentum 0.9), :class:`Adam`, :class:`AdamW` (both with ``amsgrad``) and
:class:`Adadelta` take tensors (``model.parameters()``: ``step()`` reads ``.grad``) or the arrays
fed to an executor (``step(grads)``); see :mod:`gpumat.optim.optimizer`. :mod:`.lr_scheduler` has
:class:`~gpumat.optim.lr_scheduler.StepLR` and PyTorch's other common schedules.
"""

from gpumat.optim import lr_scheduler
from gpumat.optim.adadelta import Adadelta
from gpumat.optim.adam import Adam, AdamW
from gpumat.optim.optimizer import Optimizer
from gpumat.optim.sgd import SGD, MomentumSGD

__all__ = ["SGD", "Adadelta", "Adam", "AdamW", "MomentumSGD", "Optimizer", "lr_scheduler"]
