"""nn.MultiheadAttention against PyTorch's from the same weights: outputs, attention weights and
gradients (batch_first or not, unbatched, kdim / vdim, bool and float masks, key padding, the
causal hint with need_weights=False, per-head weights), state_dict both ways, initialisation,
dropout in training mode only, bad input; nn.TransformerEncoder(Layer) and nn.Transformer
(post- and pre-norm, masks, key padding) against PyTorch's; on cpu and emu."""

import numpy as np
import pytest
from helpers import assert_close, new_rng

import gpumat
import gpumat.nn as nn

torch = pytest.importorskip("torch")


def _pair(ctx, e, h, **kw):
    ours = nn.MultiheadAttention(e, h, device=ctx, **kw)
    theirs = torch.nn.MultiheadAttention(e, h, **kw).double()
    state = {k: torch.tensor(v.numpy(), dtype=torch.float64) for k, v in ours.state_dict().items()}
    theirs.load_state_dict(state)
    return ours, theirs


def _t(x, ctx, grad=False):
    return gpumat.tensor(x, device=ctx, requires_grad=grad)


def _tt(x, grad=False):
    return torch.tensor(
        x, dtype=torch.float64 if x.dtype != bool else torch.bool, requires_grad=grad
    )


CASES = [
    dict(batch_first=False),
    dict(batch_first=True),
    dict(batch_first=False, kdim=5, vdim=3),
    dict(batch_first=True, bias=False),
]


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("kw", CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_mha_matches_torch(ctx, kw, need_weights):
    rng, seed = new_rng()
    e, h, n, lq, ls = 8, 2, 3, 7, 5
    ours, theirs = _pair(ctx, e, h, **kw)
    kdim, vdim = kw.get("kdim", e), kw.get("vdim", e)
    bf = kw["batch_first"]
    shape = (lambda length, d: (n, length, d)) if bf else (lambda length, d: (length, n, d))
    q = rng.uniform(-1, 1, size=shape(lq, e)).astype(np.float32)
    k = rng.uniform(-1, 1, size=shape(ls, kdim)).astype(np.float32)
    v = rng.uniform(-1, 1, size=shape(ls, vdim)).astype(np.float32)
    kpm = rng.uniform(size=(n, ls)) < 0.3
    kpm[:, 0] = False  # every row keeps a key
    am = rng.uniform(-1, 1, size=(lq, ls)).astype(np.float32)
    gs = [_t(x, ctx, True) for x in (q, k, v)]
    ts = [_tt(x, True) for x in (q, k, v)]
    out, w = ours(
        *gs, key_padding_mask=_t(kpm, ctx), need_weights=need_weights, attn_mask=_t(am, ctx)
    )
    tout, tw = theirs(*ts, key_padding_mask=_tt(kpm), need_weights=need_weights, attn_mask=_tt(am))
    assert_close(
        out.detach().numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5, msg=f"seed {seed}"
    )
    if need_weights:
        assert_close(w.detach().numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-5)
    else:
        assert w is None and tw is None
    r = rng.uniform(-1, 1, size=out.shape).astype(np.float32)
    (out * _t(r, ctx)).sum().backward()
    (tout * _tt(r)).sum().backward()
    for g, t in zip(gs, ts, strict=True):
        assert_close(g.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5, msg=f"seed {seed}")
    tp = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert_close(p.grad.numpy(), tp[name].grad.numpy(), rtol=1e-4, atol=1e-5, msg=name)


def test_mha_unbatched_causal_and_per_head_weights(ctx):
    rng, _ = new_rng()
    e, h, length = 12, 3, 9
    ours, theirs = _pair(ctx, e, h)
    x = rng.uniform(-1, 1, size=(length, e)).astype(np.float32)
    causal = np.triu(np.ones((length, length), bool), 1)  # True: not allowed
    # the causal hint: fused kernel (need_weights=False) vs PyTorch's
    out, w = ours(*(_t(x, ctx),) * 3, attn_mask=_t(causal, ctx), need_weights=False, is_causal=True)
    tout, _ = theirs(*(_tt(x),) * 3, attn_mask=_tt(causal), need_weights=False, is_causal=True)
    assert w is None
    assert_close(out.detach().numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
    out, w = ours(*(_t(x, ctx),) * 3, attn_mask=_t(causal, ctx), average_attn_weights=False)
    tout, tw = theirs(*(_tt(x),) * 3, attn_mask=_tt(causal), average_attn_weights=False)
    assert w.shape == (h, length, length)
    assert_close(out.detach().numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert_close(w.detach().numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_mha_state_dict_and_init():
    ours = nn.MultiheadAttention(16, 4)
    theirs = torch.nn.MultiheadAttention(16, 4)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    sd = ours.state_dict()
    assert np.all(sd["in_proj_bias"].numpy() == 0) and np.all(sd["out_proj.bias"].numpy() == 0)
    bound = np.sqrt(6.0 / (16 + 48))  # xavier_uniform_ of (48, 16)
    w = sd["in_proj_weight"].numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    ours.load_state_dict({k: gpumat.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    for k, v in theirs.state_dict().items():
        np.testing.assert_array_equal(ours.state_dict()[k].numpy(), v.numpy())
    kv = nn.MultiheadAttention(8, 2, kdim=5, vdim=3, bias=False)
    assert list(kv.state_dict()) == list(
        torch.nn.MultiheadAttention(8, 2, kdim=5, vdim=3, bias=False).state_dict()
    )


def test_mha_dropout_in_training_only():
    rng, _ = new_rng()
    m = nn.MultiheadAttention(8, 2, dropout=0.5)
    x = gpumat.tensor(rng.uniform(-1, 1, size=(6, 2, 8)).astype(np.float32))
    m.eval()
    a, _ = m(x, x, x)
    b, _ = m(x, x, x)
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    m.train()
    c, _ = m(x, x, x)
    assert not np.allclose(c.detach().numpy(), a.detach().numpy())


def test_mha_bad_input():
    with pytest.raises(ValueError, match="divisible"):
        nn.MultiheadAttention(10, 3)
    m = nn.MultiheadAttention(8, 2)
    x = gpumat.zeros(5, 2, 8)
    with pytest.raises(ValueError, match=r"MultiheadAttention: expected query \(L, N, 8\)"):
        m(gpumat.zeros(5, 2, 6), x, x)
    with pytest.raises(ValueError, match="is_causal"):
        m(x, x, x, is_causal=True)
    with pytest.raises(ValueError, match=r"attn_mask must be \(5, 5\)"):
        m(x, x, x, attn_mask=gpumat.zeros(4, 5))
    with pytest.raises(ValueError, match=r"key_padding_mask must be \(2, 5\)"):
        m(x, x, x, key_padding_mask=gpumat.zeros(2, 4, dtype=gpumat.bool))
    with pytest.raises(TypeError, match="attn_mask must be bool or float32"):
        m(x, x, x, attn_mask=gpumat.tensor(np.zeros((5, 5), np.int64)))


def _load_torch_weights(ours, theirs):
    """theirs' state dict into ours (the same names), so both start from PyTorch's weights."""
    missing, unexpected = ours.load_state_dict(
        {k: gpumat.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()}
    )
    assert not missing and not unexpected


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_layers_match_torch(ctx, norm_first, batch_first):
    torch = pytest.importorskip("torch")
    rng, _ = new_rng()
    e, h, ff = 8, 2, 16
    kw = dict(dim_feedforward=ff, dropout=0.0, batch_first=batch_first, norm_first=norm_first)
    torch.manual_seed(0)
    t_enc = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(e, h, activation="gelu", **kw), 2,
        norm=torch.nn.LayerNorm(e), enable_nested_tensor=False,
    ).double()  # fmt: skip
    g_enc = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(e, h, activation="gelu", **kw), 2, norm=nn.LayerNorm(e)
    ).to(ctx)
    assert list(g_enc.state_dict()) == list(t_enc.state_dict())
    _load_torch_weights(g_enc, t_enc)
    shape = (3, 5, e) if batch_first else (5, 3, e)
    src = rng.standard_normal(shape).astype(np.float32)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(5).double()
    g_mask = nn.Transformer.generate_square_subsequent_mask(5, device=ctx)
    assert np.array_equal(g_mask.numpy(), causal.numpy())
    kpm = np.zeros((3, 5), bool)
    kpm[1, 3:] = True
    for mask, t_mask, pad in ((None, None, None), (g_mask, causal, None), (None, None, kpm)):
        gx, tx = _t(src, ctx, grad=True), _tt(src, grad=True)
        got = g_enc(gx, mask=mask, src_key_padding_mask=None if pad is None else _t(pad, ctx))
        want = t_enc(tx, mask=t_mask, src_key_padding_mask=None if pad is None else _tt(pad))
        assert_close(got.detach(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
        r = rng.standard_normal(got.shape).astype(np.float32)
        (got * _t(r, ctx)).sum().backward()
        (want * _tt(r)).sum().backward()
        assert_close(gx.grad, tx.grad.numpy(), rtol=1e-3, atol=1e-5)

    torch.manual_seed(1)
    t_full = torch.nn.Transformer(e, h, 2, 1, ff, dropout=0.0, batch_first=batch_first,
                                  norm_first=norm_first).double()  # fmt: skip
    g_full = nn.Transformer(e, h, 2, 1, ff, dropout=0.0, batch_first=batch_first,
                            norm_first=norm_first).to(ctx)  # fmt: skip
    assert list(g_full.state_dict()) == list(t_full.state_dict())
    _load_torch_weights(g_full, t_full)
    tshape = (3, 4, e) if batch_first else (4, 3, e)
    tgt = rng.standard_normal(tshape).astype(np.float32)
    g_causal = nn.Transformer.generate_square_subsequent_mask(4, device=ctx)
    got = g_full(_t(src, ctx), _t(tgt, ctx), tgt_mask=g_causal)
    want = t_full(
        _tt(src),
        _tt(tgt),
        tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(4).double(),
    )
    assert_close(got.detach(), want.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_transformer_init_deepcopy_and_errors():
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16)
    enc = nn.TransformerEncoder(layer, 3)
    weights = [m.linear1.weight for m in enc.layers]
    assert len({id(w) for w in weights}) == 3  # deep copies, not one shared layer
    assert all(
        np.array_equal(w.detach().numpy(), layer.linear1.weight.detach().numpy()) for w in weights
    )
    full = nn.Transformer(8, 2, 1, 1, 16)
    bound = np.sqrt(6 / (8 + 16))  # xavier_uniform_ of every matrix (linear1: (16, 8))
    w = full.encoder.layers[0].linear1.weight.detach().numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    with pytest.raises(ValueError, match="activation should be relu/gelu"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    with pytest.raises(ValueError, match="feature number of src and tgt"):
        full(gpumat.zeros(3, 2, 8), gpumat.zeros(3, 2, 4))
    with pytest.raises(ValueError, match="batch number of src and tgt"):
        full(gpumat.zeros(3, 2, 8), gpumat.zeros(3, 5, 8))
    y = gpumat.ones(2, 2, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="graph leaves"):
        import copy

        copy.deepcopy(y)
