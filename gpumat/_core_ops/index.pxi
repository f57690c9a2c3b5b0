# The index family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/index.cpp.


def index_select_(PyGpuMatrix a not None, int64_t dim, PyGpuMatrix index not None,
                  PyGpuMatrix out not None):
    _require(a, "index_select", "a")
    _require(index, "index_select", "index")
    _require(out, "index_select", "out")
    with nogil:
        index_select(a.mat[0], dim, index.mat[0], out.mat[0])


def index_add_(PyGpuMatrix out not None, int64_t dim, PyGpuMatrix index not None,
               PyGpuMatrix src not None, float alpha):
    _require(out, "index_add", "out")
    _require(index, "index_add", "index")
    _require(src, "index_add", "src")
    with nogil:
        index_add(out.mat[0], dim, index.mat[0], src.mat[0], alpha)


def index_copy_(PyGpuMatrix out not None, int64_t dim, PyGpuMatrix index not None,
                PyGpuMatrix src not None):
    _require(out, "index_copy", "out")
    _require(index, "index_copy", "index")
    _require(src, "index_copy", "src")
    with nogil:
        index_copy(out.mat[0], dim, index.mat[0], src.mat[0])
