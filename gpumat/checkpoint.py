"""Checkpoints: named arrays in the safetensors format, written atomically, read with checks.

:func:`save` / :func:`load` (also ``gpumat.save`` / ``gpumat.load``) store float32 arrays by name
in a safetensors file (https://github.com/huggingface/safetensors, format: an 8-byte little-endian
header length, a JSON header of names, dtypes, shapes and byte offsets, then the raw data), written
by the ``safetensors`` library, so ``safetensors.torch.load_file`` and
``safetensors.numpy.load_file`` read gpumat's files and gpumat reads theirs.

Saving is atomic: the bytes go to a temporary file in the target's directory, which is flushed and
``os.fsync``-ed, then ``os.replace``-d over the target (an atomic rename on POSIX), and the
directory is fsync-ed so the rename itself survives a power cut. A process killed at any moment
leaves either the old file or the new one, never a mix; at worst its temporary file,
``.NAME.gpumat-save.HOST.PID.XXXXXXXX.tmp`` (the saving machine's name and process id). Every
save removes the temporary files in its folder that a process of this machine left when it died
(their PID no longer exists), so killed saves do not pile up; files of live processes, of other
machines (a shared folder) and of a PID that has since been reused are left alone.

Loading reads the whole file into memory with ordinary reads (no memory map, so another process
truncating the file meanwhile cannot kill the loader with SIGBUS: the loader sees the short read
and raises ValueError), checks it and parses it from memory. It refuses, with a ValueError naming
the file and the problem: a file that is not valid safetensors (truncated, garbage header, holes or
overlaps in the data), tensors whose SHA-256 differs from the one recorded at save time (corrupted
bytes), dtypes other than float32, and names or shapes that differ from the expected ones; a file
too large for the memory left is a MemoryError.

:func:`save_training_state` / :func:`load_training_state` add what a resumed training run needs
(used by :func:`gpumat.train.fit`): parameters, the optimizer's state (``state_dict``), and
progress (epoch, step, history, the shuffling generator's state) in the file's metadata. The
SHA-256 covers the tensors, not the metadata, so the metadata is checked field by field (types and
ranges) when it is read, before any caller state changes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import socket
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

# Bytes written per write() call and read per read() call. Tests set _after_chunk_written (called
# with the temporary path and the bytes written so far) to stop a save half-way and kill the
# process, and _after_chunk_read (the path and the bytes read so far) to change a file mid-load.
_CHUNK_BYTES = 1 << 20
_after_chunk_written = None
_after_chunk_read = None

# Temporary files of a save: ".<target name>.gpumat-save.<host>.<pid>.<random>.tmp".
_TMP_MARK = ".gpumat-save."
_TMP_PATTERN = re.compile(r"^\..+\.gpumat-save\.([A-Za-z0-9-]+)\.([0-9]+)\.[^.]+\.tmp$")

# safetensors' own limit on the JSON header (MAX_HEADER_SIZE in its Rust reader).
_MAX_HEADER_BYTES = 100_000_000
# Integers in the training metadata (epochs, steps, Adam's t) stay within what every JSON reader
# holds exactly, 2**53, so no later conversion to a C int64 can overflow.
_MAX_COUNT = 2**53
# numpy's names of the safetensors dtypes, for the "has dtype ..." error.
_DTYPE_NAMES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U64": "uint64",
    "U32": "uint32",
    "U16": "uint16",
    "U8": "uint8",
    "BOOL": "bool",
}


def _to_numpy(name: str, value) -> np.ndarray:
    if hasattr(value, "asnumpy") and not isinstance(value, np.ndarray):
        return value.asnumpy()
    arr = np.asarray(value)
    if arr.dtype != np.float32:
        raise TypeError(
            f"save: tensor {name!r} has dtype {arr.dtype}; gpumat checkpoints hold float32 "
            "arrays (convert with .astype(numpy.float32))"
        )
    # NOTE: not np.ascontiguousarray, which makes a 0-d array 1-d.
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def _digest(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over every tensor's name, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        arr = arrays[name]
        h.update(name.encode())
        h.update(repr(tuple(arr.shape)).encode())
        # The array's own buffer (no copy): a checkpoint may be as large as the memory left.
        h.update(np.ascontiguousarray(arr, dtype=np.float32).reshape(-1).data)
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


def _host_tag() -> str:
    """This machine's name as it appears in temporary file names (letters, digits and '-')."""
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())[:64] or "host"


def _process_is_dead(pid: int) -> bool:
    """True only when no process with this id exists on this machine (signal 0 says so)."""
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: alive, another user's
        return False
    return False


def _remove_stale_temporaries(directory: str) -> None:
    """Delete the temporary files that saves of dead processes of this machine left in directory.

    Never raises: a file that cannot be listed or removed is left for the next save.
    """
    host = _host_tag()
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if _TMP_MARK not in name:
            continue
        match = _TMP_PATTERN.match(name)
        if match is None or match.group(1) != host or not _process_is_dead(int(match.group(2))):
            continue
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, name))


def _atomic_write(path: str, data: bytes) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    _remove_stale_temporaries(directory)
    prefix = f".{os.path.basename(path)}{_TMP_MARK}{_host_tag()}.{os.getpid()}."
    try:
        fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=directory)
    except OSError as exc:
        # mkstemp's message names the temporary file; the caller asked for path.
        reason = "its folder does not exist" if exc.errno == errno.ENOENT else exc.strerror
        raise type(exc)(exc.errno, f"save: cannot write {path!r}: {reason}", path) from None
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
            is replaced only once the new one is complete and on disk. The temporary files that
            killed saves of this machine left in that directory (their process is gone) are
            removed first (see the module's docstring).
        tensors: name (a non-empty str) -> ``PyGpuMatrix`` (copied from its device) or float32
            numpy array, any shape, zero-size included.
        metadata: extra str -> str pairs for the file's header (``safe_open(...).metadata()``);
            keys starting with ``"gpumat."`` are reserved.

    Raises:
        TypeError: a name or metadata entry that is not a str, or a non-float32 numpy array.
        ValueError: an empty name, the name ``"__metadata__"`` (safetensors' header key), or a
            reserved metadata key; the file is then left as it was.
        OSError: the file cannot be written (the old file, if any, is left as it was); a
            missing directory is a FileNotFoundError naming ``path``.
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
        if name == "__metadata__":  # the header's own key in the safetensors format
            raise ValueError(
                "save: a tensor cannot be named '__metadata__' (safetensors reserves it for the "
                "file's metadata); nothing was written"
            )
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


def _read_bytes(path: str) -> bytearray:
    """The whole file, read (not mapped) into one buffer; the file must not change meanwhile."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"load: no checkpoint file {path!r}")
    try:
        f = open(path, "rb")  # noqa: SIM115 (closed below; the error message needs the path)
    except FileNotFoundError:
        raise FileNotFoundError(f"load: no checkpoint file {path!r}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        try:
            buf = bytearray(size)
        except MemoryError:
            raise MemoryError(
                f"load: cannot allocate {size} bytes to read {path!r} (not enough memory)"
            ) from None
        done = 0
        with memoryview(buf) as view:
            while done < size:
                n = f.readinto(view[done : done + _CHUNK_BYTES])
                if not n:
                    break
                done += n
                if _after_chunk_read is not None:
                    _after_chunk_read(path, done)
        if done != size or f.read(1):
            now = os.fstat(f.fileno()).st_size
            raise ValueError(
                f"load: {path!r} changed while it was being read ({size} bytes when opened, "
                f"{now} now): another process is writing or truncating it; load it again when "
                "that is done"
            )
    return buf


def _no_duplicate_keys(pairs: list) -> dict:
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r} in the header")
        out[key] = value
    return out


def _is_count(value) -> bool:
    return type(value) is int and value >= 0


def _parse(path: str, buf: bytearray) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Tensors and metadata of a safetensors file held in ``buf``, checked as its reader does.

    The format (https://github.com/huggingface/safetensors): an 8-byte little-endian header length
    N (at most 100 MB), N bytes of a JSON object mapping each tensor name to its ``dtype``,
    ``shape`` and ``data_offsets`` [begin, end) in the data that follows (plus an optional
    ``__metadata__`` str -> str map), then the data, which the tensors must cover exactly, without
    holes or overlaps. The arrays returned are views into ``buf`` (no copy).
    """

    def invalid(why: str) -> ValueError:
        return ValueError(
            f"load: {path!r} is not a valid safetensors file (truncated or corrupt?): {why}"
        )

    if len(buf) < 8:
        raise invalid(f"{len(buf)} bytes, shorter than the 8-byte header length")
    n = int.from_bytes(buf[:8], "little")
    if n > _MAX_HEADER_BYTES or 8 + n > len(buf):
        raise invalid(f"a header length of {n} bytes in a {len(buf)}-byte file")
    try:
        header = json.loads(
            bytes(buf[8 : 8 + n]).decode("utf-8"), object_pairs_hook=_no_duplicate_keys
        )
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise invalid(f"the header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise invalid("the header is not a JSON object")
    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        raise invalid("__metadata__ is not a map of strings to strings")
    data_start, data_len = 8 + n, len(buf) - 8 - n
    spans = []
    for name, info in header.items():
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
            raise invalid(f"tensor {name!r} lacks dtype, shape or data_offsets")
        shape, offsets = info["shape"], info["data_offsets"]
        if not isinstance(info["dtype"], str):
            raise invalid(f"tensor {name!r}: dtype {info['dtype']!r} is not a string")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise invalid(f"tensor {name!r}: shape {shape!r} is not a list of sizes >= 0")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(_is_count(o) for o in offsets)
            or offsets[0] > offsets[1]
        ):
            raise invalid(f"tensor {name!r}: data_offsets {offsets!r} is not [begin, end]")
        spans.append((offsets[0], offsets[1], name))
    position = 0
    for begin, end, name in sorted(spans):
        if begin != position:
            raise invalid(f"tensor {name!r} starts at byte {begin} of the data, not {position}")
        position = end
    if position != data_len:
        raise invalid(f"the tensors cover {position} bytes of the data, which holds {data_len}")
    arrays = {}
    for name in sorted(header):
        info = header[name]
        if info["dtype"] != "F32":
            dtype = _DTYPE_NAMES.get(info["dtype"], info["dtype"])
            raise ValueError(
                f"load: {path!r}: tensor {name!r} has dtype {dtype}; gpumat arrays are float32"
            )
        shape = tuple(info["shape"])
        count = math.prod(shape)
        begin, end = info["data_offsets"]
        if 4 * count != end - begin:
            raise invalid(f"tensor {name!r} of shape {shape} has {end - begin} bytes")
        arr = np.frombuffer(buf, dtype="<f4", count=count, offset=data_start + begin)
        arrays[name] = arr.reshape(shape)
    return arrays, meta


def _read(path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """All tensors (numpy, float32) and the metadata of a safetensors file, verified.

    The file is read once into memory; the checks and the SHA-256 run over those bytes, and the
    arrays returned are views of them, so what was verified is what the caller gets.
    """
    path = os.fspath(path)
    buf = _read_bytes(path)
    arrays, meta = _parse(path, buf)
    recorded = meta.get(_META_DIGEST)
    # A file written by another tool has no digest; the format's own checks still apply.
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


def load(path, device=None, expected: Mapping | None = None) -> dict:
    """Read the float32 arrays of a safetensors file onto a device.

    Args:
        path: a file written by :func:`save`, ``safetensors.torch.save_file`` or
            ``safetensors.numpy.save_file`` (float32 tensors only).
        device: the device of the returned arrays, default ``gpumat.cpu()``.
        expected: optional name -> shape (a tuple, or anything with ``.shape``, e.g. the
            model's arrays): the file must hold exactly these names with these shapes.

    Returns:
        name -> new ``PyGpuMatrix`` on ``device``, in name order (the order of safetensors'
        readers).

    The file is read (never memory-mapped) into memory, verified and parsed there, then copied to
    ``device``: peak host memory is the file's size plus the largest tensor's copy on ``device``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file is truncated, corrupt (its recorded SHA-256 differs), not
            safetensors, holds a non-float32 tensor, or does not match ``expected``; it changed
            size while being read (another process writing or truncating it); the message names
            the file.
        MemoryError: the file, or an array on ``device``, does not fit in the memory left.
        gpumat.CudaError: as for ``gpumat.array``.
    """
    arrays, _ = _read(path)
    if expected is not None:
        _check_expected(path, arrays, expected, "expected tensors")
    return {name: array(arr, device) for name, arr in arrays.items()}


# ------------------------------------------------------------------------------- training states


def save_training_state(path, *, params: Mapping, optimizer, progress: Mapping) -> None:
    """Write a training checkpoint: parameters, optimizer state and progress, atomically.

    Args:
        path: the file (replaced atomically, see :func:`save`).
        params: parameter name -> array (``PyGpuMatrix`` or float32 numpy), stored as
            ``params/<name>``.
        optimizer: an object with ``state_dict()`` (``gpumat.optim.SGD``, ``MomentumSGD``,
            ``Adam``, ``Adadelta``); its tensors are stored as ``optimizer/<key>``, its other
            entries in the metadata.
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
        dict: ``"params"``: name -> float32 numpy array; ``"optimizer"``: the state_dict (tensors
        as numpy); ``"progress"``: the progress mapping.

    The metadata (which the SHA-256 does not cover) is checked before anything is returned:
    ``progress`` and the optimizer's entries must be JSON objects; ``progress``'s ``epoch`` and
    ``step`` ints in [0, 2**53], ``batch_size`` an int >= 1, ``model`` a str, ``shuffle`` a bool,
    ``rng_state`` None or a state numpy's named bit generator accepts, ``history`` a map of lists
    (at most ``epoch`` long) of real numbers; the optimizer's ``type`` a str and its other entries
    real numbers or lists of them, with the ranges of :mod:`gpumat.optim` for its classes (``lr``
    and ``eps`` finite and >= 0, ``momentum`` and ``betas`` in [0, 1), Adadelta's ``rho`` in
    [0, 1], ``t`` an int in [0, 2**53]).

    Raises:
        FileNotFoundError: no such file.
        ValueError: as for :func:`load`, or the file is not a gpumat training checkpoint (no
            training metadata, or another format version), or its training metadata breaks one
            of the rules above (the message names the file and the field).
        MemoryError: as for :func:`load`.
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
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"load: {os.fspath(path)!r}: unreadable training metadata: {exc}") from exc
    progress, opt_state = _check_training(os.fspath(path), training)
    params = {k[len(_PARAM_PREFIX) :]: v for k, v in arrays.items() if k.startswith(_PARAM_PREFIX)}
    opt_state["tensors"] = {
        k[len(_OPTIM_PREFIX) :]: v for k, v in arrays.items() if k.startswith(_OPTIM_PREFIX)
    }
    if expected_params is not None:
        _check_expected(path, params, expected_params, "model's parameters")
    return {"params": params, "optimizer": opt_state, "progress": progress}


# The scalar entries of gpumat.optim's state_dicts and the rule each must follow; SGD has
# "momentum" only when it is not 0 (its older files have "lr" alone).
_OPTIMIZER_SCALARS = {
    "SGD": {"lr": "rate"},
    "MomentumSGD": {"lr": "rate", "momentum": "beta"},
    "Adam": {"lr": "rate", "betas": "betas", "eps": "rate", "t": "count"},
    "AdamW": {"lr": "rate", "betas": "betas", "eps": "rate", "t": "count"},
    "Adadelta": {"lr": "rate", "rho": "unit", "eps": "rate"},
}
# Newer states also hold "param_groups" (every group's options) and SGD's "started" (checked
# above, not by a rule here).
_OPTIONAL_SCALARS = {
    "SGD": {"momentum": "beta", "param_groups": None, "started": None},
    "MomentumSGD": {"param_groups": None, "started": None},
    "Adam": {"param_groups": None},
    "AdamW": {"param_groups": None},
    "Adadelta": {"param_groups": None},
}
_RULES = {
    "rate": "a finite number >= 0",
    "beta": "a number in [0, 1)",
    "unit": "a number in [0, 1]",
    "betas": "two numbers in [0, 1)",
    "count": "an int in [0, 2**53]",
}
_HISTORY_FIELDS = ("loss", "epoch_time_s", "valid_time_s", "valid_accuracy")


def _is_group_option(v) -> bool:
    """A parameter group's option in a state: a bool, a finite number or a list of them."""
    values = v if isinstance(v, list) else [v]
    return all(isinstance(x, bool) or _is_finite_real(x) for x in values)


def _follows(rule: str, value) -> bool:
    """Whether an optimizer entry (already a finite number or a list of them) follows rule."""
    if rule == "betas":
        return isinstance(value, list) and len(value) == 2 and all(0 <= b < 1 for b in value)
    if isinstance(value, list):
        return False
    if rule == "rate":
        return value >= 0
    if rule == "beta":
        return 0 <= value < 1
    if rule == "unit":
        return 0 <= value <= 1
    return _is_count(value) and value <= _MAX_COUNT


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite_real(value) -> bool:
    """A number that converts to a finite float (an int beyond float's range does not)."""
    if not _is_real(value):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _check_training(path: str, training) -> tuple[dict, dict]:
    """(progress, optimizer state) of a training checkpoint's metadata, every field checked.

    Raises ValueError naming the file and the field; see :func:`load_training_state`.
    """

    def bad(field: str, value, want: str) -> ValueError:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        return ValueError(
            f"load: {path!r}: training metadata {field or 'root'} is {shown}, expected {want} "
            "(the file was edited or written by something else)"
        )

    if not isinstance(training, dict):
        raise bad("", training, "a JSON object")
    progress, opt_state = training.get("progress"), training.get("optimizer")
    if not isinstance(progress, dict):
        raise bad("'progress'", progress, "a JSON object")
    if not isinstance(opt_state, dict):
        raise bad("'optimizer'", opt_state, "a JSON object")

    for key in ("epoch", "step"):
        if key in progress and not (_is_count(progress[key]) and progress[key] <= _MAX_COUNT):
            raise bad(f"progress.{key}", progress[key], "an int in [0, 2**53]")
    if "batch_size" in progress and not (
        _is_count(progress["batch_size"]) and 1 <= progress["batch_size"] <= _MAX_COUNT
    ):
        raise bad("progress.batch_size", progress["batch_size"], "an int >= 1")
    if "model" in progress and not isinstance(progress["model"], str):
        raise bad("progress.model", progress["model"], "a str")
    if "shuffle" in progress and not isinstance(progress["shuffle"], bool):
        raise bad("progress.shuffle", progress["shuffle"], "a bool")
    if progress.get("rng_state") is not None:
        _check_rng_state(progress["rng_state"], bad)
    if "history" in progress:
        history = progress["history"]
        if not isinstance(history, dict):
            raise bad("progress.history", history, "a JSON object")
        limit = progress.get("epoch", _MAX_COUNT)
        for field in _HISTORY_FIELDS:
            values = history.get(field, [])
            if not isinstance(values, list) or not all(_is_real(v) for v in values):
                raise bad(f"progress.history.{field}", values, "a list of numbers")
            if len(values) > limit:
                raise bad(f"progress.history.{field}", values, f"at most epoch={limit} values")

    opt_type = opt_state.get("type")
    if not isinstance(opt_type, str):
        raise bad("optimizer.type", opt_type, "a str (the optimizer's class name)")
    for key, value in opt_state.items():
        if key == "type":
            continue
        if key == "param_groups":  # each group's options: numbers, bools, lists of numbers
            if not isinstance(value, list) or not all(
                isinstance(g, dict) and all(_is_group_option(v) for v in g.values()) for g in value
            ):
                raise bad("optimizer.param_groups", value, "a list of objects of numbers")
            continue
        if key == "started":  # SGD: which velocities had their first step
            if not isinstance(value, list) or not all(isinstance(v, bool) for v in value):
                raise bad("optimizer.started", value, "a list of bools")
            continue
        numbers = value if isinstance(value, list) else [value]
        if not all(_is_finite_real(v) for v in numbers):
            raise bad(f"optimizer.{key}", value, "a finite number or a list of them")
    rules = _OPTIMIZER_SCALARS.get(opt_type)
    if rules is not None:
        optional = _OPTIONAL_SCALARS.get(opt_type, {})
        if not {"type", *rules} <= set(opt_state) <= {"type", *rules, *optional}:
            want = sorted({"type", *rules})
            if optional:
                want = f"{want} and optionally {sorted(optional)}"
            raise bad("optimizer keys", sorted(opt_state), f"{want}")
        for key, rule in {**rules, **optional}.items():
            if rule is not None and key in opt_state and not _follows(rule, opt_state[key]):
                raise bad(f"optimizer.{key}", opt_state[key], _RULES[rule])
    return progress, dict(opt_state)


_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")


def _check_rng_state(state, bad) -> None:
    """ValueError unless numpy's bit generator named in ``state`` accepts it."""
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if name not in _BIT_GENERATORS:
        raise bad("progress.rng_state", state, f"a numpy bit generator state ({_BIT_GENERATORS})")
    try:
        getattr(np.random, name)().state = state
    except Exception as exc:  # noqa: BLE001 - numpy raises TypeError, ValueError, KeyError, ...
        raise bad("progress.rng_state", state, f"a state {name} accepts ({exc})") from None
