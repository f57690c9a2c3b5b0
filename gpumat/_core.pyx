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


# libcpp's bool is cimported in _core.pxd and shadows the builtin name here.
_PY_BOOL = type(True)

_EMPTY_MESSAGE = (
    "this PyGpuMatrix holds no array (it was made with PyGpuMatrix.__new__ or an __init__ that "
    "failed); make arrays with gpumat.array(x, ctx), gpumat.empty(shape, ctx) or "
    "PyGpuMatrix(host_array, rows, cols[, ctx])"
)


cdef inline int _require(PyGpuMatrix a, str op, str what) except -1:
    # Every op and method that dereferences .mat goes through here first: an object that holds
    # no array must raise, never reach native code with a NULL pointer.
    if a.mat == NULL:
        raise ValueError(f"{op}: argument {what!r}: {_EMPTY_MESSAGE}")
    return 0


def _legacy_dim(value, str what):
    if isinstance(value, _PY_BOOL) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an int, got {value!r}")
    if value < 0:
        raise ValueError(f"{what} must be >= 0, got {value}")
    return int(value)


cdef class PyGpuMatrix:
    """An N-d, row-major, contiguous float32 array on one device (gpumat's NDArray).

    Create with gpumat.array(x, ctx) or gpumat.empty(shape, ctx). The buffer comes from the
    device's caching allocator and goes back to it when the object is collected.

    ``PyGpuMatrix(host_array, rows, cols[, ctx])`` is the cuda-project constructor: it copies a
    (rows, cols) floating-point numpy array to ``ctx`` (default: ``gpumat.gpu(0)`` when
    ``gpumat.cuda_available()``, else ``gpumat.cpu()``) and remembers the array, so that
    :meth:`loadFromDevice` can copy results back into it in place.

    Raises (constructor): TypeError for a host array that is not a floating-point numpy array or
    rows/cols that are not ints; ValueError when (rows, cols) differs from the array's shape; a
    call with no arguments is a TypeError. An object made without an array (``__new__``) raises
    ValueError on every use, never crashes.
    """

    def __cinit__(self):
        self.mat = NULL

    def __init__(self, host_array=None, rows=None, cols=None, ctx=None):
        if self.mat != NULL:
            raise TypeError("PyGpuMatrix.__init__: this array is already initialised")
        if host_array is None or rows is None or cols is None:
            raise TypeError(
                "PyGpuMatrix(host_array, rows, cols[, ctx]) needs a (rows, cols) numpy array and "
                "its rows and cols; for other shapes use gpumat.array(x, ctx) or "
                "gpumat.empty(shape, ctx)"
            )
        if not isinstance(host_array, np.ndarray):
            raise TypeError(
                f"PyGpuMatrix: host_array must be a numpy array, got {type(host_array).__name__}"
            )
        if host_array.dtype.kind != "f":
            raise TypeError(
                f"PyGpuMatrix: host_array must hold floating-point numbers (float32 or float64), "
                f"got dtype {host_array.dtype}; loadFromDevice writes float results back into it"
            )
        rows = _legacy_dim(rows, "PyGpuMatrix: rows")
        cols = _legacy_dim(cols, "PyGpuMatrix: cols")
        if host_array.shape != (rows, cols):
            raise ValueError(
                f"PyGpuMatrix: host_array has shape {host_array.shape}, but rows={rows}, "
                f"cols={cols} says ({rows}, {cols})"
            )
        import gpumat

        if ctx is None:
            ctx = gpumat.gpu(0) if gpumat.cuda_available() else gpumat.cpu()
        cdef PyGpuMatrix src = gpumat.array(host_array, ctx)
        # Take over the new array's native matrix, so this object is a plain array too.
        self.mat = src.mat
        src.mat = NULL
        self._ctx = src._ctx
        self._host = host_array

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
        _require(self, "_view", "self")
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
        by both. Raises ValueError if the element counts differ, TypeError for non-int dimensions.
        """
        _require(self, "reshape", "self")
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        for d in shape:
            if isinstance(d, _PY_BOOL) or not isinstance(d, (int, np.integer)):
                raise TypeError(f"reshape: dimensions must be ints, got {tuple(shape)!r}")
            if d < 0:
                raise ValueError(f"reshape: dimensions must be >= 0, got {tuple(shape)!r}")
        n = 1
        for d in shape:
            n *= int(d)
        if n != self.mat.size():
            raise ValueError(f"reshape: cannot view {self.shape} ({self.mat.size()} elements) as "
                             f"{tuple(shape)} ({n} elements)")
        return self._view(tuple(int(d) for d in shape))

    @property
    def is_view(self):
        """True if this array does not own its storage: a reshape view, or memory imported by
        gpumat.from_dlpack (owned by the producer, kept alive by this array)."""
        _require(self, "is_view", "self")
        return not self.mat.owns_data()

    @property
    def shape(self):
        """The shape, a tuple of ints."""
        _require(self, "shape", "self")
        return tuple(self.mat.shape())

    @property
    def ndim(self):
        """The number of dimensions."""
        _require(self, "ndim", "self")
        return self.mat.ndim()

    @property
    def size(self):
        """The number of elements."""
        _require(self, "size", "self")
        return self.mat.size()

    @property
    def nbytes(self):
        """The size of the data in bytes (4 per element)."""
        _require(self, "nbytes", "self")
        return self.mat.nbytes()

    @property
    def ctx(self):
        """The gpumat.Context the array lives on (None for an object that holds no array)."""
        return self._ctx

    @property
    def dtype(self):
        """Always numpy.float32."""
        return np.dtype(np.float32)

    def asnumpy(self):
        """Returns a new float32 numpy array with this array's shape and values (synchronizes).

        Raises gpumat.CudaError if the device reported an asynchronous fault.
        """
        _require(self, "asnumpy", "self")
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
        device is copied explicitly. ``source`` may be changed as soon as this returns: on a CUDA
        device a copy of up to 4 MiB is staged through page-locked memory and queued on the
        device's stream (later ops see it; the host does not wait), a larger one synchronizes.
        """
        _require(self, "copyfrom", "self")
        if isinstance(source, PyGpuMatrix):
            if source.shape != self.shape:
                raise ValueError(f"copyfrom: source shape {source.shape} differs from {self.shape}")
            self._copy_from_array(source)
            return
        src = _as_float32(source)
        if src.shape != self.shape:
            raise ValueError(f"copyfrom: source shape {src.shape} differs from {self.shape}")
        self._copy_from_numpy(src)

    def copyto(self, target):
        """Copies this array into ``target`` and returns it (the seed's ``NDArray.copyto``).

        ``target`` is a PyGpuMatrix of the same shape (on any device), or a gpumat.Context, in
        which case a new array is made there. Raises ValueError for a shape mismatch, TypeError
        for any other target.
        """
        _require(self, "copyto", "self")
        if not isinstance(target, PyGpuMatrix):
            import gpumat

            if not isinstance(target, gpumat.Context):
                raise TypeError(
                    "copyto: target must be a PyGpuMatrix or a gpumat.Context, got "
                    f"{type(target).__name__}"
                )
            target = gpumat.empty(self.shape, target)
        target.copyfrom(self)
        return target

    def __setitem__(self, key, value):
        """``a[:] = value`` (or ``a[...] = value``) copies ``value`` into the whole array.

        ``value`` is a numpy array (or array-like) of this array's shape, a PyGpuMatrix of this
        shape, or a real number (every element set to it). Only the whole-array slice is
        supported (the seed's NDArray rule): any other key raises IndexError.
        """
        _require(self, "__setitem__", "self")
        whole = key is Ellipsis or (
            isinstance(key, slice) and key.start is None and key.stop is None and key.step is None
        )
        if not whole:
            raise IndexError(
                f"PyGpuMatrix supports only whole-array assignment a[:] = value, got key {key!r}"
            )
        if isinstance(value, PyGpuMatrix):
            if value is not self:
                self.copyfrom(value)
            return
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
            value, (_PY_BOOL, np.bool_)
        ):
            array_set_(self, float(value))
            return
        self.copyfrom(value)

    def _copy_from_numpy(self, src):
        """src: a C-contiguous float32 numpy array with self.size elements."""
        _require(self, "_copy_from_numpy", "self")
        cdef float[::1] view = src.reshape(-1)
        cdef const float* ptr = &view[0] if view.shape[0] > 0 else NULL
        cdef int64_t n = view.shape[0]
        with nogil:
            self.mat.copy_from_host(ptr, n)

    def _copy_from_array(self, PyGpuMatrix src not None):
        _require(self, "_copy_from_array", "self")
        _require(src, "_copy_from_array", "src")
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
        _require(self, "len", "self")
        if self.mat.ndim() == 0:
            raise TypeError("len() of a 0-d array")
        return self.mat.shape()[0]

    def __repr__(self):
        if self.mat == NULL:
            return "PyGpuMatrix(<empty: holds no array>)"
        return f"PyGpuMatrix(shape={self.shape}, dtype=float32, ctx={self._ctx!r})"

    # ---------------------------------------------------------------------------------------
    # The cuda-project contract: PyGpuMatrix(host, rows, cols), mul, loadFromDevice, and its
    # to-do list (elementwise add / multiply / negate, transpose, random initialisation, ReLU).
    # Each method checks every dimension and argument, then calls the gpumat kernel.
    # ---------------------------------------------------------------------------------------

    def _legacy_check(self, str op, other, str what, expected):
        if not isinstance(other, PyGpuMatrix):
            raise TypeError(f"{op}: {what} must be a PyGpuMatrix, got {type(other).__name__}")
        _require(other, op, what)
        if other.shape != expected:
            raise ValueError(f"{op}: {what} has shape {other.shape}, expected {expected}")

    def mul(self, M, N, K, B, C):
        """C = self @ B (the cuda-project's ``A.mul(M, N, K, B, C)``).

        self is (M, K), B is (K, N), C is (M, N); all on one device. Raises TypeError for
        non-int dimensions or non-PyGpuMatrix operands, ValueError when a dimension differs from
        a buffer's shape or the devices differ.
        """
        _require(self, "mul", "self")
        M = _legacy_dim(M, "mul: M")
        N = _legacy_dim(N, "mul: N")
        K = _legacy_dim(K, "mul: K")
        self._legacy_check("mul", self, "A (self)", (M, K))
        self._legacy_check("mul", B, "B", (K, N))
        self._legacy_check("mul", C, "C", (M, N))
        matmul_(self, False, B, False, C)

    def loadFromDevice(self):  # noqa: N802 (the cuda-project's name)
        """Copies the device values back into the numpy array this matrix was made from (in
        place, converting to its dtype) and returns that array.

        Raises ValueError for a matrix not made by ``PyGpuMatrix(host_array, rows, cols)`` (use
        :meth:`asnumpy`) or a read-only host array.
        """
        _require(self, "loadFromDevice", "self")
        if self._host is None:
            raise ValueError(
                "loadFromDevice: this matrix was not made from a host array with "
                "PyGpuMatrix(host_array, rows, cols); use asnumpy() to get a numpy copy"
            )
        if not self._host.flags.writeable:
            raise ValueError("loadFromDevice: the host array is read-only")
        np.copyto(self._host, self.asnumpy())
        return self._host

    def loadToDevice(self):  # noqa: N802 (the cuda-project's name)
        """Copies the numpy array this matrix was made from to the device again (after the host
        array was changed). Raises ValueError as :meth:`loadFromDevice`."""
        _require(self, "loadToDevice", "self")
        if self._host is None:
            raise ValueError(
                "loadToDevice: this matrix was not made from a host array with "
                "PyGpuMatrix(host_array, rows, cols); use copyfrom(x)"
            )
        self.copyfrom(self._host)

    def add(self, B, C):
        """C = self + B elementwise (same shapes; C may be self or B)."""
        _require(self, "add", "self")
        self._legacy_check("add", B, "B", self.shape)
        self._legacy_check("add", C, "C", self.shape)
        add_(self, B, C)

    def multiply(self, B, C):
        """C = self * B elementwise (same shapes; C may be self or B)."""
        _require(self, "multiply", "self")
        self._legacy_check("multiply", B, "B", self.shape)
        self._legacy_check("multiply", C, "C", self.shape)
        multiply_(self, B, C)

    def negate(self, C):
        """C = -self elementwise (same shape; C may be self)."""
        _require(self, "negate", "self")
        self._legacy_check("negate", C, "C", self.shape)
        multiply_const_(self, -1.0, C)

    def transpose(self, C):
        """C (cols, rows) = self (rows, cols) transposed; C must not be self."""
        _require(self, "transpose", "self")
        if self.mat.ndim() != 2:
            raise ValueError(f"transpose: self must be 2-D, got shape {self.shape}")
        rows, cols = self.shape
        self._legacy_check("transpose", C, "C", (cols, rows))
        transpose_(self, C)

    def relu(self, C):
        """C = max(self, 0) elementwise (same shape; C may be self)."""
        _require(self, "relu", "self")
        self._legacy_check("relu", C, "C", self.shape)
        relu_(self, C)

    def randomInit(self, low=0.0, high=1.0, seed=0):  # noqa: N802 (the cuda-project's style)
        """Fills self with uniform samples in [low, high) (gpumat.ops.random_uniform: the same
        values on every device for one seed). Raises ValueError if low > high or the seed is not
        in [0, 2**64), TypeError for a non-int seed."""
        _require(self, "randomInit", "self")
        if isinstance(seed, _PY_BOOL) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"randomInit: seed must be an int, got {seed!r}")
        if not 0 <= seed < 2**64:
            raise ValueError(f"randomInit: seed must be in [0, 2**64), got {seed}")
        random_uniform_(self, low, high, int(seed))


# ------------------------------------------------------------------------------------ ops
# Thin: argument types are checked by Cython (TypeError), everything else in C++.

def array_set_(PyGpuMatrix arr not None, float value):
    _require(arr, "array_set", "arr")
    with nogil:
        array_set(arr.mat[0], value)


def broadcast_to_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "broadcast_to", "a")
    _require(out, "broadcast_to", "out")
    with nogil:
        broadcast_to(a.mat[0], out.mat[0])


def reduce_sum_axis_zero_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "reduce_sum_axis_zero", "a")
    _require(out, "reduce_sum_axis_zero", "out")
    with nogil:
        reduce_sum_axis_zero(a.mat[0], out.mat[0])


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


def matmul_(PyGpuMatrix a not None, bint trans_a, PyGpuMatrix b not None, bint trans_b,
            PyGpuMatrix c not None):
    _require(a, "matmul", "a")
    _require(b, "matmul", "b")
    _require(c, "matmul", "c")
    with nogil:
        matmul(a.mat[0], trans_a, b.mat[0], trans_b, c.mat[0])


def relu_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "relu", "a")
    _require(out, "relu", "out")
    with nogil:
        relu(a.mat[0], out.mat[0])


def relu_gradient_(PyGpuMatrix a not None, PyGpuMatrix grad not None, PyGpuMatrix out not None):
    _require(a, "relu_gradient", "a")
    _require(grad, "relu_gradient", "grad")
    _require(out, "relu_gradient", "out")
    with nogil:
        relu_gradient(a.mat[0], grad.mat[0], out.mat[0])


def softmax_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "softmax", "a")
    _require(out, "softmax", "out")
    with nogil:
        softmax(a.mat[0], out.mat[0])


def softmax_cross_entropy_(PyGpuMatrix logits not None, PyGpuMatrix labels not None,
                           PyGpuMatrix out not None):
    _require(logits, "softmax_cross_entropy", "logits")
    _require(labels, "softmax_cross_entropy", "labels")
    _require(out, "softmax_cross_entropy", "out")
    with nogil:
        softmax_cross_entropy(logits.mat[0], labels.mat[0], out.mat[0])


def transpose_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "transpose", "a")
    _require(out, "transpose", "out")
    with nogil:
        transpose(a.mat[0], out.mat[0])


def random_uniform_(PyGpuMatrix out not None, float low, float high, uint64_t seed):
    _require(out, "random_uniform", "out")
    with nogil:
        random_uniform(out.mat[0], low, high, seed)


def random_normal_(PyGpuMatrix out not None, float mean, float stddev, uint64_t seed):
    _require(out, "random_normal", "out")
    with nogil:
        random_normal(out.mat[0], mean, stddev, seed)


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


def reshape_(PyGpuMatrix src not None, PyGpuMatrix dst not None):
    _require(src, "reshape", "src")
    _require(dst, "reshape", "dst")
    with nogil:
        reshape(src.mat[0], dst.mat[0])


# Convolution: strides and paddings arrive as (h, w) ints; conv1d's as one int each.

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


# Pooling: kernel, stride and padding arrive as (h, w) ints.

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


# Regression losses and the optimizer.

def mse_loss_(PyGpuMatrix pred not None, PyGpuMatrix target not None, PyGpuMatrix out not None):
    _require(pred, "mse_loss", "pred")
    _require(target, "mse_loss", "target")
    _require(out, "mse_loss", "out")
    with nogil:
        mse_loss(pred.mat[0], target.mat[0], out.mat[0])


def mae_loss_(PyGpuMatrix pred not None, PyGpuMatrix target not None, PyGpuMatrix out not None):
    _require(pred, "mae_loss", "pred")
    _require(target, "mae_loss", "target")
    _require(out, "mae_loss", "out")
    with nogil:
        mae_loss(pred.mat[0], target.mat[0], out.mat[0])


def mse_loss_gradient_(PyGpuMatrix pred not None, PyGpuMatrix target not None,
                       PyGpuMatrix dloss not None, PyGpuMatrix out not None):
    _require(pred, "mse_loss_gradient", "pred")
    _require(target, "mse_loss_gradient", "target")
    _require(dloss, "mse_loss_gradient", "dloss")
    _require(out, "mse_loss_gradient", "out")
    with nogil:
        mse_loss_gradient(pred.mat[0], target.mat[0], dloss.mat[0], out.mat[0])


def mae_loss_gradient_(PyGpuMatrix pred not None, PyGpuMatrix target not None,
                       PyGpuMatrix dloss not None, PyGpuMatrix out not None):
    _require(pred, "mae_loss_gradient", "pred")
    _require(target, "mae_loss_gradient", "target")
    _require(dloss, "mae_loss_gradient", "dloss")
    _require(out, "mae_loss_gradient", "out")
    with nogil:
        mae_loss_gradient(pred.mat[0], target.mat[0], dloss.mat[0], out.mat[0])


def adam_update_(PyGpuMatrix param not None, PyGpuMatrix grad not None, PyGpuMatrix m not None,
                 PyGpuMatrix v not None, float lr, float beta1, float beta2, float eps,
                 int64_t step):
    _require(param, "adam_update", "param")
    _require(grad, "adam_update", "grad")
    _require(m, "adam_update", "m")
    _require(v, "adam_update", "v")
    with nogil:
        adam_update(param.mat[0], grad.mat[0], m.mat[0], v.mat[0], lr, beta1, beta2, eps, step)


# Fused ops (issue 16).

def matmul_bias_(PyGpuMatrix a not None, bint trans_a, PyGpuMatrix b not None, bint trans_b,
                 PyGpuMatrix bias not None, PyGpuMatrix c not None, bint relu):
    _require(a, "matmul_bias", "a")
    _require(b, "matmul_bias", "b")
    _require(bias, "matmul_bias", "bias")
    _require(c, "matmul_bias", "c")
    with nogil:
        matmul_bias(a.mat[0], trans_a, b.mat[0], trans_b, bias.mat[0], c.mat[0], relu)


def relu_bias_gradient_(PyGpuMatrix y not None, PyGpuMatrix dy not None, PyGpuMatrix dz not None,
                        PyGpuMatrix dbias not None):
    _require(y, "relu_bias_gradient", "y")
    _require(dy, "relu_bias_gradient", "dy")
    _require(dz, "relu_bias_gradient", "dz")
    _require(dbias, "relu_bias_gradient", "dbias")
    with nogil:
        relu_bias_gradient(y.mat[0], dy.mat[0], dz.mat[0], dbias.mat[0])


def softmax_cross_entropy_with_gradient_(PyGpuMatrix logits not None, PyGpuMatrix labels not None,
                                         PyGpuMatrix loss not None, PyGpuMatrix grad not None):
    cdef str op = "softmax_cross_entropy_with_gradient"
    _require(logits, op, "logits")
    _require(labels, op, "labels")
    _require(loss, op, "loss")
    _require(grad, op, "grad")
    with nogil:
        softmax_cross_entropy_with_gradient(logits.mat[0], labels.mat[0], loss.mat[0], grad.mat[0])


cdef vector[GpuMatrix*] _array_list(list arrays, str op, str what) except *:
    # The GpuMatrix pointers of a list of PyGpuMatrix; TypeError/ValueError naming the element.
    cdef vector[GpuMatrix*] out
    cdef PyGpuMatrix x
    for i, obj in enumerate(arrays):
        if not isinstance(obj, PyGpuMatrix):
            raise TypeError(f"{op}: {what} {i} is a {type(obj).__name__}, expected PyGpuMatrix")
        x = obj
        _require(x, op, f"{what} {i}")
        out.push_back(x.mat)
    return out


cdef vector[const GpuMatrix*] _const_array_list(list arrays, str op, str what) except *:
    cdef vector[GpuMatrix*] mats = _array_list(arrays, op, what)
    cdef vector[const GpuMatrix*] out
    for m in mats:
        out.push_back(m)
    return out


def sgd_update_(list params not None, list grads not None, float lr):
    cdef vector[GpuMatrix*] p = _array_list(params, "sgd_update", "parameter")
    cdef vector[const GpuMatrix*] g = _const_array_list(grads, "sgd_update", "gradient")
    with nogil:
        sgd_update(p, g, lr)


def momentum_sgd_update_(list params not None, list grads not None, list velocities not None,
                         float lr, float momentum):
    cdef str op = "momentum_sgd_update"
    cdef vector[GpuMatrix*] p = _array_list(params, op, "parameter")
    cdef vector[const GpuMatrix*] g = _const_array_list(grads, op, "gradient")
    cdef vector[GpuMatrix*] v = _array_list(velocities, op, "velocity")
    with nogil:
        momentum_sgd_update(p, g, v, lr, momentum)


def adam_update_multi_(list params not None, list grads not None, list m not None,
                       list v not None, float lr, float beta1, float beta2, float eps,
                       int64_t step):
    cdef str op = "adam_update_multi"
    cdef vector[GpuMatrix*] p = _array_list(params, op, "parameter")
    cdef vector[const GpuMatrix*] g = _const_array_list(grads, op, "gradient")
    cdef vector[GpuMatrix*] pm = _array_list(m, op, "m")
    cdef vector[GpuMatrix*] pv = _array_list(v, op, "v")
    with nogil:
        adam_update_multi(p, g, pm, pv, lr, beta1, beta2, eps, step)


def op_count_(int kind, int index):
    return op_count(make_device(kind, index))


# Layers (issue 11): softmax along an axis, NLL, activations, dropout, axis reductions.

def softmax_axis_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "softmax", "a")
    _require(out, "softmax", "out")
    with nogil:
        softmax_axis(a.mat[0], out.mat[0], axis)


def log_softmax_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "log_softmax", "a")
    _require(out, "log_softmax", "out")
    with nogil:
        log_softmax(a.mat[0], out.mat[0], axis)


def softmax_axis_gradient_(PyGpuMatrix y not None, PyGpuMatrix dy not None, PyGpuMatrix out not None, int64_t axis):
    _require(y, "softmax_gradient", "y")
    _require(dy, "softmax_gradient", "dy")
    _require(out, "softmax_gradient", "out")
    with nogil:
        softmax_axis_gradient(y.mat[0], dy.mat[0], out.mat[0], axis)


def log_softmax_gradient_(PyGpuMatrix y not None, PyGpuMatrix dy not None, PyGpuMatrix out not None, int64_t axis):
    _require(y, "log_softmax_gradient", "y")
    _require(dy, "log_softmax_gradient", "dy")
    _require(out, "log_softmax_gradient", "out")
    with nogil:
        log_softmax_gradient(y.mat[0], dy.mat[0], out.mat[0], axis)


def nll_loss_(PyGpuMatrix log_probs not None, PyGpuMatrix target not None, PyGpuMatrix out not None):
    _require(log_probs, "nll_loss", "log_probs")
    _require(target, "nll_loss", "target")
    _require(out, "nll_loss", "out")
    with nogil:
        nll_loss(log_probs.mat[0], target.mat[0], out.mat[0])


def nll_loss_gradient_(PyGpuMatrix target not None, PyGpuMatrix dloss not None, PyGpuMatrix out not None):
    _require(target, "nll_loss_gradient", "target")
    _require(dloss, "nll_loss_gradient", "dloss")
    _require(out, "nll_loss_gradient", "out")
    with nogil:
        nll_loss_gradient(target.mat[0], dloss.mat[0], out.mat[0])


def tanh_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "tanh", "a")
    _require(out, "tanh", "out")
    with nogil:
        tanh(a.mat[0], out.mat[0])


def sigmoid_(PyGpuMatrix a not None, PyGpuMatrix out not None):
    _require(a, "sigmoid", "a")
    _require(out, "sigmoid", "out")
    with nogil:
        sigmoid(a.mat[0], out.mat[0])


def tanh_gradient_(PyGpuMatrix y not None, PyGpuMatrix dy not None, PyGpuMatrix out not None):
    _require(y, "tanh_gradient", "y")
    _require(dy, "tanh_gradient", "dy")
    _require(out, "tanh_gradient", "out")
    with nogil:
        tanh_gradient(y.mat[0], dy.mat[0], out.mat[0])


def sigmoid_gradient_(PyGpuMatrix y not None, PyGpuMatrix dy not None, PyGpuMatrix out not None):
    _require(y, "sigmoid_gradient", "y")
    _require(dy, "sigmoid_gradient", "dy")
    _require(out, "sigmoid_gradient", "out")
    with nogil:
        sigmoid_gradient(y.mat[0], dy.mat[0], out.mat[0])


def dropout_(PyGpuMatrix a not None, PyGpuMatrix out not None, float p, uint64_t seed):
    _require(a, "dropout", "a")
    _require(out, "dropout", "out")
    with nogil:
        dropout(a.mat[0], out.mat[0], p, seed)


def reduce_sum_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "reduce_sum", "a")
    _require(out, "reduce_sum", "out")
    with nogil:
        reduce_sum(a.mat[0], out.mat[0], axis)


def reduce_mean_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "reduce_mean", "a")
    _require(out, "reduce_mean", "out")
    with nogil:
        reduce_mean(a.mat[0], out.mat[0], axis)


def reduce_max_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis):
    _require(a, "reduce_max", "a")
    _require(out, "reduce_max", "out")
    with nogil:
        reduce_max(a.mat[0], out.mat[0], axis)


def broadcast_axis_(PyGpuMatrix a not None, PyGpuMatrix out not None, int64_t axis, float scale):
    _require(a, "broadcast_axis", "a")
    _require(out, "broadcast_axis", "out")
    with nogil:
        broadcast_axis(a.mat[0], out.mat[0], axis, scale)


def reduce_max_gradient_(PyGpuMatrix x not None, PyGpuMatrix y not None, PyGpuMatrix dy not None, PyGpuMatrix out not None, int64_t axis):
    _require(x, "reduce_max_gradient", "x")
    _require(y, "reduce_max_gradient", "y")
    _require(dy, "reduce_max_gradient", "dy")
    _require(out, "reduce_max_gradient", "out")
    with nogil:
        reduce_max_gradient(x.mat[0], y.mat[0], dy.mat[0], out.mat[0], axis)


# ------------------------------------------------------------------------- DLPack and CUDA interop
include "_dlpack.pxi"
include "_emu_selftest.pxi"


# ---- compiled executor steps (gpumat/executor.py; extensions/include/gpumat/program.h)

cdef class NativeProgram:
    """A compiled executor step: gpumat.ops calls on planned arrays, run by one native call.

    Built by ``gpumat.Executor`` from a trace of its schedule; users do not make these. On a CUDA
    or emulated device the step can run as a CUDA graph (see program.h): eager on the first run,
    captured on the second, one graph launch per run after that.

    ``NativeProgram(kind, index)`` for the native device (kind 0 host, 1 CUDA, 2 emulated); CudaError
    for a device that does not exist. Methods raise ValueError for unknown ops, arrays or inputs
    and a wrong argument count, and whatever the ops raise when the program runs.
    """

    cdef Program* prog
    cdef list _fixed  # the PyGpuMatrix buffers that fixed arrays point into, kept alive here
    cdef int _kind, _index

    def __cinit__(self, int kind, int index):
        self.prog = new Program(make_device(kind, index))
        self._fixed = []
        self._kind = kind
        self._index = index

    def __dealloc__(self):
        if self.prog != NULL:
            del self.prog
            self.prog = NULL

    cdef int _check_array(self, PyGpuMatrix arr, str what) except -1:
        _require(arr, "NativeProgram", what)
        cdef Device d = arr.mat[0].device()
        if <int>d.kind != self._kind or d.index != self._index:
            raise ValueError(
                f"NativeProgram: {what} is on {d.str().decode()}, the program runs on "
                f"{make_device(self._kind, self._index).str().decode()}"
            )
        return 0

    def add_fixed(self, PyGpuMatrix buffer not None, shape):
        """A fixed array of ``shape`` over the first elements of ``buffer``; returns its number.
        ValueError if ``shape`` holds more elements than ``buffer`` or it is on another device."""
        self._check_array(buffer, "buffer")
        cdef vector[int64_t] dims
        cdef int64_t n = 1
        for d in shape:
            dims.push_back(d)
            n *= d
        if n > buffer.mat[0].size():
            raise ValueError(f"NativeProgram.add_fixed: shape {tuple(shape)} exceeds the buffer")
        self._fixed.append(buffer)
        return self.prog.add_fixed(buffer.mat[0].data(), dims)

    def add_input(self, int input, shape):
        """An array of ``shape`` over the array bound to ``input`` at each run; returns its number."""
        cdef vector[int64_t] dims
        for d in shape:
            dims.push_back(d)
        return self.prog.add_input(input, dims)

    def add_step(self, str op, arrays, scalars, int seeded=-1):
        """Appends a call of gpumat::ops::``op`` on array numbers ``arrays`` with ``scalars``
        (bools, ints taken mod 2**64, floats); ``seeded``: the index of a scalar advanced by the
        run's step (dropout's seed), or -1."""
        cdef vector[int] a
        cdef vector[Scalar] s
        cdef Scalar v
        for k in arrays:
            a.push_back(k)
        for x in scalars:
            v.f = float(x)
            v.u = (int(x) % 2**64) if not isinstance(x, float) else 0
            s.push_back(v)
        self.prog.add_step(op.encode(), a, s, seeded)

    def set_graphs(self, bint on):
        """CUDA graphs on (the default) or off (eager native calls only)."""
        self.prog.set_graphs(on)

    def run(self, list inputs not None, uint64_t step):
        """Runs the step: ``inputs[k]`` is the PyGpuMatrix bound to input k (on the program's
        device), ``step`` advances seeded scalars. Releases the GIL while the ops run."""
        if len(inputs) != self.prog.num_inputs():
            raise ValueError(
                f"NativeProgram.run: {len(inputs)} inputs for a program of {self.prog.num_inputs()}"
            )
        cdef PyGpuMatrix arr
        for k, value in enumerate(inputs):
            if not isinstance(value, PyGpuMatrix):
                raise TypeError(f"NativeProgram.run: input {k} is a {type(value).__name__}")
            arr = value
            self._check_array(arr, f"input {k}")
            self.prog.bind_input(k, arr.mat[0].data(), arr.mat[0].size())
        with nogil:
            self.prog.run(step)

    @property
    def num_steps(self):
        """Op calls per run."""
        return self.prog.num_steps()

    @property
    def mode(self):
        """``"eager"`` (native calls, one per op) or ``"cuda-graph"`` (the last run was one graph
        launch)."""
        return self.prog.mode().decode()

    @property
    def graph_status(self):
        """Why the step does not run as a CUDA graph ("" while it does or still may)."""
        return self.prog.graph_status().decode()

    @property
    def graph_nodes(self):
        """Nodes of the captured graph (0 before a capture)."""
        return self.prog.graph_nodes()

    @property
    def captures(self):
        """Graph captures made so far."""
        return self.prog.captures()

    @property
    def graph_launches(self):
        """Graph launches made so far."""
        return self.prog.graph_launches()
