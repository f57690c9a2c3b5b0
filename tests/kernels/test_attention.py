"""Fused scaled dot-product attention (FlashAttention-2's tiling) and its gradient: the kernels
against float64 numpy on every device with the outputs poisoned by NaN (tails of the host's
16-row and the CUDA kernels' 64-row tiles, each head-dim bucket of the CUDA kernels, l != s,
e != ev, head dim 1 and 128, causal and not, empty batches and lengths), the graph
ops' gradients against finite differences and on every device, ``F.scaled_dot_product_attention``
against PyTorch's (fused and composed paths: bool and float masks, broadcast batch dims, dropout),
a compiled step against the eager one, and bad input."""

import math

import numpy as np
import pytest
from helpers import assert_close, nan_array, new_rng
from nn_helpers import check_device_gradients, check_fd_gradients

import gpumat
import gpumat.autodiff as adx
import gpumat.graph as ad
import gpumat.nn.functional as F
import gpumat.ops as ops

# (batch, lq, s, e, ev): tails of the 16-row (host) and 64-row (CUDA) tiles, one row, l > s and
# l < s, e != ev, the largest head dim, head dim 1; the CUDA kernels' head-dim buckets 16, 32, 64
# and 128 (the larger of e and ev)
SHAPES = [
    (2, 70, 67, 40, 33),
    (1, 65, 130, 20, 17),
    (3, 37, 21, 5, 7),
    (2, 16, 40, 8, 8),
    (1, 1, 1, 1, 1),
    (2, 19, 17, 128, 128),
    (1, 33, 50, 3, 2),
    (2, 5, 9, 1, 4),
]


def _sid(s):
    return "x".join(str(d) for d in s)


def _ref(q, k, v, scale, causal):
    """float64 (batch, l, ev) output, (batch, l) logsumexp and the probabilities."""
    z = np.einsum("ble,bse->bls", q.astype(np.float64), k.astype(np.float64)) * scale
    if causal:
        z = np.where(np.tri(z.shape[1], z.shape[2], dtype=bool), z, -np.inf)
    m = z.max(axis=-1, keepdims=True)
    p = np.exp(z - m)
    lse = (m + np.log(p.sum(axis=-1, keepdims=True)))[..., 0]
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("bls,bsv->blv", p, v.astype(np.float64)), lse, p


def _inputs(rng, batch, lq, s, e, ev):
    q = rng.uniform(-2, 2, size=(batch, lq, e)).astype(np.float32)
    k = rng.uniform(-2, 2, size=(batch, s, e)).astype(np.float32)
    v = rng.uniform(-1, 1, size=(batch, s, ev)).astype(np.float32)
    return q, k, v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=_sid)
def test_attention_kernel_matches_float64(ctx, shape, causal):
    rng, seed = new_rng()
    batch, lq, s, e, ev = shape
    q, k, v = _inputs(rng, *shape)
    scale = 1.0 / math.sqrt(e)
    out = nan_array((batch, lq, ev + 1), ctx)
    ops.attention(
        gpumat.array(q, ctx), gpumat.array(k, ctx), gpumat.array(v, ctx), out, scale, causal
    )
    want, lse, _ = _ref(q, k, v, scale, causal)
    got = out.asnumpy()
    assert_close(got[..., :ev], want, rtol=1e-5, atol=1e-5, msg=f"seed {seed}")
    assert_close(got[..., ev], lse, rtol=1e-5, atol=1e-5, msg=f"seed {seed}")


@pytest.fixture(params=[False, True], ids=["fast", "deterministic"])
def deterministic(request):
    """Runs a test with gpumat.use_deterministic_algorithms off (the CUDA gradient's float atomics
    for dq) and on (its two-kernel path), restoring the setting after."""
    before = gpumat.are_deterministic_algorithms_enabled()
    gpumat.use_deterministic_algorithms(request.param)
    yield request.param
    gpumat.use_deterministic_algorithms(before)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=_sid)
def test_attention_gradient_kernel_matches_float64(ctx, shape, causal, deterministic):
    rng, seed = new_rng()
    batch, lq, s, e, ev = shape
    q, k, v = _inputs(rng, *shape)
    g = rng.uniform(-1, 1, size=(batch, lq, ev + 1)).astype(np.float32)
    scale = 0.7
    arrays = [gpumat.array(x, ctx) for x in (q, k, v)]
    out = gpumat.empty((batch, lq, ev + 1), ctx)
    ops.attention(*arrays, out, scale, causal)
    dqkv = nan_array((q.size + k.size + v.size,), ctx)
    ops.attention_gradient(*arrays, out, gpumat.array(g, ctx), dqkv, scale, causal)
    # float64: dV = P^T dO, dS = P (dP - rowsum(P dP) + dL), dQ = scale dS K, dK = scale dS^T Q
    # (dL: g's last column, the gradient of the logsumexp)
    _, _, p = _ref(q, k, v, scale, causal)
    g64 = g[..., :ev].astype(np.float64)
    dp = np.einsum("blv,bsv->bls", g64, v)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True) + g[..., ev:].astype(np.float64))
    want = np.concatenate(
        [
            (np.einsum("bls,bse->ble", ds, k) * scale).ravel(),
            (np.einsum("bls,ble->bse", ds, q) * scale).ravel(),
            np.einsum("bls,blv->bsv", p, g64).ravel(),
        ]
    )
    assert_close(dqkv.asnumpy(), want, rtol=1e-4, atol=1e-4, msg=f"seed {seed}")
    # the reference kernel module agrees (it reads the saved float32 O and logsumexp)
    ref = np.empty(want.shape)
    gpumat.reference.attention_gradient(q, k, v, out.asnumpy(), g, ref, scale, causal)
    np.testing.assert_allclose(ref, want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize(
    "shape", [(0, 4, 5, 3, 2), (2, 0, 5, 3, 2), (2, 4, 0, 3, 2), (2, 4, 5, 3, 0)]
)
def test_attention_empty_sizes(ctx, shape):
    rng, _ = new_rng()
    batch, lq, s, e, ev = shape
    q, k, v = _inputs(rng, *shape)
    arrays = [gpumat.array(x, ctx) for x in (q, k, v)]
    out = nan_array((batch, lq, ev + 1), ctx)
    ops.attention(*arrays, out, 0.5, False)
    got = out.asnumpy()
    ref = np.empty(got.shape)
    gpumat.reference.attention(q, k, v, ref, 0.5, False)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    if s == 0 and batch * lq > 0:  # no key: zeros and a logsumexp of -inf
        assert np.all(got[..., :ev] == 0) and np.all(got[..., ev] == -np.inf)
    g = rng.uniform(-1, 1, size=got.shape).astype(np.float32)
    dqkv = nan_array((q.size + k.size + v.size,), ctx)
    ops.attention_gradient(*arrays, out, gpumat.array(g, ctx), dqkv, 0.5, False)
    want = np.empty(dqkv.shape)
    gpumat.reference.attention_gradient(q, k, v, ref, g, want, 0.5, False)
    np.testing.assert_allclose(dqkv.asnumpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_nan_scores_give_nan_rows(ctx, causal):
    """A NaN in q row 3 makes that row's output and logsumexp NaN; a NaN in k row 70 makes every
    row that sees key 70 NaN (causal: the rows from 70 on), the others exact, as the float64
    reference and PyTorch (never a silent 0 or -inf); dq is NaN in the NaN rows. Two key tiles."""
    rng, seed = new_rng()
    batch, lq, s, e, ev = 2, 90, 100, 8, 6
    q, k, v = _inputs(rng, batch, lq, s, e, ev)
    q[0, 3, 2] = np.nan
    k[1, 70, 5] = np.nan
    out = nan_array((batch, lq, ev + 1), ctx)
    args = [gpumat.array(x, ctx) for x in (q, k, v)]
    ops.attention(*args, out, 0.4, causal)
    got = out.asnumpy()
    want = np.zeros((batch, lq))
    want[0, 3] = np.nan
    want[1, 70 if causal else 0 :] = np.nan
    bad = np.isnan(want)
    assert np.isnan(got[bad]).all() and not np.isnan(got[~bad]).any(), f"seed {seed}"
    ref = np.empty(got.shape)
    gpumat.reference.attention(q, k, v, ref, 0.4, causal)
    assert np.array_equal(np.isnan(ref), np.isnan(got)), f"seed {seed}"
    assert_close(got[~bad], ref[~bad], rtol=1e-5, atol=1e-5, msg=f"seed {seed}")
    torch = pytest.importorskip("torch")
    tout = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(x) for x in (q, k, v)), is_causal=causal, scale=0.4
    )
    # PyTorch's NaN rows include ours; with is_causal it makes batch 1's rows before 70 NaN too
    # (its mask meets the NaN score), where a masked key has no part in the result
    t_nan = np.isnan(tout.numpy())
    assert not (np.isnan(got[..., :ev]) & ~t_nan).any(), f"seed {seed}"
    assert np.array_equal(t_nan, np.isnan(got[..., :ev])) or causal, f"seed {seed}"
    g = rng.uniform(-1, 1, size=got.shape).astype(np.float32)
    dqkv = nan_array((q.size + k.size + v.size,), ctx)
    ops.attention_gradient(*args, out, gpumat.array(g, ctx), dqkv, 0.4, causal)
    # (elsewhere a masked score's 0 times the NaN row of K or Q may spread NaN further, as in
    # PyTorch's products: IEEE 0 * NaN)
    dq = dqkv.asnumpy()[: q.size].reshape(q.shape)
    assert np.isnan(dq[bad]).all(), f"seed {seed}"


def test_attention_kernel_errors_name_the_op(ctx):
    q, k, v = (
        gpumat.empty((2, 3, 4), ctx),
        gpumat.empty((2, 5, 4), ctx),
        gpumat.empty((2, 5, 6), ctx),
    )
    out = gpumat.empty((2, 3, 7), ctx)
    with pytest.raises(ValueError, match=r"attention: .*q \(2, 3, 4\), k \(2, 5, 3\)"):
        ops.attention(q, gpumat.empty((2, 5, 3), ctx), v, out, 1.0)
    with pytest.raises(
        ValueError, match=r"attention: out has shape \(2, 3, 6\), expected \(2, 3, 7\)"
    ):
        ops.attention(q, k, v, gpumat.empty((2, 3, 6), ctx), 1.0)
    with pytest.raises(ValueError, match=r"attention: head dims .* 128"):
        big = gpumat.empty((1, 2, 129), ctx)
        ops.attention(big, big, gpumat.empty((1, 2, 1), ctx), gpumat.empty((1, 2, 2), ctx), 1.0)
    with pytest.raises(ValueError, match="attention: scale must be finite"):
        ops.attention(q, k, v, out, math.inf)
    with pytest.raises(ValueError, match="attention"):  # out aliasing an input
        ops.attention(q, k, v, q, 1.0)
    with pytest.raises(TypeError, match="causal"):
        ops.attention(q, k, v, out, 1.0, 1)
    with pytest.raises(ValueError, match=r"attention_gradient: dqkv has shape \(3,\)"):
        ops.attention_gradient(q, k, v, out, out, gpumat.empty((3,), ctx), 1.0)


# ---------------------------------------------------------------------------- q, k, v read in place

# (batch, heads, l, s, e, ev, gap): a GPT's fused projection past one 64-row tile; one head with
# l < s, e != ev and unused columns (whose gradient is 0); l > s; head dim 32 (CUDA's bucket 32);
# the largest head dim
STRIDED = [
    (2, 3, 70, 70, 8, 8, 0),
    (3, 1, 21, 37, 5, 7, 2),
    (1, 2, 40, 19, 16, 4, 1),
    (2, 4, 5, 5, 32, 32, 0),
    (1, 1, 9, 9, 128, 128, 3),
]


def _projection(rng, batch, heads, lq, s, e, ev, gap):
    """A (batch, rows, width) array whose rows hold q's heads, then k's, then v's (each head in a
    slot of max(e, ev) columns, each block followed by ``gap`` unused ones), its geometry for the
    strided ops, and the flat indices of q, k, v as (batch * heads, rows, dim) arrays."""
    rows, slot = max(lq, s), max(e, ev)
    block = heads * slot + gap
    width = 3 * block
    x = rng.uniform(-2, 2, size=(batch, rows, width)).astype(np.float32)
    offsets, strides = (0, block, 2 * block), (rows * width, slot, width)

    def region(o, n, d):
        b, h, r, c = np.meshgrid(
            np.arange(batch), np.arange(heads), np.arange(n), np.arange(d), indexing="ij"
        )
        return (o + b * strides[0] + h * strides[1] + r * strides[2] + c).reshape(
            batch * heads, n, d
        )

    index = [region(offsets[0], lq, e), region(offsets[1], s, e), region(offsets[2], s, ev)]
    return x, (lq, s, e, ev), offsets, strides, index


def _grads64(q, k, v, g, scale, causal):
    """float64 dq, dk, dv of attention for dout g (its last column the logsumexp's gradient)."""
    _, _, p = _ref(q, k, v, scale, causal)
    ev = v.shape[2]
    g64 = g[..., :ev].astype(np.float64)
    dp = np.einsum("blv,bsv->bls", g64, v)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True) + g[..., ev:].astype(np.float64))
    return (
        np.einsum("bls,bse->ble", ds, k) * scale,
        np.einsum("bls,ble->bse", ds, q) * scale,
        np.einsum("bls,blv->bsv", p, g64),
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", STRIDED, ids=_sid)
def test_attention_strided_kernels_match_float64(ctx, shape, causal, deterministic):
    """Attention over q, k, v read where they lie in a projection, and its gradient written in
    their place (zeros in the columns no head covers: the output is NaN-poisoned first), against
    float64 on copies of the regions; the reference module agrees."""
    rng, seed = new_rng()
    batch, heads, lq, _, e, ev, _ = shape
    x, lengths, offsets, strides, index = _projection(rng, *shape)
    q, k, v = (x.reshape(-1)[i] for i in index)
    scale = 1.0 / math.sqrt(e)
    geometry = (heads, lengths, offsets, strides)
    xd = gpumat.array(x, ctx)
    out = nan_array((batch * heads, lq, ev + 1), ctx)
    ops.attention_strided(xd, out, *geometry, scale, causal)
    want, lse, _ = _ref(q, k, v, scale, causal)
    got = out.asnumpy()
    assert_close(got[..., :ev], want, rtol=1e-5, atol=1e-5, msg=f"seed {seed}")
    assert_close(got[..., ev], lse, rtol=1e-5, atol=1e-5, msg=f"seed {seed}")

    g = rng.uniform(-1, 1, size=(batch * heads, lq, ev + 1)).astype(np.float32)
    dx = nan_array(x.shape, ctx)
    ops.attention_strided_gradient(xd, out, gpumat.array(g, ctx), dx, *geometry, scale, causal)
    expect = np.zeros(x.size)
    for i, d in zip(index, _grads64(q, k, v, g, scale, causal), strict=True):
        expect[i.reshape(-1)] = d.reshape(-1)
    expect = expect.reshape(x.shape)
    assert_close(dx.asnumpy(), expect, rtol=1e-4, atol=1e-4, msg=f"seed {seed}")
    ref = np.empty(x.shape)
    gpumat.reference.attention_strided_gradient(x, got, g, ref, *geometry, scale, causal)
    np.testing.assert_allclose(ref, expect, rtol=1e-4, atol=1e-5 * np.abs(expect).max())


def test_attention_strided_errors_name_the_op(ctx):
    """Regions outside the array, overlapping rows, bad heads and shapes, and (for the gradient)
    regions that share elements: ValueError naming the op; non-integer geometry: TypeError."""
    rng, _ = new_rng()
    x = gpumat.array(rng.uniform(-1, 1, (2, 3, 24)).astype(np.float32), ctx)  # 2 heads of 4 each
    out = gpumat.empty((4, 3, 5), ctx)
    good = (2, (3, 3, 4, 4), (0, 8, 16), (72, 4, 24))
    ops.attention_strided(x, out, *good, 0.5)
    gpumat.synchronize(ctx)
    cases = [
        ((2, (3, 3, 4, 4), (0, 8, 17), (72, 4, 24)), r"v reaches element 144 of qkv's 144"),
        ((2, (3, 3, 4, 4), (0, 8, 16), (72, 4, 3)), r"the rows of q overlap: row stride 3 < its"),
        ((0, (3, 3, 4, 4), (0, 8, 16), (72, 4, 24)), "heads must be at least 1"),
        ((2, (3, 3, 4, 4), (-1, 8, 16), (72, 4, 24)), "offsets and strides must be >= 0"),
        ((3, (3, 3, 4, 4), (0, 8, 16), (72, 4, 24)), r"out must be \(batch x heads"),
        ((2, (3, 3, 4, 5), (0, 8, 16), (72, 4, 24)), r"out has shape \(4, 3, 5\), expected"),
    ]
    for geometry, message in cases:
        with pytest.raises(ValueError, match="attention_strided: " + message):
            ops.attention_strided(x, out, *geometry, 0.5)
    with pytest.raises(ValueError, match="attention_strided: head dims"):
        ops.attention_strided(
            gpumat.empty((1, 1, 400), ctx), gpumat.empty((1, 1, 131), ctx), 1,
            (1, 1, 130, 130), (0, 130, 260), (400, 0, 400), 0.5,
        )  # fmt: skip
    with pytest.raises(ValueError, match="attention_strided"):  # out aliasing qkv
        ops.attention_strided(out, out, 2, (3, 3, 1, 1), (0, 1, 2), (45, 1, 5), 0.5)
    with pytest.raises(TypeError, match="a length must be an int"):
        ops.attention_strided(x, out, 2, (3.0, 3, 4, 4), (0, 8, 16), (72, 4, 24), 0.5)
    with pytest.raises(ValueError, match="expected lengths"):
        ops.attention_strided(x, out, 2, (3, 3, 4), (0, 8, 16), (72, 4, 24), 0.5)
    dx = gpumat.empty((2, 3, 24), ctx)
    with pytest.raises(ValueError, match="attention_strided_gradient: q, k and v must lie side"):
        ops.attention_strided_gradient(x, out, out, dx, 2, (3, 3, 4, 4), (0, 4, 16), (72, 4, 24), 1)
    with pytest.raises(ValueError, match="attention_strided_gradient: q, k and v must lie side"):
        # heads whose slots overlap (head stride 2 < head dim 4)
        ops.attention_strided_gradient(x, out, out, dx, 2, (3, 3, 4, 4), (0, 8, 16), (72, 2, 24), 1)
    with pytest.raises(ValueError, match=r"attention_strided_gradient: dqkv has shape \(3,\)"):
        ops.attention_strided_gradient(x, out, out, gpumat.empty((3,), ctx), *good, 1.0)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_strided_op_gradient_fd_float64(causal):
    """The graph op's gradient (qkv's shape, zeros in the unused columns) against finite
    differences, and on the devices against numpy float64."""
    rng, _ = new_rng()
    x, lengths, offsets, strides, _ = _projection(rng, 2, 2, 5, 5, 3, 3, 1)
    build = lambda x: ad.attention_strided_op(x, 2, 2, lengths, offsets, strides, 0.8, causal)  # noqa: E731
    check_fd_gradients(build, [x.astype(np.float64)], rng)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_strided_op_on_devices_matches_numpy(ctx, causal):
    rng, _ = new_rng()
    x, lengths, offsets, strides, _ = _projection(rng, 2, 3, 20, 18, 6, 5, 2)
    build = lambda x: ad.attention_strided_op(x, 2, 3, lengths, offsets, strides, 0.4, causal)  # noqa: E731
    check_device_gradients(ctx, build, [x.astype(np.float64)], rng)


def test_attention_strided_op_shape_errors():
    x = ad.Variable("x")
    y = ad.attention_strided_op(x, 2, 2, (3, 3, 4, 4), (0, 8, 16), (72, 4, 24), 0.5, True)
    assert y.name == "AttentionStrided(x,causal)"
    with pytest.raises(ValueError, match=r"attention_strided_op .*: v reaches element 143 of "):
        adx.Executor([y]).run({x: np.zeros((2, 3, 23), np.float32)})
    g = ad.attention_strided_gradient_op(x, y, y, 2, 2, (3, 3, 4, 4), (0, 4, 16), (72, 4, 24), 0.5)
    with pytest.raises(ValueError, match="must lie side by side"):
        adx.Executor([g]).run({x: np.zeros((2, 3, 24), np.float32)})
    with pytest.raises(ValueError, match="lengths must be 4 integers"):
        ad.attention_strided_op(x, 2, 2, (3, 3, 4), (0, 8, 16), (72, 4, 24), 0.5)


# ---------------------------------------------------------------------------- graph ops


@pytest.mark.parametrize("causal", [False, True])
def test_attention_op_gradient_fd_float64(causal):
    rng, _ = new_rng()
    q = rng.uniform(-1, 1, size=(2, 5, 3))
    k = rng.uniform(-1, 1, size=(2, 7, 3))
    v = rng.uniform(-1, 1, size=(2, 7, 4))
    check_fd_gradients(lambda q, k, v: ad.attention_op(q, k, v, 0.8, causal), [q, k, v], rng)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_op_on_devices_matches_numpy(ctx, causal):
    rng, _ = new_rng()
    q = rng.uniform(-1, 1, size=(3, 20, 6))
    k = rng.uniform(-1, 1, size=(3, 18, 6))
    v = rng.uniform(-1, 1, size=(3, 18, 5))
    check_device_gradients(
        ctx, lambda q, k, v: ad.attention_op(q, k, v, 0.4, causal), [q, k, v], rng
    )


def test_attention_op_names_and_shape_errors():
    q, k, v = ad.Variable("q"), ad.Variable("k"), ad.Variable("v")
    y = ad.attention_op(q, k, v, 0.5, True)
    assert y.name == "Attention(q,k,v,causal)"
    ex = adx.Executor([y])
    with pytest.raises(ValueError, match=r"attention_op .*q \(2, 3, 4\), k \(2, 5, 3\)"):
        ex.run(
            {
                q: np.zeros((2, 3, 4), np.float32),
                k: np.zeros((2, 5, 3), np.float32),
                v: np.zeros((2, 5, 2), np.float32),
            }
        )
    with pytest.raises(TypeError, match="causal"):
        ad.attention_op(q, k, v, 0.5, "yes")


# ---------------------------------------------------------------------------- the front end


def _torch_sdpa(torch, q, k, v, mask=None, **kw):
    ts = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v)]
    m = (
        None
        if mask is None
        else torch.tensor(mask, dtype=torch.bool if mask.dtype == bool else torch.float64)
    )
    out = torch.nn.functional.scaled_dot_product_attention(*ts, attn_mask=m, **kw)
    return out, ts


@pytest.mark.parametrize(
    "qs,ks,vs,mask,causal",
    [
        ((2, 3, 37, 8), (2, 3, 21, 8), (2, 3, 21, 5), None, False),  # fused
        ((2, 3, 37, 8), (2, 3, 40, 8), (2, 3, 40, 8), None, True),  # fused, causal, l < s
        ((2, 1, 9, 4), (1, 3, 6, 4), (2, 3, 6, 1), None, False),  # broadcast batch dims, fused
        ((7, 1), (5, 1), (5, 3), None, True),  # no batch dims, E = 1
        ((2, 3, 10, 4), (2, 3, 12, 4), (2, 3, 12, 4), "bool", False),  # composed
        ((2, 3, 10, 4), (2, 3, 12, 4), (2, 3, 12, 4), "float", False),  # composed
        ((2, 10, 140), (2, 12, 140), (2, 12, 3), None, False),  # head dim over 128: composed
    ],
)
def test_sdpa_matches_torch(ctx, qs, ks, vs, mask, causal):
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    q = rng.uniform(-2, 2, size=qs).astype(np.float32)
    k = rng.uniform(-2, 2, size=ks).astype(np.float32)
    v = rng.uniform(-1, 1, size=vs).astype(np.float32)
    lq, ls = qs[-2], ks[-2]
    m = None
    if mask == "bool":
        m = rng.uniform(size=(lq, ls)) < 0.7
        m[:, 0] = True  # every row keeps a key (all-masked rows are NaN in both)
    elif mask == "float":
        m = rng.uniform(-1, 1, size=(1, lq, ls)).astype(np.float32)
    tout, ts = _torch_sdpa(torch, q, k, v, m, is_causal=causal)
    w = rng.uniform(-1, 1, size=tuple(tout.shape)).astype(np.float32)
    (tout * torch.tensor(w, dtype=torch.float64)).sum().backward()
    gs = [gpumat.tensor(x, device=ctx, requires_grad=True) for x in (q, k, v)]
    gm = None if m is None else gpumat.tensor(m, device=ctx)
    out = F.scaled_dot_product_attention(*gs, attn_mask=gm, is_causal=causal)
    assert out.shape == tuple(tout.shape)
    (out * gpumat.tensor(w, device=ctx)).sum().backward()
    assert_close(
        out.detach().numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5, msg=f"seed {seed}"
    )
    for g, t in zip(gs, ts, strict=True):
        assert_close(g.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-4, msg=f"seed {seed}")


def test_sdpa_of_head_views_matches_torch_and_copies_no_head(ctx):
    """The GPT pattern: q, k, v split from one projection, viewed as heads and transposed. The
    fused kernel reads the heads where they lie in the projection (attention_strided: no copy of
    a head), its gradient is the projection's, and a change of the projection in place after the
    views reaches the attention."""
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    b, t, h, d = 2, 5, 3, 4
    c = h * d
    x0 = rng.uniform(-1, 1, size=(b, t, 3 * c)).astype(np.float32)
    w0 = rng.uniform(-1, 1, size=(b, t, c)).astype(np.float32)

    def heads(lib, x):
        q, k, v = x.split(c, dim=2)
        return [z.view(b, t, h, d).transpose(1, 2) for z in (q, k, v)]

    xt = torch.tensor(x0, dtype=torch.float64, requires_grad=True)
    yt = torch.nn.functional.scaled_dot_product_attention(*heads(torch, xt), is_causal=True)
    (yt.transpose(1, 2).reshape(b, t, c) * torch.tensor(w0, dtype=torch.float64)).sum().backward()

    x = gpumat.tensor(x0, device=ctx, requires_grad=True)
    q, k, v = heads(gpumat, x)
    with ops.trace_calls() as calls:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        o = y.transpose(1, 2).contiguous().view(b, t, c)
        (o * gpumat.tensor(w0, device=ctx)).sum().backward()
    names = [name for name, _ in calls]
    assert "attention_strided_" in names and "attention_strided_gradient_" in names
    assert "attention_" not in names and "mul_scalar_" not in names  # no clone of a head
    # one copy: O's transpose (and its gradient's scatter); none of a head, no scatter of dq, dk, dv
    assert names.count("as_strided_") == 1 and names.count("as_strided_scatter_") == 1, names
    assert_close(y.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6, msg=f"seed {seed}")
    assert_close(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5, msg=f"seed {seed}")

    base = gpumat.tensor(x0, device=ctx)
    q2, k2, v2 = heads(gpumat, base)
    base.mul_(2.0)  # after the views were made: they show the new values, as PyTorch's
    y2 = F.scaled_dot_product_attention(q2, k2, v2, is_causal=True)
    with torch.no_grad():
        y2t = torch.nn.functional.scaled_dot_product_attention(
            *heads(torch, 2 * torch.tensor(x0, dtype=torch.float64)), is_causal=True
        )
    assert_close(y2.numpy(), y2t.numpy(), rtol=1e-5, atol=1e-6, msg=f"seed {seed}")


@pytest.mark.parametrize("grad", [True, False])
def test_sdpa_of_heads_that_share_elements(ctx, grad):
    """q = k = v, the same heads of one tensor: the regions coincide, so a gradient could not be
    written in their place: with a gradient the heads are copied (the contiguous kernel, and the
    sum of the three gradients), without one they are read in place. Both as PyTorch."""
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    x0 = rng.uniform(-1, 1, size=(2, 6, 12)).astype(np.float32)
    g0 = rng.uniform(-1, 1, size=(2, 3, 6, 4)).astype(np.float32)
    xt = torch.tensor(x0, dtype=torch.float64, requires_grad=grad)
    ht = xt.view(2, 6, 3, 4).transpose(1, 2)
    yt = torch.nn.functional.scaled_dot_product_attention(ht, ht, ht)
    x = gpumat.tensor(x0, device=ctx, requires_grad=grad)
    h = x.view(2, 6, 3, 4).transpose(1, 2)
    with ops.trace_calls() as calls:
        y = F.scaled_dot_product_attention(h, h, h)
    assert ("attention_strided_" in [n for n, _ in calls]) == (not grad)
    assert_close(y.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6, msg=f"seed {seed}")
    if grad:
        yt.backward(torch.tensor(g0, dtype=torch.float64))
        y.backward(gpumat.tensor(g0, device=ctx))
        assert_close(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5, msg=f"seed {seed}")


@pytest.mark.parametrize("grad", [True, False])
def test_sdpa_of_expanded_rows(ctx, grad):
    """q = k = v, one row expanded over every batch, head and position (stride 0: rows that
    overlap, which the strided kernels refuse): the copying path, as PyTorch."""
    torch = pytest.importorskip("torch")
    rng, seed = new_rng()
    x0 = rng.uniform(-1, 1, size=(1, 1, 1, 4)).astype(np.float32)
    xt = torch.tensor(x0, dtype=torch.float64, requires_grad=grad)
    ht = xt.expand(2, 3, 5, 4)
    yt = torch.nn.functional.scaled_dot_product_attention(ht, ht, ht, is_causal=True)
    x = gpumat.tensor(x0, device=ctx, requires_grad=grad)
    h = x.expand(2, 3, 5, 4)
    y = F.scaled_dot_product_attention(h, h, h, is_causal=True)
    assert_close(y.detach().numpy(), yt.detach().numpy(), rtol=1e-5, atol=1e-6, msg=f"seed {seed}")
    if grad:
        y.sum().backward()
        yt.sum().backward()
        assert_close(x.grad.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5, msg=f"seed {seed}")


def test_sdpa_zero_size_batch(ctx):
    q = gpumat.zeros(0, 2, 5, 4, device=ctx)
    k = gpumat.zeros(0, 2, 6, 4, device=ctx)
    v = gpumat.zeros(0, 2, 6, 3, device=ctx)
    assert F.scaled_dot_product_attention(q, k, v).shape == (0, 2, 5, 3)


def test_sdpa_scale_and_dropout(ctx):
    torch = pytest.importorskip("torch")
    rng, _ = new_rng()
    q, k, v = _inputs(rng, 2, 6, 7, 3, 4)
    tout, _ = _torch_sdpa(torch, q, k, v, scale=0.3)
    out = F.scaled_dot_product_attention(
        *(gpumat.tensor(x, device=ctx) for x in (q, k, v)), scale=0.3
    )
    assert_close(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
    # dropout: some weights zeroed, the rest scaled by 1 / (1 - p): rows of ones in v then give
    # row sums of the kept weights / (1 - p), each a multiple-free value in [0, 2]
    ones = gpumat.ones(2, 7, 4, device=ctx)
    d = F.scaled_dot_product_attention(
        *(gpumat.tensor(x, device=ctx) for x in (q, k)), ones, dropout_p=0.5
    )
    dn = d.numpy()
    assert dn.shape == (2, 6, 4) and np.all(dn >= 0) and np.all(dn <= 2 + 1e-5)
    assert not np.allclose(dn, 1.0)


def test_sdpa_bad_input():
    q, k, v = gpumat.zeros(2, 5, 4), gpumat.zeros(2, 6, 4), gpumat.zeros(2, 6, 3)
    with pytest.raises(ValueError, match=r"scaled_dot_product_attention: .*key \(2, 6, 3\)"):
        F.scaled_dot_product_attention(q, gpumat.zeros(2, 6, 3), v)
    with pytest.raises(ValueError, match="attn_mask or is_causal"):
        F.scaled_dot_product_attention(
            q, k, v, attn_mask=gpumat.ones(5, 6, dtype=gpumat.bool), is_causal=True
        )
    with pytest.raises(TypeError, match="scaled_dot_product_attention: query must be a float32"):
        F.scaled_dot_product_attention(gpumat.tensor(np.zeros((2, 5, 4), np.int64)), k, v)
    with pytest.raises(TypeError, match="attn_mask"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=gpumat.tensor(np.zeros((5, 6), np.int64)))
    with pytest.raises(ValueError, match="batch dims"):
        F.scaled_dot_product_attention(q, gpumat.zeros(3, 6, 4), gpumat.zeros(3, 6, 3))
    with pytest.raises(TypeError, match="is_causal"):
        F.scaled_dot_product_attention(q, k, v, is_causal=1)


def test_compiled_sdpa_step_equals_eager(ctx):
    rng, _ = new_rng()
    q0, k0, v0 = _inputs(rng, 2, 9, 11, 4, 3)
    x = gpumat.tensor(rng.uniform(-1, 1, size=(2, 9, 4)).astype(np.float32), device=ctx)

    def step(q, x):
        q.grad = None
        k = gpumat.tensor(k0, device=ctx)
        v = gpumat.tensor(v0, device=ctx)
        loss = (F.scaled_dot_product_attention(q * x, k, v, is_causal=True) ** 2).sum()
        loss.backward()
        return loss, q.grad

    q_eager = gpumat.tensor(q0, device=ctx, requires_grad=True)
    q_traced = gpumat.tensor(q0, device=ctx, requires_grad=True)
    eager = step(q_eager, x)
    compiled = gpumat.compile(lambda x: step(q_traced, x), fusion=False)
    for _ in range(2):  # the first call traces, the second replays
        traced = compiled(x)
        for e, c in zip(eager, traced, strict=True):
            np.testing.assert_array_equal(c.numpy(), e.detach().numpy())


def test_deterministic_algorithms_switch():
    assert gpumat.are_deterministic_algorithms_enabled() is False  # PyTorch's default
    try:
        gpumat.use_deterministic_algorithms(True)
        assert gpumat.are_deterministic_algorithms_enabled() is True
    finally:
        gpumat.use_deterministic_algorithms(False)
    assert gpumat.are_deterministic_algorithms_enabled() is False
    for bad in (1, None, "yes", np.bool_(True)):
        with pytest.raises(TypeError, match="use_deterministic_algorithms: mode must be a bool"):
            gpumat.use_deterministic_algorithms(bad)
        with pytest.raises(TypeError, match="warn_only must be a bool"):
            gpumat.use_deterministic_algorithms(True, warn_only=bad)
    assert gpumat.are_deterministic_algorithms_enabled() is False
    # PyTorch's keyword: kept and reported (every gpumat op has a deterministic kernel)
    assert gpumat.is_deterministic_algorithms_warn_only_enabled() is False
    try:
        gpumat.use_deterministic_algorithms(True, warn_only=True)
        assert gpumat.are_deterministic_algorithms_enabled() is True
        assert gpumat.is_deterministic_algorithms_warn_only_enabled() is True
    finally:
        gpumat.use_deterministic_algorithms(False)
    assert gpumat.is_deterministic_algorithms_warn_only_enabled() is False


@pytest.mark.parametrize("shape", [(2, 70, 130, 24, 16), (3, 200, 150, 64, 64)], ids=_sid)
def test_deterministic_gradient_repeats_bits_and_agrees_with_the_fast_one(
    ctx, shape, deterministic
):
    """The deterministic path gives the same bits on every run; the CUDA kernels' fast path (dq's
    key-tile sums added by float atomics, in the order blocks finish) agrees with it to float32
    rounding. Several key tiles per row, so dq gets several atomic adds (the host has one path)."""
    rng, seed = new_rng()
    batch, lq, s, e, ev = shape
    q, k, v = _inputs(rng, *shape)
    g = rng.uniform(-1, 1, size=(batch, lq, ev + 1)).astype(np.float32)
    arrays = [gpumat.array(x, ctx) for x in (q, k, v)]
    out = gpumat.empty((batch, lq, ev + 1), ctx)
    ops.attention(*arrays, out, 0.3, True)
    dout = gpumat.array(g, ctx)
    runs = []
    for _ in range(2):
        dqkv = nan_array((q.size + k.size + v.size,), ctx)
        ops.attention_gradient(*arrays, out, dout, dqkv, 0.3, True)
        runs.append(dqkv.asnumpy())
    if deterministic:
        np.testing.assert_array_equal(runs[0], runs[1])
    gpumat.use_deterministic_algorithms(not deterministic)
    other = nan_array((q.size + k.size + v.size,), ctx)
    ops.attention_gradient(*arrays, out, dout, other, 0.3, True)
    assert_close(other.asnumpy(), runs[0], rtol=1e-5, atol=1e-6, msg=f"seed {seed}")
    # dk and dv have one writer per element on both paths: the same bits
    nq = q.size
    np.testing.assert_array_equal(other.asnumpy()[nq:], runs[0][nq:])


def test_emu_profile_sees_the_attention_kernels():
    from gpumat import profile as gprof

    rng, _ = new_rng()
    ctx = gpumat.emu(0)
    b, lq, s, e, ev = 2, 20, 17, 8, 8
    q, k, v = (gpumat.array(x, ctx) for x in _inputs(rng, b, lq, s, e, ev))
    out = gpumat.empty((b, lq, ev + 1), ctx)
    with gprof.profile() as prof:
        ops.attention(q, k, v, out, 0.5, False)
    (launch,) = prof.launches
    assert launch["name"] == "attention_forward_kernel<16>"  # the head-dim bucket holding e = 8
    assert launch["flops"] == 2 * b * lq * s * (e + ev)
