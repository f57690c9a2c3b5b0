"""One forward and one gradient (fast and deterministic paths) per shape on gpu(0), for ncu."""

import numpy as np

import gpumat
from gpumat import ops

ctx = gpumat.gpu(0)
rng = np.random.default_rng(0)
for n, t, d in ((96, 1024, 64), (32, 1024, 128)):
    q, k, v = (
        gpumat.array(rng.standard_normal((n, t, d)).astype(np.float32), ctx) for _ in range(3)
    )
    g = np.zeros((n, t, d + 1), np.float32)
    g[..., :d] = rng.standard_normal((n, t, d))
    dout = gpumat.array(g, ctx)
    out = gpumat.empty((n, t, d + 1), ctx)
    dqkv = gpumat.empty((3 * n * t * d,), ctx)
    ops.attention(q, k, v, out, d**-0.5, True)
    for det in (False, True):
        gpumat.use_deterministic_algorithms(det)
        ops.attention_gradient(q, k, v, out, dout, dqkv, d**-0.5, True)
    gpumat.use_deterministic_algorithms(False)
    gpumat.synchronize(ctx)
print("done")
