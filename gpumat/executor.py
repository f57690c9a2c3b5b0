"""Run autodiff graphs: shape inference, a memory plan made once, then kernels in topological order.

:class:`Executor` (also ``gpumat.autodiff.Executor``) evaluates a list of graph nodes on one
backend:

- ``ctx=None``: numpy, the reference. Float32, unless a numpy feed is float64, in which case every
  value of the run is float64 (finite-difference gradient checks use this).
- ``gpumat.cpu()``: gpumat's host kernels; ``gpumat.gpu(i)``: CUDA device i. Values are float32
  ``PyGpuMatrix`` arrays on that device.

On the first ``run``, and again only when the set of fed nodes, a feed's shape, a feed's kind
(numpy array or device array) or, for numpy, the run's dtype changes, the executor

1. sorts the graph topologically (iteratively: no recursion limit),
2. infers every node's shape from the feed shapes with each op's ``infer_shape``, so that a missing
   feed or incompatible shapes raise ``ValueError`` (naming the node and the shapes) before any
   kernel runs,
3. plans memory: a liveness analysis over the topological order gives each value the interval from
   the step that writes it to the last step that reads it (the evaluated nodes live to the end;
   inputs an op reads only for their shape do not count). Values whose intervals do not overlap
   share a buffer: values are placed largest first, each in the smallest planned buffer that is
   free for its whole interval (best fit), else in a new buffer. A node's inputs are live at its
   step, so its output buffer is never one of its inputs' (matmul, softmax, transpose and
   broadcast cannot work in place). numpy values are views of a flat buffer, so any large-enough
   buffer fits; device arrays have a fixed shape, so there a buffer only serves values of its shape,
4. allocates the planned buffers, once.

Steady-state runs then allocate nothing on the device: numpy feeds are copied into their planned
buffers and every op writes into its planned output. ``Executor.memory_plan`` reports the plan.

This is static memory planning as in MXNet/NNVM's ``PlanMemory`` pass (Chen et al., "Training Deep
Nets with Sublinear Memory Cost", 2016, section 3), with the greedy-by-size placement of Pisarchyk
and Lee, "Efficient Memory Management for Deep Neural Net Inference" (2020), on whole buffers.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from gpumat.autodiff import Node, PlaceholderOp, find_topo_sort

__all__ = ["Executor", "MemoryPlan", "ScheduleReport"]

# Step kinds of the compiled schedule (_WRITTEN: a second output of a fused node, which writes it).
_COMPUTE, _FEED_COPY, _FEED_EXTERNAL, _WRITTEN = 0, 1, 2, 3


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    """What the executor's memory plan holds (all sizes in bytes).

    Attributes:
        num_values: values held in executor-owned buffers (every node of the schedule except feeds
            passed as device arrays, which are used in place).
        num_buffers: buffers allocated for them.
        planned_bytes: total size of those buffers.
        naive_bytes: total size if every value had its own buffer.
        itemsize: bytes per element (4 for float32, 8 for a float64 numpy run).
    """

    num_values: int
    num_buffers: int
    planned_bytes: int
    naive_bytes: int
    itemsize: int

    @property
    def saved_fraction(self) -> float:
        """1 - planned_bytes / naive_bytes (0 for an empty plan)."""
        return 1.0 - self.planned_bytes / self.naive_bytes if self.naive_bytes else 0.0

    def __str__(self) -> str:
        return (
            f"{self.num_values} values in {self.num_buffers} buffers: "
            f"{self.planned_bytes} bytes planned vs {self.naive_bytes} naive "
            f"({100 * self.saved_fraction:.1f}% saved)"
        )


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


class _NotCompilable(Exception):
    """Why a traced schedule cannot become a native program (the report's reason)."""


# Types already recognised: the check runs for every feed of every step.
_DEVICE_ARRAY_TYPES: set[type] = set()


def _is_device_array(value) -> bool:
    # PyGpuMatrix, recognised by its interface so this module does not import the native layer.
    if type(value) in _DEVICE_ARRAY_TYPES:
        return True
    found = (
        not isinstance(value, np.ndarray) and hasattr(value, "asnumpy") and hasattr(value, "ctx")
    )
    if found:
        _DEVICE_ARRAY_TYPES.add(type(value))
    return found


def _nbytes(shape: tuple, itemsize: int) -> int:
    return int(np.prod(shape, dtype=np.int64)) * itemsize


def _shape_str(shape) -> str:
    return "(" + ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def value_lifetimes(
    order: Sequence[Node], computed: set[Node], eval_nodes: Sequence[Node]
) -> dict[Node, tuple[int, int]]:
    """Each node's live interval ``(first, last)``, as steps of ``order`` (inclusive).

    A value is written at its own step and read up to the last step whose op reads it; inputs an
    op uses only for their shape (``Op.shape_only_inputs``) do not count, nor do the inputs of fed
    nodes (not in ``computed``). Fed values live from step 0, since a compiled run copies every
    feed in before its first op. Eval nodes live to ``len(order)``, past the last step. The extra
    outputs of a fused node (``node.extra_outputs``, see ``gpumat.fusion``) are written at the
    fused node's step, so they live from there.
    """
    # Fed values live from step 0: the compiled step copies every feed in before its first op.
    first = {node: 0 if node not in computed else step for step, node in enumerate(order)}
    for step, node in enumerate(order):
        if node in computed:
            for extra in getattr(node, "extra_outputs", ()):
                if extra in first:
                    first[extra] = step
    last = dict(first)
    for step, node in enumerate(order):
        if node in computed:
            skip = node.op.shape_only_inputs
            for k, inp in enumerate(node.inputs):
                if k not in skip:
                    last[inp] = step
    for node in eval_nodes:
        last[node] = len(order)
    return {node: (first[node], last[node]) for node in order}


def plan_buffers(
    order: Sequence[Node],
    shapes: Mapping[Node, tuple],
    planned: set[Node],
    eval_nodes: Sequence[Node],
    computed: set[Node],
    itemsize: int,
):
    """Assign executor buffers to values so that values live at the same time never share one.

    Args:
        order: nodes in topological order (the schedule).
        shapes: every node's shape.
        planned: nodes that need an executor-owned buffer.
        eval_nodes: nodes whose values are returned (live to the end).
        computed: nodes whose inputs are read at their step (all but fed nodes).
        itemsize: bytes per element.

    Returns:
        (assignment, buffer_bytes): node -> buffer index, and each buffer's size in bytes.

    Greedy by size (the "greedy by size" strategy of Pisarchyk & Lee, "Efficient Memory Management
    for Deep Neural Net Inference", 2020, as in TFLite's arena planner, on whole buffers): values
    are taken largest first, and each goes to the smallest existing buffer that is free for the
    value's whole lifetime, else to a new buffer. Since a node's inputs are live at its step, a
    value never shares a buffer with one of its inputs, so ops that cannot work in place are safe.
    """
    lifetimes = value_lifetimes(order, computed, eval_nodes)
    step_of = {node: step for step, node in enumerate(order)}
    nbytes = {node: _nbytes(shapes[node], itemsize) for node in planned}
    values = sorted(planned, key=lambda n: (-nbytes[n], step_of[n]))

    buffer_bytes: list[int] = []
    # Per buffer, the disjoint lifetimes it holds, sorted: starts and ends in parallel lists.
    starts: list[list[int]] = []
    ends: list[list[int]] = []
    assignment: dict[Node, int] = {}
    for node in values:
        first, last = lifetimes[node]
        choice = None
        # Buffers were added largest first, so the last free one is the best fit.
        for b in reversed(range(len(buffer_bytes))):
            k = bisect.bisect_left(starts[b], first)
            if (k == 0 or ends[b][k - 1] < first) and (k == len(starts[b]) or starts[b][k] > last):
                choice = b
                break
        if choice is None:
            choice = len(buffer_bytes)
            buffer_bytes.append(nbytes[node])
            starts.append([])
            ends.append([])
        k = bisect.bisect_left(starts[choice], first)
        starts[choice].insert(k, first)
        ends[choice].insert(k, last)
        assignment[node] = choice
    return assignment, buffer_bytes


class Executor:
    """Evaluates graph nodes on numpy (``ctx=None``), the host device or a CUDA device.

    Args:
        eval_node_list: the nodes to evaluate, e.g. ``[loss, *gradients(loss, params)]``.
        ctx: None for the numpy backend, else a ``gpumat.Context`` (``gpumat.cpu()``,
            ``gpumat.gpu(i)``).
        training: the mode seen by ops that depend on it (``gpumat.nn.dropout_op``): True (the
            default) applies dropout, False (evaluation, prediction) makes it the identity.
            Settable later through the ``training`` attribute.
        fusion: run the fusion pass (``gpumat.fusion``) on each plan: dense layers, the ReLU and
            bias gradients, and the softmax cross-entropy with its gradient become fused kernels
            (fewer launches and passes over memory). On by default: the values equal the unfused
            graph's up to float32 rounding (bias sums are added in another order), and the
            eval nodes, feeds and returned values are the same. False runs the graph as built.
        compiled: on a device, compile each plan into one native call per run (default True):
            the first run of a plan calls the ops from Python while recording the ``gpumat.ops``
            calls they make (``gpumat.ops.trace_calls``), and later runs replay that list in C++
            with no Python per op. Dropout's seed advances with ``step`` as in Python. Plans with
            an op that is not ``compilable`` (see ``gpumat.autodiff.Op``) run from Python, as
            with False; ``schedule_report`` says which and why. The values are the same as the
            Python path's (the very same kernels, in the same order).
        cuda_graph: on a CUDA or emulated device, run the compiled step as a CUDA graph (default
            True): captured on the plan's second run, then one graph launch per run. Feeds are
            copied into the captured buffers; device arrays fed at another address trigger a
            new capture. Falls back to compiled eager calls, and says why in
            ``schedule_report``, when capture is impossible (dropout in training mode, an op that
            allocates or synchronizes during capture). Ignored on cpu.

    Attributes (``training`` and ``step`` at once, the rest after the first run; the others are
        the seed assignment's names):
        training: the mode (above).
        step: the number of runs made in training mode (starts at 0, +1 after each training
            run). Dropout masks use seed + step, so each step draws a fresh mask and a rerun of
            the same program draws the same masks; set it to resume a run at a given step.
        topo_order: the schedule, a topological order of the needed nodes (of the fused graph
            when fusion is on: fused nodes replace the user's there).
        schedule_report: a :class:`ScheduleReport` (how runs are made: numpy, python, compiled
            or cuda-graph, and why not the next); None before the first run.
        fusion_report: a ``gpumat.fusion.FusionReport`` of the current plan (ops before and
            after, rewrites per rule); None before the first run.
        node_to_shape_map: node -> inferred shape (every node of the graph as built, and of the
            fused graph when fusion is on).
        feed_shapes: fed node -> shape of the current plan.
        memory_plan: a :class:`MemoryPlan` (None before the first run); ``gpumat.dlsys``'s
            Executor, whose ``memory_plan`` is the seed's method, reports it as ``plan_stats``.
        node_to_arr_map: node -> the buffer planned for it, for every node except the fed ones
            (the seed's name; None before the first run).

    Raises:
        TypeError: ``eval_node_list`` holds something that is not a graph node, ``ctx`` is
            neither None nor a ``gpumat.Context`` (e.g. the string ``"gpu"``), or ``training`` is
            not a bool (nor are fusion, compiled, cuda_graph).

    Example (training with parameters kept on the device)::

        ex = Executor([loss, *gradients(loss, params)], ctx=gpumat.gpu(0))
        dev = [gpumat.array(p, ctx) for p in init_values]
        opt = gpumat.optim.SGD(dev, lr=1.0)
        for X, Y in batches:
            loss_val, *grads = ex.run({x: X, y_: Y, **dict(zip(params, dev))})
            opt.step(grads)
    """

    def __init__(
        self,
        eval_node_list: Sequence[Node],
        ctx=None,
        training: bool = True,
        fusion: bool = True,
        compiled: bool = True,
        cuda_graph: bool = True,
    ) -> None:
        if isinstance(eval_node_list, (Node, str, bytes)) or not isinstance(
            eval_node_list, Sequence
        ):
            raise TypeError(
                "Executor: eval_node_list must be a list of graph nodes, got a "
                f"{type(eval_node_list).__name__} (e.g. Executor([loss, *grads]))"
            )
        self.eval_node_list = list(eval_node_list)
        for node in self.eval_node_list:
            if not isinstance(node, Node):
                raise TypeError(
                    f"Executor: eval_node_list holds a {type(node).__name__}, expected graph nodes"
                )
        if ctx is not None:
            from gpumat.context import Context

            if not isinstance(ctx, Context):
                raise TypeError(
                    f"Executor: ctx must be None (numpy) or a gpumat.Context such as gpumat.cpu() "
                    f"or gpumat.gpu(0), got {ctx!r}"
                )
        if not isinstance(training, (bool, np.bool_)):
            raise TypeError(f"Executor: training must be a bool, got {training!r}")
        for flag, value in (("fusion", fusion), ("compiled", compiled), ("cuda_graph", cuda_graph)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"Executor: {flag} must be a bool, got {value!r}")
        self.ctx = ctx
        self.fusion = bool(fusion)
        self.compiled = bool(compiled)
        self.cuda_graph = bool(cuda_graph)
        # The compiled step of the current plan and mode: a gpumat._core.NativeProgram, or None
        # with _compile_reason saying why not ("" while not yet traced).
        self._program = None
        self._program_training = None
        self._compile_reason = ""
        self._external_steps: list[tuple[int, Node]] = []
        self._copy_steps: list[tuple[int, Node]] = []
        self._buffer_of: dict[int, int] = {}
        self._segments: list = []
        self.fusion_report = None
        # Ops with ``takes_run_state`` (dropout) see the mode and the number of training runs so
        # far; see the class docstring.
        self.training = bool(training)
        self.step = 0
        self.topo_order: list[Node] | None = None
        self.node_to_shape_map: dict[Node, tuple] | None = None
        self.feed_shapes: dict[Node, tuple] | None = None
        self._plan_stats: MemoryPlan | None = None
        # Every node any feed combination could need; feeds for other nodes are ignored.
        self._graph_nodes = set(find_topo_sort(self.eval_node_list))
        self._plan_key = None
        self._steps: list = []
        self._template: list = []
        self._buffers: list = []
        self._eval_index: list[int] = []
        self._dtype = np.float32

    @property
    def memory_plan(self) -> MemoryPlan | None:
        """The current :class:`MemoryPlan` (None before the first run)."""
        return self._plan_stats

    @property
    def plan_stats(self) -> MemoryPlan | None:
        """The current :class:`MemoryPlan`, under a name that the seed's API leaves free."""
        return self._plan_stats

    @property
    def node_to_arr_map(self) -> dict | None:
        """node -> its planned buffer (numpy array or PyGpuMatrix view), for every node of the
        schedule except fed ones; None before the first run. Buffers of values whose lifetimes
        do not overlap are shared, and the next run overwrites them."""
        if self._plan_key is None and not self._steps:
            return None
        return {
            node: self._template[i]
            for kind, i, node, _, _ in self._steps
            if kind in (_COMPUTE, _WRITTEN) and self._template[i] is not None
        }

    def __repr__(self) -> str:
        names = ", ".join(n.name for n in self.eval_node_list[:4])
        more = ", ..." if len(self.eval_node_list) > 4 else ""
        backend = "numpy" if self.ctx is None else str(self.ctx)
        return f"Executor([{names}{more}], ctx={backend})"

    # ------------------------------------------------------------------------------------------
    # Shape inference
    # ------------------------------------------------------------------------------------------

    def infer_shape(self, feed_shapes: Mapping[Node, tuple]) -> dict[Node, tuple]:
        """Shapes of every node needed for the eval nodes, given the fed nodes' shapes.

        Args:
            feed_shapes: fed node -> shape (a tuple of ints). Fed nodes are leaves: their inputs,
                if any, are not needed.

        Returns:
            node -> shape for the schedule (also stored as ``node_to_shape_map``).

        Raises:
            ValueError: a variable the eval nodes need is not fed (naming it), or an op's
                ``infer_shape`` rejects its input shapes (naming the op, node and shapes).
        """
        return self._infer_shapes(self.eval_node_list, feed_shapes)

    def _infer_shapes(self, eval_nodes, feed_shapes: Mapping[Node, tuple]) -> dict[Node, tuple]:
        order = find_topo_sort(eval_nodes, stop_at=feed_shapes.keys())
        shapes: dict[Node, tuple] = {}
        missing = [n for n in order if n not in feed_shapes and isinstance(n.op, PlaceholderOp)]
        if missing:
            names = ", ".join(repr(n.name) for n in missing)
            needs = ", ".join(repr(n.name) for n in eval_nodes[:4])
            raise ValueError(f"no value fed for variable(s) {names}, needed to evaluate {needs}")
        for node in order:
            if node in feed_shapes:
                shapes[node] = tuple(int(d) for d in feed_shapes[node])
                continue
            in_shapes = [shapes[i] for i in node.inputs]
            out = node.op.infer_shape(node, in_shapes)
            if out is None:
                raise RuntimeError(
                    f"{node.op.name}.infer_shape returned None for node {node.name!r}"
                )
            shapes[node] = tuple(int(d) for d in out)
        self.topo_order = order
        self.node_to_shape_map = shapes
        return shapes

    # ------------------------------------------------------------------------------------------
    # Feeds, plan, run
    # ------------------------------------------------------------------------------------------

    def _normalise_feeds(self, feed_dict: Mapping) -> dict:
        """fed node -> (value, external) for the nodes of this graph; checks devices."""
        feeds = {}
        for node, value in feed_dict.items():
            if not isinstance(node, Node):
                raise TypeError(f"feed_dict keys must be graph nodes, got {type(node).__name__}")
            if node not in self._graph_nodes:
                continue
            if _is_device_array(value):
                if self.ctx is None:
                    raise ValueError(
                        f"feed for {node.name!r} is a device array on {value.ctx}, but this "
                        "executor runs on numpy (ctx=None): feed a numpy array (value.asnumpy())"
                    )
                if value.ctx is not self.ctx and value.ctx != self.ctx:
                    raise ValueError(
                        f"feed for {node.name!r} is on {value.ctx}, but this executor runs on "
                        f"{self.ctx}; devices are never mixed implicitly: copy it explicitly"
                    )
                feeds[node] = (value, True)
            else:
                arr = np.asarray(value)
                if arr.dtype.kind not in "biuf":
                    raise TypeError(
                        f"feed for {node.name!r}: expected real numbers, got dtype {arr.dtype}"
                    )
                feeds[node] = (arr, False)
        return feeds

    def _prepare(self, feeds: dict, dtype) -> None:
        """Infer shapes, plan memory and allocate buffers for these feeds (the first run, or a
        changed feed signature). Raises ValueError from shape inference before allocating."""
        feed_shapes = {n: tuple(v.shape) for n, (v, _) in feeds.items()}
        shapes = self.infer_shape(feed_shapes)
        # Past shape inference the old plan is given up; if planning fails, the next run replans.
        self._plan_key = None
        from gpumat import fusion

        if self.fusion:
            eval_nodes, report = fusion.fuse_graph(self.eval_node_list, feeds.keys(), shapes)
            if eval_nodes != self.eval_node_list:
                fused_shapes = self._infer_shapes(eval_nodes, feed_shapes)
                # The user's nodes keep their shapes in node_to_shape_map, fused or not.
                self.node_to_shape_map = {**shapes, **fused_shapes}
                shapes = fused_shapes
        else:
            eval_nodes = self.eval_node_list
            n_ops = sum(1 for n in self.topo_order if n not in feeds)
            report = fusion.FusionReport(n_ops, n_ops, {k: 0 for k in fusion.RULES}, False)
        order = self.topo_order
        itemsize = np.dtype(dtype).itemsize if self.ctx is None else 4
        external = {n for n, (_, ext) in feeds.items() if ext and n in shapes}
        computed = {n for n in order if n not in feeds}
        planned = {n for n in order if n not in external}
        # Device values are views (PyGpuMatrix._view) over flat planned buffers, so any buffer
        # that is large enough can hold any value, as on numpy.
        assignment, buffer_bytes = plan_buffers(
            order, shapes, planned, eval_nodes, computed, itemsize
        )

        # Drop the old buffers first so that the allocator can reuse their memory.
        self._buffers = []
        self._template = []
        if self.ctx is None:
            flat = [np.empty(b // itemsize, dtype=dtype) for b in buffer_bytes]
            self._buffers = flat

            def value_buffer(node):
                size = int(np.prod(shapes[node], dtype=np.int64))
                return flat[assignment[node]][:size].reshape(shapes[node])
        else:
            import gpumat

            self._buffers = [gpumat.empty((b // itemsize,), self.ctx) for b in buffer_bytes]

            def value_buffer(node):
                return self._buffers[assignment[node]]._view(shapes[node])

        index = {node: i for i, node in enumerate(order)}
        self._template = [value_buffer(n) if n in assignment else None for n in order]
        self._buffer_of = {i: assignment[n] for i, n in enumerate(order) if n in assignment}
        self._external_steps = [(i, n) for i, n in enumerate(order) if n in external]
        self._program = None
        self._compile_reason = ""
        steps = []
        for i, node in enumerate(order):
            if node in external:
                steps.append((_FEED_EXTERNAL, i, node, None))
            elif node in feeds:
                steps.append((_FEED_COPY, i, node, None))
            elif isinstance(node.op, fusion.FusedOutputOp):
                steps.append((_WRITTEN, i, node, None))
            else:
                extra = [index[x] for x in getattr(node, "extra_outputs", ()) if x in index]
                if len(extra) != len(getattr(node, "extra_outputs", ())):
                    raise RuntimeError(f"fused node {node.name!r}: an output is not scheduled")
                steps.append((_COMPUTE, i, node, [index[x] for x in node.inputs], extra or None))
        self._steps = [s if len(s) == 5 else (*s, None) for s in steps]
        self._copy_steps = [(i, node) for kind, i, node, _, _ in self._steps if kind == _FEED_COPY]
        self._eval_index = [index[n] for n in eval_nodes]
        self.fusion_report = report
        self._dtype = dtype
        self.feed_shapes = {n: shapes[n] for n in feeds if n in shapes}
        self._plan_stats = MemoryPlan(
            num_values=len(planned),
            num_buffers=len(buffer_bytes),
            planned_bytes=int(sum(buffer_bytes)),
            naive_bytes=int(sum(_nbytes(shapes[n], itemsize) for n in planned)),
            itemsize=itemsize,
        )

    def run(self, feed_dict: Mapping, convert_to_numpy_ret_vals: bool = False) -> list:
        """Evaluate the eval nodes.

        Args:
            feed_dict: node -> value for every variable the eval nodes need (any node may be fed:
                its value is then used and its inputs are not evaluated). Values are numpy arrays
                (or array-likes), copied into planned buffers, or, on a device backend,
                ``PyGpuMatrix`` arrays on the executor's device, used in place without a copy (keep
                training parameters on the device this way).
            convert_to_numpy_ret_vals: return numpy copies instead of device arrays.

        Returns:
            One value per eval node, in order. On a device backend these are ``PyGpuMatrix``
            buffers that belong to the executor: the next ``run`` overwrites them (copy what you
            keep, or pass ``convert_to_numpy_ret_vals=True``); a fed device array is returned as
            itself. The numpy backend always returns fresh numpy arrays.

        Raises:
            ValueError: a needed variable is not fed; shapes are incompatible (raised by shape
                inference, before any kernel runs); a device array is on another device.
            TypeError: a feed key is not a node, or a feed is not numeric.
        """
        feeds = self._normalise_feeds(feed_dict)
        if self.ctx is None:
            dtype = (
                np.float64
                if any(v.dtype == np.float64 for v, ext in feeds.values())
                else np.float32
            )
        else:
            dtype = np.float32
        key = (
            frozenset((n, tuple(v.shape), ext) for n, (v, ext) in feeds.items()),
            np.dtype(dtype).str,
        )
        if key != self._plan_key:
            # A shape error leaves the previous plan in place (and valid for its feeds).
            self._prepare(feeds, dtype)
            self._plan_key = key

        ctx = self.ctx
        training, step = self.training, self.step
        if ctx is not None and self.compiled:
            if self._program_training != training:
                # Run-state ops trace differently per mode (dropout is a copy when evaluating).
                self._program, self._compile_reason = None, ""
                self._program_training = training
            if self._program is not None:
                vals = self._run_program(feeds, step)
            elif not self._compile_reason:
                vals = self._trace_and_compile(feeds, training, step)
            else:
                vals = self._run_python(feeds, training, step)
        else:
            vals = self._run_python(feeds, training, step)

        if training:
            self.step += 1
        results = [vals[i] for i in self._eval_index]
        if ctx is None:
            return [np.array(v, copy=True) for v in results]
        if convert_to_numpy_ret_vals:
            return [v.asnumpy() for v in results]
        return results

    @property
    def schedule_report(self) -> ScheduleReport | None:
        """How runs of the current plan are made (see :class:`ScheduleReport`); None before the
        first run."""
        if self._plan_key is None:
            return None
        n_ops = sum(1 for kind, *_ in self._steps if kind == _COMPUTE)
        if self.ctx is None:
            return ScheduleReport("numpy", n_ops)
        prog = self._program
        if prog is None:
            reason = self._compile_reason or (
                "compiled=False" if not self.compiled else "compiled on the next run"
            )
            return ScheduleReport("python", n_ops, reason=reason)
        graph_reason = prog.graph_status
        if not graph_reason and not self.cuda_graph:
            graph_reason = "cuda_graph=False"
        elif not graph_reason and self.ctx.device_type == "cpu":
            graph_reason = "no CUDA graphs on cpu"
        mode = "cuda-graph" if prog.mode == "cuda-graph" else "compiled"
        return ScheduleReport(mode, prog.num_steps, prog.graph_nodes, prog.captures, graph_reason)

    def _run_python(self, feeds: dict, training: bool, step: int, trace=None) -> list:
        """One run with a Python call per op; ``trace`` (a list being filled by
        ``gpumat.ops.trace_calls``) makes it return each compute step's slice of the calls."""
        ctx = self.ctx
        vals = list(self._template)
        self._segments = []
        for kind, i, node, inputs, extra in self._steps:
            if kind == _COMPUTE:
                out = vals[i] if extra is None else (vals[i], *[vals[j] for j in extra])
                first = len(trace) if trace is not None else 0
                if getattr(node.op, "takes_run_state", False):
                    node.op.compute(
                        node, [vals[j] for j in inputs], out, ctx, training=training, step=step
                    )
                else:
                    node.op.compute(node, [vals[j] for j in inputs], out, ctx)
                if trace is not None:
                    self._segments.append((node, trace[first:]))
            elif kind == _FEED_COPY:
                value = feeds[node][0]
                if ctx is None:
                    np.copyto(vals[i], value, casting="unsafe")
                else:
                    vals[i].copyfrom(value)  # converts to float32 on the way, no device allocation
            elif kind == _FEED_EXTERNAL:
                vals[i] = feeds[node][0]
        return vals

    def _run_program(self, feeds: dict, step: int) -> list:
        """One run of the compiled step: feeds copied in, fed device arrays bound, one call."""
        vals = list(self._template)
        for i, node in self._copy_steps:
            vals[i].copyfrom(feeds[node][0])
        inputs = []
        for i, node in self._external_steps:
            vals[i] = feeds[node][0]
            inputs.append(vals[i])
        self._program.run(inputs, step)
        return vals

    def _trace_and_compile(self, feeds: dict, training: bool, step: int) -> list:
        """The plan's first run (per mode) on a device: from Python, recording the ops calls,
        then compiled into a NativeProgram for the next runs (or the reason why not)."""
        from gpumat import ops

        for kind, _, node, _, _ in self._steps:
            if kind != _COMPUTE:
                continue
            op = node.op
            ok = op.compilable
            if ok is None:
                ok = type(op).__module__.startswith("gpumat.")
            if not ok:
                self._compile_reason = f"op {op.name} ({type(op).__name__}) is not compilable"
                return self._run_python(feeds, training, step)
            if getattr(op, "takes_run_state", False) and not op.seeded_scalars:
                self._compile_reason = f"op {op.name} depends on the run state (no seeded_scalars)"
                return self._run_python(feeds, training, step)
        with contextlib.ExitStack() as stack:
            try:
                trace = stack.enter_context(ops.trace_calls())
            except RuntimeError:  # another thread is tracing: from Python now, compile next run
                return self._run_python(feeds, training, step)
            vals = self._run_python(feeds, training, step, trace=trace)
        try:
            self._program = self._compile(vals, step)
        except _NotCompilable as exc:
            self._compile_reason = str(exc)
        finally:
            self._segments = []
        return vals

    def _compile(self, vals: list, step: int):
        """A NativeProgram making the traced calls (self._segments) on the planned arrays."""
        from gpumat import _core

        prog = _core.NativeProgram(*self.ctx._native)
        prog.set_graphs(self.cuda_graph)
        number: dict[int, int] = {}  # id(PyGpuMatrix value) -> the program's array number
        for i, b in self._buffer_of.items():
            number[id(vals[i])] = prog.add_fixed(self._buffers[b], vals[i].shape)
        for k, (i, node) in enumerate(self._external_steps):
            if id(vals[i]) in number:
                raise _NotCompilable(f"the array fed to {node.name!r} is also fed to another node")
            number[id(vals[i])] = prog.add_input(k, vals[i].shape)
        for node, calls in self._segments:
            if not calls:
                raise _NotCompilable(f"op {node.op.name} made no gpumat.ops calls")
            seeded = node.op.seeded_scalars if getattr(node.op, "takes_run_state", False) else {}
            for name, args in calls:
                arrays, scalars = [], []
                for a in args:
                    if isinstance(a, _core.PyGpuMatrix):
                        if id(a) not in number:
                            raise _NotCompilable(
                                f"op {node.op.name} calls {name} on an array outside the plan"
                            )
                        arrays.append(number[id(a)])
                    elif isinstance(a, (bool, int, float, np.integer, np.floating, np.bool_)):
                        scalars.append(a)
                    else:
                        raise _NotCompilable(
                            f"op {node.op.name} calls {name} with a {type(a).__name__} argument"
                        )
                k = seeded.get(name, -1)
                if k >= 0:  # traced as seed + step; the program adds each run's step
                    scalars[k] = (int(scalars[k]) - step) % 2**64
                try:
                    prog.add_step(name.removesuffix("_"), arrays, scalars, k)
                except ValueError as exc:
                    raise _NotCompilable(f"op {node.op.name}: {exc}") from None
        return prog
