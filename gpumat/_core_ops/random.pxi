# The random family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/random.cpp.


def random_uniform_(PyGpuMatrix out not None, float low, float high, uint64_t seed):
    _require(out, "random_uniform", "out")
    with nogil:
        random_uniform(out.mat[0], low, high, seed)


def random_normal_(PyGpuMatrix out not None, float mean, float stddev, uint64_t seed):
    _require(out, "random_normal", "out")
    with nogil:
        random_normal(out.mat[0], mean, stddev, seed)
