"""The executor's fusion pass: rewrite a graph into gpumat's fused kernels.

:func:`fuse` takes the schedule an :class:`~gpumat.runtime.Executor` has sorted and returns an
equivalent graph in which the patterns of :data:`RULES` are replaced by fused ops, each one kernel
launch (or two) instead of several. The executor runs it on every plan (``Executor(...,
fusion=True)``, the default) and reports the counts as ``Executor.fusion_report``.

The rules, all in this module (one function each, applied in this order):

``dense_relu``
    ``relu_op(matmul_op(a, b) + broadcastto_op(bias, mm))`` -> ``matmul_bias_op(a, b, bias,
    relu=True)`` (:func:`gpumat.ops.matmul_bias`): 4 ops become 1. The pre-activation z
    disappears; the ReLU gradients that read z as their mask read the fused output y instead
    (y > 0 exactly where z > 0).
``dense``
    ``matmul_op(a, b) + broadcastto_op(bias, mm)`` -> ``matmul_bias_op(a, b, bias)``: 3 -> 1.
    Both dense rules also take ``broadcast_binary_op(matmul_op(a, b), bias, "add")``, whose
    product is read elsewhere only for its shape; ``dense_relu`` also takes
    ``relu_op(matmul_bias_op(a, b, bias))``, the front end's ``F.linear`` and a ReLU.
``relu_bias_gradient``
    ``relu_gradient_op(y, g)`` and ``reducesumaxiszero_op`` or ``sum_to_op`` of it to a
    (cols,) bias (a course graph's layer, or ``F.linear`` and ``F.relu`` in Tensor code) ->
    ``relu_bias_gradient_op(y, g)`` with two outputs, dz and dbias
    (:func:`gpumat.ops.relu_bias_gradient`): 2 -> 1.
``cross_entropy``
    ``softmaxcrossentropy_op(y, y_)`` and ``softmaxcrossentropy_gradient_op(y, y_)`` of the same
    nodes -> ``softmaxcrossentropy_with_gradient_op(y, y_)`` with two outputs, the gradient and the
    loss (:func:`gpumat.ops.cross_entropy_with_gradient`): 2 nodes (5 launches) -> 1 (2).
``split_gradient``
    a sum of ``as_strided_backward_op`` arrays of one shape whose regions tile it, each element
    in one region (the gradient of views that cover one array: each piece's gradient zero-filled
    to the whole, then added) -> ``cat_op`` of the pieces' gradients when the regions are slabs
    along one dim (``split`` / ``chunk``), else ``assemble_op`` (a transformer's q, k, v heads,
    views of one projection through split, view and transpose): for k pieces, 2k - 1 ops (k
    fills, k scatters, k - 1 sums of the whole) become one write of the whole. The values are
    the same but for the sign of a zero (x + 0 is +0 for x = -0).
``layer_norm_backward``
    ``layer_norm_gradient_op`` and ``layer_norm_weight_gradient_op`` over one
    ``layer_norm_stats_op`` of the same x, and the bias's ``sum_to_op`` of the same dy ->
    ``layer_norm_backward_op`` with three outputs, dx, dweight and dbias
    (:func:`gpumat.ops.layer_norm_backward`): 4 ops become 1, and the host reads x and dy once
    instead of four times. Rows of at most ``LAYER_NORM_BACKWARD_MAX_D`` values.

A pattern is rewritten only when no value that disappears is fed, evaluated, or read by a node
outside the pattern, so the fused graph computes the same eval values (to float32 rounding: the
bias sums run in another order). A fused op with several outputs writes each after its first
into the buffer of a :class:`FusedOutputOp` node, which the executor plans like any value but
does not run.
The fused ops themselves live with their kernel families (``matmul_bias_op`` in
:mod:`gpumat.graph.matmul`, ``relu_bias_gradient_op`` in :mod:`gpumat.graph.activation`,
``softmaxcrossentropy_with_gradient_op`` in :mod:`gpumat.graph.loss`,
``layer_norm_backward_op`` in :mod:`gpumat.graph.norm`, ``assemble_op`` in
:mod:`gpumat.graph.strided`).

The user's nodes are never modified: rewritten nodes and their consumers are new nodes, built
inputs first, so the pass emits the fused graph's schedule as it builds it (no second sort) and
carries every shape over (no second shape inference).
This is pattern-based operator fusion as in TVM's FuseOps / XLA's fusion passes, on the graph
level only (the fused kernels are hand-written, not generated).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from gpumat.graph.activation import (
    ReluGradientOp,
    ReluOp,
    relu_bias_gradient_op,
)
from gpumat.graph.attention import AttentionPartOp
from gpumat.graph.elementwise import AddOp
from gpumat.graph.layout import ReshapeOp, reshape_op
from gpumat.graph.loss import (
    SoftmaxCrossEntropyGradientOp,
    SoftmaxCrossEntropyOp,
    softmaxcrossentropy_with_gradient_op,
)
from gpumat.graph.matmul import MatMulBiasOp, MatMulOp, matmul_bias_op
from gpumat.graph.node import Attr, Node, Op, short_name
from gpumat.graph.norm import (
    LayerNormGradientOp,
    LayerNormStatsOp,
    LayerNormWeightGradientOp,
    layer_norm_backward_op,
)
from gpumat.graph.reduce import BroadcastToOp, ReduceSumAxisZeroOp
from gpumat.graph.reverse_mode import find_topo_sort
from gpumat.graph.strided import (
    AsStridedBackwardOp,
    BroadcastBinaryOp,
    SumToOp,
    as_strided_op,
    assemble_op,
    cat_op,
    contiguous_strides,
)

__all__ = [
    "RULES",
    "FusedGraph",
    "FusedOutputOp",
    "FusionReport",
    "fuse",
    "fuse_graph",
    "fused_output_op",
]


# --------------------------------------------------------------------------------------------------
# Multi-output values
# --------------------------------------------------------------------------------------------------


class FusedOutputOp(Op):
    """``fused_output_op(fused, index, shape)``: output ``index`` (>= 1) of a fused op with several
    outputs. The fused node writes it when it runs; this node only names the value (the executor
    plans its buffer from the fused node's step on and never calls its compute)."""

    name = "fused_output_op"
    no_gradient = "made by the fusion pass, after gradients"
    shape_only_inputs = (0,)
    inputs = ("fused",)
    attrs = (
        Attr("index", lambda i, _n, _op: int(i), 1, int),
        Attr("shape", lambda s, _n, _op: tuple(int(d) for d in s), (), tuple),
    )

    def __call__(self, fused: Node, index: int = 1, shape: tuple = ()) -> Node:
        node = super().__call__(fused, index, shape)
        fused.extra_outputs.append(node)  # the fused node plans and writes this output
        return node

    def node_name(self, node):
        return f"Output{node.index}({short_name(node.inputs[0])})"

    def compute(self, node, input_vals, output_val, device=None):
        raise RuntimeError(
            f"fused_output_op at node {node.name!r}: written by its fused node; not run on its own"
        )

    def infer_shape(self, node, input_shapes):
        return node.shape


fused_output_op = FusedOutputOp()


# --------------------------------------------------------------------------------------------------
# The pass
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FusionReport:
    """What the fusion pass did to one plan.

    Attributes:
        ops_before: nodes that run a kernel in the graph as built (fed nodes excluded).
        ops_after: the same count after fusion (the outputs of fused nodes excluded: they run
            nothing).
        rules: rule name -> number of rewrites (every rule of :data:`RULES` is listed).
        enabled: False when the executor was made with ``fusion=False`` (then before == after).
    """

    ops_before: int
    ops_after: int
    rules: dict
    enabled: bool = True

    def __str__(self) -> str:
        fired = ", ".join(f"{k} x{v}" for k, v in self.rules.items() if v) or "none"
        state = "" if self.enabled else " (fusion off)"
        return f"{self.ops_before} ops -> {self.ops_after} ops{state}; rules: {fired}"


def _is(node: Node, op_type: type) -> bool:
    return type(node.op) is op_type


class _Rewriter:
    """The state the rules share: the graph's consumers, claimed nodes and the new nodes' makers."""

    def __init__(self, order, eval_nodes, fed, shapes):
        self.order = order
        self.eval = set(eval_nodes)
        self.fed = set(fed)
        self.shapes = shapes
        self.consumers: dict[Node, list[Node]] = collections.defaultdict(list)
        for node in order:
            if node not in self.fed:
                for inp in node.inputs:
                    self.consumers[inp].append(node)
        self.claimed: set[Node] = set()
        self.makers: dict[Node, Callable] = {}  # original node -> maker(get) -> new node
        self.alias: dict[Node, Node] = {}  # eliminated pre-activation -> the fused ReLU node
        self.counts: collections.Counter = collections.Counter()

    def free(self, node: Node) -> bool:
        """Whether a rule may take ``node``: computed here, not fed, not taken by another rule."""
        return node not in self.fed and node not in self.claimed and node.op is not None

    def only_used_by(self, node: Node, allowed) -> bool:
        return node not in self.eval and all(c in allowed for c in self.consumers[node])


def _shape_use_only(node: Node, user: Node) -> bool:
    """Whether ``user`` reads ``node`` only for its shape (``Op.shape_only_inputs``)."""
    return all(k in user.op.shape_only_inputs for k, i in enumerate(user.inputs) if i is node)


def _dense_parts(rw: _Rewriter, z: Node):
    """(mm, bc, bias) when z = mm + broadcastto_op(bias, mm) with a (n,) bias, or (mm, None, bias)
    when z = broadcast_binary_op(mm, bias, "add"), mm 2-D and read elsewhere only for its shape
    (its gradient's ``sum_to_op(g, mm)``), or (z, None, bias) when z is already a dense layer
    without ReLU (``matmul_bias_op``: the front end's ``F.linear``), else None."""
    if _is(z, MatMulBiasOp) and not z.relu and rw.free(z):
        return z, None, z.inputs[2]
    if _is(z, BroadcastBinaryOp) and z.kind == "add" and rw.free(z):
        mm, bias = z.inputs
        if (
            _is(mm, MatMulOp)
            and rw.free(mm)
            and mm is not bias
            and mm not in rw.eval
            and len(rw.shapes[mm]) == 2
            and tuple(rw.shapes[bias]) == (rw.shapes[mm][1],)
            and all(c is z or _shape_use_only(mm, c) for c in rw.consumers[mm])
        ):
            return mm, None, bias
        return None
    if not _is(z, AddOp) or not rw.free(z):
        return None
    for mm, bc in (z.inputs, z.inputs[::-1]):
        if not (_is(mm, MatMulOp) and _is(bc, BroadcastToOp) and rw.free(mm) and rw.free(bc)):
            continue
        bias, target = bc.inputs
        n = rw.shapes[mm][1]
        if target is not mm or tuple(rw.shapes[bias]) != (n,) or mm is bc:
            continue
        if rw.only_used_by(mm, {z, bc}) and rw.only_used_by(bc, {z}):
            return mm, bc, bias
    return None


def _make_dense(rw: _Rewriter, mm: Node, bias: Node, relu: bool):
    a, b = mm.inputs[:2]  # a matmul_op's, or a matmul_bias_op's product
    ta, tb = mm.trans_A, mm.trans_B
    return lambda get: matmul_bias_op(get(a), get(b), get(bias), ta, tb, relu)


def rule_dense_relu(rw: _Rewriter, node: Node) -> bool:
    """relu(mm + broadcast(bias)) -> matmul_bias_op(relu=True); z's ReLU-gradient masks -> y."""
    if not _is(node, ReluOp) or not rw.free(node):
        return False
    z = node.inputs[0]
    parts = _dense_parts(rw, z)
    if parts is None:
        return False
    mask_users = [c for c in rw.consumers[z] if c is not node]
    if z in rw.eval or not all(
        _is(c, ReluGradientOp) and c.inputs[0] is z and c.inputs[1] is not z for c in mask_users
    ):
        return False
    mm, bc, bias = parts
    rw.claimed |= {n for n in (node, z, mm, bc) if n is not None}
    rw.alias[z] = node
    rw.alias[mm] = node  # for readers of its shape alone: the fused output has it
    rw.makers[node] = _make_dense(rw, mm, bias, relu=True)
    return True


def rule_dense(rw: _Rewriter, node: Node) -> bool:
    """mm + broadcast(bias) -> matmul_bias_op(relu=False)."""
    if _is(node, MatMulBiasOp):  # already one
        return False
    parts = _dense_parts(rw, node)
    if parts is None:
        return False
    mm, bc, bias = parts
    rw.claimed |= {n for n in (node, mm, bc) if n is not None}
    rw.alias[mm] = node  # for readers of its shape alone: the fused output has it
    rw.makers[node] = _make_dense(rw, mm, bias, relu=False)
    return True


def rule_relu_bias_gradient(rw: _Rewriter, node: Node) -> bool:
    """relu_gradient(y, g) and its column sums to a (cols,) bias -> relu_bias_gradient_op. The
    sums are a course graph's reducesumaxiszero_op or the front end's sum_to_op (a bias's
    gradient in ``Tensor`` code)."""
    if not (_is(node, ReduceSumAxisZeroOp) or _is(node, SumToOp)) or not rw.free(node):
        return False
    r = node.inputs[0]
    if not _is(r, ReluGradientOp) or not rw.free(r):
        return False
    shape = rw.shapes[r]
    if len(shape) != 2 or tuple(rw.shapes[node]) != (shape[1],):
        return False
    y, g = r.inputs
    rw.claimed |= {node, r}
    rw.makers[r] = lambda get: relu_bias_gradient_op(get(rw.alias.get(y, y)), get(g))
    out_shape = (shape[1],)
    rw.makers[node] = lambda get: fused_output_op(get(r), 1, out_shape)
    return True


def rule_cross_entropy(rw: _Rewriter, node: Node) -> bool:
    """softmaxcrossentropy_op(y, y_) and its gradient op on the same nodes -> one fused op."""
    if not _is(node, SoftmaxCrossEntropyGradientOp) or not rw.free(node):
        return False
    y, y_ = node.inputs
    for loss in rw.consumers[y]:
        if _is(loss, SoftmaxCrossEntropyOp) and rw.free(loss) and loss.inputs == [y, y_]:
            rw.claimed |= {node, loss}
            rw.makers[node] = lambda get: softmaxcrossentropy_with_gradient_op(get(y), get(y_))
            rw.makers[loss] = lambda get: fused_output_op(get(node), 1, (1,))
            return True
    return False


def _free_consumer(rw: _Rewriter, of: Node, op_type: type, first_inputs: tuple, shape: tuple):
    """The first free consumer of ``of`` that is an ``op_type`` node of ``shape`` whose leading
    inputs are ``first_inputs`` (the same nodes), or None."""
    for c in rw.consumers[of]:
        if (
            _is(c, op_type)
            and rw.free(c)
            and len(c.inputs) >= len(first_inputs)
            and all(
                a is b for a, b in zip(c.inputs[: len(first_inputs)], first_inputs, strict=True)
            )
            and tuple(rw.shapes[c]) == shape
        ):
            return c
    return None


#: The widest rows the layer_norm_backward rule fuses: its host kernel keeps two partial sums per
#: column and chunk of rows, and wider rows would leave it fewer chunks than threads.
LAYER_NORM_BACKWARD_MAX_D = 8192


def rule_layer_norm_backward(rw: _Rewriter, node: Node) -> bool:
    """layer_norm_gradient_op and layer_norm_weight_gradient_op over one layer_norm_stats_op of
    the same x, and dy's sum_to_op to the bias -> layer_norm_backward_op with three outputs."""
    if not _is(node, LayerNormGradientOp) or not rw.free(node):
        return False
    x, stats, w, dy = node.inputs
    if not _is(stats, LayerNormStatsOp) or not rw.free(stats) or stats.inputs[0] is not x:
        return False
    if stats.rms != node.rms:
        return False
    shape_w = tuple(rw.shapes[w])
    if math.prod(shape_w) > LAYER_NORM_BACKWARD_MAX_D:
        return False
    gw = _free_consumer(rw, stats, LayerNormWeightGradientOp, (x, stats, dy), shape_w)
    gb = _free_consumer(rw, dy, SumToOp, (dy,), shape_w)
    if gw is None or gb is None or not rw.only_used_by(stats, {node, gw}):
        return False
    rw.claimed |= {node, stats, gw, gb}
    eps, rms = stats.eps, stats.rms
    rw.makers[node] = lambda get: layer_norm_backward_op(get(x), get(w), get(dy), eps, rms)
    rw.makers[gw] = lambda get: fused_output_op(get(node), 1, shape_w)
    rw.makers[gb] = lambda get: fused_output_op(get(node), 2, shape_w)
    return True


def _piece(rw: _Rewriter, node: Node):
    """(full shape, stride, offset, g) when node = as_strided_backward_op(g, like, stride, offset)
    with non-negative strides (g put into a strided region of like's contiguous layout: the
    gradient of a view), else None."""
    if not _is(node, AsStridedBackwardOp) or not rw.free(node):
        return None
    stride = tuple(node.stride)
    if any(st < 0 for st in stride):
        return None
    return tuple(rw.shapes[node]), stride, node.offset, node.inputs[0]


def _slab(rw: _Rewriter, full: tuple, stride: tuple, offset: int, g: Node):
    """(dim, start) when the region is a slab of full's contiguous layout along one dim (the
    gradient of ``narrow``, so of ``split`` and ``chunk``), else None."""
    part = tuple(rw.shapes[g])
    strides = contiguous_strides(full)
    if len(full) != len(part) or not full or stride != strides:
        return None
    dims = [d for d in range(len(full)) if full[d] != part[d]]
    if len(dims) != 1:
        return None
    d = dims[0]
    step = strides[d]
    if step <= 0 or offset % step:
        return None
    return d, offset // step


def _tiles(rw: _Rewriter, full: tuple, pieces) -> bool:
    """Whether the pieces' regions cover full's elements once each: together as many elements as
    full, and none left unmarked when each region is marked (numpy strided views of one flag per
    element)."""
    numel = math.prod(full)
    if sum(math.prod(rw.shapes[g]) for _, _, _, g in pieces) != numel:
        return False
    flags = np.zeros(numel, np.uint8)
    for _, stride, offset, g in pieces:  # inside full: as_strided_backward_op's shape rule checked
        size = tuple(rw.shapes[g])
        if math.prod(size) == 0:
            continue
        region = np.lib.stride_tricks.as_strided(
            flags[offset:], size, tuple(st * flags.itemsize for st in stride)
        )
        region[...] = 1
    return bool(flags.all())


def rule_split_gradient(rw: _Rewriter, node: Node) -> bool:
    """A sum (a tree of ``add_op``) of as_strided_backward_op arrays of one shape whose regions
    tile it (each element in one region) -> one write of the whole: ``cat_op`` of their gradients
    when the regions are slabs along one dim (the gradient of ``split`` / ``chunk``), else
    ``assemble_op`` (a transformer's q, k, v heads: views of one projection through split, view
    and transpose) instead of a zero-filled array per piece and their sums."""
    if not _is(node, AddOp) or not rw.free(node):
        return False
    adds, leaves, stack = {node}, [], list(node.inputs)
    while stack:
        x = stack.pop()
        if _is(x, AddOp) and rw.free(x) and rw.only_used_by(x, adds):
            adds.add(x)
            stack.extend(x.inputs)
        else:
            leaves.append(x)
    pieces = []
    for leaf in leaves:
        piece = _piece(rw, leaf)
        if piece is None or not rw.only_used_by(leaf, adds):
            return False
        pieces.append(piece)
    full = pieces[0][0]
    if any(p[0] != full for p in pieces) or not _tiles(rw, full, pieces):
        return False
    rw.claimed |= adds | set(leaves)
    slabs = [_slab(rw, *p) for p in pieces]
    if all(sl is not None and sl[0] == slabs[0][0] for sl in slabs):
        d = slabs[0][0]
        gs = [p[3] for _, p in sorted(zip(slabs, pieces, strict=True), key=lambda sp: sp[0][1])]
        rw.makers[node] = lambda get: cat_op([get(g) for g in gs], d)
        return True
    gather = _gather_of_parts(rw, full, pieces, leaves)
    if gather is not None:
        source, size, stride, offset, parts = gather
        rw.claimed |= parts
        rw.makers[node] = lambda get: _gathered(get(source), size, stride, offset, full)
        return True
    gs = [p[3] for p in pieces]
    strides, offsets = tuple(p[1] for p in pieces), tuple(p[2] for p in pieces)
    rw.makers[node] = lambda get: assemble_op([get(g) for g in gs], full, strides, offsets)
    return True


def _gathered(source: Node, size: tuple, stride: tuple, offset: int, full: tuple) -> list:
    gathered = as_strided_op(source, size, stride, offset)
    return [(gathered, size), (reshape_op(gathered, full), full)]


def _gather_of_parts(rw: _Rewriter, full: tuple, pieces, leaves):
    """When every piece is (a reshape of) one ``attention_part_op`` of the same flat gradient G
    (dq, dk, dv: contiguous blocks of G), and the pieces are alike (one shape and strides, offsets
    evenly spaced in the whole and in G), the whole is one strided gather from G: (G, size,
    stride, offset, the part and reshape nodes it replaces) for ``as_strided_op(G, size, stride,
    offset)`` shown as full; else None. The pieces and the block index are the gather's dims,
    ordered by their strides in the whole, which must then be its row-major layout."""
    sources, parts = [], set()
    for (_, _, _, g), leaf in zip(pieces, leaves, strict=True):
        users = {leaf}
        if _is(g, ReshapeOp) and rw.free(g) and rw.only_used_by(g, users):
            parts.add(g)
            users = {g}
            g = g.inputs[0]
        if not (_is(g, AttentionPartOp) and rw.free(g) and rw.only_used_by(g, users)):
            return None
        parts.add(g)
        blocks = [math.prod(rw.shapes[x]) for x in g.inputs[1:]]
        sources.append((g.inputs[0], sum(blocks[: g.index])))
    if (
        len({src for src, _ in sources}) != 1
        or len({(tuple(rw.shapes[p[3]]), p[1]) for p in pieces}) != 1
    ):
        return None
    order = sorted(range(len(pieces)), key=lambda k: pieces[k][2])
    whole_at = [pieces[k][2] for k in order]
    source_at = [sources[k][1] for k in order]
    if whole_at[0] != 0:
        return None
    k = len(pieces)
    step, source_step = (whole_at[1], source_at[1] - source_at[0]) if k > 1 else (0, 0)
    if any(
        whole_at[j] != j * step or source_at[j] - source_at[0] != j * source_step for j in range(k)
    ):
        return None
    shape = tuple(rw.shapes[pieces[0][3]])
    dims = [(k, step, source_step)] + list(
        zip(shape, pieces[0][1], contiguous_strides(shape), strict=True)
    )
    dims = sorted((d for d in dims if d[0] != 1), key=lambda d: -d[1])
    expected = 1
    for n, st, _ in reversed(dims):  # the whole's row-major layout, dim by dim from the last
        if st != expected:
            return None
        expected *= n
    if expected != math.prod(full):
        return None
    size = tuple(d[0] for d in dims)
    return sources[0][0], size, tuple(d[2] for d in dims), source_at[0], parts


#: name -> rule; applied in this order over the whole graph (dense_relu before dense, so a ReLU
#: layer is one fused node, not a dense node and a ReLU).
RULES: dict[str, Callable[[_Rewriter, Node], bool]] = {
    "dense_relu": rule_dense_relu,
    "dense": rule_dense,
    "relu_bias_gradient": rule_relu_bias_gradient,
    "cross_entropy": rule_cross_entropy,
    "split_gradient": rule_split_gradient,
    "layer_norm_backward": rule_layer_norm_backward,
}


def _count_ops(order: Sequence[Node], fed: set) -> int:
    return sum(1 for n in order if n not in fed and not _is(n, FusedOutputOp))


@dataclasses.dataclass(frozen=True)
class FusedGraph:
    """The result of :func:`fuse`.

    Attributes:
        eval_nodes: the new eval nodes, one per eval node, in order (an untouched node is itself).
        order: the fused graph's schedule, a topological order of what ``eval_nodes`` need (fed
            nodes are leaves), as the pass built it.
        shapes: node -> shape for every node of ``order`` (carried over from the input shapes: a
            fused node has the shape of the node it replaces).
        report: a :class:`FusionReport`.
    """

    eval_nodes: list
    order: list
    shapes: dict
    report: FusionReport


def fuse(
    order: Sequence[Node],
    eval_nodes: Sequence[Node],
    fed,
    shapes: dict,
    rules: Sequence[str] | None = None,
) -> FusedGraph:
    """Rewrites the graph scheduled as ``order`` with :data:`RULES`.

    Args:
        order: ``find_topo_sort(eval_nodes, stop_at=fed)``, the executor's schedule.
        eval_nodes: the nodes to evaluate.
        fed: the fed nodes (leaves: their inputs are not needed; a fed node is never rewritten).
        shapes: node -> shape for every node of ``order``.
        rules: names of the rules to apply (default: all, in :data:`RULES` order).

    Returns:
        A :class:`FusedGraph`. When no rule fires it holds the given order and shapes.

    Raises:
        KeyError: an unknown rule name.
    """
    fed = set(fed)
    names = list(RULES) if rules is None else list(rules)
    for name in names:
        if name not in RULES:
            raise KeyError(f"fuse_graph: unknown rule {name!r}; rules are {list(RULES)}")
    rw = _Rewriter(order, eval_nodes, fed, shapes)
    for name in names:
        for node in order:
            if RULES[name](rw, node):
                rw.counts[name] += 1
    n_ops = _count_ops(order, fed)
    report = FusionReport(n_ops, n_ops, {name: rw.counts[name] for name in RULES})
    if not rw.claimed:
        return FusedGraph(list(eval_nodes), list(order), dict(shapes), report)

    built: dict[Node, Node] = {}
    new_shapes: dict[Node, tuple] = {}
    new_order: list[Node] = []  # nodes in the order get() finishes them: inputs first

    def get(node: Node) -> Node:
        if node in built:
            return built[node]
        if node in fed:
            new = node
        elif node in rw.makers:
            new = rw.makers[node](get)
            # a list [(node, shape), ...]: the replacement last, its inputs first
            if isinstance(new, list):
                for inner, shape in new[:-1]:
                    new_shapes[inner] = shape
                    new_order.append(inner)
                new = new[-1][0]
        else:
            inputs = [get(rw.alias.get(i, i)) for i in node.inputs]
            unchanged = all(a is b for a, b in zip(inputs, node.inputs, strict=True))
            new = node if unchanged else node.with_inputs(inputs)
        built[node] = new
        new_shapes[new] = shapes[node]  # a replacement has the shape of the node it replaces
        new_order.append(new)
        return new

    for node in order:  # inputs first: get() recurses only into nodes a rule builds on demand
        if node not in rw.claimed or node in rw.makers:
            get(node)
    new_eval = [get(n) for n in eval_nodes]
    # Keep what the new eval nodes need (a claimed pattern's leftovers are dropped).
    needed: set[Node] = set()
    stack = list(new_eval)
    while stack:
        node = stack.pop()
        if node not in needed:
            needed.add(node)
            if node not in fed:
                stack.extend(node.inputs)
    new_order = [n for n in new_order if n in needed]
    report = dataclasses.replace(report, ops_after=_count_ops(new_order, fed))
    return FusedGraph(new_eval, new_order, {n: new_shapes[n] for n in new_order}, report)


def fuse_graph(
    eval_nodes: Sequence[Node], fed, shapes: dict, rules: Sequence[str] | None = None
) -> tuple[list[Node], FusionReport]:
    """:func:`fuse` for a graph given by its eval nodes (it sorts the graph first).

    Args:
        eval_nodes: the nodes to evaluate.
        fed: the fed nodes (leaves).
        shapes: node -> shape for every node of ``find_topo_sort(eval_nodes, stop_at=fed)``
            (``Executor.infer_shape``'s result).
        rules: names of the rules to apply (default: all, in :data:`RULES` order).

    Returns:
        (new eval nodes, one per eval node, in order; a :class:`FusionReport`). Nodes that no rule
        touches, and whose inputs are unchanged, are the original node objects.

    Raises:
        KeyError: an unknown rule name.
    """
    fused = fuse(find_topo_sort(eval_nodes, stop_at=fed), eval_nodes, fed, shapes, rules)
    return fused.eval_nodes, fused.report
