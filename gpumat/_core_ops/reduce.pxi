# The reduce family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/reduce.cpp. Reductions and broadcasts, each the other's
# gradient.


def sum_to_size_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "sum_to_size", "a")
    _require(out, "sum_to_size", "out")
    with nogil:
        sum_to_size(a.mat[0], out.mat[0])


def broadcast_to_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "broadcast_to", "a")
    _require(out, "broadcast_to", "out")
    with nogil:
        broadcast_to(a.mat[0], out.mat[0])


def sum_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "sum", "a")
    _require(out, "sum", "out")
    with nogil:
        sum(a.mat[0], out.mat[0], axis)


def mean_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "mean", "a")
    _require(out, "mean", "out")
    with nogil:
        mean(a.mat[0], out.mat[0], axis)


def amax_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "amax", "a")
    _require(out, "amax", "out")
    with nogil:
        amax(a.mat[0], out.mat[0], axis)


def amax_gradient_(PyGpuMatrix x not None, PyGpuMatrix y not None, PyGpuMatrix dy not None, PyGpuMatrix out not None, int64_t axis):
    _require(x, "amax_gradient", "x")
    _require(y, "amax_gradient", "y")
    _require(dy, "amax_gradient", "dy")
    _require(out, "amax_gradient", "out")
    with nogil:
        amax_gradient(x.mat[0], y.mat[0], dy.mat[0], out.mat[0], axis)


def broadcast_dim_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis, float scale):
    _require(a, "broadcast_dim", "a")
    _require(out, "broadcast_dim", "out")
    with nogil:
        broadcast_dim(a.mat[0], out.mat[0], axis, scale)


def argmax_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "argmax", "a")
    _require(out, "argmax", "out")
    with nogil:
        argmax(a.mat[0], out.mat[0], axis)


def prod_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "prod", "a")
    _require(out, "prod", "out")
    with nogil:
        prod(a.mat[0], out.mat[0], axis)


def prod_gradient_(PyGpuMatrix x not None, PyGpuMatrix dy not None, PyGpuMatrix out not None, int64_t axis):
    _require(x, "prod_gradient", "x")
    _require(dy, "prod_gradient", "dy")
    _require(out, "prod_gradient", "out")
    with nogil:
        prod_gradient(x.mat[0], dy.mat[0], out.mat[0], axis)


def cumsum_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis, bint reverse):
    _require(a, "cumsum", "a")
    _require(out, "cumsum", "out")
    with nogil:
        cumsum(a.mat[0], out.mat[0], axis, reverse)
