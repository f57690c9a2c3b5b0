"""gpumat.optim: optimizers that update parameters in place, and learning-rate schedules.

:class:`SGD` (with ``momentum``; :class:`MomentumSGD` is SGD with momentum 0.9), :class:`Adam` and
:class:`Adadelta` take tensors (``model.parameters()``: ``step()`` reads ``.grad``) or the arrays
fed to an executor (``step(grads)``); see :mod:`gpumat.optim.optimizer`. :mod:`.lr_scheduler` has
:class:`~gpumat.optim.lr_scheduler.StepLR`.
"""

from gpumat.optim import lr_scheduler
from gpumat.optim.adadelta import Adadelta
from gpumat.optim.adam import Adam
from gpumat.optim.optimizer import Optimizer
from gpumat.optim.sgd import SGD, MomentumSGD

__all__ = ["SGD", "Adadelta", "Adam", "MomentumSGD", "Optimizer", "lr_scheduler"]
