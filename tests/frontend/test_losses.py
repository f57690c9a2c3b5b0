"""The loss functions and modules against PyTorch: ``cross_entropy`` / ``nll_loss`` with
``weight``, ``ignore_index``, ``label_smoothing``, probability targets and (C,), (N, C) and
(N, C, d1, d2) inputs; ``binary_cross_entropy`` (``_with_logits``, ``pos_weight``),
``smooth_l1_loss``, ``huber_loss`` and ``kl_div``; each reduction. Values and gradients on fresh
random inputs against PyTorch in float64 (the reference) on every device, results NaN-poisoned
first; a compiled step against the eager one; the bad-input errors."""

import numpy as np
import pytest
import torch
from frontend_helpers import poison
from helpers import new_rng

import gpumat
import gpumat.nn as nn
import gpumat.nn.functional as F  # noqa: N812 (PyTorch's convention)

TF = torch.nn.functional


def _pair(values, ctx, grad=False):
    ours = gpumat.tensor(values, device=ctx, requires_grad=grad and values.dtype == np.float32)
    ref = torch.tensor(values.astype(np.float64) if values.dtype == np.float32 else values)
    return ours, ref.requires_grad_(grad and values.dtype == np.float32)


def _check(ctx, fn_ours, fn_ref, arrays, grad_of=(0,), rtol=2e-5, atol=2e-6):
    """fn_ours(*gpumat tensors) against fn_ref(*float64 torch tensors): values, then the
    gradients of sum(loss * r) with respect to the arrays at ``grad_of``."""
    pairs = [_pair(a, ctx, grad=k in grad_of) for k, a in enumerate(arrays)]
    poison(ctx, [a.shape for a in arrays])
    ours = fn_ours(*[p[0] for p in pairs])
    ref = fn_ref(*[p[1] for p in pairs])
    assert tuple(ours.shape) == tuple(ref.shape)
    np.testing.assert_allclose(ours.detach().numpy(), ref.detach().numpy(), rtol=rtol, atol=atol)
    if not grad_of:
        return
    r = np.random.default_rng(0).uniform(0.5, 1.5, size=tuple(ref.shape)).astype(np.float32)
    (ours * gpumat.tensor(r, device=ctx)).sum().backward()
    (ref * torch.tensor(r, dtype=torch.float64)).sum().backward()
    for k in grad_of:
        got, want = pairs[k][0].grad, pairs[k][1].grad
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=rtol * 5, atol=atol * 5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
def test_class_losses_with_weight_ignore_index_and_smoothing(ctx, fn, reduction):
    rng, _ = new_rng()
    n, c = 7, 5
    logits = rng.standard_normal((n, c)).astype(np.float32) * 2
    target = rng.integers(0, c, n)
    target[[1, 4]] = -100  # ignored
    weight = rng.uniform(0.2, 2.0, c).astype(np.float32)
    if fn == "nll_loss":
        logits = np.log(np.exp(logits) / np.exp(logits).sum(1, keepdims=True)).astype(np.float32)
    variants = [
        ({"weight": True}, {}),
        ({}, {}),  # ignored targets only
        ({"weight": True}, {"ignore_index": 2}),
    ]
    if fn == "cross_entropy":
        variants += [({}, {"label_smoothing": 0.2}), ({"weight": True}, {"label_smoothing": 0.1})]
    for with_weight, kw in variants:
        t = target if "ignore_index" not in kw else np.where(target < 0, 0, target)

        def ours(x, t_, w, kw=kw, with_weight=with_weight):
            return getattr(F, fn)(x, t_, w if with_weight else None, reduction=reduction, **kw)

        def ref(x, t_, w, kw=kw, with_weight=with_weight):
            return getattr(TF, fn)(x, t_, w if with_weight else None, reduction=reduction, **kw)

        _check(ctx, ours, ref, [logits, t, weight])


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_class_losses_of_other_shapes_and_probability_targets(ctx, reduction):
    rng, _ = new_rng()
    x4 = rng.standard_normal((3, 4, 2, 5)).astype(np.float32)  # (N, C, d1, d2)
    t4 = rng.integers(0, 4, (3, 2, 5))
    t4[0, 1, 2] = -100
    w = rng.uniform(0.5, 1.5, 4).astype(np.float32)
    for kw in ({}, {"label_smoothing": 0.3}):
        _check(
            ctx,
            lambda x, t, w, kw=kw: F.cross_entropy(x, t, w, reduction=reduction, **kw),
            lambda x, t, w, kw=kw: TF.cross_entropy(x, t, w, reduction=reduction, **kw),
            [x4, t4, w],
        )
    _check(
        ctx,
        lambda x, t: F.nll_loss(x.log_softmax(1), t, reduction=reduction),
        lambda x, t: TF.nll_loss(x.log_softmax(1), t, reduction=reduction),
        [x4, t4],
    )
    x1, t1 = rng.standard_normal(6).astype(np.float32), np.array(4)  # (C,), a 0-d target
    _check(
        ctx,
        lambda x, t: F.cross_entropy(x, t, reduction=reduction),
        lambda x, t: TF.cross_entropy(x, t, reduction=reduction),
        [x1, t1],
    )
    probs = rng.dirichlet(np.ones(4), size=(3, 2, 5)).transpose(0, 3, 1, 2).astype(np.float32)
    for kw in ({}, {"label_smoothing": 0.25}):
        _check(
            ctx,
            lambda x, p, w, kw=kw: F.cross_entropy(x, p, w, reduction=reduction, **kw),
            lambda x, p, w, kw=kw: TF.cross_entropy(x, p, w, reduction=reduction, **kw),
            [x4, probs, w],
            grad_of=(0, 1),
        )


def test_every_target_ignored_is_nan_as_pytorch(ctx):
    x = gpumat.tensor(
        np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32), device=ctx
    )
    t = gpumat.tensor([-100, -100, -100], device=ctx)
    assert np.isnan(F.cross_entropy(x, t).item())
    assert np.isnan(TF.cross_entropy(torch.tensor(x.numpy()), torch.tensor(t.numpy())).item())
    assert F.cross_entropy(x, t, reduction="sum").item() == 0.0
    assert np.array_equal(F.nll_loss(x, t, reduction="none").numpy(), np.zeros(3, np.float32))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_and_regression_losses(ctx, reduction):
    rng, _ = new_rng()
    shape = (4, 3, 2)
    logits = rng.standard_normal(shape).astype(np.float32) * 4
    logits[0, 0, 0], logits[1, 1, 1] = 60.0, -60.0  # saturated: the stable forms stay finite
    probs = (1 / (1 + np.exp(-rng.standard_normal(shape)))).astype(np.float32)
    probs[0, 0, 0] = 0.0  # log clamped to -100, as PyTorch
    target = rng.uniform(0, 1, shape).astype(np.float32)
    weight = rng.uniform(0.5, 2, (3, 2)).astype(np.float32)  # broadcast
    pos_weight = rng.uniform(0.5, 3, (2,)).astype(np.float32)
    pred = rng.standard_normal(shape).astype(np.float32) * 2
    r = reduction
    _check(
        ctx,
        lambda x, t, w: F.binary_cross_entropy(x, t, w, reduction=r),
        lambda x, t, w: TF.binary_cross_entropy(x, t, w, reduction=r),
        [probs, target, weight],
        grad_of=(),  # at x = 0 the gradients are infinite (PyTorch's target gradient reads the
        # unclamped log); the clipped probabilities below check both gradients
    )
    _check(
        ctx,
        lambda x, t: F.binary_cross_entropy(x, t, reduction=r),
        lambda x, t: TF.binary_cross_entropy(x, t, reduction=r),
        [np.clip(probs, 0.05, 0.95), target],
        grad_of=(0, 1),
    )
    _check(
        ctx,
        lambda x, t, w, pw: F.binary_cross_entropy_with_logits(x, t, w, reduction=r, pos_weight=pw),
        lambda x, t, w, pw: TF.binary_cross_entropy_with_logits(
            x, t, w, reduction=r, pos_weight=pw
        ),
        [logits, target, weight, pos_weight],
        grad_of=(0, 1),
    )
    _check(
        ctx,
        lambda x, t: F.binary_cross_entropy_with_logits(x, t, reduction=r),
        lambda x, t: TF.binary_cross_entropy_with_logits(x, t, reduction=r),
        [logits, target],
        grad_of=(0, 1),
    )
    for beta in (1.0, 0.5, 0.0):
        _check(
            ctx,
            lambda x, t, b=beta: F.smooth_l1_loss(x, t, reduction=r, beta=b),
            lambda x, t, b=beta: TF.smooth_l1_loss(x, t, reduction=r, beta=b),
            [pred, target],
            grad_of=(0, 1),
        )
    for delta in (1.0, 0.3):
        _check(
            ctx,
            lambda x, t, d=delta: F.huber_loss(x, t, reduction=r, delta=d),
            lambda x, t, d=delta: TF.huber_loss(x, t, reduction=r, delta=d),
            [pred, target],
            grad_of=(0, 1),
        )
    logp = np.log(rng.dirichlet(np.ones(2), size=(4, 3))).astype(np.float32)
    q = rng.dirichlet(np.ones(2), size=(4, 3)).astype(np.float32)
    q[0, 0] = [0.0, 1.0]  # a zero target contributes 0
    for kl_r in (r, "batchmean") if r == "mean" else (r,):
        _check(
            ctx,
            lambda x, t, k=kl_r: F.kl_div(x, t, reduction=k),
            lambda x, t, k=kl_r: TF.kl_div(x, t, reduction=k),
            [logp, q],
        )
        _check(
            ctx,
            lambda x, t, k=kl_r: F.kl_div(x, t, reduction=k, log_target=True),
            lambda x, t, k=kl_r: TF.kl_div(x, t, reduction=k, log_target=True),
            [logp, np.log(np.clip(q, 1e-3, 1)).astype(np.float32)],
            grad_of=(0, 1),
        )


def test_loss_modules_are_the_functions():
    rng, _ = new_rng()
    x = rng.standard_normal((6, 4)).astype(np.float32)
    t = rng.integers(0, 4, 6)
    t[2] = 1
    w = rng.uniform(0.5, 2, 4).astype(np.float32)
    y = rng.uniform(0, 1, (6, 4)).astype(np.float32)
    cases = [
        ("CrossEntropyLoss", {"weight": w, "ignore_index": 1, "label_smoothing": 0.1}, x, t),
        ("NLLLoss", {"weight": w, "ignore_index": 1, "reduction": "sum"}, x, t),
        ("BCELoss", {"weight": w}, 1 / (1 + np.exp(-x)), y),
        ("BCEWithLogitsLoss", {"pos_weight": w, "reduction": "none"}, x, y),
        ("SmoothL1Loss", {"beta": 0.5}, x, y),
        ("HuberLoss", {"delta": 0.7, "reduction": "sum"}, x, y),
        ("KLDivLoss", {"reduction": "batchmean"}, np.log(y / y.sum(1, keepdims=True)), y),
        ("KLDivLoss", {"size_average": False}, np.log(y), y),
    ]
    for name, kw, a, b in cases:
        ours_kw = {k: gpumat.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        ref_kw = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
        got = getattr(nn, name)(**ours_kw)(gpumat.tensor(a.astype(np.float32)), gpumat.tensor(b))
        want = getattr(torch.nn, name)(**ref_kw)(
            torch.tensor(a.astype(np.float32)), torch.tensor(b)
        )
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_compiled_step_with_the_new_losses_is_eager(ctx):
    rng, _ = new_rng()
    x = gpumat.tensor(rng.standard_normal((5, 3, 4)).astype(np.float32), device=ctx)
    t = gpumat.tensor(np.array([[0, 2, -100, 1], [1, 1, 0, -100], [2, 0, 1, 2], [0, 0, 0, 0],
                                [1, 2, 2, -100]]), device=ctx)  # fmt: skip
    y = gpumat.tensor(rng.uniform(0, 1, (5, 4)).astype(np.float32), device=ctx)
    w0 = rng.standard_normal((3, 3)).astype(np.float32)
    cw = gpumat.tensor(np.array([0.5, 1.0, 2.0], np.float32), device=ctx)

    def step(w, x, t, y):
        w.grad = None
        h = (w @ x).relu() - 0.5  # (5, 3, 4): classes in dim 1
        loss = F.cross_entropy(h, t, cw, label_smoothing=0.1)
        loss = loss + F.binary_cross_entropy_with_logits(h[:, 0], y) + F.smooth_l1_loss(h[:, 1], y)
        loss = loss + F.kl_div(h.log_softmax(1), h.softmax(1).detach(), reduction="batchmean")
        loss.backward()
        return loss, w.grad

    eager_w = gpumat.tensor(w0, device=ctx, requires_grad=True)
    eager = step(eager_w, x, t, y)
    traced_w = gpumat.tensor(w0, device=ctx, requires_grad=True)
    compiled = gpumat.compile(lambda x, t, y: step(traced_w, x, t, y))
    for _ in range(2):  # the first call traces, the second replays
        for e, c in zip(eager, compiled(x, t, y), strict=True):
            np.testing.assert_allclose(c.numpy(), e.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_loss_errors():
    x = gpumat.tensor(np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32))
    t = gpumat.tensor([0, 1, 3])
    with pytest.raises(IndexError, match="Target 7 is out of bounds"):
        F.cross_entropy(x, gpumat.tensor([0, 7, -100]))
    with pytest.raises(IndexError, match="Target -3 is out of bounds"):
        F.nll_loss(x, gpumat.tensor([-3, 1, -100]))
    with pytest.raises(ValueError, match=r"weight must have shape \(4,\)"):
        F.cross_entropy(x, t, gpumat.ones(3))
    with pytest.raises(ValueError, match="label_smoothing must be between"):
        F.cross_entropy(x, t, label_smoothing=1.5)
    with pytest.raises(TypeError, match="ignore_index must be an int"):
        F.cross_entropy(x, t, ignore_index=1.5)
    with pytest.raises(ValueError, match=r"class indices of shape \(3, 2\) expected"):
        F.cross_entropy(x.reshape(3, 4, 1).expand(3, 4, 2), t)
    with pytest.raises(ValueError, match=r"float targets must be \(N, C\) rows of input's shape"):
        F.cross_entropy(x, gpumat.ones(3, 3))
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.binary_cross_entropy(x, gpumat.ones(3, 4))
    with pytest.raises(ValueError, match="differ in shape"):
        F.smooth_l1_loss(x, gpumat.ones(4, 3))
    with pytest.raises(ValueError, match="beta must be non-negative"):
        F.smooth_l1_loss(x, x, beta=-1.0)
    with pytest.raises(ValueError, match="delta must be positive"):
        F.huber_loss(x, x, delta=0.0)
    with pytest.raises(ValueError, match="reduction must be"):
        F.kl_div(x, x, reduction="batch")
    with pytest.raises(TypeError, match="must be a float32 tensor"):
        F.binary_cross_entropy_with_logits(x, t)
    empty = gpumat.zeros(0, 4)
    assert np.isnan(F.smooth_l1_loss(empty, empty).item())  # the mean of nothing, as PyTorch
    assert F.cross_entropy(empty, gpumat.tensor(np.zeros(0, np.int64)), reduction="sum").item() == 0
