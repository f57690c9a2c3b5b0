"""The fused recurrent-cell kernels (lstm_cell, gru_cell and their gradients): every device
against float64 numpy formulas written here from PyTorch's documented cell equations (not
gpumat.reference), outputs NaN-poisoned first, zero rows included; the graph ops' gradients
against float64 central differences and on every device; bad shapes."""

import numpy as np
import pytest
from helpers import new_rng, shape_id
from nn_helpers import check_device_gradients, check_fd_gradients

import gpumat
import gpumat.graph as ad
import gpumat.ops as ops
import gpumat.reference as reference
from gpumat.runtime import Executor

SIZES = [(1, 1), (3, 7), (5, 33), (0, 4)]


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _lstm64(gates, c):
    i, f, g, o = np.split(gates, 4, axis=1)
    cn = _sig(f) * c + _sig(i) * np.tanh(g)
    return np.concatenate([_sig(o) * np.tanh(cn), cn], axis=1)


def _gru64(gi, gh, h):
    ir, iz, inn = np.split(gi, 3, axis=1)
    hr, hz, hn = np.split(gh, 3, axis=1)
    r, z = _sig(ir + hr), _sig(iz + hz)
    n = np.tanh(inn + r * hn)
    return (1 - z) * n + z * h


def _vjp(f, xs, dy, eps=1e-6):
    """sum(f(*xs) * dy)'s gradient w.r.t. each of xs by float64 central differences."""
    out = []
    for x in xs:
        g = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            old = x[idx]
            x[idx] = old + eps
            fp = np.sum(f(*xs) * dy)
            x[idx] = old - eps
            fm = np.sum(f(*xs) * dy)
            x[idx] = old
            g[idx] = (fp - fm) / (2 * eps)
        out.append(g)
    return out


def _run(ctx, name, ins, out_shape):
    out = gpumat.array(np.full(out_shape, np.nan, np.float32), ctx)
    getattr(ops, name)(*(gpumat.array(v.astype(np.float32), ctx) for v in ins), out)
    return out.asnumpy()


@pytest.mark.parametrize("n,h", SIZES, ids=[shape_id(s) for s in SIZES])
def test_lstm_kernels_match_float64(ctx, n, h):
    rng, seed = new_rng()
    gates = rng.uniform(-3, 3, (n, 4 * h)).astype(np.float32).astype(np.float64)
    c = rng.uniform(-2, 2, (n, h)).astype(np.float32).astype(np.float64)
    dy = rng.uniform(-1, 1, (n, 2 * h)).astype(np.float32).astype(np.float64)
    y = _lstm64(gates, c)
    got = _run(ctx, "lstm_cell", [gates, c], (n, 2 * h))
    np.testing.assert_allclose(got, y, rtol=1e-5, atol=1e-6, err_msg=f"seed {seed}")
    dgates, dc = _vjp(_lstm64, [gates, c], dy) if n else (np.zeros((0, 4 * h)), np.zeros((0, h)))
    got = _run(ctx, "lstm_cell_gradient", [gates, c, y, dy], (n, 5 * h))
    want = np.concatenate([dgates, dc], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6, err_msg=f"seed {seed}")


@pytest.mark.parametrize("n,h", SIZES, ids=[shape_id(s) for s in SIZES])
def test_gru_kernels_match_float64(ctx, n, h):
    rng, seed = new_rng()
    gi = rng.uniform(-3, 3, (n, 3 * h)).astype(np.float32).astype(np.float64)
    gh = rng.uniform(-3, 3, (n, 3 * h)).astype(np.float32).astype(np.float64)
    hx = rng.uniform(-1, 1, (n, h)).astype(np.float32).astype(np.float64)
    dy = rng.uniform(-1, 1, (n, h)).astype(np.float32).astype(np.float64)
    got = _run(ctx, "gru_cell", [gi, gh, hx], (n, h))
    np.testing.assert_allclose(got, _gru64(gi, gh, hx), rtol=1e-5, atol=1e-6, err_msg=f"{seed}")
    grads = _vjp(_gru64, [gi, gh, hx], dy) if n else [np.zeros((0, k * h)) for k in (3, 3, 1)]
    got = _run(ctx, "gru_cell_gradient", [gi, gh, hx, dy], (n, 7 * h))
    np.testing.assert_allclose(
        got, np.concatenate(grads, axis=1), rtol=1e-4, atol=1e-6, err_msg=f"seed {seed}"
    )


def test_reference_matches_formulas():
    rng, _ = new_rng()
    gates, c = rng.standard_normal((4, 12)), rng.standard_normal((4, 3))
    out = np.full((4, 6), np.nan)
    reference.lstm_cell(gates, c, out)
    np.testing.assert_allclose(out, _lstm64(gates, c), rtol=1e-12)
    gi, gh, hx = (
        rng.standard_normal((4, 9)),
        rng.standard_normal((4, 9)),
        rng.standard_normal((4, 3)),
    )
    out = np.full((4, 3), np.nan)
    reference.gru_cell(gi, gh, hx, out)
    np.testing.assert_allclose(out, _gru64(gi, gh, hx), rtol=1e-12)


def test_graph_gradients_finite_differences(ctx):
    rng, _ = new_rng()
    n, h = 3, 4
    lstm_in = [rng.uniform(-2, 2, (n, 4 * h)), rng.uniform(-2, 2, (n, h))]
    check_fd_gradients(ad.lstm_cell_op, [x.copy() for x in lstm_in], rng, rtol=1e-5, atol=1e-7)
    check_device_gradients(ctx, ad.lstm_cell_op, lstm_in, rng)
    gru_in = [rng.uniform(-2, 2, (n, 3 * h)), rng.uniform(-2, 2, (n, 3 * h))]
    gru_in.append(rng.uniform(-1, 1, (n, h)))
    check_fd_gradients(ad.gru_cell_op, [x.copy() for x in gru_in], rng, rtol=1e-5, atol=1e-7)
    check_device_gradients(ctx, ad.gru_cell_op, gru_in, rng)


def test_bad_shapes(ctx):
    a = lambda *s: gpumat.array(np.zeros(s, np.float32), ctx)  # noqa: E731
    with pytest.raises(ValueError, match=r"lstm_cell: gates \(2, 7\) must be \(N, 4 \* H\)"):
        ops.lstm_cell(a(2, 7), a(2, 2), a(2, 4))
    with pytest.raises(ValueError, match=r"lstm_cell: out must be \(2, 4\), got \(2, 5\)"):
        ops.lstm_cell(a(2, 8), a(2, 2), a(2, 5))
    with pytest.raises(ValueError, match=r"gru_cell: gh must be \(2, 6\)"):
        ops.gru_cell(a(2, 6), a(3, 6), a(2, 2), a(2, 2))
    with pytest.raises(ValueError, match=r"gru_cell_gradient: dy must be \(2, 2\)"):
        ops.gru_cell_gradient(a(2, 6), a(2, 6), a(2, 2), a(2, 3), a(2, 14))
    x = a(2, 8)
    with pytest.raises(ValueError, match="lstm_cell"):
        ops.lstm_cell(x, a(2, 2), x)
    g, c = ad.Variable("g"), ad.Variable("c")
    with pytest.raises(ValueError, match=r"lstm_cell_op at node 'LstmCell\(g,c\)': gates \(2, 7\)"):
        Executor([ad.lstm_cell_op(g, c)], device=ctx).run(
            {g: np.zeros((2, 7), np.float32), c: np.zeros((2, 2), np.float32)}
        )
    gi, gh, hx = ad.Variable("gi"), ad.Variable("gh"), ad.Variable("hx")
    with pytest.raises(ValueError, match=r"gru_cell_op at node .*: gh has shape \(2, 9\)"):
        Executor([ad.gru_cell_op(gi, gh, hx)], device=ctx).run(
            {
                gi: np.zeros((2, 6), np.float32),
                gh: np.zeros((2, 9), np.float32),
                hx: np.zeros((2, 2), np.float32),
            }
        )
