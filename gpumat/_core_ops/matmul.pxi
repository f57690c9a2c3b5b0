# The matmul family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/matmul.cpp.


def matmul_(PyGpuMatrix a not None, bint trans_a, PyGpuMatrix b not None, bint trans_b,
            PyGpuMatrix c not None):
    _require(a, "matmul", "a")
    _require(b, "matmul", "b")
    _require(c, "matmul", "c")
    with nogil:
        matmul(a.mat[0], trans_a, b.mat[0], trans_b, c.mat[0])


def matmul_bias_(PyGpuMatrix a not None, bint trans_a, PyGpuMatrix b not None, bint trans_b,
                 PyGpuMatrix bias not None, PyGpuMatrix c not None, bint relu):
    _require(a, "matmul_bias", "a")
    _require(b, "matmul_bias", "b")
    _require(bias, "matmul_bias", "bias")
    _require(c, "matmul_bias", "c")
    with nogil:
        matmul_bias(a.mat[0], trans_a, b.mat[0], trans_b, bias.mat[0], c.mat[0], relu)


def bmm_(PyGpuMatrix a not None, bint trans_a, PyGpuMatrix b not None, bint trans_b,
         PyGpuMatrix c not None):
    _require(a, "bmm", "a")
    _require(b, "bmm", "b")
    _require(c, "bmm", "c")
    with nogil:
        bmm(a.mat[0], trans_a, b.mat[0], trans_b, c.mat[0])
