"""gpumat.runtime: runs graphs. The executor, its plans (sort, shapes, fusion, memory), and
compiled steps.

:class:`Executor` is the entry point; :mod:`~gpumat.runtime.plan` makes a plan per feed signature
(one sort, one shape inference, :mod:`~gpumat.runtime.fusion`, :mod:`~gpumat.runtime.memory`),
and :mod:`~gpumat.runtime.compiled` turns a traced plan into one native call per run (one CUDA
graph launch on a CUDA or emulated device).
"""

from gpumat.runtime.compiled import ScheduleReport
from gpumat.runtime.executor import Executor
from gpumat.runtime.fusion import RULES, FusedOutputOp, FusionReport, fuse_graph
from gpumat.runtime.memory import MemoryPlan, plan_buffers, value_lifetimes

__all__ = [
    "RULES",
    "Executor",
    "FusedOutputOp",
    "FusionReport",
    "MemoryPlan",
    "ScheduleReport",
    "fuse_graph",
    "plan_buffers",
    "value_lifetimes",
]
