"""Devices: where an array lives and where an op runs, and what each device reports.

``gpumat.cpu()`` is the host device (parallel loops on gpumat's thread pool, BLAS sgemm);
``gpumat.gpu(i)`` is CUDA device ``i``; ``gpumat.emu(i)`` is the emulated CUDA device: gpumat's CUDA
kernel sources compiled for the CPU and run by its CUDA emulator (always built, no GPU needed; for
checking kernels, never for speed). A device is a small immutable value: creating ``gpu(0)`` never
fails, but creating an array on it raises ``gpumat.CudaError`` when gpumat was built without CUDA or
no such GPU exists.

The device functions (:func:`memory_stats`, :func:`launch_count`, :func:`synchronize`, ...) take a
device (default ``cpu()``) and report on, or act on, that device's allocator and stream.

``gpumat.device`` is :class:`Device` itself, as ``torch.device`` is a class:
``gpumat.device("cuda:0")`` makes one and ``isinstance(x, gpumat.device)`` tests for one (this
module is ``gpumat.devices``).
"""

from __future__ import annotations

from gpumat import _build_config, _core  # _build_config: written by setup.py
from gpumat._checks import as_int

__all__ = [
    "Device",
    "as_device",
    "build_info",
    "check_device",
    "cpu",
    "cuda_available",
    "emu",
    "empty_cache",
    "get_num_threads",
    "gpu",
    "is_gpu_device",
    "launch_count",
    "memory_stats",
    "reset_peak_memory_stats",
    "set_num_threads",
    "synchronize",
    "use_deterministic_algorithms",
    "are_deterministic_algorithms_enabled",
    "is_deterministic_algorithms_warn_only_enabled",
]

__version__ = "0.1.0"

_KINDS = {"cpu": 0, "gpu": 1, "emu": 2}


class Device:
    """A device: ``device_type`` is ``"cpu"``, ``"gpu"`` or ``"emu"``, ``index`` the device ordinal.

    Also built as PyTorch builds ``torch.device``: ``Device("cuda:1")``, ``Device("cuda", 1)``,
    ``Device("cpu")``, ``Device("emu:0")`` (``"cuda"`` is ``"gpu"``; names are case-insensitive;
    a Device is returned as an equal one). Devices compare equal by value and are hashable;
    ``type`` is PyTorch's name of the kind. The dlsys course calls this DLContext.

    Raises:
        ValueError: an unknown device type or name, an index given twice, a negative index.
        TypeError: a device type that is neither a string nor a Device.
    """

    # NOTE: the kind is stored as _kind and read through the device_type property, so that
    # gpumat.dlsys.ndarray.DLContext can report the dlsys course's integer device types (1 cpu,
    # 2 gpu) while every gpumat layer keeps reading the string.
    __slots__ = ("_kind", "index", "_native")

    def __init__(self, device_type, index: int | None = None):
        if isinstance(device_type, Device):
            device_type, index = _index_once(device_type._kind, device_type.index, index)
        elif isinstance(device_type, str) and device_type not in _KINDS:
            kind, sep, number = device_type.strip().lower().partition(":")
            bad_cpu = kind == "cpu" and number not in ("", "0")
            if kind not in _DEVICE_KINDS or (sep and not number.isdigit()) or bad_cpu:
                raise ValueError(
                    f"unknown device {device_type!r}; use 'cpu', 'cuda', 'cuda:N', 'gpu:N', "
                    "'emu' or 'emu:N'"
                )
            device_type, index = _index_once(
                _DEVICE_KINDS[kind], int(number) if sep else None, index
            )
        elif not isinstance(device_type, str):
            raise TypeError(f"device type must be a string or a Device, got {device_type!r}")
        index = 0 if index is None else int(index)
        if index < 0:
            raise ValueError(f"device index must be >= 0, got {index}")
        object.__setattr__(self, "_kind", device_type)
        object.__setattr__(self, "index", index)
        # (kind, index) as gpumat._core takes it: read by every eager op's allocation
        native = (_KINDS[device_type], 0 if device_type == "cpu" else index)
        object.__setattr__(self, "_native", native)

    def __setattr__(self, name, value):
        raise AttributeError("Device is immutable")

    @property
    def device_type(self) -> str:
        """``"cpu"``, ``"gpu"`` or ``"emu"``."""
        return self._kind

    @property
    def type(self) -> str:
        """PyTorch's ``device.type``: ``"cuda"`` for a GPU, else ``"cpu"`` or ``"emu"``."""
        return "cuda" if self._kind == "gpu" else self._kind

    @property
    def device_id(self) -> int:
        """The dlsys course's name for ``index``."""
        return self.index

    def __eq__(self, other):
        return isinstance(other, Device) and self._kind == other._kind and self.index == other.index

    def __hash__(self):
        return hash((self._kind, self.index))

    def __reduce__(self):
        # pickle and copy rebuild through the constructor: its slots cannot be set afterwards
        return (Device, (self._kind, self.index))

    def __repr__(self):
        return f"{self._kind}({self.index})"


def _index_once(kind: str, parsed: int | None, given: int | None) -> tuple[str, int | None]:
    """(kind, index) from a name's index and an explicit one, which may not both be given."""
    if parsed is not None and given is not None:
        raise ValueError(f"device index given twice: {parsed} in the name and {given}")
    return kind, given if parsed is None else parsed


# One Device object per device from cpu(), gpu(i) and emu(i): every eager op compares its inputs'
# devices, and ``is`` answers where __eq__ (a Python call) would otherwise run. Devices are
# immutable, so sharing one is safe; other equal Device objects still compare equal.
_CPU = Device("cpu", 0)
_CANONICAL: dict = {}


def _canonical(kind: str, index) -> Device:
    device = _CANONICAL.get((kind, index))
    if device is None:
        device = Device(kind, index)  # checks the index
        if type(index) is int and len(_CANONICAL) < 1024:
            _CANONICAL[(kind, index)] = device
    return device


def cpu(index: int = 0) -> Device:
    """The host device. ``index`` is accepted (for the dlsys course's ``ndarray.cpu(0)``) and
    ignored."""
    return _CPU


def gpu(index: int = 0) -> Device:
    """CUDA device ``index`` (arrays on it raise gpumat.CudaError if it does not exist)."""
    return _canonical("gpu", index)


def emu(index: int = 0) -> Device:
    """Emulated CUDA device ``index``: the CUDA kernels run on the CPU by gpumat's CUDA emulator.

    A correctness tool: each CUDA thread is a fiber scheduled in a seeded random order between
    barriers (``GPUMAT_EMU_SEED``), so races and missing ``__syncthreads()`` give wrong answers.
    Slow by design; its timings say nothing about a GPU. ``GPUMAT_EMU_DEVICES`` (default 1) sets
    how many exist; arrays on a missing one raise ``gpumat.CudaError``.
    """
    return _canonical("emu", index)


_DEVICE_KINDS = {"cpu": "cpu", "cuda": "gpu", "gpu": "gpu", "emu": "emu"}


def as_device(device, op: str = "device", *, numpy: bool = False) -> Device | None:
    """A :class:`Device` from a device or a name, the one device parser of gpumat: ``"cpu"``,
    ``"cuda"``, ``"cuda:1"``, ``"gpu"``, ``"gpu:1"``, ``"emu"``, ``"emu:0"`` (``"cuda"`` and
    ``"gpu"`` are CUDA device 0; names are case-insensitive), or ``"auto"`` (``gpu(0)`` when
    :func:`cuda_available`, else ``cpu()``). None is the host, ``cpu()``.

    With ``numpy=True`` (the graph executor's backends, :func:`gpumat.train.get_device`), None
    and ``"numpy"`` are the numpy backend, returned as None.

    Raises:
        TypeError: not a device, a string or None. ValueError: an unknown device name, naming
            ``op``.
    """
    if device is None:
        return None if numpy else _CPU
    if isinstance(device, Device):
        return device
    if not isinstance(device, str):
        raise TypeError(
            f"{op}: device must be a gpumat.Device or a name such as 'cpu', 'cuda', 'emu', got "
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
    return Device(kind, int(index) if index else 0)


def is_gpu_device(device) -> bool:
    """True if ``device`` is a CUDA device (the dlsys course's ``ndarray.is_gpu_device``)."""
    return isinstance(device, Device) and device._kind == "gpu"


def _device_of_native(kind: int, index: int) -> Device:
    """The Device of a native (kind, index) device, the inverse of ``Device._native``."""
    device_type = next(name for name, k in _KINDS.items() if k == kind)
    return Device(device_type, index if kind != 0 else 0)


# PyGpuMatrix.device builds its Device through this hook (the native layer knows no Python classes).
_core._device_from_native = _device_of_native


def check_device(device, default_cpu: bool = True) -> Device:
    """``device``, or ``cpu()`` when it is None and ``default_cpu``; TypeError for anything else.

    Raises:
        TypeError: ``device`` is not a Device (e.g. the string ``"gpu"``), naming what it was.
    """
    if device is None and default_cpu:
        return cpu()
    if not isinstance(device, Device):
        raise TypeError(
            f"device must be a gpumat.Device (gpumat.cpu(), gpumat.gpu(i) or gpumat.emu(i)), "
            f"got {device!r}"
        )
    return device


def cuda_available() -> bool:
    """True when gpumat was built with CUDA and at least one CUDA GPU is usable."""
    return bool(_core.built_with_cuda_() and _core.cuda_device_count_() > 0)


def build_info() -> dict:
    """What this build of gpumat contains.

    Returns a dict: ``version``; ``cuda`` (compiled with CUDA); ``cuda_arch`` (list of compute
    capabilities compiled, e.g. ["75", "90"]); ``cuda_device_count``; ``emu_device_count`` (the
    emulated CUDA devices, always built); ``blas`` (the host BLAS in use: oneDNN's sgemm when the
    onednn-cpu-gomp wheel is installed, else OpenBLAS; ``GPUMAT_BLAS`` chooses, see
    ``gpumat._host_blas``); ``openmp`` (built with OpenMP: the emulated device runs its blocks
    in parallel; the host kernels run on gpumat's own thread pool either way).
    """
    return {
        "version": __version__,
        "cuda": bool(_core.built_with_cuda_()),
        "cuda_arch": list(_build_config.CUDA_ARCH) if _core.built_with_cuda_() else [],
        "cuda_device_count": int(_core.cuda_device_count_()),
        "emu_device_count": int(_core.emu_device_count_()),
        "blas": _core.host_blas_(),
        "openmp": bool(_build_config.OPENMP),
    }


def memory_stats(device: Device | None = None) -> dict:
    """Counters of the caching allocator of ``device`` (default cpu()).

    Returns a dict of ints: ``device_malloc_calls`` (cudaMalloc or host allocations made),
    ``device_free_calls``, ``bytes_in_use``, ``peak_bytes_in_use``, ``bytes_reserved`` (in use plus
    cached), ``num_alloc_requests`` (cache hits included). Sizes are in bytes, rounded up to the
    allocator's bins (512 B under 1 MiB, 2 MiB above).

    Raises TypeError for a device that is not a Device, gpumat.CudaError for an unavailable GPU.
    """
    return _core.memory_stats_(*check_device(device)._native)


def launch_count(device: Device | None = None) -> int:
    """Native op calls that reached ``device`` (default cpu()) since the process started (an int).

    Every ``gpumat.ops`` call that passes its checks counts one: one kernel launch on CUDA and the
    emulated device, except the few ops that launch two or three (convolutions, loss means,
    ``cross_entropy_with_gradient``); one host kernel call on cpu(). A fused op counts
    one. Take the difference of two readings to count a training step's launches.

    Raises TypeError for a device that is not a Device, gpumat.CudaError for an unavailable GPU.
    """
    return _core.op_count_(*check_device(device)._native)


def get_num_threads() -> int:
    """The threads gpumat's host kernels use (an int >= 1): every parallel loop of the cpu()
    device (run on gpumat's own thread pool, not OpenMP's), matrix products included (the BLAS
    runs single-threaded on pieces of each product that these threads share out),
    ``torch.get_num_threads``'s counterpart.

    It starts at OpenMP's default, ``OMP_NUM_THREADS`` when set, else the machine's cores, until
    :func:`set_num_threads` changes it. With
    ``GPUMAT_DYNAMIC_THREADS=1`` in the environment it is a maximum: each loop and matrix product
    then uses at most the cores that other processes leave free (Linux's ``/proc/stat``, sampled
    every 50 ms; a parallel loop waits for its slowest thread, and a thread sharing its core with a
    busy process is slow). Results are the same bits whatever the count: products are cut into
    pieces by their shape and the machine's CPU count, and sums add fixed blocks in order.
    """
    return _core.get_num_threads_()


def set_num_threads(n: int) -> None:
    """Sets the threads of gpumat's host kernels to ``n``: every parallel loop of the cpu() device,
    matrix products included, process-wide, for calls from any Python thread (PyTorch's
    ``torch.set_num_threads``). The CUDA and emulated devices are not affected (the emulator runs
    its blocks on OpenMP's default team, ``OMP_NUM_THREADS``). Results do not depend on it: they
    are the same bits on any count (see :func:`get_num_threads`).

    Raises TypeError when ``n`` is not an int (a bool is refused), ValueError when it is below 1
    or above 2**31 - 1.
    """
    n = as_int(n, "n", "set_num_threads")
    if not 1 <= n <= 2**31 - 1:
        raise ValueError(f"set_num_threads: n must be at least 1 (and below 2**31), got {n}")
    _core.set_num_threads_(n)


_deterministic_warn_only = False


def use_deterministic_algorithms(mode: bool, *, warn_only: bool = False) -> None:
    """Makes every op give the same bits on every run (``mode=True``) or lets ops take a faster
    nondeterministic kernel (``False``, the default): PyTorch's
    ``torch.use_deterministic_algorithms``. Process-wide, for calls from any Python thread; each op
    call reads it, and a compiled step's CUDA graph keeps the kernels it captured.

    One op differs today: the gradient of fused attention
    (``F.scaled_dot_product_attention``, ``ops.attention_gradient``) on CUDA devices. Its fast path
    (FlashAttention-2's backward, Dao 2023) computes each tile's scores once for dq, dk and dv and
    adds dq's per-key-tile sums with float atomics, whose order varies between runs (a difference
    in the last bits); the deterministic path computes dq in a second kernel, each element with one
    writer, for about 40% more arithmetic. Host kernels are deterministic either way.

    ``warn_only`` is PyTorch's: there it makes an op that has no deterministic implementation warn
    instead of raise. Every gpumat op has one, so nothing warns or raises either way; the setting
    is kept for :func:`is_deterministic_algorithms_warn_only_enabled`.

    Raises TypeError when ``mode`` or ``warn_only`` is not a bool.
    """
    global _deterministic_warn_only
    for name, value in (("mode", mode), ("warn_only", warn_only)):
        if not isinstance(value, bool):
            got = type(value).__name__
            raise TypeError(f"use_deterministic_algorithms: {name} must be a bool, got {got}")
    _core.use_deterministic_algorithms_(mode)
    _deterministic_warn_only = warn_only


def are_deterministic_algorithms_enabled() -> bool:
    """Whether :func:`use_deterministic_algorithms` is on (PyTorch's
    ``torch.are_deterministic_algorithms_enabled``): False unless set."""
    return bool(_core.are_deterministic_algorithms_enabled_())


def is_deterministic_algorithms_warn_only_enabled() -> bool:
    """The ``warn_only`` of the last :func:`use_deterministic_algorithms` call (PyTorch's
    ``torch.is_deterministic_algorithms_warn_only_enabled``): False unless set."""
    return _deterministic_warn_only


def reset_peak_memory_stats(device: Device | None = None) -> None:
    """Sets ``peak_bytes_in_use`` of ``device`` (default cpu()) to the current ``bytes_in_use``."""
    _core.reset_peak_memory_stats_(*check_device(device)._native)


def empty_cache(device: Device | None = None) -> None:
    """Returns every cached (free) block of ``device`` to the device; arrays in use are
    untouched."""
    _core.empty_cache_(*check_device(device)._native)


def synchronize(device: Device | None = None) -> None:
    """Waits for all queued work on ``device``; raises gpumat.CudaError for an asynchronous
    fault."""
    _core.synchronize_(*check_device(device)._native)
