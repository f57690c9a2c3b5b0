"""Tensor's reductions: ``sum``, ``mean``, ``max``, ``argmax``, ``min``, ``argmin``, ``amax``,
``amin``, ``prod``, ``cumsum``, ``var``, ``std``, ``norm``, ``logsumexp``, ``any`` and ``all``,
over all elements or along dims, with the range checks that keep int64 sums exact.

One topic of the class, apart so that each file stays readable; :mod:`gpumat.tensor` adds
``ReductionMethods``' methods to :class:`gpumat.Tensor`.
"""

from __future__ import annotations

import collections
import math
import numbers

import numpy as np

from gpumat.autograd import current_trace
from gpumat.dtypes import EXACT_INT, float32, int64
from gpumat.graph.elementwise import (
    abs_op,
    mul_byconst_op,
    oneslike_op,
    where_op,
    zeroslike_op,
)
from gpumat.graph.reduce import (
    argmax_op,
    broadcast_axis_op,
    cumsum_op,
    reduce_max_op,
    reduce_mean_op,
    reduce_prod_op,
    reduce_sum_op,
)
from gpumat.tensor._tensor import Tensor, _require_float, apply_op

# Named from gpumat.tensor, where it was made before the split: type(x.max(1)) reads the same.
_MaxResult = collections.namedtuple("max", ["values", "indices"], module="gpumat.tensor")
_MinResult = collections.namedtuple("min", ["values", "indices"], module="gpumat.tensor")


class ReductionMethods:
    """The reductions of Tensor."""

    # ---------------------------------------------------------------- reductions

    def _reduce(self, name: str, op, dim, keepdim: bool, out_dtype, bounds=None):
        if not isinstance(keepdim, (bool, np.bool_)):
            raise TypeError(f"{name}: keepdim must be a bool, got {keepdim!r}")
        if dim is None:
            flat = self.reshape(-1)
            out = apply_op(name, lambda n: op(n, 0), [flat], out_dtype, bounds)
            return out.reshape((1,) * self.ndim) if keepdim else out
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        axes = sorted({self._axis(d, name) for d in dims}, reverse=True)
        if self.ndim == 0:  # PyTorch reduces a 0-d tensor along dim 0 or -1: itself, as (1,)
            flat = self.reshape(1)
            return apply_op(name, lambda n: op(n, 0), [flat], out_dtype, bounds)
        out = self
        for a in axes:  # from the last axis, so the earlier axes keep their numbers
            out = apply_op(name, lambda n, a=a: op(n, a, bool(keepdim)), [out], out_dtype, bounds)
        return out

    def sum(self, dim=None, keepdim: bool = False) -> Tensor:
        """The sum over all elements (``dim=None``) or along ``dim`` (an int or a tuple of ints),
        keeping the summed axes as length 1 when ``keepdim``. A float32 sum in index order.
        Sums of int64 and bool tensors are int64 and must stay within 2**24 in magnitude (else
        ValueError: they would round)."""
        if self._dtype is float32:
            return self._reduce("sum", reduce_sum_op, dim, keepdim, float32)
        n = self.numel() if dim is None else self._reduced_count(dim)
        lo, hi = self._range
        bound = n * max(abs(lo), abs(hi))
        if bound > EXACT_INT:
            raise ValueError(
                f"sum: the sum of {n} values in [{lo}, {hi}] may exceed 2**24 in magnitude, "
                f"beyond what an {self._dtype} tensor holds exactly (convert with .float())"
            )
        limit = EXACT_INT // max(n, 1)
        trace = current_trace()
        if self._range_src is not None:  # an argument of a compiled step: checked on every call
            self._trace.guard_range(self._range_src, -limit, limit, "sum", ValueError)
        elif self._trace is None and trace is not None:  # a tensor the step reads
            trace.guard_range(self, -limit, limit, "sum", ValueError)
        bounds = (min(0, n * lo), max(0, n * hi))
        return self._reduce("sum", reduce_sum_op, dim, keepdim, int64, bounds)

    def _reduced_count(self, dim) -> int:
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        return math.prod(self._shape[self._axis(d, "sum")] for d in set(dims))

    def mean(self, dim=None, keepdim: bool = False) -> Tensor:
        """The mean over all elements or along ``dim`` (float32 only, as PyTorch)."""
        _require_float("mean", self)
        return self._reduce("mean", reduce_mean_op, dim, keepdim, float32)

    def max(self, dim=None, keepdim: bool = False):
        """``max()``: the largest element (0-d). ``max(dim, keepdim=False)``: a named tuple
        ``(values, indices)`` along ``dim``, the indices an int64 tensor (``argmax``).

        Gradient: the output gradient is split equally among tied maxima (PyTorch's ``amax``
        and full ``max()``; its ``max(dim)`` sends it to one of them: the same for distinct
        values). NaN counts as the maximum.
        """
        if dim is None:
            out = self._reduce("max", reduce_max_op, None, False, self._dtype, self._range)
            out._range_src = self._range_src
            return out
        if isinstance(dim, (tuple, list)):
            raise TypeError("max: dim must be an int (use amax for several dims)")
        values = self._reduce("max", reduce_max_op, dim, keepdim, self._dtype, self._range)
        values._range_src = self._range_src
        return _MaxResult(values, self.argmax(dim, keepdim))

    def argmax(self, dim=None, keepdim: bool = False) -> Tensor:
        """The index of the largest element (int64): over the flattened tensor (``dim=None``) or
        along ``dim``. The first maximum wins; NaN counts as the maximum (PyTorch's rules)."""
        if not isinstance(keepdim, (bool, np.bool_)):
            raise TypeError(f"argmax: keepdim must be a bool, got {keepdim!r}")
        if dim is None:
            flat = self.reshape(-1)
            n = flat._shape[0]
            out = apply_op("argmax", lambda x: argmax_op(x, 0), [flat], int64, (0, max(n - 1, 0)))
            out = out if not keepdim else out.reshape((1,) * self.ndim)
            return out
        axis = self._axis(dim, "argmax")
        n = self._shape[axis]
        return apply_op(
            "argmax",
            lambda x: argmax_op(x, axis, bool(keepdim)),
            [self],
            int64,
            (0, max(n - 1, 0)),
            False,
        )

    # ------------------------------------------------ min, amin, amax, prod, cumsum

    def _negated(self, op: str) -> Tensor:
        """-self, exact, as float32 (a float tensor) or int64 with the negated range (int64 and
        bool): min = -max(-x) without rounding."""
        if self._dtype is float32:
            return apply_op(op, lambda n: mul_byconst_op(n, -1.0), [self])
        lo, hi = self._range
        return apply_op(op, lambda n: mul_byconst_op(n, -1.0), [self], int64, (-hi, -lo))

    def min(self, dim=None, keepdim: bool = False):
        """``min()``: the smallest element (0-d). ``min(dim, keepdim=False)``: a named tuple
        ``(values, indices)`` along ``dim``, the indices int64 (``argmin``). Computed as
        ``-max(-x)`` (exact); NaN counts as the minimum, as PyTorch's. Gradient: split equally
        among tied minima (see ``max``). Raises TypeError for a tuple dim (use ``amin``),
        ValueError for an empty tensor or dim, IndexError for a dim out of range."""
        if isinstance(dim, (tuple, list)):
            raise TypeError("min: dim must be an int (use amin for several dims)")
        self._nonempty(dim, "min")
        if dim is None:
            return self._negated("min").max()._negated("min")._as_dtype(self)
        values = self._negated("min").max(dim, keepdim).values._negated("min")._as_dtype(self)
        return _MinResult(values, self.argmin(dim, keepdim))

    def _nonempty(self, dim, op: str) -> None:
        """Checks ``dim`` (IndexError) and that no reduced dim is empty (ValueError), naming
        ``op`` rather than the max it runs."""
        axes = self._dims(dim, op)
        empty = [a for a in axes if self._shape[a] == 0] if self.ndim else []
        if empty:
            raise ValueError(
                f"{op}: cannot reduce the empty dim {empty[0]} of a tensor of shape "
                f"{tuple(self._shape)}"
            )

    def _as_dtype(self, like: Tensor) -> Tensor:
        """self (a negated-back result) relabelled with like's dtype and range: exact, since the
        values are like's own."""
        if like._dtype is float32 or self._dtype is like._dtype:
            return self
        return apply_op("min", lambda n: mul_byconst_op(n, 1.0), [self], like._dtype, like._range)

    def argmin(self, dim=None, keepdim: bool = False) -> Tensor:
        """The index of the smallest element (int64): over the flattened tensor (``dim=None``)
        or along ``dim``: ``argmax(-x)``, so the first minimum wins and the first NaN counts as
        the minimum (PyTorch's rules). Raises ValueError for an empty dim, IndexError for one out
        of range."""
        self._nonempty(dim, "argmin")
        return self._negated("argmin").argmax(dim, keepdim)

    def amax(self, dim=(), keepdim: bool = False) -> Tensor:
        """The max over ``dim`` (an int or a tuple of ints; ``()`` or None: every dim), keeping
        the reduced dims as 1 when ``keepdim`` (``torch.amax``). NaN wins; the gradient is split
        equally among tied maxima. Raises ValueError for an empty reduced dim."""
        dim = None if isinstance(dim, (tuple, list)) and not dim else dim
        out = self._reduce("amax", reduce_max_op, dim, keepdim, self._dtype, self._range)
        out._range_src = self._range_src
        return out

    def amin(self, dim=(), keepdim: bool = False) -> Tensor:
        """The min over ``dim`` (as ``amax``; ``torch.amin``): ``-amax(-x)``, exact."""
        self._nonempty(None if isinstance(dim, (tuple, list)) and not dim else dim, "amin")
        return self._negated("amin").amax(dim, keepdim)._negated("amin")._as_dtype(self)

    def prod(self, dim=None, keepdim: bool = False) -> Tensor:
        """The product of all elements (``dim=None``, 0-d) or along the int ``dim``
        (``torch.prod``), float32 products in index order; 1 for an empty dim. Gradient:
        PyTorch's, the product of the other elements (a zero gets the product of the rest, two
        zeros give 0). float32 only (TypeError otherwise); TypeError for a tuple dim."""
        _require_float("prod", self)
        if isinstance(dim, (tuple, list)):
            raise TypeError("prod: dim must be an int")
        return self._reduce("prod", reduce_prod_op, dim, keepdim, float32)

    def cumsum(self, dim: int) -> Tensor:
        """The running sums along ``dim`` (``torch.cumsum``): a float64 accumulation in index
        order rounded once per element (deterministic, every device). int64 and bool tensors
        give int64 and must stay within 2**24 (ValueError otherwise). Gradient: the reverse
        running sums of the output gradient. Raises IndexError for a dim out of range."""
        a = self._axis(dim, "cumsum")
        if self.ndim == 0:
            return self.reshape(1).cumsum(0).reshape(())
        if self._dtype is float32:
            return apply_op("cumsum", lambda n: cumsum_op(n, a), [self])
        n = self._shape[a]
        lo, hi = self._range
        if n * max(abs(lo), abs(hi)) > EXACT_INT:
            raise ValueError(
                f"cumsum: running sums of {n} values in [{lo}, {hi}] may exceed 2**24 in "
                f"magnitude, beyond what an int64 tensor holds exactly (convert with .float())"
            )
        bounds = (min(0, n * lo), max(0, n * hi))
        return apply_op("cumsum", lambda x: cumsum_op(x, a), [self], int64, bounds, False)

    # ------------------------------------------------ var, std, norm, logsumexp, any, all

    def _dims(self, dim, op: str) -> list:
        """The distinct axes of ``dim`` (None: all), ascending."""
        if dim is None:
            return list(range(self.ndim))
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        return sorted({self._axis(d, op) for d in dims})

    def _expand_over(self, m: Tensor, axes: list, op: str) -> Tensor:
        """m (self's shape with 1s at ``axes``) repeated to self's shape, one axis at a time
        (``broadcast_axis_op``; its gradient sums back). The shape of each step is taken from
        a sum of self over the axes still to go (a shape-only input)."""
        cur = m
        for i, a in enumerate(axes):
            rest = axes[i + 1 :]
            like = self if not rest else self.detach().sum(tuple(rest), keepdim=True)
            cur = apply_op(op, lambda g, ref, a=a: broadcast_axis_op(g, ref, a), [cur, like])
        return cur

    def var(self, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> Tensor:
        """The variance over ``dim`` (None: all; an int or a tuple), ``sum((x - mean)**2) /
        max(0, N - correction)``, correction 1 by default (Bessel's), or ``unbiased=False``
        (correction 0), as ``torch.var``. Two passes: the mean, then the sum of squared
        differences (no cancellation of E[x**2] - E[x]**2). float32 only. N - correction <= 0
        gives inf or NaN, as PyTorch's. Raises TypeError for both unbiased and correction, a
        non-float tensor, IndexError for a dim out of range."""
        _require_float("var", self)
        if isinstance(dim, (bool, np.bool_)):  # torch's var(unbiased) overload
            dim, unbiased = None, dim
        if unbiased is not None and correction is not None:
            raise TypeError("var: give unbiased or correction, not both")
        if correction is None:
            correction = 1 if unbiased is None or unbiased else 0
        if isinstance(correction, (bool, np.bool_)) or not isinstance(correction, numbers.Real):
            raise TypeError(f"var: correction must be a number, got {correction!r}")
        axes = self._dims(dim, "var")
        if self.ndim == 0:
            x, axes = self.reshape(1), [0]
        else:
            x = self
        n = math.prod(x._shape[a] for a in axes)
        m = x.mean(tuple(axes), keepdim=True) if n > 0 else x.sum(tuple(axes), keepdim=True)
        d = x - x._expand_over(m, axes, "var")
        ss = (d * d).sum(tuple(axes), keepdim=keepdim)
        div = max(0.0, n - float(correction))
        out = ss / div if div > 0 else ss * math.inf if n > 0 else ss * math.nan
        if self.ndim == 0:
            return out.reshape(())
        return out

    def std(self, dim=None, unbiased=None, keepdim: bool = False, *, correction=None) -> Tensor:
        """The standard deviation, ``sqrt(var(...))`` with ``var``'s arguments and rules
        (``torch.std``)."""
        return self.var(dim, unbiased, keepdim, correction=correction).sqrt()

    def norm(self, p="fro", dim=None, keepdim: bool = False) -> Tensor:
        """The vector norm over ``dim`` (None: all elements; an int or a tuple), as
        ``torch.norm`` / ``torch.linalg.vector_norm``: p = 2 or 'fro' (sqrt of the sum of
        squares), 1, inf (max |x|), -inf (min |x|), 0 (the count of nonzeros), any other real p
        (``sum(|x|**p)**(1/p)``). Gradients PyTorch's: 0 at a zero vector for p = 2 (a
        double ``where`` keeps the NaN of sqrt'(0) out), split among ties for +-inf; zeros for p = 0
        (PyTorch leaves that gradient None).
        float32 only. Raises ValueError for another p ('nuc'), TypeError for a non-number p."""
        _require_float("norm", self)
        if p == "fro":
            p = 2.0
        if isinstance(p, (bool, np.bool_, str)) or not isinstance(p, numbers.Real):
            raise ValueError(f"norm: p must be a real number or 'fro', got {p!r}")
        p = float(p)
        axes = self._dims(dim, "norm")
        x = self.reshape(1) if self.ndim == 0 else self
        dims = tuple(axes) if self.ndim else (0,)
        kd = keepdim and self.ndim > 0
        if p == 2.0:
            s = (x * x).sum(dims, keepdim=kd)
            zero = s == 0
            ones = apply_op("norm", oneslike_op, [s], float32, None, False)
            safe = apply_op("norm", where_op, [zero, ones, s]).sqrt()
            zeros = apply_op("norm", zeroslike_op, [s], float32, None, False)
            out = apply_op("norm", where_op, [zero, zeros, safe])
        elif p == 1.0:
            out = apply_op("norm", abs_op, [x]).sum(dims, keepdim=kd)
        elif p == math.inf:
            out = apply_op("norm", abs_op, [x]).amax(dims, keepdim=kd)
        elif p == -math.inf:
            out = apply_op("norm", abs_op, [x]).amin(dims, keepdim=kd)
        elif p == 0.0:
            nonzero = (x != 0).float()
            zeros = (x**0) * 0.0
            out = (nonzero + zeros).sum(dims, keepdim=kd)  # zeros: a zero gradient, as PyTorch's
        else:
            out = (apply_op("norm", abs_op, [x]) ** p).sum(dims, keepdim=kd) ** (1.0 / p)
        return out.reshape(()) if self.ndim == 0 else out

    def logsumexp(self, dim, keepdim: bool = False) -> Tensor:
        """``log(sum(exp(x)))`` over ``dim`` (an int or a tuple), computed as ``m + log(sum(
        exp(x - m)))`` with m the max over dim (0 where m is +-inf, so an all -inf slice gives
        -inf and a +inf gives inf: ``torch.logsumexp``'s rule); m carries no gradient (the
        result's gradient is softmax(x)). float32 only. Raises ValueError for an empty dim,
        IndexError for a dim out of range."""
        _require_float("logsumexp", self)
        axes = self._dims(dim, "logsumexp")
        x = self.reshape(1) if self.ndim == 0 else self
        axes = axes if self.ndim else [0]
        m = x.detach().amax(tuple(axes), keepdim=True)
        finite = m.abs() != math.inf
        zeros = apply_op("logsumexp", zeroslike_op, [m], float32, None, False)
        m = apply_op("logsumexp", where_op, [finite, m, zeros])
        e = (x - x._expand_over(m, axes, "logsumexp")).exp()
        out = e.sum(tuple(axes), keepdim=True).log() + m
        if not keepdim:
            out = out.reshape(tuple(s for i, s in enumerate(x._shape) if i not in axes))
        return out.reshape(()) if self.ndim == 0 and not keepdim else out

    def any(self, dim=None, keepdim: bool = False) -> Tensor:
        """True where any element over ``dim`` (None: all; an int or a tuple) is nonzero (NaN
        is nonzero), a bool tensor (``torch.any``); False over an empty dim."""
        counts = (self != 0).float().sum(dim, keepdim)
        return counts > 0

    def all(self, dim=None, keepdim: bool = False) -> Tensor:
        """True where every element over ``dim`` is nonzero, a bool tensor (``torch.all``);
        True over an empty dim."""
        counts = (self == 0).float().sum(dim, keepdim)
        return counts == 0
