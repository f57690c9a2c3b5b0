# The layout family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/layout.cpp.


def transpose_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "transpose", "a")
    _require(out, "transpose", "out")
    with nogil:
        transpose(a.mat[0], out.mat[0])


def reshape_(PyGpuMatrix src not None, PyGpuMatrix dst not None):
    _require(src, "reshape", "src")
    _require(dst, "reshape", "dst")
    with nogil:
        reshape(src.mat[0], dst.mat[0])


def one_hot_(PyGpuMatrix indices not None, PyGpuMatrix out not None):
    _require(indices, "one_hot", "indices")
    _require(out, "one_hot", "out")
    with nogil:
        one_hot(indices.mat[0], out.mat[0])


def tril_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t diagonal):
    _require(a, "tril", "a")
    _require(out, "tril", "out")
    with nogil:
        tril(a.mat[0], out.mat[0], diagonal)


def triu_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t diagonal):
    _require(a, "triu", "a")
    _require(out, "triu", "out")
    with nogil:
        triu(a.mat[0], out.mat[0], diagonal)
