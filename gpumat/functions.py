"""The tensor functions of PyTorch's ``torch`` namespace: ``gpumat.exp(x)`` is ``x.exp()``.

PyTorch programs call both spellings (``torch.exp(x)`` and ``x.exp()``, ``torch.sum(x, 1)`` and
``x.sum(1)``), so each function here is its :class:`gpumat.Tensor` method, with PyTorch's
argument names (``input``, ``dim``, ``keepdim``): the pointwise ones (``exp``, ``log``, ``sqrt``,
``abs``, ``sign``, ``sin``, ``cos``, ``erf``, ``log1p``, ``rsqrt``, ``relu``, ``tanh``,
``sigmoid``: one per graph op that names a tensor method), ``neg``, the comparisons ``eq``,
``ne``, ``lt``, ``le``, ``gt``, ``ge``, ``logical_not``, ``logical_and``, ``logical_or``,
``clamp`` / ``clip``, ``minimum``, ``maximum``, ``masked_fill``, ``softmax``, ``log_softmax``,
``sum``, ``mean``, ``max``, ``argmax``, ``sort``, ``argsort``, ``topk``, ``reshape``,
``squeeze``, ``unsqueeze``, ``t``, ``transpose``, ``matmul`` and ``bmm``; the views and splits
``permute``, ``movedim``, ``swapaxes``, ``narrow``, ``select``, ``unbind``, ``split``,
``tensor_split``, ``chunk``, ``broadcast_to``, and ``flip``, ``tile``; the index functions
``index_select``, ``index_add``, ``index_copy``, ``index_fill``, ``gather``, ``scatter_add``,
``masked_select``, ``nonzero``; ``min``, ``argmin``, ``amin``, ``amax``, ``prod``,
``cumsum``, ``var``, ``std``, ``norm``, ``logsumexp``, ``any``, ``all``, ``square``, ``tril``,
``triu`` and ``pow(input, exponent)`` (input a tensor or, with a tensor exponent, a number);
``cat`` / ``concat`` and ``stack`` (lists of tensors); and
``where(condition, input, other)``, whose first argument is the condition
(:func:`gpumat.tensor.where`). Shapes, dtypes and errors are the methods'.

Raises (every function): TypeError when ``input`` is not a :class:`gpumat.Tensor`, naming the
function; otherwise what the method raises.
"""

from __future__ import annotations

from gpumat.graph.node import TENSOR_METHODS
from gpumat.tensor import (  # noqa: F401 (gpumat.where, cat, ...: in __all__)
    Tensor,
    cat,
    concat,
    concatenate,
    meshgrid,
    stack,
    where,
)

_POINTWISE = [op.tensor_method for op in TENSOR_METHODS]
__all__ = sorted(
    [
        *_POINTWISE,
        "argmax",
        "argsort",
        "bmm",
        "mm",
        "clamp",
        "clip",
        "eq",
        "ge",
        "gt",
        "le",
        "logical_and",
        "logical_not",
        "logical_or",
        "lt",
        "masked_fill",
        "maximum",
        "minimum",
        "ne",
        "where",
        "log_softmax",
        "matmul",
        "max",
        "mean",
        "neg",
        "reshape",
        "softmax",
        "sort",
        "squeeze",
        "sum",
        "t",
        "topk",
        "transpose",
        "unsqueeze",
        # views, splitting and joining (gpumat.tensor._views)
        "broadcast_to",
        "cat",
        "chunk",
        "concat",
        "concatenate",
        "flip",
        "movedim",
        "narrow",
        "permute",
        "select",
        "split",
        "stack",
        "meshgrid",
        "roll",
        "repeat_interleave",
        "swapaxes",
        "tensor_split",
        "tile",
        "unbind",
        # index
        "gather",
        "index_add",
        "index_copy",
        "index_fill",
        "index_select",
        "masked_select",
        "nonzero",
        "scatter_add",
        "take_along_dim",
        #: reductions, powers, triangles
        "all",
        "amax",
        "amin",
        "any",
        "argmin",
        "cumsum",
        "logsumexp",
        "min",
        "norm",
        "pow",
        "prod",
        "square",
        "std",
        "tril",
        "triu",
        "var",
    ]
)


def _tensor(input, name: str) -> Tensor:  # noqa: A002 (PyTorch's argument name)
    if not isinstance(input, Tensor):
        raise TypeError(f"{name}: expected a Tensor, got {type(input).__name__}")
    return input


def _method(name: str, doc: str):
    """``name(input, *args, **kwargs)`` calling ``input.name(*args, **kwargs)``."""

    def function(input, *args, **kwargs):  # noqa: A002
        return getattr(_tensor(input, name), name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__module__ = __name__
    function.__doc__ = f"{doc} (``torch.{name}``; ``Tensor.{name}``)."
    return function


for _op in TENSOR_METHODS:
    globals()[_op.tensor_method] = _method(_op.tensor_method, f"``input.{_op.tensor_method}()``")

neg = _method("neg", "``-input``")
softmax = _method("softmax", "``input.softmax(dim)``")
log_softmax = _method("log_softmax", "``input.log_softmax(dim)``")
sum = _method("sum", "``input.sum(dim=None, keepdim=False)``")  # noqa: A001 (torch.sum)
mean = _method("mean", "``input.mean(dim=None, keepdim=False)``")
max = _method("max", "``input.max(dim=None, keepdim=False)``")  # noqa: A001 (torch.max)
argmax = _method("argmax", "``input.argmax(dim=None, keepdim=False)``")
reshape = _method("reshape", "``input.reshape(shape)``")
squeeze = _method("squeeze", "``input.squeeze(dim=None)``")
unsqueeze = _method("unsqueeze", "``input.unsqueeze(dim)``")
t = _method("t", "``input.t()``")
transpose = _method("transpose", "``input.transpose(dim0, dim1)``")
matmul = _method("matmul", "``input @ other`` for float32 tensors of rank >= 1, batched")
mm = _method("mm", "``input.mm(mat2)``: (N, K) @ (K, M) -> (N, M), 2-D tensors only")
bmm = _method("bmm", "``input.bmm(mat2)``: (B, N, K) @ (B, K, M) -> (B, N, M)")
eq = _method("eq", "``input == other``, a bool tensor")
ne = _method("ne", "``input != other``, a bool tensor")
lt = _method("lt", "``input < other``, a bool tensor")
le = _method("le", "``input <= other``, a bool tensor")
gt = _method("gt", "``input > other``, a bool tensor")
ge = _method("ge", "``input >= other``, a bool tensor")
logical_not = _method("logical_not", "``input.logical_not()``, a bool tensor")
logical_and = _method("logical_and", "``input.logical_and(other)``, a bool tensor")
logical_or = _method("logical_or", "``input.logical_or(other)``, a bool tensor")
clamp = _method("clamp", "``input.clamp(min=None, max=None)`` with number bounds")
clip = _method("clip", "``input.clamp(min=None, max=None)`` (PyTorch's alias)")
minimum = _method("minimum", "``input.minimum(other)``")
maximum = _method("maximum", "``input.maximum(other)``")
masked_fill = _method("masked_fill", "``input.masked_fill(mask, value)``")
permute = _method("permute", "``input.permute(dims)``: the dims reordered (a view)")
movedim = _method("movedim", "``input.movedim(source, destination)`` (a view)")
swapaxes = _method("swapaxes", "``input.transpose(axis0, axis1)`` (a view)")
narrow = _method("narrow", "``input.narrow(dim, start, length)`` (a view)")
select = _method("select", "``input.select(dim, index)`` (a view)")
unbind = _method("unbind", "``input.unbind(dim=0)``: views along dim")
split = _method("split", "``input.split(split_size_or_sections, dim=0)``: views")
tensor_split = _method("tensor_split", "``input.tensor_split(sections, dim=0)``: views")
chunk = _method("chunk", "``input.chunk(chunks, dim=0)``: views")
flip = _method("flip", "``input.flip(dims)``: a reversed copy")
tile = _method("tile", "``input.tile(dims)``: a tiled copy")
broadcast_to = _method("broadcast_to", "``input.expand(size)`` (a view)")
# index
index_select = _method("index_select", "``input.index_select(dim, index)``")
index_add = _method("index_add", "``input.index_add(dim, index, source, *, alpha=1)``")
index_copy = _method("index_copy", "``input.index_copy(dim, index, source)``")
index_fill = _method("index_fill", "``input.index_fill(dim, index, value)``")
gather = _method("gather", "``input.gather(dim, index)``")
scatter_add = _method("scatter_add", "``input.scatter_add(dim, index, src)``")
take_along_dim = _method("take_along_dim", "``input.take_along_dim(indices, dim=None)``")
masked_select = _method("masked_select", "``input.masked_select(mask)``")
nonzero = _method("nonzero", "``input.nonzero(*, as_tuple=False)``")
sort = _method("sort", "``input.sort(dim=-1, descending=False, stable=False)``: (values, indices)")
argsort = _method("argsort", "``input.argsort(dim=-1, descending=False, stable=False)``")
topk = _method("topk", "``input.topk(k, dim=-1, largest=True, sorted=True)``: (values, indices)")

# reductions, powers, triangles
min = _method("min", "``input.min(dim=None, keepdim=False)``")  # noqa: A001 (torch.min)
argmin = _method("argmin", "``input.argmin(dim=None, keepdim=False)``")
amax = _method("amax", "``input.amax(dim=(), keepdim=False)``")
amin = _method("amin", "``input.amin(dim=(), keepdim=False)``")
prod = _method("prod", "``input.prod(dim=None, keepdim=False)``")
cumsum = _method("cumsum", "``input.cumsum(dim)``")
var = _method("var", "``input.var(dim=None, unbiased=None, keepdim=False, *, correction=None)``")
std = _method("std", "``input.std(dim=None, unbiased=None, keepdim=False, *, correction=None)``")
norm = _method("norm", "``input.norm(p='fro', dim=None, keepdim=False)``")
logsumexp = _method("logsumexp", "``input.logsumexp(dim, keepdim=False)``")
any = _method("any", "``input.any(dim=None, keepdim=False)``, a bool tensor")  # noqa: A001
all = _method("all", "``input.all(dim=None, keepdim=False)``, a bool tensor")  # noqa: A001
square = _method("square", "``input * input``")
tril = _method("tril", "``input.tril(diagonal=0)``")
triu = _method("triu", "``input.triu(diagonal=0)``")


def pow(input, exponent):  # noqa: A001, A002 (torch.pow's names)
    """``input ** exponent`` (``torch.pow``; ``Tensor.pow``): input a float32 tensor and
    exponent a real number or a tensor, or input a real number and exponent a tensor
    (``number ** tensor``). Shapes, dtypes, gradients and errors are ``Tensor.__pow__``'s
    and ``Tensor.__rpow__``'s.

    Raises:
        TypeError: neither argument is a Tensor, or the exponent is not a number or a Tensor.
    """
    if isinstance(input, Tensor):
        return input.pow(exponent)
    if isinstance(exponent, Tensor):
        out = exponent.__rpow__(input)
        if out is not NotImplemented:
            return out
    raise TypeError(
        f"pow: expected a Tensor, got {type(input).__name__} (and an exponent of type "
        f"{type(exponent).__name__})"
    )


roll = _method("roll", "``input.roll(shifts, dims=None)``: a rolled copy")
repeat_interleave = _method(
    "repeat_interleave", "``input.repeat_interleave(repeats, dim=None)``: a copy"
)
