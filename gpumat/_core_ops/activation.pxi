# The activation family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/activation.cpp.


def relu_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "relu", "a")
    _require(out, "relu", "out")
    with nogil:
        relu(a.mat[0], out.mat[0])


def relu_gradient_(PyGpuMatrix a not None, PyGpuMatrix grad not None, PyGpuMatrix out not None):
    _require(a, "relu_gradient", "a")
    _require(grad, "relu_gradient", "grad")
    _require(out, "relu_gradient", "out")
    with nogil:
        relu_gradient(a.mat[0], grad.mat[0], out.mat[0])


def dropout_(PyGpuMatrix a not None, PyGpuMatrix out not None, float p, uint64_t seed):
    _require(a, "dropout", "a")
    _require(out, "dropout", "out")
    with nogil:
        dropout(a.mat[0], out.mat[0], p, seed)


def relu_bias_gradient_(PyGpuMatrix y not None, PyGpuMatrix dy not None, PyGpuMatrix dz not None,
                        PyGpuMatrix dbias not None):
    _require(y, "relu_bias_gradient", "y")
    _require(dy, "relu_bias_gradient", "dy")
    _require(dz, "relu_bias_gradient", "dz")
    _require(dbias, "relu_bias_gradient", "dbias")
    with nogil:
        relu_bias_gradient(y.mat[0], dy.mat[0], dz.mat[0], dbias.mat[0])
