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
