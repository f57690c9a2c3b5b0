"""Checkpoints: named arrays in the safetensors format, written atomically, read with checks.

:func:`save` / :func:`load` (also ``gpumat.save`` / ``gpumat.load``) store float32 arrays by name
in a safetensors file (https://github.com/huggingface/safetensors, format: an 8-byte little-endian
header length, a JSON header of names, dtypes, shapes and byte offsets, then the raw data), written
by the ``safetensors`` library, so ``safetensors.torch.load_file`` and
``safetensors.numpy.load_file`` read gpumat's files and gpumat reads theirs.

Saving is atomic: the bytes go to a temporary file in the target's directory, which is flushed and
``os.fsync``-ed, then ``os.replace``-d over the target (an atomic rename on POSIX), and the
directory is fsync-ed so the rename itself survives a power cut. A process killed at any moment
leaves either the old file or the new one, never a mix; at worst a stray ``.NAME.*.tmp`` file.

Loading refuses, with a ValueError naming the file and the problem: a file that is not valid
safetensors (truncated, garbage header), tensors whose SHA-256 differs from the one recorded at
save time (corrupted bytes), dtypes other than float32, and names or shapes that differ from the
expected ones.

:func:`save_training_state` / :func:`load_training_state` add what a resumed training run needs
(used by :func:`gpumat.train.fit`): parameters, the optimizer's state (``state_dict``), and
progress (epoch, step, history, the shuffling generator's state) in the file's metadata.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping

import numpy as np

from gpumat.arrays import array

__all__ = ["FORMAT_VERSION", "load", "load_training_state", "save", "save_training_state"]

#: Written to the metadata as ``gpumat.format``; bumped when the layout of training states changes.
FORMAT_VERSION = "1"

_META_FORMAT = "gpumat.format"
_META_DIGEST = "gpumat.sha256"
_META_TRAINING = "gpumat.training"
_PARAM_PREFIX = "params/"
_OPTIM_PREFIX = "optimizer/"

# Bytes written per write() call. Tests set _after_chunk_written (called with the temporary path
# and the bytes written so far) to stop a save half-way and kill the process.
_CHUNK_BYTES = 1 << 20
_after_chunk_written = None


def _to_numpy(name: str, value) -> np.ndarray:
    if hasattr(value, "asnumpy") and not isinstance(value, np.ndarray):
        return value.asnumpy()
    arr = np.asarray(value)
    if arr.dtype != np.float32:
        raise TypeError(
            f"save: tensor {name!r} has dtype {arr.dtype}; gpumat checkpoints hold float32 "
            "arrays (convert with .astype(numpy.float32))"
        )
    return np.ascontiguousarray(arr)


def _digest(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over every tensor's name, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        arr = arrays[name]
        h.update(name.encode())
        h.update(repr(tuple(arr.shape)).encode())
        h.update(np.ascontiguousarray(arr, dtype=np.float32).tobytes())
    return h.hexdigest()


def _fsync_dir(directory: str) -> None:
    # Makes the rename durable. Some file systems refuse to open or fsync a directory: the rename
    # has happened either way, so that is not an error.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _atomic_write(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would make checkpoints unreadable to others
        with os.fdopen(fd, "wb") as f:
            view = memoryview(data)
            for start in range(0, len(view), _CHUNK_BYTES):
                f.write(view[start : start + _CHUNK_BYTES])
                if _after_chunk_written is not None:
                    f.flush()
                    _after_chunk_written(tmp, min(start + _CHUNK_BYTES, len(view)))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def save(path, tensors: Mapping, metadata: Mapping[str, str] | None = None) -> None:
    """Write float32 arrays to ``path`` in the safetensors format, atomically.

    Args:
        path: the file to write (str or os.PathLike); its directory must exist. An existing file
            is replaced only once the new one is complete and on disk.
        tensors: name (a non-empty str) -> ``PyGpuMatrix`` (copied from its device) or float32
            numpy array, any shape, zero-size included.
        metadata: extra str -> str pairs for the file's header (``safe_open(...).metadata()``);
            keys starting with ``"gpumat."`` are reserved.

    Raises:
        TypeError: a name or metadata entry that is not a str, or a non-float32 numpy array.
        ValueError: an empty name, or a reserved metadata key.
        OSError: the file cannot be written (the old file, if any, is left as it was).
    """
    return _save(path, tensors, metadata, {})


def _save(path, tensors: Mapping, metadata, internal: Mapping[str, str]) -> None:
    from safetensors.numpy import save as st_save

    path = os.fspath(path)
    arrays = {}
    for name, value in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"save: tensor names must be str, got {name!r}")
        if not name:
            raise ValueError("save: a tensor name is empty")
        arrays[name] = _to_numpy(name, value)
    meta = {}
    for key, value in (metadata or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"save: metadata must map str to str, got {key!r}: {value!r}")
        if key.startswith("gpumat."):
            raise ValueError(f"save: metadata key {key!r} is reserved (prefix 'gpumat.')")
        meta[key] = value
    meta.update(internal)
    meta[_META_FORMAT] = FORMAT_VERSION
    meta[_META_DIGEST] = _digest(arrays)
    _atomic_write(path, st_save(arrays, metadata=meta))


def _read(path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """All tensors (numpy) and the metadata of a safetensors file, verified."""
    from safetensors import safe_open

    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"load: no checkpoint file {path!r}")
    try:
        with safe_open(path, framework="numpy") as f:
            meta = dict(f.metadata() or {})
            arrays = {name: f.get_tensor(name) for name in f.keys()}  # noqa: SIM118 (not a dict)
    except Exception as exc:  # safetensors raises its own SafetensorError and others
        raise ValueError(
            f"load: {path!r} is not a valid safetensors file (truncated or corrupt?): {exc}"
        ) from exc
    for name, arr in arrays.items():
        if arr.dtype != np.float32:
            raise ValueError(
                f"load: {path!r}: tensor {name!r} has dtype {arr.dtype}; gpumat arrays are float32"
            )
    recorded = meta.get(_META_DIGEST)
    # A file written by another tool has no digest; safetensors' own header checks still apply.
    if recorded is not None and recorded != _digest(arrays):
        raise ValueError(
            f"load: {path!r} is corrupt: the SHA-256 of its tensors differs from the one "
            "recorded when it was saved"
        )
    return arrays, meta


def _check_expected(path, arrays: Mapping[str, np.ndarray], expected: Mapping, what: str) -> None:
    """ValueError unless ``arrays`` has exactly the names and shapes of ``expected``."""
    want = {
        k: tuple(v) if isinstance(v, (tuple, list)) else tuple(v.shape) for k, v in expected.items()
    }
    missing = [k for k in want if k not in arrays]
    extra = [k for k in arrays if k not in want]
    if missing or extra:
        raise ValueError(
            f"load: {os.fspath(path)!r} does not match the {what}: "
            + "; ".join(
                s
                for s in (
                    f"missing {missing}" if missing else "",
                    f"unexpected {extra}" if extra else "",
                )
                if s
            )
        )
    for k, shape in want.items():
        if tuple(arrays[k].shape) != shape:
            raise ValueError(
                f"load: {os.fspath(path)!r}: tensor {k!r} has shape {tuple(arrays[k].shape)}, "
                f"the {what} expects {shape}"
            )


def load(path, ctx=None, expected: Mapping | None = None) -> dict:
    """Read the float32 arrays of a safetensors file onto a device.

    Args:
        path: a file written by :func:`save`, ``safetensors.torch.save_file`` or
            ``safetensors.numpy.save_file`` (float32 tensors only).
        ctx: the device of the returned arrays, default ``gpumat.cpu()``.
        expected: optional name -> shape (a tuple, or anything with ``.shape``, e.g. the
            model's arrays): the file must hold exactly these names with these shapes.

    Returns:
        name -> new ``PyGpuMatrix`` on ``ctx``, in the file's order.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is truncated, corrupt (its recorded SHA-256 differs), not
            safetensors, holds a non-float32 tensor, or does not match ``expected``; the message
            names the file.
        gpumat.CudaError, MemoryError: as for ``gpumat.array``.
    """
    arrays, _ = _read(path)
    if expected is not None:
        _check_expected(path, arrays, expected, "expected tensors")
    return {name: array(arr, ctx) for name, arr in arrays.items()}


# ------------------------------------------------------------------------------- training states


def save_training_state(path, *, params: Mapping, optimizer, progress: Mapping) -> None:
    """Write a training checkpoint: parameters, optimizer state and progress, atomically.

    Args:
        path: the file (replaced atomically, see :func:`save`).
        params: parameter name -> array (``PyGpuMatrix`` or float32 numpy), stored as
            ``params/<name>``.
        optimizer: an object with ``state_dict()`` (``gpumat.optim.SGD``, ``MomentumSGD``,
            ``Adam``); its tensors are stored as ``optimizer/<key>``, its other entries in the
            metadata.
        progress: JSON-serialisable training progress (epoch, step, history, generator state),
            stored in the metadata.

    Raises:
        TypeError: the optimizer has no ``state_dict``; as for :func:`save`.
    """
    if not hasattr(optimizer, "state_dict"):
        raise TypeError(
            f"save_training_state: the optimizer {type(optimizer).__name__} has no state_dict(), "
            "so its state cannot be saved"
        )
    state = optimizer.state_dict()
    tensors = {_PARAM_PREFIX + k: v for k, v in params.items()}
    tensors.update({_OPTIM_PREFIX + k: v for k, v in state["tensors"].items()})
    training = {
        "progress": dict(progress),
        "optimizer": {k: v for k, v in state.items() if k != "tensors"},
    }
    _save(path, tensors, None, {_META_TRAINING: json.dumps(training)})


def load_training_state(path, expected_params: Mapping | None = None) -> dict:
    """Read a checkpoint written by :func:`save_training_state`.

    Args:
        path: the checkpoint file.
        expected_params: optional parameter name -> shape (or array): the checkpoint's parameters
            must have exactly these names and shapes.

    Returns:
        ``{"params": name -> float32 numpy array, "optimizer": the state_dict (tensors as numpy),
        "progress": the progress mapping}``.

    Raises:
        FileNotFoundError: no such file. ValueError: as for :func:`load`, or the file is not a
        gpumat training checkpoint (no training metadata, or another format version).
    """
    arrays, meta = _read(path)
    if _META_TRAINING not in meta:
        raise ValueError(
            f"load: {os.fspath(path)!r} holds no training state (it was not written by "
            "gpumat.train.fit / save_training_state)"
        )
    if meta.get(_META_FORMAT) != FORMAT_VERSION:
        raise ValueError(
            f"load: {os.fspath(path)!r} has gpumat checkpoint format "
            f"{meta.get(_META_FORMAT)!r}; this gpumat reads {FORMAT_VERSION!r}"
        )
    try:
        training = json.loads(meta[_META_TRAINING])
        progress, opt_state = training["progress"], dict(training["optimizer"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"load: {os.fspath(path)!r}: unreadable training metadata: {exc}") from exc
    params = {k[len(_PARAM_PREFIX) :]: v for k, v in arrays.items() if k.startswith(_PARAM_PREFIX)}
    opt_state["tensors"] = {
        k[len(_OPTIM_PREFIX) :]: v for k, v in arrays.items() if k.startswith(_OPTIM_PREFIX)
    }
    if expected_params is not None:
        _check_expected(path, params, expected_params, "model's parameters")
    return {"params": params, "optimizer": opt_state, "progress": progress}
