# The strided family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/strided.cpp.


#: The most dims a Strides holds (as_strided's and as_strided_scatter's stride tuples): a compiled
#: step (gpumat.runtime.compiled) passes a stride tuple as this many integer scalars.
MAX_STRIDED_DIMS = kMaxStridedDims


cdef Strides _strides(tuple stride, str op) except *:
    """A Strides from a tuple of at most kMaxStridedDims ints (the rest of the slots 0)."""
    cdef Strides st
    cdef int d
    if len(stride) > kMaxStridedDims:
        raise ValueError(f"{op}: {len(stride)} strides, at most {kMaxStridedDims}")
    for d in range(kMaxStridedDims):
        st.v[d] = stride[d] if d < len(stride) else 0
    return st


def broadcast_binary_(PyGpuMatrix a not None, PyGpuMatrix b not None, PyGpuMatrix out not None,
                      int64_t op):
    _require(a, "broadcast_binary", "a")
    _require(b, "broadcast_binary", "b")
    _require(out, "broadcast_binary", "out")
    with nogil:
        broadcast_binary(a.mat[0], b.mat[0], out.mat[0], op)


def broadcast_where_(PyGpuMatrix cond not None, PyGpuMatrix a not None, PyGpuMatrix b not None,
                     PyGpuMatrix out not None):
    _require(cond, "broadcast_where", "cond")
    _require(a, "broadcast_where", "a")
    _require(b, "broadcast_where", "b")
    _require(out, "broadcast_where", "out")
    with nogil:
        broadcast_where(cond.mat[0], a.mat[0], b.mat[0], out.mat[0])


def sum_to_(PyGpuMatrix x not None, PyGpuMatrix out not None):
    _require(x, "sum_to", "x")
    _require(out, "sum_to", "out")
    with nogil:
        sum_to(x.mat[0], out.mat[0])


def as_strided_(PyGpuMatrix x not None, PyGpuMatrix out not None, tuple stride not None,
                int64_t offset):
    _require(x, "as_strided", "x")
    _require(out, "as_strided", "out")
    cdef Strides st = _strides(stride, "as_strided")
    with nogil:
        as_strided(x.mat[0], out.mat[0], st, offset)


def as_strided_scatter_(PyGpuMatrix src not None, PyGpuMatrix out not None,
                        tuple stride not None, int64_t offset):
    _require(src, "as_strided_scatter", "src")
    _require(out, "as_strided_scatter", "out")
    cdef Strides st = _strides(stride, "as_strided_scatter")
    with nogil:
        as_strided_scatter(src.mat[0], out.mat[0], st, offset)
