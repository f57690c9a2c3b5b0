"""One launch of each fused attention kernel (8 x 12 heads, T = 1024, D = 64, causal) for ncu."""

import math

import numpy as np

import gpumat
from gpumat import ops

d = gpumat.gpu(0)
rng = np.random.default_rng(0)
n, t, e = 96, 1024, 64
q, k, v = (gpumat.array(rng.standard_normal((n, t, e)).astype(np.float32), d) for _ in range(3))
g = gpumat.array(rng.standard_normal((n, t, e + 1)).astype(np.float32), d)
out = gpumat.empty((n, t, e + 1), d)
dqkv = gpumat.empty((3 * n * t * e,), d)
ops.attention(q, k, v, out, 1 / math.sqrt(e), True)
ops.attention_gradient(q, k, v, out, g, dqkv, 1 / math.sqrt(e), True)
gpumat.synchronize(d)
print("ran")
