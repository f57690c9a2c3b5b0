# The elementwise family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/elementwise.cpp.


def fill_(PyGpuMatrix arr not None, float value):
    _require(arr, "fill", "arr")
    with nogil:
        fill(arr.mat[0], value)


def add_(PyGpuMatrix a not None, PyGpuMatrix b not None, PyGpuMatrix out not None):
    _require(a, "add", "a")
    _require(b, "add", "b")
    _require(out, "add", "out")
    with nogil:
        add(a.mat[0], b.mat[0], out.mat[0])


def mul_(PyGpuMatrix a not None, PyGpuMatrix b not None, PyGpuMatrix out not None):
    _require(a, "mul", "a")
    _require(b, "mul", "b")
    _require(out, "mul", "out")
    with nogil:
        mul(a.mat[0], b.mat[0], out.mat[0])


def div_(PyGpuMatrix a not None, PyGpuMatrix b not None, PyGpuMatrix out not None):
    _require(a, "div", "a")
    _require(b, "div", "b")
    _require(out, "div", "out")
    with nogil:
        div(a.mat[0], b.mat[0], out.mat[0])


def eq_(PyGpuMatrix a not None, PyGpuMatrix b not None, PyGpuMatrix out not None):
    _require(a, "eq", "a")
    _require(b, "eq", "b")
    _require(out, "eq", "out")
    with nogil:
        eq(a.mat[0], b.mat[0], out.mat[0])


def add_scalar_(PyGpuMatrix a not None, float value, PyGpuMatrix out not None):
    _require(a, "add_scalar", "a")
    _require(out, "add_scalar", "out")
    with nogil:
        add_scalar(a.mat[0], value, out.mat[0])


def mul_scalar_(PyGpuMatrix a not None, float value, PyGpuMatrix out not None):
    _require(a, "mul_scalar", "a")
    _require(out, "mul_scalar", "out")
    with nogil:
        mul_scalar(a.mat[0], value, out.mat[0])


def axpy_(float alpha, PyGpuMatrix x not None, PyGpuMatrix y not None):
    _require(x, "axpy", "x")
    _require(y, "axpy", "y")
    with nogil:
        axpy(alpha, x.mat[0], y.mat[0])


def copy_(PyGpuMatrix src not None, PyGpuMatrix dst not None):
    _require(src, "copy", "src")
    _require(dst, "copy", "dst")
    with nogil:
        copy(src.mat[0], dst.mat[0])


def exp_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "exp", "a")
    _require(out, "exp", "out")
    with nogil:
        exp(a.mat[0], out.mat[0])


def log_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "log", "a")
    _require(out, "log", "out")
    with nogil:
        log(a.mat[0], out.mat[0])
