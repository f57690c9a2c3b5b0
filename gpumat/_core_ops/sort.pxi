# The sort family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked and
# dispatched by extensions/src/ops/sort.cpp.


def argsort_(PyGpuMatrix a not None, PyGpuMatrix indices not None, int64_t axis, bint descending):
    _require(a, "argsort", "a")
    _require(indices, "argsort", "indices")
    with nogil:
        argsort(a.mat[0], indices.mat[0], axis, descending)


def gather_(PyGpuMatrix a not None, PyGpuMatrix index not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "gather", "a")
    _require(index, "gather", "index")
    _require(out, "gather", "out")
    with nogil:
        gather(a.mat[0], index.mat[0], out.mat[0], axis)


def gather_gradient_(PyGpuMatrix index not None, PyGpuMatrix dy not None, PyGpuMatrix out not None,
                     int64_t axis):
    _require(index, "gather_gradient", "index")
    _require(dy, "gather_gradient", "dy")
    _require(out, "gather_gradient", "out")
    with nogil:
        gather_gradient(index.mat[0], dy.mat[0], out.mat[0], axis)
