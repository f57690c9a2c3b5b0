"""Gradient-check helpers for the graph tests (test_autodiff.py, test_conv.py, test_pool.py,
test_losses.py).

- ``check_fd_gradients``: autodiff gradients on the numpy backend in float64 against central
  finite differences (the float64 run makes them accurate to ~1e-9).
- ``check_device_gradients``: the same graph on a gpumat device (float32) against the numpy
  backend's analytic float64 values and gradients (float32 finite differences are noise).

Both weight the output with a fixed random array R (the gradient of sum(out * R)), so every
output element matters.
"""

import numpy as np

import gpumat.autodiff as ad


def rand64(rng, shape, low=0.1, high=1.0):
    """float64 entries, |x| in [low, high), random sign: never zero."""
    return rng.uniform(low, high, size=shape) * np.where(rng.random(size=shape) < 0.5, -1.0, 1.0)


def numeric_grad(f, x, eps=1e-6):
    """Central differences of the scalar f() with respect to the array x (perturbed in place)."""
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        old = x[idx]
        x[idx] = old + eps
        fp = f()
        x[idx] = old - eps
        fm = f()
        x[idx] = old
        grad[idx] = (fp - fm) / (2 * eps)
    return grad


def _weighted_graph(build, n_inputs):
    xs = [ad.Variable(f"x{i}") for i in range(n_inputs)]
    out = build(*xs)
    r = ad.Variable("R")
    return xs, out, r


def check_fd_gradients(build, inputs, rng, wrt=None, rtol=1e-6, atol=1e-8):
    """Gradients of sum(build(*xs) * R) on the numpy backend (float64) vs finite differences.

    inputs: float64 arrays, one per variable (perturbed in place and restored).
    Returns the forward value.
    """
    xs, out, r = _weighted_graph(build, len(inputs))
    wrt = list(range(len(inputs))) if wrt is None else wrt
    feeds = dict(zip(xs, inputs, strict=True))
    forward = ad.Executor([out])
    out_val = forward.run(feeds)[0]
    assert out_val.dtype == np.float64
    r_val = rand64(rng, out_val.shape)
    grads = ad.gradients(out * r, [xs[i] for i in wrt])
    got = ad.Executor(grads).run({**feeds, r: r_val})

    def f():
        return float(np.sum(forward.run(feeds)[0] * r_val))

    for k, i in enumerate(wrt):
        assert got[k].shape == inputs[i].shape, f"gradient {i}: {got[k].shape} != {inputs[i].shape}"
        expected = numeric_grad(f, inputs[i])
        np.testing.assert_allclose(
            got[k], expected, rtol=rtol, atol=atol, err_msg=f"gradient w.r.t. input {i}"
        )
    return out_val


def check_device_gradients(ctx, build, inputs, rng, wrt=None, rtol=2e-4, atol_scale=2e-5):
    """Values and gradients of sum(build(*xs) * R) on ``ctx`` (float32) vs numpy float64.

    inputs: float64 arrays (rounded to float32 first, so both runs see the same numbers). The
    tolerance is rtol relative plus atol_scale times the largest reference magnitude.
    """
    xs, out, r = _weighted_graph(build, len(inputs))
    wrt = list(range(len(inputs))) if wrt is None else wrt
    inputs32 = [np.asarray(x, dtype=np.float32) for x in inputs]
    shape = ad.Executor([out]).run(dict(zip(xs, inputs32, strict=True)))[0].shape
    r_val = rand64(rng, shape).astype(np.float32)
    nodes = [out, *ad.gradients(out * r, [xs[i] for i in wrt])]
    feeds64 = {**dict(zip(xs, [x.astype(np.float64) for x in inputs32], strict=True)), r: r_val}
    feeds32 = {**dict(zip(xs, inputs32, strict=True)), r: r_val}
    ref = ad.Executor(nodes).run({k: np.asarray(v, np.float64) for k, v in feeds64.items()})
    got = ad.Executor(nodes, device=ctx).run(feeds32, convert_to_numpy_ret_vals=True)
    names = ["value"] + [f"gradient w.r.t. input {i}" for i in wrt]
    for name, g, e in zip(names, got, ref, strict=True):
        assert g.dtype == np.float32 and g.shape == e.shape, f"{name}: {g.dtype} {g.shape}"
        atol = atol_scale * max(float(np.max(np.abs(e))), 1e-30)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=f"{name} on {ctx}")
    return got, ref
