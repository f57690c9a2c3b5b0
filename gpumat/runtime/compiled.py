"""Compiled steps: a plan's kernel calls recorded once and replayed natively, as a CUDA graph on a
CUDA or emulated device.

The executor runs a plan's first run from Python inside :func:`gpumat.ops.trace_calls`, which
records the ``gpumat._core`` kernel calls each op's ``compute`` makes (name, arrays, scalars; a
view's stride tuple as ``_core.MAX_STRIDED_DIMS`` integer scalars, the unused slots 0).
:func:`build_program` maps every traced array to a planned buffer or a fed device array and hands
the list to ``gpumat._core.NativeProgram`` (``extensions/include/gpumat/program.h``): one native
call per run, no Python per op. Dropout's seed is marked as "seed + step" and advanced natively.
On CUDA and the emulated device the program runs eagerly once (workspaces grow outside any
capture), then captures the step into a CUDA graph and launches it each run after; it falls back
to eager native calls, and :class:`ScheduleReport` says why, when capture is impossible.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpumat import _core
from gpumat.runtime.plan import COMPUTE, Plan

__all__ = ["NotCompilable", "ScheduleReport", "build_program", "not_compilable_reason"]


@dataclasses.dataclass(frozen=True)
class ScheduleReport:
    """How the executor runs its current plan (``Executor.schedule_report``).

    Attributes:
        mode: ``"numpy"`` (the reference backend), ``"python"`` (one Python call per op),
            ``"compiled"`` (one native call per run: the traced ``gpumat.ops`` calls made in
            C++, see ``extensions/include/gpumat/program.h``) or ``"cuda-graph"`` (one CUDA graph
            launch per run, on a CUDA or emulated device).
        ops: op calls per run (the compiled program's steps, or the computed nodes).
        graph_nodes: nodes of the captured CUDA graph (0 without one).
        captures: CUDA graph captures made for this plan.
        reason: why the mode is not the next one up (not compiled, or not a graph); "" when
            nothing stands in the way (a graph is captured on the second run of a plan).
    """

    mode: str
    ops: int
    graph_nodes: int = 0
    captures: int = 0
    reason: str = ""

    def __str__(self) -> str:
        text = f"{self.mode}: {self.ops} op calls per run"
        if self.graph_nodes:
            text += f" in a CUDA graph of {self.graph_nodes} nodes ({self.captures} captures)"
        return text + (f"; {self.reason}" if self.reason else "")


class NotCompilable(Exception):
    """Why a traced schedule cannot become a native program (the report's reason)."""


def not_compilable_reason(plan: Plan) -> str:
    """Why the plan's ops cannot be traced into a program, or "" when they can.

    Only gpumat's own ops (defined in a ``gpumat.`` module) and ops that set ``compilable =
    True`` are compiled; an op with run state (dropout) needs ``seeded_scalars``.
    """
    for step in plan.steps:
        if step.kind != COMPUTE:
            continue
        op = step.node.op
        ok = op.compilable
        if ok is None:
            ok = type(op).__module__.startswith("gpumat.")
        if not ok:
            return f"op {op.name} ({type(op).__name__}) is not compilable"
        if getattr(op, "takes_run_state", False) and not op.seeded_scalars:
            return f"op {op.name} depends on the run state (no seeded_scalars)"
    return ""


_SCALARS = (bool, int, float, np.integer, np.floating, np.bool_)


def _is_strides(value: tuple) -> bool:
    """Whether a traced tuple argument is a stride tuple a step can hold: ints (not bools), at
    most ``_core.MAX_STRIDED_DIMS`` of them."""
    return len(value) <= _core.MAX_STRIDED_DIMS and all(
        isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)) for x in value
    )


def build_program(
    device, cuda_graph: bool, plan: Plan, buffers: list, vals: list, segments: list, step: int
):
    """A ``gpumat._core.NativeProgram`` making the traced calls on the planned arrays.

    Args:
        device: the device.
        cuda_graph: capture the program into a CUDA graph (CUDA and emulated devices).
        plan: the plan that was traced.
        buffers: the plan's allocated buffers (flat device arrays).
        vals: the traced run's values, one per schedule position (views of ``buffers``, or the
            fed device arrays).
        segments: (node, [(name, args), ...]) per computed node, the calls its compute made.
        step: the executor's step during the traced run (dropout seeds are stored relative to it).

    Raises:
        NotCompilable: the trace names an array outside the plan, a non-scalar argument, an array
            fed to two nodes, an op that made no calls, or a call the native table does not have.
    """
    prog = _core.NativeProgram(*device._native)
    prog.set_graphs(cuda_graph)
    number: dict[int, int] = {}  # id(PyGpuMatrix value) -> the program's array number
    for i, b in plan.assignment.items():
        number[id(vals[i])] = prog.add_fixed(buffers[b], vals[i].shape)
    for k, (i, node) in enumerate(plan.external_steps):
        if id(vals[i]) in number:
            raise NotCompilable(f"the array fed to {node.name!r} is also fed to another node")
        number[id(vals[i])] = prog.add_input(k, vals[i].shape)
    for node, calls in segments:
        if not calls:
            raise NotCompilable(f"op {node.op.name} made no gpumat.ops calls")
        seeded = node.op.seeded_scalars if getattr(node.op, "takes_run_state", False) else {}
        for name, args in calls:
            arrays, scalars = [], []
            for a in args:
                if isinstance(a, _core.PyGpuMatrix):
                    if id(a) not in number:
                        raise NotCompilable(
                            f"op {node.op.name} calls {name} on an array outside the plan"
                        )
                    arrays.append(number[id(a)])
                elif isinstance(a, _SCALARS):
                    scalars.append(a)
                elif isinstance(a, tuple) and _is_strides(a):
                    # an ops::Strides parameter (as_strided's): its MAX_STRIDED_DIMS slots, the
                    # unused ones 0, as gpumat._core's wrapper fills them
                    scalars.extend(a)
                    scalars.extend([0] * (_core.MAX_STRIDED_DIMS - len(a)))
                else:
                    raise NotCompilable(
                        f"op {node.op.name} calls {name} with a {type(a).__name__} argument"
                    )
            k = seeded.get(name, -1)
            if k >= 0:  # traced as seed + step; the program adds each run's step
                scalars[k] = (int(scalars[k]) - step) % 2**64
            try:
                prog.add_step(name.removesuffix("_"), arrays, scalars, k)
            except ValueError as exc:
                raise NotCompilable(f"op {node.op.name}: {exc}") from None
    return prog
