# The conv family's kernel calls, included by gpumat/_core.pyx: declared in _core.pxd, checked
# and dispatched by extensions/src/ops/conv.cpp.
# Strides and paddings arrive as (h, w) ints; conv1d's as one int each.


def conv2d_(PyGpuMatrix x not None, PyGpuMatrix w not None, PyGpuMatrix y not None,
            int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w):
    _require(x, "conv2d", "x")
    _require(w, "conv2d", "w")
    _require(y, "conv2d", "y")
    with nogil:
        conv2d(x.mat[0], w.mat[0], y.mat[0], stride_h, stride_w, pad_h, pad_w)


def conv2d_gradient_input_(PyGpuMatrix dy not None, PyGpuMatrix w not None,
                           PyGpuMatrix dx not None, int64_t stride_h, int64_t stride_w,
                           int64_t pad_h, int64_t pad_w):
    _require(dy, "conv2d_gradient_input", "dy")
    _require(w, "conv2d_gradient_input", "w")
    _require(dx, "conv2d_gradient_input", "dx")
    with nogil:
        conv2d_gradient_input(dy.mat[0], w.mat[0], dx.mat[0], stride_h, stride_w, pad_h, pad_w)


def conv2d_gradient_filter_(PyGpuMatrix x not None, PyGpuMatrix dy not None,
                            PyGpuMatrix dw not None, int64_t stride_h, int64_t stride_w,
                            int64_t pad_h, int64_t pad_w):
    _require(x, "conv2d_gradient_filter", "x")
    _require(dy, "conv2d_gradient_filter", "dy")
    _require(dw, "conv2d_gradient_filter", "dw")
    with nogil:
        conv2d_gradient_filter(x.mat[0], dy.mat[0], dw.mat[0], stride_h, stride_w, pad_h, pad_w)


def conv1d_(PyGpuMatrix x not None, PyGpuMatrix w not None, PyGpuMatrix y not None,
            int64_t stride, int64_t pad):
    _require(x, "conv1d", "x")
    _require(w, "conv1d", "w")
    _require(y, "conv1d", "y")
    with nogil:
        conv1d(x.mat[0], w.mat[0], y.mat[0], stride, pad)


def conv1d_gradient_input_(PyGpuMatrix dy not None, PyGpuMatrix w not None,
                           PyGpuMatrix dx not None, int64_t stride, int64_t pad):
    _require(dy, "conv1d_gradient_input", "dy")
    _require(w, "conv1d_gradient_input", "w")
    _require(dx, "conv1d_gradient_input", "dx")
    with nogil:
        conv1d_gradient_input(dy.mat[0], w.mat[0], dx.mat[0], stride, pad)


def conv1d_gradient_filter_(PyGpuMatrix x not None, PyGpuMatrix dy not None,
                            PyGpuMatrix dw not None, int64_t stride, int64_t pad):
    _require(x, "conv1d_gradient_filter", "x")
    _require(dy, "conv1d_gradient_filter", "dy")
    _require(dw, "conv1d_gradient_filter", "dw")
    with nogil:
        conv1d_gradient_filter(x.mat[0], dy.mat[0], dw.mat[0], stride, pad)


def set_conv_workspace_limit_(int64_t nbytes):
    return set_conv_workspace_limit(nbytes)


def add_channel_bias_(PyGpuMatrix a not None, PyGpuMatrix bias not None,
                      PyGpuMatrix out not None):
    _require(a, "add_channel_bias", "a")
    _require(bias, "add_channel_bias", "bias")
    _require(out, "add_channel_bias", "out")
    with nogil:
        add_channel_bias(a.mat[0], bias.mat[0], out.mat[0])


def reduce_sum_channels_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "reduce_sum_channels", "a")
    _require(out, "reduce_sum_channels", "out")
    with nogil:
        reduce_sum_channels(a.mat[0], out.mat[0])
