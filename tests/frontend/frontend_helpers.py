"""Helpers of the front-end tests: fresh inputs on a device, a NaN-poisoned allocator cache, and
float64 finite-difference gradients of numpy references.

``poison(ctx, shapes)`` fills the caching allocator of ``ctx`` with freed NaN blocks of the sizes
a test's outputs and gradients will take, so an op that leaves an element of its (fresh,
uninitialised) output unwritten shows NaN instead of a stale value: the front end's counterpart of
``helpers.nan_array`` for kernels whose outputs it allocates itself.
"""

import math

import numpy as np

import gpumat


def poison(ctx, shapes, copies: int = 4) -> None:
    """Leave NaN-filled freed blocks of each shape's size (and a few more) in ``ctx``'s cache."""
    sizes = {max(1, math.prod(s)) for s in shapes}
    held = []
    for n in sorted(sizes):
        for _ in range(copies):
            a = gpumat.empty((n,), ctx)
            gpumat.ops.fill(a, float("nan"))
            held.append(a)
    del held


def fd_gradient(f, xs, r, eps=1e-6):
    """Central differences, in float64, of sum(f(*xs) * r) with respect to each of ``xs``."""
    xs = [np.array(x, dtype=np.float64) for x in xs]
    grads = []
    for x in xs:
        g = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            old = x[idx]
            x[idx] = old + eps
            fp = float(np.sum(f(*xs) * r))
            x[idx] = old - eps
            fm = float(np.sum(f(*xs) * r))
            x[idx] = old
            g[idx] = (fp - fm) / (2 * eps)
        grads.append(g)
    return grads
