"""The dlsys course's ``gpu_op`` name for :mod:`gpumat.dlsys.gpu_op` (a face: it only
re-exports)."""

from gpumat.dlsys.gpu_op import *  # noqa: F403
from gpumat.dlsys.gpu_op import __all__  # noqa: F401
