"""Creation ops: new tensors from data (``tensor``, ``from_numpy``), filled (``zeros``, ``ones``,
``full`` and their ``_like`` forms, ``eye``), random (``rand``, ``randn``, ``randint``,
``randperm``, ``multinomial``) and ranges (``arange``, ``linspace``), with PyTorch's names and
arguments; and ``flatten``.

Every function takes ``dtype`` (``gpumat.float32``, ``gpumat.int64``, ``gpumat.bool`` or a name of
one), ``device`` (a ``gpumat.Device`` or a name: :func:`gpumat.devices.as_device`) and
``requires_grad`` where PyTorch does; random values come from gpumat's generator
(:func:`gpumat.manual_seed`), the same on every device.
"""

from __future__ import annotations

import numbers

import numpy as np

from gpumat import arrays, ops
from gpumat.arrays import empty as _empty_array
from gpumat.autograd import current_trace
from gpumat.devices import as_device, cpu
from gpumat.dtypes import EXACT_INT, as_dtype, float32, int64
from gpumat.random import draw_seed
from gpumat.tensor import Tensor, _copy_of, _filled, _from_host, _is_number, _size_args

__all__ = [
    "arange",
    "empty",
    "empty_like",
    "eye",
    "flatten",
    "from_numpy",
    "full",
    "full_like",
    "linspace",
    "multinomial",
    "ones",
    "ones_like",
    "rand",
    "rand_like",
    "randn",
    "randint",
    "randn_like",
    "randperm",
    "tensor",
    "zeros",
    "zeros_like",
]


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data``.

    Args:
        data: a number, nested lists, a numpy array or a Tensor (copied).
        dtype: ``gpumat.float32``, ``gpumat.int64``, ``gpumat.bool`` (or their names, Python's
            float/int/bool); default from the data: floats -> float32 (float64 data is rounded),
            integers -> int64, bools -> bool.
        device: ``gpumat.cpu()``, ``gpumat.emu(i)``, ``gpumat.gpu(i)`` or a name (``"cpu"``,
            ``"cuda"``, ``"cuda:0"``, ``"emu"``); default the host (or the Tensor's device).
        requires_grad: record ops on it for backward (float32 only).

    Raises:
        TypeError: non-numeric data or a bad dtype or device. ValueError: int64 data that is not
            whole or beyond 2**24 in magnitude; ragged lists. MemoryError, gpumat.CudaError: as
            for ``gpumat.array``.
    """
    out = _copy_of(data, as_dtype(dtype, "tensor"), device, "tensor")
    if requires_grad:
        out.requires_grad = True
    return out


def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A tensor on the host with a copy of ``ndarray`` (PyTorch shares the memory; gpumat's
    tensors own device storage, so this copies). float64 data becomes float32, integers int64.

    Raises:
        TypeError: not a numpy array, or not numeric.
    """
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"from_numpy: expected a numpy array, got {type(ndarray).__name__}")
    return _from_host(ndarray, None, cpu(), "from_numpy")


def zeros(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros: ``zeros(2, 3)`` or ``zeros((2, 3))`` (float32 unless ``dtype``)."""
    return _filled("zeros", size, 0.0, dtype or float32, device, requires_grad)


def ones(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones (float32 unless ``dtype``)."""
    return _filled("ones", size, 1.0, dtype or float32, device, requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ``size`` filled with ``fill_value`` (dtype from the value unless given)."""
    size = (size,) if isinstance(size, numbers.Integral) else tuple(size)
    return _filled("full", (size,), fill_value, dtype, device, requires_grad)


def zeros_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Zeros of ``t``'s shape, dtype and device (unless given)."""
    return zeros(
        t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad
    )


def empty(*size, dtype=None, device=None, requires_grad: bool = False):
    """Two calls in one name. With ints (``empty(3, 2)``, ``empty(5)``) or a ``dtype`` /
    ``requires_grad`` argument, PyTorch's ``torch.empty``: a float32 tensor whose values are not
    set (as :func:`empty_like`). With a shape tuple or list, and optionally a device
    (``empty((3, 2), device)``), gpumat's array API: an uninitialised
    :class:`gpumat.PyGpuMatrix` (:func:`gpumat.arrays.empty`), as the kernels take.

    Raises:
        TypeError: a non-float32 ``dtype`` (see :func:`empty_like`); bad sizes or device (as
            :func:`zeros` / :func:`gpumat.arrays.empty`). ValueError: a negative size.
        MemoryError: the device is out of memory.
    """
    tensor_form = dtype is not None or requires_grad or not size
    if size and isinstance(size[0], numbers.Integral) and not isinstance(size[0], bool):
        tensor_form = True
    if not tensor_form:
        if len(size) > 2:
            raise TypeError(f"empty: the array form takes (shape, device), got {len(size)} args")
        return arrays.empty(size[0], size[1] if len(size) == 2 else device)
    dt = as_dtype(dtype, "empty") or float32
    if dt is not float32:
        raise TypeError(
            f"empty: only float32 ({dt} tensors know their values' range, which unset memory has "
            "not; use zeros)"
        )
    dev = as_device(device, "empty")
    out = Tensor._make(_empty_array(_size_args(size, "empty"), dev), float32, dev)
    if requires_grad:
        out.requires_grad = True
    return out


def empty_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A float32 tensor of ``t``'s shape and device (unless given) whose values are not set
    (PyTorch's ``empty_like``): the output of a kernel that writes every element, such as a
    :class:`gpumat.cuda.RawKernel`. On the emulated device its memory reads as NaN and initcheck
    reports a kernel reading it before a write.

    Raises:
        TypeError: ``dtype`` other than float32 (int64 and bool tensors carry the range of their
            values, which unset memory has not: use :func:`zeros_like`).
    """
    dt = as_dtype(dtype, "empty_like") or t.dtype
    if dt is not float32:
        raise TypeError(
            f"empty_like: only float32 ({dt} tensors know their values' range, which unset "
            "memory has not; use zeros_like)"
        )
    dev = as_device(device, "empty_like") if device is not None else t.device
    out = Tensor._make(_empty_array(t.shape, dev), float32, dev)
    if requires_grad:
        out.requires_grad = True
    return out


def full_like(
    t: Tensor, fill_value, dtype=None, device=None, requires_grad: bool = False
) -> Tensor:
    """``fill_value`` in ``t``'s shape, dtype and device (unless given), PyTorch's ``full_like``.

    Raises:
        ValueError / TypeError: a value the dtype cannot hold (NaN or a fraction into int64).
    """
    return _filled(
        "full_like", (t.shape,), fill_value, dtype or t.dtype, device or t.device, requires_grad
    )


def ones_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Ones of ``t``'s shape, dtype and device (unless given)."""
    return ones(
        t.shape, dtype=dtype or t.dtype, device=device or t.device, requires_grad=requires_grad
    )


def _random(op: str, size, fill, device, dtype, requires_grad) -> Tensor:
    if current_trace() is not None:
        raise RuntimeError(
            f"{op}: a random tensor made inside a step compiled by gpumat.compile would repeat "
            "its first values on every call; make it outside the step and pass it in"
        )
    dt = as_dtype(dtype, op)
    if dt not in (None, float32):
        raise TypeError(f"{op}: random tensors are float32, got dtype {dt}")
    device = as_device(device, op)
    data = _empty_array(_size_args(size, op), device)
    fill(data, draw_seed())
    out = Tensor._make(data, float32, device)
    if requires_grad:
        out.requires_grad = True
    return out


def rand(*size, device=None, dtype=None, requires_grad: bool = False) -> Tensor:
    """Samples of U[0, 1) (float32) from gpumat's generator (:func:`manual_seed`)."""
    return _random(
        "rand", size, lambda d, s: ops.uniform(d, 0.0, 1.0, s), device, dtype, requires_grad
    )


def randn(*size, device=None, dtype=None, requires_grad: bool = False) -> Tensor:
    """Samples of N(0, 1) (float32; Box-Muller on gpumat's counter-based generator)."""
    return _random(
        "randn", size, lambda d, s: ops.normal(d, 0.0, 1.0, s), device, dtype, requires_grad
    )


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad: bool = False):
    """``start, start + step, ...`` below ``end`` (``arange(n)``: 0 .. n - 1): int64 when every
    argument is an int, else float32 (numpy's ``arange`` values).

    Raises:
        ValueError: step 0. TypeError: non-numeric arguments.
    """
    if end is None:
        start, end = 0, start
    for v in (start, end, step):
        if not _is_number(v) or isinstance(v, (bool, np.bool_)):
            raise TypeError(f"arange: start, end and step must be numbers, got {v!r}")
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    ints = all(isinstance(v, numbers.Integral) for v in (start, end, step))
    dt = as_dtype(dtype, "arange") or (int64 if ints else float32)
    values = np.arange(start, end, step, dtype=np.float64 if not ints else np.int64)
    out = _from_host(values, dt, as_device(device, "arange"), "arange")
    if requires_grad:
        out.requires_grad = True
    return out


def flatten(input: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:  # noqa: A002
    """``input.flatten(start_dim, end_dim)`` (PyTorch's ``torch.flatten``)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"flatten: expected a Tensor, got {type(input).__name__}")
    return input.flatten(start_dim, end_dim)


def rand_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """:func:`rand` in ``t``'s shape, dtype and device (unless given): float32 only.

    Raises:
        TypeError: a dtype other than float32.
        RuntimeError: inside a step traced by gpumat.compile (see :func:`rand`).
    """
    return _random_like(rand, t, dtype, device, requires_grad)


def randn_like(t: Tensor, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """:func:`randn` in ``t``'s shape, dtype and device (unless given): float32 only.

    Raises:
        TypeError: a dtype other than float32.
        RuntimeError: inside a step traced by gpumat.compile (see :func:`randn`).
    """
    return _random_like(randn, t, dtype, device, requires_grad)


def _random_like(make, t: Tensor, dtype, device, requires_grad: bool) -> Tensor:
    dt = dtype or t.dtype
    return make(t.shape, device=device or t.device, dtype=dt, requires_grad=requires_grad)


# --------------------------------------------------------------------------------------------------
# eye, linspace; randint, randperm, multinomial (random: from gpumat's generator, on the device)
# --------------------------------------------------------------------------------------------------


def _not_traced(op: str) -> None:
    if current_trace() is not None:
        raise RuntimeError(
            f"{op}: a random tensor made inside a step compiled by gpumat.compile would repeat "
            "its first values on every call; make it outside the step and pass it in"
        )


def _count(value, name: str, op: str) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {name} must be an int, got {value!r}")
    if value < 0:
        raise ValueError(f"{op}: {name} must be >= 0, got {value}")
    return int(value)


def _seed_from(generator, op: str) -> int:
    """A device seed from gpumat's generator, or from ``generator`` (a numpy Generator, such as
    :func:`gpumat.random.generator`'s)."""
    if generator is None:
        return draw_seed()
    if not isinstance(generator, np.random.Generator):
        raise TypeError(
            f"{op}: generator must be None or a numpy.random.Generator, got "
            f"{type(generator).__name__}"
        )
    return int(generator.integers(0, 2**63))


def _int_result(op: str, dtype, default=int64):
    dt = as_dtype(dtype, op) or default
    if dt not in (int64, float32):
        raise TypeError(f"{op}: dtype must be gpumat.int64 or gpumat.float32, got {dt}")
    return dt


def _finish(out: Tensor, requires_grad: bool) -> Tensor:
    if requires_grad:
        out.requires_grad = True
    return out


def eye(n, m=None, *, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """The (n, m) identity: ones on the diagonal, zeros elsewhere (``m`` defaults to ``n``;
    float32 unless ``dtype``), PyTorch's ``torch.eye``.

    Raises:
        TypeError: a non-int n or m, a bad dtype or device. ValueError: n or m negative.
    """
    rows = _count(n, "n", "eye")
    cols = rows if m is None else _count(m, "m", "eye")
    dt = as_dtype(dtype, "eye") or float32
    out = _from_host(np.eye(rows, cols), dt, as_device(device, "eye"), "eye")
    return _finish(out, requires_grad)


def linspace(start, end, steps, *, dtype=None, device=None, requires_grad: bool = False):
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive (float32 unless
    ``dtype``), with ``torch.linspace``'s float32 values: step = (end - start) / (steps - 1) in
    float32, element i = start + i * step for the first half (i < steps // 2) and end - (steps
    - 1 - i) * step for the rest, so both ends are exact (PyTorch's CUDA values; its CPU kernel
    applies the formula per SIMD vector, which can differ in the last bit). int64: the same in
    float64, truncated toward zero (PyTorch's integer results).

    Raises:
        TypeError: non-number start or end, a non-int steps. ValueError: steps < 0; int64
            values beyond 2**24.
    """
    for v in (start, end):
        if not _is_number(v) or isinstance(v, (bool, np.bool_)):
            raise TypeError(f"linspace: start and end must be numbers, got {v!r}")
    count = _count(steps, "steps", "linspace")
    dt = as_dtype(dtype, "linspace") or float32
    ftype = np.float32 if dt is float32 else np.float64
    lo, hi = ftype(start), ftype(end)
    i = np.arange(count)
    if count == 1:
        values = np.array([lo], dtype=ftype)
    else:
        step = (hi - lo) / ftype(max(count - 1, 1))
        first = lo + step * i.astype(ftype)
        last = hi - step * (count - 1 - i).astype(ftype)
        values = np.where(i < count // 2, first, last).astype(ftype)
    if dt is not float32:
        values = np.trunc(values)
    out = _from_host(values, dt, as_device(device, "linspace"), "linspace")
    return _finish(out, requires_grad)


def _randint_args(args, low, high, size) -> tuple:
    if size is None:
        if not args:
            raise TypeError(
                "randint: missing size (randint(high, size) or randint(low, high, size))"
            )
        size, args = args[-1], args[:-1]
    if len(args) > 2:
        raise TypeError("randint: expected randint(high, size) or randint(low, high, size)")
    if len(args) == 2:
        low, high = args
    elif len(args) == 1:
        if high is None:
            high = args[0]
        else:
            low = args[0]
    if high is None:
        raise TypeError("randint: missing high")
    return (0 if low is None else low), high, size


def randint(
    *args,
    low=None,
    high=None,
    size=None,
    generator=None,
    dtype=None,
    device=None,
    requires_grad: bool = False,
) -> Tensor:
    """Integers drawn uniformly from [low, high) (int64 unless ``dtype``): ``randint(high,
    size)`` or ``randint(low, high, size)`` (``torch.randint``), on the device, from gpumat's
    generator (:func:`gpumat.manual_seed`) or ``generator`` (a numpy Generator): the same values
    on every device for the same seed (:func:`gpumat.ops.randint`).

    Raises:
        TypeError: missing or non-int low, high or size; a dtype other than int64 or float32.
        ValueError: low >= high, a bound past 2**24 in magnitude (float32 storage keeps
            integers exact only up to there), a negative size. RuntimeError: inside a step
            traced by gpumat.compile (make it outside and pass it in).
    """
    _not_traced("randint")
    low, high, size = _randint_args(args, low, high, size)
    for name, v in (("low", low), ("high", high)):
        if not isinstance(v, numbers.Integral) or isinstance(v, (bool, np.bool_)):
            raise TypeError(f"randint: {name} must be an int, got {v!r}")
    low, high = int(low), int(high)
    if low >= high:
        raise ValueError(f"randint: low must be below high, got low={low}, high={high}")
    if low < -EXACT_INT or high - 1 > EXACT_INT:
        raise ValueError(
            f"randint: [{low}, {high}) goes past 2**24 in magnitude, where gpumat's float32 "
            "storage holds integers exactly"
        )
    shape = _size_args(size if isinstance(size, (tuple, list)) else (size,), "randint")
    dt = _int_result("randint", dtype)
    dev = as_device(device, "randint")
    data = _empty_array(shape, dev)
    ops.randint(data, low, high, _seed_from(generator, "randint"))
    out = Tensor._make(data, dt, dev, (low, high - 1) if dt is int64 else None)
    return _finish(out, requires_grad)


def randperm(n, *, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A random permutation of 0 .. n - 1 (int64 unless ``dtype``), ``torch.randperm``.

    On the device: two keys per element from gpumat's generator (or ``generator``), then a
    stable sort by the second key and by the first (:func:`gpumat.ops.argsort`), so ties need
    equal 48-bit keys; the same permutation on every device for the same seed.

    Raises:
        TypeError: a non-int n; a dtype other than int64 or float32. ValueError: n < 0 or
            n > 2**24 (its values would not be exact). RuntimeError: inside a step traced by
            gpumat.compile.
    """
    _not_traced("randperm")
    count = _count(n, "n", "randperm")
    if count > EXACT_INT:
        raise ValueError(f"randperm: n = {count} is beyond 2**24 (values exact in float32)")
    dt = _int_result("randperm", dtype)
    dev = as_device(device, "randperm")
    major, minor, order, keys, perm = (_empty_array((count,), dev) for _ in range(5))
    ops.uniform(major, 0.0, 1.0, _seed_from(generator, "randperm"))
    ops.uniform(minor, 0.0, 1.0, _seed_from(generator, "randperm"))
    ops.argsort(minor, order, 0)  # by the minor key, then stably by the major one
    ops.gather(major, order, keys, 0)
    ops.argsort(keys, minor, 0)
    ops.gather(order, minor, perm, 0)
    out = Tensor._make(perm, dt, dev, (0, max(count - 1, 0)) if dt is int64 else None)
    return _finish(out, requires_grad)


def multinomial(input: Tensor, num_samples: int, replacement: bool = False, *, generator=None):  # noqa: A002
    """``num_samples`` category indices per row of ``input`` (weights (k,) or (rows, k), any
    non-negative numbers, each row with a positive sum), drawn with probabilities proportional
    to the weights: ``torch.multinomial``. Returns int64 (num_samples,) or (rows, num_samples).

    On the device, from gpumat's generator (or ``generator``): each category gets an
    exponential race key E / w (E = -log(1 - u), u uniform in [0, 1)); without replacement the
    ``num_samples`` smallest keys win, in order (the Gumbel-top-k trick: sampling without
    replacement in proportion to the weights), zero-weight categories last, as PyTorch's; with
    replacement each sample draws its own keys and takes the smallest (``argmax`` of -E/w),
    (rows, num_samples, k) keys in all. The weights are read to the host to check them.

    Raises:
        TypeError: input not a float32 Tensor; a non-int num_samples; a non-bool replacement.
        ValueError: input not 1-D or 2-D, or empty; a weight negative, infinite or NaN; a row
            summing to 0; num_samples < 1, or above k without replacement. RuntimeError: inside
            a step traced by gpumat.compile.
    """
    _not_traced("multinomial")
    if not isinstance(input, Tensor):
        raise TypeError(f"multinomial: expected a Tensor, got {type(input).__name__}")
    if input.dtype is not float32:
        raise TypeError(f"multinomial: input must be float32 weights, got {input.dtype}")
    if not isinstance(replacement, (bool, np.bool_)):
        raise TypeError(f"multinomial: replacement must be a bool, got {replacement!r}")
    s = _count(num_samples, "num_samples", "multinomial")
    shape = tuple(input.shape)
    if len(shape) not in (1, 2) or shape[-1] == 0 or (len(shape) == 2 and shape[0] == 0):
        raise ValueError(
            f"multinomial: input must be 1-D or 2-D with at least one category, got shape {shape}"
        )
    k = shape[-1]
    if s < 1 or (not replacement and s > k):
        raise ValueError(
            f"multinomial: cannot draw {s} samples from {k} categories"
            + ("" if replacement else " without replacement")
        )
    w = input.detach().cpu().numpy()
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("multinomial: weights must be finite and >= 0")
    if np.any(w.reshape(-1, k).sum(axis=1) <= 0):
        raise ValueError(f"multinomial: every row of the weights {shape} must have a positive sum")
    rows = w.reshape(-1, k).shape[0]
    weights = input.detach().reshape(rows, 1, k)
    draws = 1 if not replacement else s
    dev = input.device
    u = _empty_array((rows, draws, k), dev)
    ops.uniform(u, 0.0, 1.0, _seed_from(generator, "multinomial"))
    # 1 - u lies in (0, 1] exactly (u is a multiple of 2**-24): E = -log(1 - u) is finite, and
    # 2**-30 keeps it > 0 (0 / 0 would be NaN), so E / w is inf exactly where w = 0.
    exp_draws = -(1.0 - Tensor._make(u, float32, dev)).log() + 2.0**-30
    race = exp_draws / weights
    if replacement:
        idx = (-race).argmax(-1)
    else:
        idx = race.reshape(rows, k).topk(s, -1, largest=False).indices
    return idx.reshape(s) if len(shape) == 1 else idx.reshape(rows, s)
