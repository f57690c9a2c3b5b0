# The norm family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/norm.cpp.


def layer_norm_(PyGpuMatrix x not None, PyGpuMatrix weight not None, PyGpuMatrix bias not None,
                PyGpuMatrix out not None, float eps, bint rms):
    _require(x, "layer_norm", "x")
    _require(weight, "layer_norm", "weight")
    _require(bias, "layer_norm", "bias")
    _require(out, "layer_norm", "out")
    with nogil:
        layer_norm(x.mat[0], weight.mat[0], bias.mat[0], out.mat[0], eps, rms)


def layer_norm_stats_(PyGpuMatrix x not None, PyGpuMatrix stats not None, float eps, bint rms):
    _require(x, "layer_norm_stats", "x")
    _require(stats, "layer_norm_stats", "stats")
    with nogil:
        layer_norm_stats(x.mat[0], stats.mat[0], eps, rms)


def layer_norm_gradient_(PyGpuMatrix x not None, PyGpuMatrix stats not None, PyGpuMatrix weight not None,
                         PyGpuMatrix dy not None, PyGpuMatrix dx not None, bint rms):
    _require(x, "layer_norm_gradient", "x")
    _require(stats, "layer_norm_gradient", "stats")
    _require(weight, "layer_norm_gradient", "weight")
    _require(dy, "layer_norm_gradient", "dy")
    _require(dx, "layer_norm_gradient", "dx")
    with nogil:
        layer_norm_gradient(x.mat[0], stats.mat[0], weight.mat[0], dy.mat[0], dx.mat[0], rms)


def layer_norm_weight_gradient_(PyGpuMatrix x not None, PyGpuMatrix stats not None, PyGpuMatrix dy not None,
                                PyGpuMatrix dweight not None):
    _require(x, "layer_norm_weight_gradient", "x")
    _require(stats, "layer_norm_weight_gradient", "stats")
    _require(dy, "layer_norm_weight_gradient", "dy")
    _require(dweight, "layer_norm_weight_gradient", "dweight")
    with nogil:
        layer_norm_weight_gradient(x.mat[0], stats.mat[0], dy.mat[0], dweight.mat[0])


def layer_norm_backward_(PyGpuMatrix x not None, PyGpuMatrix weight not None, PyGpuMatrix dy not None,
                         PyGpuMatrix dx not None, PyGpuMatrix dweight not None, PyGpuMatrix dbias not None,
                         float eps, bint rms):
    _require(x, "layer_norm_backward", "x")
    _require(weight, "layer_norm_backward", "weight")
    _require(dy, "layer_norm_backward", "dy")
    _require(dx, "layer_norm_backward", "dx")
    _require(dweight, "layer_norm_backward", "dweight")
    _require(dbias, "layer_norm_backward", "dbias")
    with nogil:
        layer_norm_backward(x.mat[0], weight.mat[0], dy.mat[0], dx.mat[0], dweight.mat[0], dbias.mat[0], eps, rms)


def batch_norm_stats_(PyGpuMatrix x not None, PyGpuMatrix stats not None):
    _require(x, "batch_norm_stats", "x")
    _require(stats, "batch_norm_stats", "stats")
    with nogil:
        batch_norm_stats(x.mat[0], stats.mat[0])


def batch_norm_(PyGpuMatrix x not None, PyGpuMatrix stats not None, PyGpuMatrix weight not None,
                PyGpuMatrix bias not None, PyGpuMatrix out not None, float eps):
    _require(x, "batch_norm", "x")
    _require(stats, "batch_norm", "stats")
    _require(weight, "batch_norm", "weight")
    _require(bias, "batch_norm", "bias")
    _require(out, "batch_norm", "out")
    with nogil:
        batch_norm(x.mat[0], stats.mat[0], weight.mat[0], bias.mat[0], out.mat[0], eps)


def batch_norm_gradient_(PyGpuMatrix x not None, PyGpuMatrix stats not None, PyGpuMatrix weight not None,
                         PyGpuMatrix dy not None, PyGpuMatrix dx not None, float eps, bint training):
    _require(x, "batch_norm_gradient", "x")
    _require(stats, "batch_norm_gradient", "stats")
    _require(weight, "batch_norm_gradient", "weight")
    _require(dy, "batch_norm_gradient", "dy")
    _require(dx, "batch_norm_gradient", "dx")
    with nogil:
        batch_norm_gradient(x.mat[0], stats.mat[0], weight.mat[0], dy.mat[0], dx.mat[0], eps, training)


def batch_norm_weight_gradient_(PyGpuMatrix x not None, PyGpuMatrix stats not None, PyGpuMatrix dy not None,
                                PyGpuMatrix dweight not None, float eps):
    _require(x, "batch_norm_weight_gradient", "x")
    _require(stats, "batch_norm_weight_gradient", "stats")
    _require(dy, "batch_norm_weight_gradient", "dy")
    _require(dweight, "batch_norm_weight_gradient", "dweight")
    with nogil:
        batch_norm_weight_gradient(x.mat[0], stats.mat[0], dy.mat[0], dweight.mat[0], eps)
