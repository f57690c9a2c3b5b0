"""CUDA from Python: the ``torch.cuda`` calls PyTorch programs make first, and users' own kernels.

``is_available()`` (a usable CUDA GPU and a build with CUDA), ``device_count()``,
``current_device()`` (0: gpumat runs on the device an array lives on, with no current-device
state), ``synchronize(device=None)`` and ``manual_seed`` / ``manual_seed_all`` (gpumat's one
generator, :func:`gpumat.manual_seed`, seeds every device). The emulated CUDA device
(``gpumat.emu(i)``) is not a CUDA GPU here: ``is_available()`` is false without a real one.

Users' own CUDA C++ kernels, with CuPy's conventions: :class:`RawKernel` and :class:`RawModule`
(compiled by nvcc for a GPU, or by the host compiler against gpumat's emulator for ``emu``, where
every access is checked), :class:`CompileError`, and :class:`Stream` / :func:`current_stream`, the
stream gpumat queues a device's work on (:mod:`gpumat.cuda.kernel`).
"""

from __future__ import annotations

from gpumat import _core
from gpumat.devices import as_device, cuda_available
from gpumat.devices import synchronize as _synchronize
from gpumat.random import manual_seed as _manual_seed

__all__ = [
    "CompileError",
    "RawKernel",
    "RawModule",
    "Stream",
    "current_device",
    "current_stream",
    "device_count",
    "is_available",
    "manual_seed",
    "manual_seed_all",
    "synchronize",
]


def is_available() -> bool:
    """True when gpumat was built with CUDA and at least one CUDA GPU is usable."""
    return cuda_available()


def device_count() -> int:
    """The number of usable CUDA GPUs (0 in a build without CUDA)."""
    return int(_core.cuda_device_count_())


def current_device() -> int:
    """0: gpumat keeps no current device (each op runs where its arrays live)."""
    return 0


def synchronize(device=None) -> None:
    """Waits for the queued work of CUDA device ``device`` (an index, a name such as ``"cuda:1"``
    or a :class:`gpumat.Device`; default ``cuda:0``).

    Raises:
        gpumat.CudaError: no such GPU, or an asynchronous fault of its queued work.
        TypeError / ValueError: a device that is not a CUDA device.
    """
    if device is None or isinstance(device, int) and not isinstance(device, bool):
        device = f"cuda:{device or 0}"
    parsed = as_device(device, "cuda.synchronize")
    if parsed.device_type != "gpu":
        raise ValueError(f"cuda.synchronize: expected a CUDA device, got {parsed}")
    _synchronize(parsed)


def manual_seed(seed: int) -> None:
    """Seeds gpumat's generator (:func:`gpumat.manual_seed`), which every device draws from."""
    _manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    """As :func:`manual_seed`: one generator serves every device."""
    _manual_seed(seed)


from gpumat.cuda.kernel import CompileError, RawKernel, RawModule, Stream, current_stream  # noqa: E402
