# The elementwise family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/elementwise.cpp.


def array_set_(PyGpuMatrix arr not None, float value):
    _require(arr, "array_set", "arr")
    with nogil:
        array_set(arr.mat[0], value)


def add_(PyGpuMatrix a not None, PyGpuMatrix b not None, PyGpuMatrix out not None):
    _require(a, "add", "a")
    _require(b, "add", "b")
    _require(out, "add", "out")
    with nogil:
        add(a.mat[0], b.mat[0], out.mat[0])


def multiply_(PyGpuMatrix a not None, PyGpuMatrix b not None, PyGpuMatrix out not None):
    _require(a, "multiply", "a")
    _require(b, "multiply", "b")
    _require(out, "multiply", "out")
    with nogil:
        multiply(a.mat[0], b.mat[0], out.mat[0])


def divide_(PyGpuMatrix a not None, PyGpuMatrix b not None, PyGpuMatrix out not None):
    _require(a, "divide", "a")
    _require(b, "divide", "b")
    _require(out, "divide", "out")
    with nogil:
        divide(a.mat[0], b.mat[0], out.mat[0])


def eq_(PyGpuMatrix a not None, PyGpuMatrix b not None, PyGpuMatrix out not None):
    _require(a, "eq", "a")
    _require(b, "eq", "b")
    _require(out, "eq", "out")
    with nogil:
        eq(a.mat[0], b.mat[0], out.mat[0])


def add_const_(PyGpuMatrix a not None, float value, PyGpuMatrix out not None):
    _require(a, "add_const", "a")
    _require(out, "add_const", "out")
    with nogil:
        add_const(a.mat[0], value, out.mat[0])


def multiply_const_(PyGpuMatrix a not None, float value, PyGpuMatrix out not None):
    _require(a, "multiply_const", "a")
    _require(out, "multiply_const", "out")
    with nogil:
        multiply_const(a.mat[0], value, out.mat[0])


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
