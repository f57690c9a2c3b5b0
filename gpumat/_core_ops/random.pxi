# The random family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/random.cpp.


def uniform_(PyGpuMatrix out not None, float low, float high, uint64_t seed):
    _require(out, "uniform", "out")
    with nogil:
        uniform(out.mat[0], low, high, seed)


def normal_(PyGpuMatrix out not None, float mean, float stddev, uint64_t seed):
    _require(out, "normal", "out")
    with nogil:
        normal(out.mat[0], mean, stddev, seed)


def randint_(PyGpuMatrix out not None, int64_t low, int64_t high, uint64_t seed):
    _require(out, "randint", "out")
    with nogil:
        randint(out.mat[0], low, high, seed)
