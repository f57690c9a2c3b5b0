"""The seed assignment's ``gpu_op`` module: the same functions as :mod:`gpumat.ops`."""

from .ops import *  # noqa: F403
from .ops import __all__  # noqa: F401
