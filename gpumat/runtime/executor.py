"""The executor: evaluates graph nodes on numpy, the host device or a CUDA device.

One feed through :meth:`Executor.run`: the feeds are checked (nodes, kinds, devices); on the first
run, and again only when the feed signature changes (the set of fed nodes, a feed's shape, a feed's
kind, numpy or device array, or for numpy the run's dtype), :func:`gpumat.runtime.plan.make_plan`
sorts the graph once, infers the shapes once, fuses, plans memory and lays out the steps, and the
executor allocates the planned buffers once; then the steps run: host feeds are copied into their
buffers (on the cpu device a large float32 numpy feed is read in place), fed device arrays are
used in place, and each op writes into its planned output. On a
device the plan's first run is traced and later runs replay it natively, as one CUDA graph launch
on a CUDA or emulated device (:mod:`gpumat.runtime.compiled`). Steady-state runs allocate nothing
on the device.

Backends (``device``):

- ``None``: numpy, the reference (:mod:`gpumat.reference`). Float32, unless a numpy feed is
  float64, in which case every value of the run is float64 (finite-difference gradient checks
  use this).
- ``gpumat.cpu()``: gpumat's host kernels; ``gpumat.gpu(i)``: CUDA device i; ``gpumat.emu(i)``:
  the emulated CUDA device. Values are float32 ``PyGpuMatrix`` arrays on that device.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
from collections.abc import Mapping, Sequence

import numpy as np

from gpumat import ops
from gpumat.arrays import empty, is_device_array
from gpumat.devices import Device
from gpumat.dlpack import from_dlpack
from gpumat.graph.node import Node
from gpumat.graph.reverse_mode import find_topo_sort
from gpumat.runtime.compiled import (
    NotCompilable,
    ScheduleReport,
    build_program,
    not_compilable_reason,
)
from gpumat.runtime.fusion import FusionReport
from gpumat.runtime.memory import MemoryPlan
from gpumat.runtime.plan import (
    COMPUTE,
    FEED_COPY,
    FEED_EXTERNAL,
    WRITTEN,
    Plan,
    infer_shapes,
    make_plan,
)

__all__ = ["Executor"]

# The smallest numpy feed the cpu device reads in place (Executor._host_view): a 64 KiB copy
# takes about as long as making the view (~2-4 us on a 2-core Xeon, numpy 2).
_HOST_VIEW_MIN_BYTES = 1 << 16
_UNCHECKED = object()  # last_feeds' marker for a host value: mutable, so checked again every run


class _ThreadState:
    """What one thread's runs of an executor use: its plan, the plan's buffers, its compiled step.

    Each thread that runs an executor gets its own (``Executor._state``), so runs from several
    threads at once never share a buffer: each thread's returned arrays are overwritten only by
    that thread's next run.
    """

    def __init__(self) -> None:
        self.plan_key = None
        self.plan: Plan | None = None
        self.buffers: list = []
        self.template: list = []  # per schedule position: the planned value buffer, or None
        # The compiled step of the current plan and mode: a gpumat._core.NativeProgram, or None
        # with compile_reason saying why not ("" while not yet traced).
        self.program = None
        self.program_training = None
        self.compile_reason = ""
        self.segments: list = []  # while tracing: (node, its kernel calls)
        # Sorted (start, end) byte ranges of ``buffers`` on a device: a fed array inside one of
        # them (a value this executor returned) is copied in, never used in place.
        self.buffer_starts: list[int] = []
        self.buffer_ends: list[int] = []
        self.topo_order: list[Node] | None = None
        self.node_to_shape_map: dict[Node, tuple] | None = None
        # The checked feeds of the last run of the current plan: node -> (the value as fed, or
        # _UNCHECKED for host values, which are checked every run; (value, external); shape).
        # A device array fed again as the same object needs no new check (its device, address
        # and shape never change), and a run whose nodes, shapes and placements all match it
        # keeps the plan without building the plan key. None when no run of this plan has done.
        self.last_feeds: dict | None = None


class Executor:
    """Evaluates graph nodes on numpy (``device=None``), the host device or a CUDA device.

    Args:
        eval_node_list: the nodes to evaluate, e.g. ``[loss, *gradients(loss, params)]``.
        device: None for the numpy backend, else a ``gpumat.Device`` (``gpumat.cpu()``,
            ``gpumat.gpu(i)``, ``gpumat.emu(i)``).
        training: the mode seen by ops that depend on it (``dropout_op``): True (the
            default) applies dropout, False (evaluation, prediction) makes it the identity.
            Settable later through the ``training`` attribute.
        fusion: run the fusion pass (:mod:`gpumat.runtime.fusion`) on each plan: dense layers,
            the ReLU and bias gradients, and the softmax cross-entropy with its gradient become
            fused kernels (fewer launches and passes over memory). On by default: the values
            equal the unfused graph's up to float32 rounding (bias sums are added in another
            order), and the eval nodes, feeds and returned values are the same. False runs the
            graph as built.
        compiled: on a device, compile each plan into one native call per run (default True):
            the first run of a plan calls the ops from Python while recording the ``gpumat.ops``
            calls they make (``gpumat.ops.trace_calls``), and later runs replay that list in C++
            with no Python per op. Dropout's seed advances with ``step`` as in Python. Plans with
            an op that is not ``compilable`` (see :class:`gpumat.graph.Op`) run from Python, as
            with False; ``schedule_report`` says which and why. The values are the same as the
            Python path's (the very same kernels, in the same order).
        cuda_graph: on a CUDA or emulated device, run the compiled step as a CUDA graph (default
            True): captured on the plan's second run, then one graph launch per run. Feeds are
            copied into the captured buffers; device arrays fed at another address trigger a
            new capture. Falls back to compiled eager calls, and says why in
            ``schedule_report``, when capture is impossible (dropout in training mode, an op that
            allocates or synchronizes during capture). Ignored on cpu.

    ``training`` and ``step`` are set at once, the other attributes after the first run; several
    are the dlsys course's names.

    Attributes:
        training: the mode (above).
        step: the number of runs made in training mode (starts at 0, +1 after each training
            run). Dropout masks use seed + step, so each step draws a fresh mask and a rerun of
            the same program draws the same masks; set it to resume a run at a given step.
        topo_order: the schedule, a topological order of the needed nodes (of the fused graph
            when fusion is on: fused nodes replace the user's there).
        schedule_report: a :class:`~gpumat.runtime.compiled.ScheduleReport` (how runs are made:
            numpy, python, compiled or cuda-graph, and why not the next); None before the first
            run.
        fusion_report: a :class:`~gpumat.runtime.fusion.FusionReport` of the current plan (ops
            before and after, rewrites per rule); None before the first run.
        node_to_shape_map: node -> inferred shape (every node of the graph as built, and of the
            fused graph when fusion is on).
        feed_shapes: fed node -> shape of the current plan.
        memory_plan: a :class:`~gpumat.runtime.memory.MemoryPlan` (None before the first run);
            ``gpumat.dlsys``'s Executor, whose ``memory_plan`` is the course's method, reports it
            as ``plan_stats``.
        node_to_arr_map: node -> the buffer planned for it, for every node except the fed ones
            (the dlsys course's name; None before the first run).

    Raises:
        TypeError: ``eval_node_list`` holds something that is not a graph node, ``device`` is
            neither None nor a ``gpumat.Device`` (e.g. the string ``"gpu"``), or ``training`` is
            not a bool (nor are fusion, compiled, cuda_graph).

    Example (training with parameters kept on the device)::

        device = gpumat.gpu(0)
        ex = Executor([loss, *gradients(loss, params)], device=device)
        dev = [gpumat.array(p, device) for p in init_values]
        opt = gpumat.optim.SGD(dev, lr=1.0)
        for X, Y in batches:
            loss_val, *grads = ex.run({x: X, y_: Y, **dict(zip(params, dev))})
            opt.step(grads)
    """

    def __init__(
        self,
        eval_node_list: Sequence[Node],
        device=None,
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
        if device is not None and not isinstance(device, Device):
            raise TypeError(
                f"Executor: device must be None (numpy) or a gpumat.Device such as gpumat.cpu() "
                f"or gpumat.gpu(0), got {device!r}"
            )
        if not isinstance(training, (bool, np.bool_)):
            raise TypeError(f"Executor: training must be a bool, got {training!r}")
        for flag, value in (("fusion", fusion), ("compiled", compiled), ("cuda_graph", cuda_graph)):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"Executor: {flag} must be a bool, got {value!r}")
        self.device = device
        self.fusion = bool(fusion)
        self.compiled = bool(compiled)
        self.cuda_graph = bool(cuda_graph)
        self._local = threading.local()
        self._step_lock = threading.Lock()
        # Ops with ``takes_run_state`` (dropout) see the mode and the number of training runs so
        # far; see the class docstring.
        self.training = bool(training)
        self.step = 0
        # Every node any feed combination could need; feeds for other nodes are ignored.
        self._graph_nodes = set(find_topo_sort(self.eval_node_list))

    @property
    def _state(self) -> _ThreadState:
        """The calling thread's run state (made on its first use)."""
        st = getattr(self._local, "state", None)
        if st is None:
            st = self._local.state = _ThreadState()
        return st

    @property
    def topo_order(self) -> list | None:
        """The schedule of the calling thread's current plan (None before its first run)."""
        return self._state.topo_order

    @property
    def node_to_shape_map(self) -> dict | None:
        """node -> shape of the calling thread's current plan (None before its first run)."""
        return self._state.node_to_shape_map

    @property
    def memory_plan(self) -> MemoryPlan | None:
        """The current :class:`~gpumat.runtime.memory.MemoryPlan` (None before the first run)."""
        plan = self._state.plan
        return None if plan is None else plan.memory_plan

    @property
    def plan_stats(self) -> MemoryPlan | None:
        """The current memory plan, under a name that the dlsys course's API leaves free (its
        Executor's ``memory_plan`` is a method)."""
        plan = self._state.plan
        return None if plan is None else plan.memory_plan

    @property
    def fusion_report(self) -> FusionReport | None:
        """The current plan's :class:`~gpumat.runtime.fusion.FusionReport` (None before the first
        run)."""
        plan = self._state.plan
        return None if plan is None else plan.fusion_report

    @property
    def feed_shapes(self) -> dict | None:
        """Fed node -> shape, for the current plan (None before the first run)."""
        plan = self._state.plan
        return None if plan is None else plan.feed_shapes

    @property
    def node_to_arr_map(self) -> dict | None:
        """node -> its planned buffer (numpy array or PyGpuMatrix view), for every node of the
        schedule except fed ones; None before the first run. Buffers of values whose lifetimes
        do not overlap are shared, and the next run overwrites them."""
        st = self._state
        if st.plan is None:
            return None
        return {
            s.node: st.template[s.index]
            for s in st.plan.steps
            if s.kind in (COMPUTE, WRITTEN) and st.template[s.index] is not None
        }

    def __repr__(self) -> str:
        names = ", ".join(n.name for n in self.eval_node_list[:4])
        more = ", ..." if len(self.eval_node_list) > 4 else ""
        backend = "numpy" if self.device is None else str(self.device)
        return f"Executor([{names}{more}], device={backend})"

    def infer_shape(self, feed_shapes: Mapping[Node, tuple]) -> dict[Node, tuple]:
        """Shapes of every node needed for the eval nodes, given the fed nodes' shapes.

        Args:
            feed_shapes: fed node -> shape (a tuple of ints). Fed nodes are leaves: their inputs,
                if any, are not needed.

        Returns:
            node -> shape for the graph as built (also stored as ``node_to_shape_map``; the
            schedule is stored as ``topo_order``).

        Raises:
            ValueError: a variable the eval nodes need is not fed (naming it), or an op's
                ``infer_shape`` rejects its input shapes (naming the op, node and shapes).
        """
        order = find_topo_sort(self.eval_node_list, stop_at=feed_shapes.keys())
        shapes = infer_shapes(order, feed_shapes, self.eval_node_list)
        st = self._state
        st.topo_order, st.node_to_shape_map = order, shapes
        return shapes

    # ------------------------------------------------------------------------------------------
    # Feeds, plan, run
    # ------------------------------------------------------------------------------------------

    def _normalise_feeds(self, st: _ThreadState, feed_dict: Mapping) -> tuple[dict, dict, bool]:
        """fed node -> (value, external) for the nodes of this graph; checks devices. A device
        array is used in place (external) unless it lies in one of this thread's planned buffers
        (a value an earlier run returned, fed back: ``h = ex.run({x: h})[0]``): the plan may
        overwrite that buffer before the feed's last reader runs, so such a feed is copied into a
        buffer of its own, like a numpy feed.

        Also returns the feeds' record for ``st.last_feeds`` and whether the feed signature (the
        fed nodes, their shapes and placements) equals the last run's. A device array that the
        last run of this plan was fed as the same object is not checked again: its device,
        storage and shape are fixed for its lifetime (the record keeps it alive, so its identity
        is not reused), and this thread's buffers are those of that run."""
        feeds = {}
        record = {}
        last = st.last_feeds
        same = last is not None
        for node, value in feed_dict.items():
            prev = last.get(node) if last is not None else None
            if prev is not None and prev[0] is value:
                feeds[node] = prev[1]
                record[node] = prev
                continue
            if not isinstance(node, Node):
                raise TypeError(f"feed_dict keys must be graph nodes, got {type(node).__name__}")
            if node not in self._graph_nodes:
                continue
            if is_device_array(value):
                if self.device is None:
                    raise ValueError(
                        f"feed for {node.name!r} is a device array on {value.device}, but this "
                        "executor runs on numpy (device=None): feed a numpy array (value.asnumpy())"
                    )
                if value.device is not self.device and value.device != self.device:
                    raise ValueError(
                        f"feed for {node.name!r} is on {value.device}, but this executor runs on "
                        f"{self.device}; devices are never mixed implicitly: copy it explicitly"
                    )
                fed = feeds[node] = (value, not self._in_own_buffers(st, value))
                record[node] = entry = (value, fed, value.shape)
            else:
                arr = np.asarray(value)
                if arr.dtype.kind not in "biuf":
                    raise TypeError(
                        f"feed for {node.name!r}: expected real numbers, got dtype {arr.dtype}"
                    )
                view = self._host_view(st, node, arr)
                fed = feeds[node] = (arr, False) if view is None else (view, True)
                record[node] = entry = (_UNCHECKED, fed, arr.shape)
            if same and (prev is None or prev[2] != entry[2] or prev[1][1] != fed[1]):
                same = False
        return feeds, record, same and len(record) == len(last)

    def _host_view(self, st: _ThreadState, node: Node, arr: np.ndarray):
        """On the cpu device, a large float32 numpy feed read in place, as a fed device array is:
        a ``PyGpuMatrix`` over the array's memory (``from_dlpack``, no copy), or None to copy it.

        Only a writable, C-contiguous float32 array of at least ``_HOST_VIEW_MIN_BYTES`` (below
        that a copy costs less than the view) that is not an eval node (whose value the run would
        return as a gpumat array over the caller's memory) and does not lie in this thread's
        planned buffers (``np.asarray`` of a returned value, fed back). Ops never write their
        inputs and the run is over when ``run`` returns, so the caller's array is only read, and
        only during the call; the record of the run's feeds keeps it alive until the next run.
        """
        device = self.device
        if (
            device is None
            or device.device_type != "cpu"
            or arr.dtype != np.float32
            or arr.nbytes < _HOST_VIEW_MIN_BYTES
            or not arr.flags.c_contiguous
            or not arr.flags.writeable
            or node in self.eval_node_list
        ):
            return None
        view = from_dlpack(arr)
        return None if self._in_own_buffers(st, view) else view

    @staticmethod
    def _in_own_buffers(st: _ThreadState, value) -> bool:
        if not st.buffer_starts:
            return False
        start, end = value._address_range()
        k = bisect.bisect_right(st.buffer_starts, start) - 1
        return end > start and k >= 0 and start < st.buffer_ends[k]

    def _prepare(self, st: _ThreadState, feeds: dict, dtype) -> None:
        """Make the plan for these feeds and allocate its buffers (the first run, or a changed
        feed signature) in the thread state ``st``. Raises ValueError from shape inference before
        allocating."""
        plan = make_plan(self.eval_node_list, feeds, dtype, self.device is not None, self.fusion)
        # Past planning the old plan is given up; if allocating fails, the next run replans.
        st.plan_key = None
        st.plan = None
        st.last_feeds = None
        # Drop the old buffers first so that the allocator can reuse their memory.
        st.buffers = []
        st.template = []
        itemsize = plan.memory_plan.itemsize
        if self.device is None:
            buffers = [np.empty(b // itemsize, dtype=dtype) for b in plan.buffer_bytes]

            def value_buffer(node, b):
                size = int(np.prod(plan.shapes[node], dtype=np.int64))
                return buffers[b][:size].reshape(plan.shapes[node])
        else:
            buffers = [empty((b // itemsize,), self.device) for b in plan.buffer_bytes]

            def value_buffer(node, b):
                # Device values are views over flat planned buffers, so any buffer that is large
                # enough can hold any value, as on numpy.
                return buffers[b]._view(plan.shapes[node])

        st.buffers = buffers
        if self.device is not None:
            ranges = sorted(b._address_range() for b in buffers if b.size)
            st.buffer_starts = [r[0] for r in ranges]
            st.buffer_ends = [r[1] for r in ranges]
        st.template = [
            value_buffer(n, plan.assignment[i]) if i in plan.assignment else None
            for i, n in enumerate(plan.order)
        ]
        st.program = None
        st.compile_reason = ""
        st.topo_order = plan.order
        st.node_to_shape_map = plan.shapes
        st.plan = plan

    def run(self, feed_dict: Mapping, convert_to_numpy_ret_vals: bool = False) -> list:
        """Evaluate the eval nodes.

        Args:
            feed_dict: node -> value for every variable the eval nodes need (any node may be fed:
                its value is then used and its inputs are not evaluated). Values are numpy arrays
                (or array-likes), copied into planned buffers (on the cpu device a writable
                C-contiguous float32 array of 64 KiB or more is read in place instead, never
                written, and only during the call), or, on a device backend,
                ``PyGpuMatrix`` arrays on the executor's device, used in place without a copy (keep
                training parameters on the device this way).
            convert_to_numpy_ret_vals: return numpy copies instead of device arrays.

        Returns:
            One value per eval node, in order. On a device backend these are ``PyGpuMatrix``
            buffers that belong to the executor: the calling thread's next ``run`` overwrites
            them (copy what you keep, or pass ``convert_to_numpy_ret_vals=True``); a fed device
            array is returned as itself. Feeding a returned array back (``h = ex.run({x: h})[0]``)
            is safe: it is copied in, since the plan may reuse its buffer during the run. The
            numpy backend always returns fresh numpy arrays.

        Threads: several threads may run one executor at once. Each thread has its own plan,
        buffers and compiled step (made on its first run), so no run overwrites another thread's
        values; the shared ``step`` counter gives every training run its own step.

        Raises:
            ValueError: a needed variable is not fed; shapes are incompatible (raised by shape
                inference, before any kernel runs); a device array is on another device.
            TypeError: a feed key is not a node, or a feed is not numeric.
        """
        st = self._state
        feeds, record, same = self._normalise_feeds(st, feed_dict)
        if not same or self.device is None:  # numpy: the run's dtype depends on the feeds' too
            if self.device is None:
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
            if key != st.plan_key:
                # A shape error leaves the previous plan in place (and valid for its feeds).
                self._prepare(st, feeds, dtype)
                st.plan_key = key
                record = None  # checked against the old buffers: check again next run
        st.last_feeds = record

        device = self.device
        training = self.training
        with self._step_lock:  # each training run, from any thread, gets its own step
            step = self.step
            if training:
                self.step += 1
        try:
            if device is not None and self.compiled:
                if st.program_training != training:
                    # Run-state ops trace differently per mode (dropout is a copy when evaluating).
                    st.program, st.compile_reason = None, ""
                    st.program_training = training
                if st.program is not None:
                    vals = self._run_program(st, feeds, step)
                elif not st.compile_reason:
                    vals = self._trace_and_compile(st, feeds, training, step)
                else:
                    vals = self._run_python(st, feeds, training, step)
            else:
                vals = self._run_python(st, feeds, training, step)
        except BaseException:
            with self._step_lock:  # a failed run gives its step back if no run took one since
                if training and self.step == step + 1:
                    self.step = step
            raise

        results = [vals[i] for i in st.plan.eval_index]
        if device is None:
            return [np.array(v, copy=True) for v in results]
        if convert_to_numpy_ret_vals:
            return [v.asnumpy() for v in results]
        return results

    @property
    def schedule_report(self) -> ScheduleReport | None:
        """How runs of the current plan are made (see
        :class:`~gpumat.runtime.compiled.ScheduleReport`); None before the first run."""
        st = self._state
        if st.plan_key is None:
            return None
        n_ops = sum(1 for s in st.plan.steps if s.kind == COMPUTE)
        if self.device is None:
            return ScheduleReport("numpy", n_ops)
        prog = st.program
        if prog is None:
            reason = st.compile_reason or (
                "compiled=False" if not self.compiled else "compiled on the next run"
            )
            return ScheduleReport("python", n_ops, reason=reason)
        graph_reason = prog.graph_status
        if not graph_reason and not self.cuda_graph:
            graph_reason = "cuda_graph=False"
        elif not graph_reason and self.device.device_type == "cpu":
            graph_reason = "no CUDA graphs on cpu"
        mode = "cuda-graph" if prog.mode == "cuda-graph" else "compiled"
        return ScheduleReport(mode, prog.num_steps, prog.graph_nodes, prog.captures, graph_reason)

    def _run_python(self, st, feeds: dict, training: bool, step: int, trace=None) -> list:
        """One run with a Python call per op; ``trace`` (a list being filled by
        ``gpumat.ops.trace_calls``) makes it record each compute step's slice of the calls in
        ``st.segments``."""
        device = self.device
        vals = list(st.template)
        st.segments = []
        for kind, i, node, inputs, extra in st.plan.steps:
            if kind == COMPUTE:
                out = vals[i] if extra is None else (vals[i], *[vals[j] for j in extra])
                first = len(trace) if trace is not None else 0
                if getattr(node.op, "takes_run_state", False):
                    node.op.compute(
                        node, [vals[j] for j in inputs], out, device, training=training, step=step
                    )
                else:
                    node.op.compute(node, [vals[j] for j in inputs], out, device)
                if trace is not None:
                    st.segments.append((node, trace[first:]))
            elif kind == FEED_COPY:
                value = feeds[node][0]
                if device is None:
                    np.copyto(vals[i], value, casting="unsafe")
                else:
                    vals[i].copyfrom(value)  # converts to float32 on the way, no device allocation
            elif kind == FEED_EXTERNAL:
                vals[i] = feeds[node][0]
        return vals

    def _run_program(self, st, feeds: dict, step: int) -> list:
        """One run of the compiled step: feeds copied in, fed device arrays bound, one call."""
        vals = list(st.template)
        for i, node in st.plan.copy_steps:
            vals[i].copyfrom(feeds[node][0])
        inputs = []
        for i, node in st.plan.external_steps:
            vals[i] = feeds[node][0]
            inputs.append(vals[i])
        st.program.run(inputs, step)
        return vals

    def _trace_and_compile(self, st, feeds: dict, training: bool, step: int) -> list:
        """The plan's first run (per mode) on a device: from Python, recording the ops calls,
        then compiled into a NativeProgram for the next runs (or the reason why not)."""
        st.compile_reason = not_compilable_reason(st.plan)
        if st.compile_reason:
            return self._run_python(st, feeds, training, step)
        with contextlib.ExitStack() as stack:
            try:
                trace = stack.enter_context(ops.trace_calls())
            except RuntimeError:  # another thread is tracing: from Python now, compile next run
                return self._run_python(st, feeds, training, step)
            vals = self._run_python(st, feeds, training, step, trace=trace)
        try:
            st.program = build_program(
                self.device, self.cuda_graph, st.plan, st.buffers, vals, st.segments, step
            )
        except NotCompilable as exc:
            st.compile_reason = str(exc)
        finally:
            st.segments = []
        return vals
