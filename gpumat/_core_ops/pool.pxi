# The pool family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/pool.cpp.
# Kernel, stride and padding arrive as (h, w) ints.


def max_pool2d_(PyGpuMatrix x not None, PyGpuMatrix y not None, int64_t kernel_h,
                int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                int64_t pad_w):
    _require(x, "max_pool2d", "x")
    _require(y, "max_pool2d", "y")
    with nogil:
        max_pool2d(x.mat[0], y.mat[0], kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w)


def max_pool2d_gradient_(PyGpuMatrix x not None, PyGpuMatrix dy not None,
                         PyGpuMatrix dx not None, int64_t kernel_h, int64_t kernel_w,
                         int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w):
    _require(x, "max_pool2d_gradient", "x")
    _require(dy, "max_pool2d_gradient", "dy")
    _require(dx, "max_pool2d_gradient", "dx")
    with nogil:
        max_pool2d_gradient(x.mat[0], dy.mat[0], dx.mat[0], kernel_h, kernel_w, stride_h,
                            stride_w, pad_h, pad_w)


def avg_pool2d_(PyGpuMatrix x not None, PyGpuMatrix y not None, int64_t kernel_h,
                int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                int64_t pad_w):
    _require(x, "avg_pool2d", "x")
    _require(y, "avg_pool2d", "y")
    with nogil:
        avg_pool2d(x.mat[0], y.mat[0], kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w)


def avg_pool2d_gradient_(PyGpuMatrix dy not None, PyGpuMatrix dx not None, int64_t kernel_h,
                         int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                         int64_t pad_w):
    _require(dy, "avg_pool2d_gradient", "dy")
    _require(dx, "avg_pool2d_gradient", "dx")
    with nogil:
        avg_pool2d_gradient(dy.mat[0], dx.mat[0], kernel_h, kernel_w, stride_h, stride_w, pad_h,
                            pad_w)


def adaptive_avg_pool2d_(PyGpuMatrix x not None, PyGpuMatrix y not None):
    _require(x, "adaptive_avg_pool2d", "x")
    _require(y, "adaptive_avg_pool2d", "y")
    with nogil:
        adaptive_avg_pool2d(x.mat[0], y.mat[0])


def adaptive_avg_pool2d_gradient_(PyGpuMatrix dy not None, PyGpuMatrix dx not None):
    _require(dy, "adaptive_avg_pool2d_gradient", "dy")
    _require(dx, "adaptive_avg_pool2d_gradient", "dx")
    with nogil:
        adaptive_avg_pool2d_gradient(dy.mat[0], dx.mat[0])
