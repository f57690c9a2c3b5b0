"""The dlsys course's ``gpu_op`` name for :mod:`gpumat.ops` (a face: it only re-exports)."""

from gpumat.ops import *  # noqa: F403
from gpumat.ops import __all__  # noqa: F401
