"""Device contexts: where an array lives and where an op runs.

``gpumat.cpu()`` is the host device (OpenMP loops, BLAS sgemm); ``gpumat.gpu(i)`` is CUDA device
``i``; ``gpumat.emu(i)`` is the emulated CUDA device: gpumat's CUDA kernel sources compiled for the
CPU and run by its CUDA emulator (always built, no GPU needed; for checking kernels, never for
speed). A context is a small immutable value: creating ``gpu(0)`` never fails, but creating an
array on it raises ``gpumat.CudaError`` when gpumat was built without CUDA or no such GPU exists.
"""

from __future__ import annotations

_KINDS = {"cpu": 0, "gpu": 1, "emu": 2}


class Context:
    """A device: ``device_type`` is ``"cpu"``, ``"gpu"`` or ``"emu"``, ``index`` the device ordinal.

    Contexts compare equal by value and are hashable. The seed assignment called this DLContext.

    Raises:
        ValueError: an unknown device_type or a negative index.
    """

    # NOTE: the kind is stored as _kind and read through the device_type property, so that
    # gpumat.dlsys.ndarray.DLContext can report the seed's integer device types (1 cpu, 2 gpu)
    # while every gpumat layer keeps reading the string.
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
        """``"cpu"`` or ``"gpu"``."""
        return self._kind

    @property
    def device_id(self) -> int:
        """The seed's name for ``index``."""
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
    """The host device. ``index`` is accepted for the seed's ``ndarray.cpu(0)`` and ignored."""
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


def is_gpu_ctx(ctx) -> bool:
    """True if ``ctx`` is a CUDA context (the seed's ``ndarray.is_gpu_ctx``)."""
    return isinstance(ctx, Context) and ctx._kind == "gpu"
