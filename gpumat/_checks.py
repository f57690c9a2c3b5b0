"""Argument checks shared by the kernel calls (gpumat.ops), their numpy twins (gpumat.reference)
and the graph ops (gpumat.graph): each turns a Python value into what the native layer takes, or
raises TypeError / ValueError naming the op and the argument."""

from __future__ import annotations

import numbers

import numpy as np

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def as_int(value, what: str, op: str) -> int:
    """int(value) for an integer that fits int64; TypeError for a non-integer (bools included),
    ValueError past int64 (the C++ ops then check the op's own range, e.g. conv strides up to
    2^31 - 1)."""
    if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:  # the common case, no ABC check
        return value
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{op}: {what} must be an int, got {value!r}")
    v = int(value)
    if not -(2**63) <= v < 2**63:
        raise ValueError(f"{op}: {what} {v} is out of range (it must fit in 64 bits)")
    return v


def as_int_tuple(value, what: str, op: str, item: str | None = None) -> tuple:
    """``value`` (a tuple or list of ints, each as :func:`as_int` takes it, named ``item``: by
    default "an element of ``what``") as a tuple; TypeError for anything else."""
    if type(value) is tuple:  # the common case (every view's sizes and strides): no call per int
        for v in value:
            if type(v) is not int or not _INT64_MIN <= v <= _INT64_MAX:
                break
        else:
            return value
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{op}: {what} must be a tuple of ints, got {type(value).__name__}")
    item = f"an element of {what}" if item is None else item
    return tuple(as_int(v, item, op) for v in value)


def as_pair(value, what: str, op: str) -> tuple[int, int]:
    """(h, w) from an int (used for both) or a pair of ints; TypeError otherwise."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise TypeError(f"{op}: {what} must be an int or a pair of ints, got {value!r}")
        return as_int(value[0], what, op), as_int(value[1], what, op)
    v = as_int(value, what, op)
    return v, v


def pool_args(op: str, kernel_size, stride, padding) -> tuple[int, int, int, int, int, int]:
    """(kh, kw, sh, sw, ph, pw) from pooling arguments; the stride defaults to the kernel size."""
    kh, kw = as_pair(kernel_size, "kernel_size", op)
    sh, sw = (kh, kw) if stride is None else as_pair(stride, "stride", op)
    ph, pw = as_pair(padding, "padding", op)
    return kh, kw, sh, sw, ph, pw


def as_seed(seed, op: str = "seed") -> int:
    """A random seed: an int in [0, 2**64); TypeError / ValueError otherwise."""
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
        raise TypeError(f"{op}: seed must be an int, got {seed!r}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"{op}: seed must be in [0, 2**64), got {seed}")
    return int(seed)


def as_probability(p, op: str) -> float:
    """A probability: a real number in [0, 1] (NaN rejected); TypeError / ValueError otherwise."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError(f"{op}: p must be a real number, got {p!r}")
    if not 0.0 <= float(p) <= 1.0:  # also rejects NaN
        raise ValueError(f"{op}: p must be in [0, 1], got {p!r}")
    return float(p)


def as_flag(value, what: str, op: str) -> bool:
    """A bool (Python or numpy); TypeError for anything else (a truthy array or string would
    otherwise pick a transpose silently)."""
    if value is True or value is False:
        return value
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: {what} must be a bool, got {value!r}")
    return bool(value)


def as_real(value, what: str, op: str) -> float:
    """float(value) for a real number (bools rejected); TypeError otherwise."""
    if type(value) is float:  # the common case, without numbers.Real's ABC check (~1 us)
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{op}: {what} must be a number, got {value!r}")
    return float(value)


def array_lists(op: str, **lists) -> list[list]:
    """The named lists (or tuples) of arrays as lists; TypeError naming the one that is not.

    Lists are returned as they are (the kernels read them at once and keep no reference);
    tuples are copied into lists."""
    values = list(lists.values())
    if all(type(v) is list for v in values):  # the common case, checked cheaply: it runs per step
        return values
    bad = {k: type(v).__name__ for k, v in lists.items() if not isinstance(v, (list, tuple))}
    if bad:
        got = ", ".join(f"{k} is a {t}" for k, t in bad.items())
        raise TypeError(f"{op}: {', '.join(lists)} must be lists of arrays; {got}")
    return [list(v) for v in lists.values()]
