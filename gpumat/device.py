"""Devices: where an array lives and where an op runs, and what each device reports.

``gpumat.cpu()`` is the host device (OpenMP loops, BLAS sgemm); ``gpumat.gpu(i)`` is CUDA device
``i``; ``gpumat.emu(i)`` is the emulated CUDA device: gpumat's CUDA kernel sources compiled for the
CPU and run by its CUDA emulator (always built, no GPU needed; for checking kernels, never for
speed). A context is a small immutable value: creating ``gpu(0)`` never fails, but creating an
array on it raises ``gpumat.CudaError`` when gpumat was built without CUDA or no such GPU exists.

The device functions (:func:`memory_stats`, :func:`launch_count`, :func:`synchronize`, ...) take a
context (default ``cpu()``) and report on, or act on, that device's allocator and stream.
"""

from __future__ import annotations

from gpumat import _build_config, _core  # _build_config: written by setup.py

__all__ = [
    "Context",
    "as_device",
    "build_info",
    "check_ctx",
    "cpu",
    "cuda_available",
    "emu",
    "empty_cache",
    "gpu",
    "is_gpu_ctx",
    "launch_count",
    "memory_stats",
    "reset_peak_memory_stats",
    "synchronize",
]

__version__ = "0.1.0"

_KINDS = {"cpu": 0, "gpu": 1, "emu": 2}


class Context:
    """A device: ``device_type`` is ``"cpu"``, ``"gpu"`` or ``"emu"``, ``index`` the device ordinal.

    Contexts compare equal by value and are hashable. The dlsys course calls this DLContext.

    Raises:
        ValueError: an unknown device_type or a negative index.
    """

    # NOTE: the kind is stored as _kind and read through the device_type property, so that
    # gpumat.dlsys.ndarray.DLContext can report the dlsys course's integer device types (1 cpu,
    # 2 gpu) while every gpumat layer keeps reading the string.
    __slots__ = ("_kind", "index")

    def __init__(self, device_type: str, index: int = 0):
        if device_type not in _KINDS:
            raise ValueError(f"device_type must be 'cpu', 'gpu' or 'emu', got {device_type!r}")
        index = int(index)
        if index < 0:
            raise ValueError(f"device index must be >= 0, got {index}")
        object.__setattr__(self, "_kind", device_type)
        object.__setattr__(self, "index", index)

    def __setattr__(self, name, value):
        raise AttributeError("Context is immutable")

    @property
    def device_type(self) -> str:
        """``"cpu"``, ``"gpu"`` or ``"emu"``."""
        return self._kind

    @property
    def device_id(self) -> int:
        """The dlsys course's name for ``index``."""
        return self.index

    @property
    def _native(self) -> tuple[int, int]:
        # (kind, index) as gpumat._core takes it
        return _KINDS[self._kind], (0 if self._kind == "cpu" else self.index)

    def __eq__(self, other):
        return (
            isinstance(other, Context) and self._kind == other._kind and self.index == other.index
        )

    def __hash__(self):
        return hash((self._kind, self.index))

    def __repr__(self):
        return f"{self._kind}({self.index})"


def cpu(index: int = 0) -> Context:
    """The host device. ``index`` is accepted (for the dlsys course's ``ndarray.cpu(0)``) and
    ignored."""
    return Context("cpu", 0)


def gpu(index: int = 0) -> Context:
    """CUDA device ``index`` (arrays on it raise gpumat.CudaError if it does not exist)."""
    return Context("gpu", index)


def emu(index: int = 0) -> Context:
    """Emulated CUDA device ``index``: the CUDA kernels run on the CPU by gpumat's CUDA emulator.

    A correctness tool: each CUDA thread is a fiber scheduled in a seeded random order between
    barriers (``GPUMAT_EMU_SEED``), so races and missing ``__syncthreads()`` give wrong answers.
    Slow by design; its timings say nothing about a GPU. ``GPUMAT_EMU_DEVICES`` (default 1) sets
    how many exist; arrays on a missing one raise ``gpumat.CudaError``.
    """
    return Context("emu", index)


_DEVICE_KINDS = {"cpu": "cpu", "cuda": "gpu", "gpu": "gpu", "emu": "emu"}


def as_device(device, op: str = "device", *, numpy: bool = False) -> Context | None:
    """A :class:`Context` from a context or a name, the one device parser of gpumat: ``"cpu"``,
    ``"cuda"``, ``"cuda:1"``, ``"gpu"``, ``"gpu:1"``, ``"emu"``, ``"emu:0"`` (``"cuda"`` and
    ``"gpu"`` are CUDA device 0; names are case-insensitive), or ``"auto"`` (``gpu(0)`` when
    :func:`cuda_available`, else ``cpu()``). None is the host, ``cpu()``.

    With ``numpy=True`` (the graph executor's backends, :func:`gpumat.train.get_context`), None
    and ``"numpy"`` are the numpy backend, returned as None.

    Raises:
        TypeError: not a context, a string or None. ValueError: an unknown device name, naming
            ``op``.
    """
    if device is None:
        return None if numpy else Context("cpu", 0)
    if isinstance(device, Context):
        return device
    if not isinstance(device, str):
        raise TypeError(
            f"{op}: device must be a gpumat.Context or a name such as 'cpu', 'cuda', 'emu', got "
            f"{device!r}"
        )
    name = device.strip().lower()
    if numpy and name == "numpy":
        return None
    if name == "auto":
        return gpu(0) if cuda_available() else cpu()
    kind, sep, index = name.partition(":")
    kind = _DEVICE_KINDS.get(kind)
    if kind is None or (sep and not index.isdigit()) or (kind == "cpu" and index not in "0"):
        names = "'numpy', " if numpy else ""
        raise ValueError(
            f"{op}: unknown device {device!r}; use {names}'cpu', 'cuda', 'cuda:N', 'gpu:N', "
            "'emu', 'emu:N' or 'auto', or gpumat.cpu(), gpumat.gpu(i), gpumat.emu(i)"
        )
    return Context(kind, int(index) if index else 0)


def is_gpu_ctx(ctx) -> bool:
    """True if ``ctx`` is a CUDA context (the dlsys course's ``ndarray.is_gpu_ctx``)."""
    return isinstance(ctx, Context) and ctx._kind == "gpu"


def _context_of_native(kind: int, index: int) -> Context:
    """The Context of a native (kind, index) device, the inverse of ``Context._native``."""
    device_type = next(name for name, k in _KINDS.items() if k == kind)
    return Context(device_type, index if kind != 0 else 0)


# PyGpuMatrix.ctx builds its Context through this hook (the native layer knows no Python classes).
_core._context_of = _context_of_native


def check_ctx(ctx, default_cpu: bool = True) -> Context:
    """``ctx``, or ``cpu()`` when it is None and ``default_cpu``; TypeError for anything else.

    Raises:
        TypeError: ``ctx`` is not a Context (e.g. the string ``"gpu"``), naming what it was.
    """
    if ctx is None and default_cpu:
        return cpu()
    if not isinstance(ctx, Context):
        raise TypeError(
            f"ctx must be a gpumat.Context (gpumat.cpu(), gpumat.gpu(i) or gpumat.emu(i)), "
            f"got {ctx!r}"
        )
    return ctx


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

    Raises TypeError for a ctx that is not a Context, gpumat.CudaError for an unavailable GPU.
    """
    return _core.memory_stats_(*check_ctx(ctx)._native)


def launch_count(ctx: Context | None = None) -> int:
    """Native op calls that reached ``ctx`` (default cpu()) since the process started (an int).

    Every ``gpumat.ops`` call that passes its checks counts one: one kernel launch on CUDA and the
    emulated device, except the few ops that launch two or three (convolutions, loss means,
    ``cross_entropy_with_gradient``); one host kernel call on cpu(). A fused op counts
    one. Take the difference of two readings to count a training step's launches.

    Raises TypeError for a ctx that is not a Context, gpumat.CudaError for an unavailable GPU.
    """
    return _core.op_count_(*check_ctx(ctx)._native)


def reset_peak_memory_stats(ctx: Context | None = None) -> None:
    """Sets ``peak_bytes_in_use`` of ``ctx`` (default cpu()) to the current ``bytes_in_use``."""
    _core.reset_peak_memory_stats_(*check_ctx(ctx)._native)


def empty_cache(ctx: Context | None = None) -> None:
    """Returns every cached (free) block of ``ctx`` to the device; arrays in use are untouched."""
    _core.empty_cache_(*check_ctx(ctx)._native)


def synchronize(ctx: Context | None = None) -> None:
    """Waits for all queued work on ``ctx``; raises gpumat.CudaError for an asynchronous fault."""
    _core.synchronize_(*check_ctx(ctx)._native)
