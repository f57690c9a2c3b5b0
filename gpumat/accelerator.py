"""PyTorch's ``torch.accelerator`` calls, which pytorch/examples now start with:

```python
device = gpumat.accelerator.current_accelerator() if gpumat.accelerator.is_available() else "cpu"
```

gpumat's accelerator is CUDA: a usable GPU in a build with CUDA. The emulated device
(``gpumat.emu()``) is a checking tool, not an accelerator, so it is never chosen here; name it
explicitly to use it.
"""

from __future__ import annotations

from gpumat import _build_config, cuda
from gpumat.devices import Device

__all__ = [
    "current_accelerator",
    "current_device_index",
    "device_count",
    "is_available",
    "synchronize",
]


def is_available() -> bool:
    """True when a CUDA GPU is usable (:func:`gpumat.cuda.is_available`)."""
    return cuda.is_available()


def current_accelerator(check_available: bool = False) -> Device | None:
    """``cuda:0`` as a :class:`gpumat.Device` (its ``type`` is ``"cuda"``) in a build with CUDA,
    else None; with ``check_available=True`` also None when no GPU is usable."""
    if not _build_config.CUDA or (check_available and not is_available()):
        return None
    return Device("gpu", 0)


def device_count() -> int:
    """The number of usable CUDA GPUs (0 without one)."""
    return cuda.device_count()


def current_device_index() -> int:
    """0: gpumat keeps no current device (each op runs where its tensors live)."""
    return 0


def synchronize(device=None) -> None:
    """Waits for the queued work of GPU ``device`` (default ``cuda:0``); see
    :func:`gpumat.cuda.synchronize`.

    Raises:
        gpumat.CudaError: no such GPU, or an asynchronous fault of its queued work.
    """
    cuda.synchronize(device)
