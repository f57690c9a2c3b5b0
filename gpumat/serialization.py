"""``gpumat.save`` and ``gpumat.load``: state dicts of tensors in safetensors files.

``gpumat.save(model.state_dict(), path)`` and ``model.load_state_dict(gpumat.load(path))``, as
PyTorch's ``torch.save`` / ``torch.load`` are used, through :mod:`gpumat.checkpoint`: the file is
safetensors (float32 tensors by name), written atomically and verified by SHA-256 when read, so
``safetensors.torch.load_file(path)`` reads what gpumat saves (and gpumat reads what
``safetensors.torch.save_file`` writes). The names and layouts are PyTorch's, so a state dict
saved from a gpumat network loads into the same network written in PyTorch, and back.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from gpumat import checkpoint
from gpumat.devices import as_device
from gpumat.dtypes import float32
from gpumat.tensor import Tensor

__all__ = ["load", "save"]


def _is_path(x) -> bool:
    return isinstance(x, (str, bytes, os.PathLike))


def save(obj, f, metadata: Mapping[str, str] | None = None) -> None:
    """Write a dict of float32 tensors to a safetensors file, atomically.

    Args:
        obj: name -> ``gpumat.Tensor`` (float32, any device: copied to the host), ``PyGpuMatrix``
            or float32 numpy array, e.g. ``model.state_dict()``.
        f: the file path. The older order ``save(path, tensors)`` is accepted too (a mapping is
            never a path).
        metadata: extra str -> str pairs for the file's header (keys starting with "gpumat."
            are reserved).

    Raises:
        TypeError: ``obj`` is not a mapping of tensors (a whole module cannot be saved: save its
            ``state_dict()``), or a tensor is not float32; as for
            :func:`gpumat.checkpoint.save`.
        ValueError, OSError: as for :func:`gpumat.checkpoint.save`.
    """
    if _is_path(obj) and isinstance(f, Mapping):
        obj, f = f, obj
    if not isinstance(obj, Mapping):
        hint = " (save a module's state_dict())" if hasattr(obj, "state_dict") else ""
        raise TypeError(
            f"save: gpumat saves a dict of name -> tensor, got {type(obj).__name__}{hint}"
        )
    if not _is_path(f):
        raise TypeError(f"save: f must be a file path, got {type(f).__name__}")
    tensors = {}
    for name, value in obj.items():
        if isinstance(value, Tensor):
            value._concrete("save")
            if value.dtype is not float32:
                raise TypeError(
                    f"save: tensor {name!r} is {value.dtype}; gpumat checkpoints hold float32 "
                    "tensors (convert with .float())"
                )
            value = value._data
        tensors[name] = value
    checkpoint.save(f, tensors, metadata)


def load(
    f,
    map_location=None,
    expected: Mapping | None = None,
    *,
    weights_only: bool | None = None,
    mmap: bool | None = None,
) -> dict:
    """Read a safetensors file of float32 tensors (gpumat's, or ``safetensors.torch``'s).

    Args:
        f: the file path.
        map_location: the device of the returned tensors: a ``gpumat.Device`` or a name
            (``"cpu"``, ``"cuda"``, ``"emu"``); default the host.
        expected: optional name -> shape (or anything with ``.shape``): the file must hold
            exactly these names and shapes.
        weights_only, mmap: PyTorch's ``torch.load`` flags, accepted so that its calls port
            unchanged: gpumat never unpickles (a checkpoint is tensors only, as with
            ``weights_only=True``) and reads the whole file, whatever their values.

    Returns:
        name -> float32 ``gpumat.Tensor`` on ``map_location``, in name order.

    Raises:
        FileNotFoundError, ValueError, MemoryError: as for :func:`gpumat.checkpoint.load` (a
            truncated, corrupt or non-float32 file is a ValueError naming it).
    """
    del weights_only, mmap  # see the docstring: nothing to choose
    device = as_device(map_location, "load")
    arrays = checkpoint.load(f, device, expected)
    return {name: Tensor._make(a, float32, device) for name, a in arrays.items()}
