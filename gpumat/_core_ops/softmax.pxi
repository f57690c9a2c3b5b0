# The softmax family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/softmax.cpp.


def softmax_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "softmax", "a")
    _require(out, "softmax", "out")
    with nogil:
        softmax(a.mat[0], out.mat[0], axis)


def log_softmax_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "log_softmax", "a")
    _require(out, "log_softmax", "out")
    with nogil:
        log_softmax(a.mat[0], out.mat[0], axis)


def softmax_gradient_(PyGpuMatrix y not None, PyGpuMatrix dy not None, PyGpuMatrix out not None, int64_t axis):
    _require(y, "softmax_gradient", "y")
    _require(dy, "softmax_gradient", "dy")
    _require(out, "softmax_gradient", "out")
    with nogil:
        softmax_gradient(y.mat[0], dy.mat[0], out.mat[0], axis)


def log_softmax_gradient_(PyGpuMatrix y not None, PyGpuMatrix dy not None, PyGpuMatrix out not None, int64_t axis):
    _require(y, "log_softmax_gradient", "y")
    _require(dy, "log_softmax_gradient", "dy")
    _require(out, "log_softmax_gradient", "out")
    with nogil:
        log_softmax_gradient(y.mat[0], dy.mat[0], out.mat[0], axis)
