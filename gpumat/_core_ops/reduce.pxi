# The reduce family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/reduce.cpp. Reductions and broadcasts, each the other's
# gradient.


def reduce_sum_axis_zero_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "reduce_sum_axis_zero", "a")
    _require(out, "reduce_sum_axis_zero", "out")
    with nogil:
        reduce_sum_axis_zero(a.mat[0], out.mat[0])


def broadcast_to_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "broadcast_to", "a")
    _require(out, "broadcast_to", "out")
    with nogil:
        broadcast_to(a.mat[0], out.mat[0])


def reduce_sum_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "reduce_sum", "a")
    _require(out, "reduce_sum", "out")
    with nogil:
        reduce_sum(a.mat[0], out.mat[0], axis)


def reduce_mean_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "reduce_mean", "a")
    _require(out, "reduce_mean", "out")
    with nogil:
        reduce_mean(a.mat[0], out.mat[0], axis)


def reduce_max_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "reduce_max", "a")
    _require(out, "reduce_max", "out")
    with nogil:
        reduce_max(a.mat[0], out.mat[0], axis)


def reduce_max_gradient_(PyGpuMatrix x not None, PyGpuMatrix y not None, PyGpuMatrix dy not None, PyGpuMatrix out not None, int64_t axis):
    _require(x, "reduce_max_gradient", "x")
    _require(y, "reduce_max_gradient", "y")
    _require(dy, "reduce_max_gradient", "dy")
    _require(out, "reduce_max_gradient", "out")
    with nogil:
        reduce_max_gradient(x.mat[0], y.mat[0], dy.mat[0], out.mat[0], axis)


def broadcast_axis_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis, float scale):
    _require(a, "broadcast_axis", "a")
    _require(out, "broadcast_axis", "out")
    with nogil:
        broadcast_axis(a.mat[0], out.mat[0], axis, scale)


def argmax_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "argmax", "a")
    _require(out, "argmax", "out")
    with nogil:
        argmax(a.mat[0], out.mat[0], axis)
