# cython: language_level=3, boundscheck=False, wraparound=False
# distutils: language = c++
"""gpumat._core: the Cython wrapper of libgpumat (private; use gpumat, gpumat.ops).

PyGpuMatrix owns one native GpuMatrix. Every native call releases the GIL, and every C++
exception becomes a Python one through gpumat_raise_py_error (ShapeError -> ValueError,
DTypeError -> TypeError, OutOfMemory -> MemoryError, CudaError -> gpumat.CudaError).
Devices are passed as (kind, index) with kind 0 = host, 1 = CUDA, 2 = the emulated CUDA device.
"""

from libc.stdint cimport int64_t, uint64_t
from libcpp.vector cimport vector

import numpy as np


class CudaError(RuntimeError):
    """A CUDA API call or kernel launch failed, or a CUDA device is not available.

    The message names the failing call or op and CUDA's error name and text.
    """


gpumat_set_cuda_error_type(CudaError)

# numpy dtype kinds that convert to float32 without losing meaning: bool, int, uint, float
_CONVERTIBLE_KINDS = "biuf"


def _as_float32(x):
    """x as a C-contiguous float32 numpy array (a copy when a conversion is needed).

    Raises TypeError for complex, object, string or other non-numeric data.
    """
    arr = np.asarray(x)
    if arr.dtype.kind not in _CONVERTIBLE_KINDS:
        raise TypeError(
            f"gpumat arrays are float32; cannot convert numpy dtype {arr.dtype} "
            "(bool, integer and floating dtypes convert; complex, object and strings do not)"
        )
    # NOTE: not np.ascontiguousarray, which turns a 0-d array into shape (1,)
    return np.asarray(arr, dtype=np.float32, order="C")


cdef Device make_device(int kind, int index):
    if kind == 1:
        return Device.cuda(index)
    if kind == 2:
        return Device.emu(index)
    return Device.host()


def built_with_cuda_():
    return built_with_cuda()


def cuda_device_count_():
    return cuda_device_count()


def emu_device_count_():
    return emu_device_count()


def check_device_(int kind, int index):
    check_device(make_device(kind, index))


def synchronize_(int kind, int index):
    cdef Device d = make_device(kind, index)
    with nogil:
        synchronize(d)


def memory_stats_(int kind, int index):
    cdef MemoryStats s = memory_stats(make_device(kind, index))
    return {
        "device_malloc_calls": s.device_malloc_calls,
        "device_free_calls": s.device_free_calls,
        "bytes_in_use": s.bytes_in_use,
        "peak_bytes_in_use": s.peak_bytes_in_use,
        "bytes_reserved": s.bytes_reserved,
        "num_alloc_requests": s.num_alloc_requests,
    }


def reset_peak_memory_stats_(int kind, int index):
    reset_peak_memory_stats(make_device(kind, index))


def empty_cache_(int kind, int index):
    cdef Device d = make_device(kind, index)
    with nogil:
        empty_cache(d)


def allocation_size_(size_t nbytes):
    return allocation_size(nbytes)


cdef class PyGpuMatrix:
    """An N-d, row-major, contiguous float32 array on one device (gpumat's NDArray).

    Create with gpumat.array(x, ctx) or gpumat.empty(shape, ctx), not directly. The buffer comes
    from the device's caching allocator and goes back to it when the object is collected.
    """

    def __cinit__(self):
        self.mat = NULL

    def __dealloc__(self):
        # NOTE: never raises (GpuMatrix's destructor is noexcept): "Cannot raise in the destructor!"
        if self.mat != NULL:
            del self.mat
            self.mat = NULL

    @staticmethod
    def _empty(shape, ctx, int kind, int index):
        cdef vector[int64_t] dims
        for d in shape:
            dims.push_back(d)
        cdef PyGpuMatrix out = PyGpuMatrix.__new__(PyGpuMatrix)
        out.mat = new GpuMatrix(dims, make_device(kind, index))
        out._ctx = ctx
        return out

    def _view(self, shape):
        """A PyGpuMatrix of ``shape`` over the first elements of this array's storage.

        Private, for the executor's memory plan (values of different shapes sharing one buffer);
        users call :meth:`reshape`. Raises ValueError if ``shape`` holds more elements.
        """
        cdef vector[int64_t] dims
        for d in shape:
            dims.push_back(d)
        cdef PyGpuMatrix out = PyGpuMatrix.__new__(PyGpuMatrix)
        out.mat = new GpuMatrix(self.mat[0], dims)
        out._ctx = self._ctx
        out._base = self if self._base is None else self._base
        return out

    def reshape(self, *shape):
        """A view with a new shape and the same number of elements, sharing this array's storage.

        ``shape`` is given as ints or one tuple, as numpy's. Writes through either array are seen
        by both. Raises ValueError if the element counts differ.
        """
        if len(shape) == 1 and not isinstance(shape[0], int):
            shape = tuple(shape[0])
        n = 1
        for d in shape:
            n *= d
        if n != self.mat.size():
            raise ValueError(f"reshape: cannot view {self.shape} ({self.mat.size()} elements) as "
                             f"{tuple(shape)} ({n} elements)")
        return self._view(shape)

    @property
    def is_view(self):
        """True if this array does not own its storage: a reshape view, or memory imported by
        gpumat.from_dlpack (owned by the producer, kept alive by this array)."""
        return not self.mat.owns_data()

    @property
    def shape(self):
        """The shape, a tuple of ints."""
        return tuple(self.mat.shape())

    @property
    def ndim(self):
        """The number of dimensions."""
        return self.mat.ndim()

    @property
    def size(self):
        """The number of elements."""
        return self.mat.size()

    @property
    def nbytes(self):
        """The size of the data in bytes (4 per element)."""
        return self.mat.nbytes()

    @property
    def ctx(self):
        """The gpumat.Context the array lives on."""
        return self._ctx

    @property
    def dtype(self):
        """Always numpy.float32."""
        return np.dtype(np.float32)

    def asnumpy(self):
        """Returns a new float32 numpy array with this array's shape and values (synchronizes).

        Raises gpumat.CudaError if the device reported an asynchronous fault.
        """
        out = np.empty(self.shape, dtype=np.float32)
        cdef float[::1] view = out.reshape(-1)
        cdef float* ptr = &view[0] if view.shape[0] > 0 else NULL
        cdef int64_t n = self.mat.size()
        with nogil:
            self.mat.copy_to_host(ptr, n)
        return out

    def copyfrom(self, source):
        """Copies ``source`` (a numpy array or a PyGpuMatrix on any device) into this array.

        The shapes must be equal (ValueError otherwise). numpy data are converted to float32 as
        in gpumat.array (TypeError for complex/object/string data); a PyGpuMatrix on another
        device is copied explicitly.
        """
        if isinstance(source, PyGpuMatrix):
            if source.shape != self.shape:
                raise ValueError(f"copyfrom: source shape {source.shape} differs from {self.shape}")
            self._copy_from_array(source)
            return
        src = _as_float32(source)
        if src.shape != self.shape:
            raise ValueError(f"copyfrom: source shape {src.shape} differs from {self.shape}")
        self._copy_from_numpy(src)

    def _copy_from_numpy(self, src):
        """src: a C-contiguous float32 numpy array with self.size elements."""
        cdef float[::1] view = src.reshape(-1)
        cdef const float* ptr = &view[0] if view.shape[0] > 0 else NULL
        cdef int64_t n = view.shape[0]
        with nogil:
            self.mat.copy_from_host(ptr, n)

    def _copy_from_array(self, PyGpuMatrix src not None):
        with nogil:
            self.mat.copy_from(src.mat[0])

    # ---------------------------------------------------------------- interop (DLPack, CAI, numpy)
    # The implementations live in _dlpack.pxi.

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export this array as a DLPack capsule, zero-copy (the array API standard's protocol).

        The consumer (``numpy.from_dlpack``, ``torch.from_dlpack``, ``cupy.from_dlpack``) shares
        the buffer: writes through either side are seen by both, and the consumer keeps the
        memory alive after this object is gone. Consumers call this; users call their
        ``from_dlpack``.

        Args:
            stream: CUDA arrays: the consumer's stream (1 legacy default, 2 per-thread default, a
                cudaStream_t as an int, -1 no synchronization, None as 1). For any value but -1,
                gpumat's stream for the device is synchronized (a host-side wait) before the
                capsule is returned, so every queued kernel writing the array has finished before
                the consumer's stream can touch it. 0 is disallowed by the specification
                (ValueError). CPU arrays: must be None (ValueError).
            max_version: the newest (major, minor) DLPack version the consumer reads. >= (1, 0)
                gives a ``"dltensor_versioned"`` capsule (DLManagedTensorVersioned, version 1.0);
                None or older gives the legacy ``"dltensor"`` capsule (DLManagedTensor).
            dl_device: the (device_type, device_id) the consumer wants; default this array's
                (:meth:`__dlpack_device__`). (1, 0), the CPU, for a CUDA array exports a host copy
                (unless ``copy=False``).
            copy: True exports a fresh copy (flagged IS_COPIED in a versioned capsule); False
                forbids copies (BufferError where one is needed); None copies only for another
                ``dl_device``.

        Returns:
            A PyCapsule over a float32 row-major tensor with explicit strides.

        Raises:
            BufferError: a device that cannot be exported to, or copy=False where a copy is
                needed. ValueError: an invalid stream, or a PyGpuMatrix that holds no array.
            TypeError: a stream that is not an int.
        """
        return _dlpack_export(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self):
        """(device_type, device_id) in DLPack's terms: (1, 0) for cpu, (2, i) for gpu(i)."""
        if self.mat == NULL:
            raise ValueError("__dlpack_device__: this PyGpuMatrix holds no array")
        return _dlpack_device_of(<int>self.mat.device().kind, self.mat.device().index)

    @property
    def __cuda_array_interface__(self):
        """The CUDA array interface, version 3 (Numba's specification), for arrays on a GPU.

        A dict: shape, typestr "<f4", data (device pointer as an int, read-only False), version
        3, strides None (row-major contiguous), and stream: the integer cudaStream_t of gpumat's
        stream for the device, on which the consumer must synchronize before using the data
        (CuPy does). The consumer keeps a reference to this object, hence the memory, alive.

        Raises AttributeError for arrays not in CUDA memory (so ``hasattr`` is False there).
        """
        return _cuda_array_interface(self)

    def __array__(self, dtype=None, copy=None):
        """numpy's conversion protocol (``numpy.asarray(a)``), numpy 2's ``copy`` honoured.

        On the cpu device the result is a zero-copy view of this array's buffer (through
        DLPack; it keeps the buffer alive) unless ``copy=True`` or a ``dtype`` other than
        float32 asks for a copy. On a GPU it is a copy (``copy=False`` raises ValueError).
        """
        return _array_export(self, dtype, copy)
    # ----------------------------------------------------------------------------- end interop

    def __len__(self):
        if self.mat.ndim() == 0:
            raise TypeError("len() of a 0-d array")
        return self.mat.shape()[0]

    def __repr__(self):
        return f"PyGpuMatrix(shape={self.shape}, dtype=float32, ctx={self._ctx!r})"


# ------------------------------------------------------------------------------------ ops
# Thin: argument types are checked by Cython (TypeError), everything else in C++.

def array_set_(PyGpuMatrix arr not None, float value):
    with nogil:
        array_set(arr.mat[0], value)


def broadcast_to_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    with nogil:
        broadcast_to(a.mat[0], out.mat[0])


def reduce_sum_axis_zero_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    with nogil:
        reduce_sum_axis_zero(a.mat[0], out.mat[0])


def add_(PyGpuMatrix a not None, PyGpuMatrix b not None, PyGpuMatrix out not None):
    with nogil:
        add(a.mat[0], b.mat[0], out.mat[0])


def multiply_(PyGpuMatrix a not None, PyGpuMatrix b not None, PyGpuMatrix out not None):
    with nogil:
        multiply(a.mat[0], b.mat[0], out.mat[0])


def add_const_(PyGpuMatrix a not None, float value, PyGpuMatrix out not None):
    with nogil:
        add_const(a.mat[0], value, out.mat[0])


def multiply_const_(PyGpuMatrix a not None, float value, PyGpuMatrix out not None):
    with nogil:
        multiply_const(a.mat[0], value, out.mat[0])


def matmul_(PyGpuMatrix a not None, bint trans_a, PyGpuMatrix b not None, bint trans_b,
            PyGpuMatrix c not None):
    with nogil:
        matmul(a.mat[0], trans_a, b.mat[0], trans_b, c.mat[0])


def relu_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    with nogil:
        relu(a.mat[0], out.mat[0])


def relu_gradient_(PyGpuMatrix a not None, PyGpuMatrix grad not None, PyGpuMatrix out not None):
    with nogil:
        relu_gradient(a.mat[0], grad.mat[0], out.mat[0])


def softmax_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    with nogil:
        softmax(a.mat[0], out.mat[0])


def softmax_cross_entropy_(PyGpuMatrix logits not None, PyGpuMatrix labels not None,
                           PyGpuMatrix out not None):
    with nogil:
        softmax_cross_entropy(logits.mat[0], labels.mat[0], out.mat[0])


def transpose_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    with nogil:
        transpose(a.mat[0], out.mat[0])


def random_uniform_(PyGpuMatrix out not None, float low, float high, uint64_t seed):
    with nogil:
        random_uniform(out.mat[0], low, high, seed)


def random_normal_(PyGpuMatrix out not None, float mean, float stddev, uint64_t seed):
    with nogil:
        random_normal(out.mat[0], mean, stddev, seed)


def axpy_(float alpha, PyGpuMatrix x not None, PyGpuMatrix y not None):
    with nogil:
        axpy(alpha, x.mat[0], y.mat[0])


def copy_(PyGpuMatrix src not None, PyGpuMatrix dst not None):
    with nogil:
        copy(src.mat[0], dst.mat[0])


def reshape_(PyGpuMatrix src not None, PyGpuMatrix dst not None):
    with nogil:
        reshape(src.mat[0], dst.mat[0])


# Convolution: strides and paddings arrive as (h, w) ints; conv1d's as one int each.

def conv2d_(PyGpuMatrix x not None, PyGpuMatrix w not None, PyGpuMatrix y not None,
            int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w):
    with nogil:
        conv2d(x.mat[0], w.mat[0], y.mat[0], stride_h, stride_w, pad_h, pad_w)


def conv2d_gradient_input_(PyGpuMatrix dy not None, PyGpuMatrix w not None,
                           PyGpuMatrix dx not None, int64_t stride_h, int64_t stride_w,
                           int64_t pad_h, int64_t pad_w):
    with nogil:
        conv2d_gradient_input(dy.mat[0], w.mat[0], dx.mat[0], stride_h, stride_w, pad_h, pad_w)


def conv2d_gradient_filter_(PyGpuMatrix x not None, PyGpuMatrix dy not None,
                            PyGpuMatrix dw not None, int64_t stride_h, int64_t stride_w,
                            int64_t pad_h, int64_t pad_w):
    with nogil:
        conv2d_gradient_filter(x.mat[0], dy.mat[0], dw.mat[0], stride_h, stride_w, pad_h, pad_w)


def conv1d_(PyGpuMatrix x not None, PyGpuMatrix w not None, PyGpuMatrix y not None,
            int64_t stride, int64_t pad):
    with nogil:
        conv1d(x.mat[0], w.mat[0], y.mat[0], stride, pad)


def conv1d_gradient_input_(PyGpuMatrix dy not None, PyGpuMatrix w not None,
                           PyGpuMatrix dx not None, int64_t stride, int64_t pad):
    with nogil:
        conv1d_gradient_input(dy.mat[0], w.mat[0], dx.mat[0], stride, pad)


def conv1d_gradient_filter_(PyGpuMatrix x not None, PyGpuMatrix dy not None,
                            PyGpuMatrix dw not None, int64_t stride, int64_t pad):
    with nogil:
        conv1d_gradient_filter(x.mat[0], dy.mat[0], dw.mat[0], stride, pad)


def set_conv_workspace_limit_(int64_t nbytes):
    return set_conv_workspace_limit(nbytes)


def add_channel_bias_(PyGpuMatrix a not None, PyGpuMatrix bias not None,
                      PyGpuMatrix out not None):
    with nogil:
        add_channel_bias(a.mat[0], bias.mat[0], out.mat[0])


def reduce_sum_channels_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    with nogil:
        reduce_sum_channels(a.mat[0], out.mat[0])


# Pooling: kernel, stride and padding arrive as (h, w) ints.

def max_pool2d_(PyGpuMatrix x not None, PyGpuMatrix y not None, int64_t kernel_h,
                int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                int64_t pad_w):
    with nogil:
        max_pool2d(x.mat[0], y.mat[0], kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w)


def max_pool2d_gradient_(PyGpuMatrix x not None, PyGpuMatrix dy not None,
                         PyGpuMatrix dx not None, int64_t kernel_h, int64_t kernel_w,
                         int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w):
    with nogil:
        max_pool2d_gradient(x.mat[0], dy.mat[0], dx.mat[0], kernel_h, kernel_w, stride_h,
                            stride_w, pad_h, pad_w)


def avg_pool2d_(PyGpuMatrix x not None, PyGpuMatrix y not None, int64_t kernel_h,
                int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                int64_t pad_w):
    with nogil:
        avg_pool2d(x.mat[0], y.mat[0], kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w)


def avg_pool2d_gradient_(PyGpuMatrix dy not None, PyGpuMatrix dx not None, int64_t kernel_h,
                         int64_t kernel_w, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                         int64_t pad_w):
    with nogil:
        avg_pool2d_gradient(dy.mat[0], dx.mat[0], kernel_h, kernel_w, stride_h, stride_w, pad_h,
                            pad_w)


# Regression losses and the optimizer.

def mse_loss_(PyGpuMatrix pred not None, PyGpuMatrix target not None, PyGpuMatrix out not None):
    with nogil:
        mse_loss(pred.mat[0], target.mat[0], out.mat[0])


def mae_loss_(PyGpuMatrix pred not None, PyGpuMatrix target not None, PyGpuMatrix out not None):
    with nogil:
        mae_loss(pred.mat[0], target.mat[0], out.mat[0])


def mse_loss_gradient_(PyGpuMatrix pred not None, PyGpuMatrix target not None,
                       PyGpuMatrix dloss not None, PyGpuMatrix out not None):
    with nogil:
        mse_loss_gradient(pred.mat[0], target.mat[0], dloss.mat[0], out.mat[0])


def mae_loss_gradient_(PyGpuMatrix pred not None, PyGpuMatrix target not None,
                       PyGpuMatrix dloss not None, PyGpuMatrix out not None):
    with nogil:
        mae_loss_gradient(pred.mat[0], target.mat[0], dloss.mat[0], out.mat[0])


def adam_update_(PyGpuMatrix param not None, PyGpuMatrix grad not None, PyGpuMatrix m not None,
                 PyGpuMatrix v not None, float lr, float beta1, float beta2, float eps,
                 int64_t step):
    with nogil:
        adam_update(param.mat[0], grad.mat[0], m.mat[0], v.mat[0], lr, beta1, beta2, eps, step)


# ------------------------------------------------------------------------- DLPack and CUDA interop
include "_dlpack.pxi"
