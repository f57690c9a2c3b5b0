"""gpumat: a deep-learning stack you can read end to end, from CUDA kernels to MNIST training.

Layers, bottom up (see docs/ARCHITECTURE.md): libgpumat (C++/CUDA kernels) -> gpumat._core (Cython,
PyGpuMatrix) -> gpumat.ops (one call per kernel) -> gpumat.autodiff / gpumat.executor (graph,
gradients, memory-planned execution) -> gpumat.train, gpumat.models, gpumat.datasets.

Arrays are float32, row-major, contiguous, on ``cpu()`` (the host), ``gpu(i)`` (CUDA) or ``emu(i)``
(the CUDA kernels run by gpumat's CUDA emulator on the CPU, to check them without a GPU).
"""

# NOTE: no `from __future__ import annotations` and private aliases for os and numpy: the
# gpumat namespace exports only gpumat's own names (dir(gpumat) is what a user explores).
import os as _os

import numpy as _np

# NOTE: libgomp reads this when _core loads it. Spinning OpenMP workers fight OpenBLAS's threads and
# any other busy process for the cores: a 1000x256 relu took 6.9 ms spinning and 0.14 ms passive on
# a loaded 2-core machine. An explicit user setting wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# --- gpumat.distributed: one rank per core group -------------------------------------------------
# NOTE: N ranks launched on one node by an MPI launcher would each start one OpenMP/OpenBLAS thread
# per core, N x oversubscribing it (2 ranks on 2 cores: MNIST MLP epoch 2.2 s instead of 0.48 s).
# Like torchrun (which sets OMP_NUM_THREADS=1), give each rank its share of the cores, read before
# _core loads libgomp and OpenBLAS. The local rank count comes from MPICH/Hydra (MPI_LOCALNRANKS) or
# Open MPI (OMPI_COMM_WORLD_LOCAL_SIZE); an explicit OMP_NUM_THREADS wins.
def _threads_per_local_rank() -> int | None:
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):
        try:
            local = int(_os.environ.get(var, ""))
        except ValueError:
            continue
        if local > 1:
            return max(1, (_os.cpu_count() or 1) // local)
    return None


if "OMP_NUM_THREADS" not in _os.environ and _threads_per_local_rank() is not None:
    _os.environ["OMP_NUM_THREADS"] = str(_threads_per_local_rank())
# --------------------------------------------------------------------------------------------------

from . import _core  # noqa: E402
from ._core import CudaError, PyGpuMatrix, _as_float32  # noqa: E402
from .context import Context, cpu, emu, gpu, is_gpu_ctx  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "Context",
    "CudaError",
    "PyGpuMatrix",
    "array",
    "build_info",
    "cpu",
    "cuda_available",
    "empty",
    "empty_cache",
    "emu",
    "from_dlpack",
    "gpu",
    "is_gpu_ctx",
    "launch_count",
    "load",
    "memory_stats",
    "reset_peak_memory_stats",
    "save",
    "synchronize",
]


def _context_of_native(kind: int, index: int) -> Context:
    """The Context of a native (kind, index) device, the inverse of ``Context._native``."""
    from .context import _KINDS

    device_type = next(name for name, k in _KINDS.items() if k == kind)
    return Context(device_type, index if kind != 0 else 0)


def _check_ctx(ctx) -> Context:
    if not isinstance(ctx, Context):
        raise TypeError(
            f"ctx must be a gpumat.Context (gpumat.cpu(), gpumat.gpu(i) or gpumat.emu(i)), "
            f"got {ctx!r}"
        )
    return ctx


def empty(shape, ctx: Context | None = None) -> PyGpuMatrix:
    """A new uninitialised float32 array.

    Args:
        shape: an int or a sequence of ints >= 0 (a 0 dimension gives an empty array).
        ctx: the device, default ``gpumat.cpu()``.

    Raises:
        ValueError: a negative dimension. TypeError: a non-integer dimension or a bad ctx.
        MemoryError: the device is out of memory. gpumat.CudaError: the GPU does not exist.
    """
    ctx = _check_ctx(cpu() if ctx is None else ctx)
    if isinstance(shape, (int, _np.integer)):
        shape = (shape,)
    try:
        dims = tuple(shape)
    except TypeError as exc:
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from exc
    if any(isinstance(d, bool) or not isinstance(d, (int, _np.integer)) for d in dims):
        raise TypeError(f"shape must contain only ints, got {shape!r}")
    dims = tuple(int(d) for d in dims)
    kind, index = ctx._native
    return PyGpuMatrix._empty(dims, ctx, kind, index)


def array(x, ctx: Context | None = None) -> PyGpuMatrix:
    """A new float32 array on ``ctx`` holding a copy of ``x``.

    Args:
        x: a numpy array, a PyGpuMatrix, or anything ``numpy.asarray`` accepts. float64, integer
            and bool data are converted to float32 (float64 values round to nearest); any layout
            (non-contiguous, negative strides) is accepted and copied.
        ctx: the device, default ``gpumat.cpu()``.

    Raises:
        TypeError: complex, object or string data, or a bad ctx.
        MemoryError, gpumat.CudaError: as for :func:`empty`.
    """
    ctx = _check_ctx(cpu() if ctx is None else ctx)
    if isinstance(x, PyGpuMatrix):
        out = empty(x.shape, ctx)
        out._copy_from_array(x)
        return out
    src = _as_float32(x)
    out = empty(src.shape, ctx)
    out._copy_from_numpy(src)
    return out


def cuda_available() -> bool:
    """True when gpumat was built with CUDA and at least one CUDA GPU is usable."""
    return bool(_core.built_with_cuda_() and _core.cuda_device_count_() > 0)


def build_info() -> dict:
    """What this build of gpumat contains.

    Returns a dict: ``version``; ``cuda`` (compiled with CUDA); ``cuda_arch`` (list of compute
    capabilities compiled, e.g. ["75", "90"]); ``cuda_device_count``; ``emu_device_count`` (the
    emulated CUDA devices, always built); ``blas`` (the host BLAS); ``openmp`` (host loops run in
    parallel).
    """
    from . import _build_config

    return {
        "version": __version__,
        "cuda": bool(_core.built_with_cuda_()),
        "cuda_arch": list(_build_config.CUDA_ARCH) if _core.built_with_cuda_() else [],
        "cuda_device_count": int(_core.cuda_device_count_()),
        "emu_device_count": int(_core.emu_device_count_()),
        "blas": _build_config.BLAS,
        "openmp": bool(_build_config.OPENMP),
    }


def memory_stats(ctx: Context | None = None) -> dict:
    """Counters of the caching allocator of ``ctx`` (default cpu()).

    Returns a dict of ints: ``device_malloc_calls`` (cudaMalloc or host allocations made),
    ``device_free_calls``, ``bytes_in_use``, ``peak_bytes_in_use``, ``bytes_reserved`` (in use plus
    cached), ``num_alloc_requests`` (cache hits included). Sizes are in bytes, rounded up to the
    allocator's bins (512 B under 1 MiB, 2 MiB above).

    Raises gpumat.CudaError for an unavailable GPU.
    """
    return _core.memory_stats_(*_check_ctx(cpu() if ctx is None else ctx)._native)


def launch_count(ctx: Context | None = None) -> int:
    """Native op calls that reached ``ctx`` (default cpu()) since the process started (an int).

    Every ``gpumat.ops`` call that passes its checks counts one: one kernel launch on CUDA and the
    emulated device, except the few ops that launch two or three (convolutions, loss means,
    ``softmax_cross_entropy_with_gradient``); one host kernel call on cpu(). A fused op counts
    one. Take the difference of two readings to count a training step's launches.

    Raises gpumat.CudaError for an unavailable GPU.
    """
    return _core.op_count_(*_check_ctx(cpu() if ctx is None else ctx)._native)


def reset_peak_memory_stats(ctx: Context | None = None) -> None:
    """Sets ``peak_bytes_in_use`` of ``ctx`` to the current ``bytes_in_use``."""
    _core.reset_peak_memory_stats_(*_check_ctx(cpu() if ctx is None else ctx)._native)


def empty_cache(ctx: Context | None = None) -> None:
    """Returns every cached (free) block of ``ctx`` to the device; arrays in use are untouched."""
    _core.empty_cache_(*_check_ctx(cpu() if ctx is None else ctx)._native)


def synchronize(ctx: Context | None = None) -> None:
    """Waits for all queued work on ``ctx``; raises gpumat.CudaError for an asynchronous fault."""
    _core.synchronize_(*_check_ctx(cpu() if ctx is None else ctx)._native)


from . import gpu_op, ops  # noqa: E402, F401  (they need the names above)

# ---- interop and checkpoints (DLPack: gpumat/dlpack.py; safetensors: gpumat/checkpoint.py)
from .checkpoint import load, save  # noqa: E402
from .dlpack import from_dlpack  # noqa: E402

_core._context_of = _context_of_native
# ---- end interop and checkpoints
