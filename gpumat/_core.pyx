# cython: language_level=3, boundscheck=False, wraparound=False
# distutils: language = c++
"""gpumat._core: the Cython wrapper of libgpumat (private; use gpumat, gpumat.ops).

PyGpuMatrix owns one native GpuMatrix. Every native call releases the GIL, and every C++
exception becomes a Python one through gpumat_raise_py_error (ShapeError -> ValueError,
DTypeError -> TypeError, OutOfMemory -> MemoryError, CudaError -> gpumat.CudaError).
Devices are passed as (kind, index) with kind 0 = host, 1 = CUDA, 2 = the emulated CUDA device.
"""

from libc.stdint cimport int64_t, uint64_t, uintptr_t
from libcpp.utility cimport pair
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
    "failed); make arrays with gpumat.array(x, device), gpumat.empty(shape, device) or "
    "PyGpuMatrix(host_array, rows, cols[, device])"
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

    Create with gpumat.array(x, device) or gpumat.empty(shape, device). The buffer comes from the
    device's caching allocator and goes back to it when the object is collected.

    ``PyGpuMatrix(host_array, rows, cols[, device])`` is the cuda-project constructor: it copies a
    (rows, cols) floating-point numpy array to ``device`` (default: ``gpumat.gpu(0)`` when
    ``gpumat.cuda_available()``, else ``gpumat.cpu()``) and remembers the array, so that
    :meth:`loadFromDevice` can copy results back into it in place.

    Raises (constructor): TypeError for a host array that is not a floating-point numpy array or
    rows/cols that are not ints; ValueError when (rows, cols) differs from the array's shape; a
    call with no arguments is a TypeError. An object made without an array (``__new__``) raises
    ValueError on every use, never crashes.
    """

    def __cinit__(self):
        self.mat = NULL

    def __init__(self, host_array=None, rows=None, cols=None, device=None):
        if self.mat != NULL:
            raise TypeError("PyGpuMatrix.__init__: this array is already initialised")
        if host_array is None or rows is None or cols is None:
            raise TypeError(
                "PyGpuMatrix(host_array, rows, cols[, device]) needs a (rows, cols) numpy array and "
                "its rows and cols; for other shapes use gpumat.array(x, device) or "
                "gpumat.empty(shape, device)"
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

        if device is None:
            device = gpumat.gpu(0) if gpumat.cuda_available() else gpumat.cpu()
        cdef PyGpuMatrix src = gpumat.array(host_array, device)
        # Take over the new array's native matrix, so this object is a plain array too.
        self.mat = src.mat
        src.mat = NULL
        self._device = src._device
        self._host = host_array

    def __dealloc__(self):
        # NOTE: never raises (GpuMatrix's destructor is noexcept): "Cannot raise in the destructor!"
        if self.mat != NULL:
            del self.mat
            self.mat = NULL

    @staticmethod
    def _empty(shape, device, int kind, int index):
        cdef vector[int64_t] dims
        for d in shape:
            dims.push_back(d)
        cdef PyGpuMatrix out = PyGpuMatrix.__new__(PyGpuMatrix)
        out.mat = new GpuMatrix(dims, make_device(kind, index))
        out._device = device
        return out

    def _clone(self):
        """A new array of this array's shape on its device holding a copy of its values (one
        native call; asynchronous on CUDA, as :func:`gpumat.ops.copy`). Private, for
        ``gpumat.compile``'s returned tensors. Raises ValueError for an object without an array,
        MemoryError when the device is out of memory."""
        _require(self, "_clone", "self")
        cdef PyGpuMatrix out = PyGpuMatrix.__new__(PyGpuMatrix)
        out.mat = new GpuMatrix(self.mat[0].shape(), self.mat[0].device())
        out._device = self._device
        with nogil:
            copy(self.mat[0], out.mat[0])
        return out

    def _view(self, shape, int64_t offset=0):
        """A PyGpuMatrix of ``shape`` over this array's elements from ``offset`` on (the first ones
        by default), sharing its storage.

        Private, for the executor's memory plan (values of different shapes sharing one buffer)
        and eager backward (a reshape, a part of attention's flat gradient); users call
        :meth:`reshape`. Raises ValueError if the elements are not all inside this array.
        """
        _require(self, "_view", "self")
        cdef vector[int64_t] dims
        for d in shape:
            dims.push_back(d)
        cdef PyGpuMatrix out = PyGpuMatrix.__new__(PyGpuMatrix)
        out.mat = new GpuMatrix(self.mat[0], dims, offset)
        out._device = self._device
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

    def shares_memory(self, PyGpuMatrix other not None):
        """True when this array and ``other`` have elements in common: the same device and
        intersecting element ranges (a reshape view of one array, or DLPack imports of overlapping
        memory). Empty arrays share nothing. Raises ValueError for an object that holds no array."""
        _require(self, "shares_memory", "self")
        _require(other, "shares_memory", "other")
        if self.mat.size() == 0 or other.mat.size() == 0:
            return False
        cdef Device da = self.mat.device()
        cdef Device db = other.mat.device()
        if da.kind != db.kind or da.index != db.index:
            return False
        cdef uintptr_t a0 = <uintptr_t>self.mat.data()
        cdef uintptr_t b0 = <uintptr_t>other.mat.data()
        return a0 < b0 + <uintptr_t>other.mat.nbytes() and b0 < a0 + <uintptr_t>self.mat.nbytes()

    def _address_range(self):
        """(first byte, one past the last byte) of the elements, as ints; (0, 0) when empty. For
        the executor's check that a fed array is not one of its own buffers."""
        _require(self, "_address_range", "self")
        if self.mat.size() == 0:
            return (0, 0)
        cdef uintptr_t a0 = <uintptr_t>self.mat.data()
        return (a0, a0 + <uintptr_t>self.mat.nbytes())

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
    def device(self):
        """The gpumat.Device the array lives on (None for an object that holds no array)."""
        return self._device

    @property
    def ctx(self):
        """:attr:`device` under the dlsys course's name (its ``NDArray.ctx``)."""
        return self._device

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
        """Copies this array into ``target`` and returns it (the dlsys course's ``NDArray.copyto``).

        ``target`` is a PyGpuMatrix of the same shape (on any device), or a gpumat.Device, in
        which case a new array is made there. Raises ValueError for a shape mismatch, TypeError
        for any other target.
        """
        _require(self, "copyto", "self")
        if not isinstance(target, PyGpuMatrix):
            import gpumat

            if not isinstance(target, gpumat.Device):
                raise TypeError(
                    "copyto: target must be a PyGpuMatrix or a gpumat.Device, got "
                    f"{type(target).__name__}"
                )
            target = gpumat.empty(self.shape, target)
        target.copyfrom(self)
        return target

    def __setitem__(self, key, value):
        """``a[:] = value`` (or ``a[...] = value``) copies ``value`` into the whole array.

        ``value`` is a numpy array (or array-like) of this array's shape, a PyGpuMatrix of this
        shape, or a real number (every element set to it). Only the whole-array slice is
        supported (the dlsys course's NDArray rule): any other key raises IndexError.
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
            fill_(self, float(value))
            return
        self.copyfrom(value)

    def _copy_from_numpy(self, src):
        """src: a C-contiguous float32 numpy array with self.size elements."""
        _require(self, "_copy_from_numpy", "self")
        cdef const float[::1] view = src.reshape(-1)  # read-only sources too
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
            TypeError: an argument of the wrong type: max_version or dl_device not a pair of
                ints, stream not an int, copy not a bool or None.
            ValueError: a malformed value (a pair without two entries, a negative version, a
                number that is no DLPack device type, a negative device id, stream 0 or below
                -1, any stream for a CPU array), or a PyGpuMatrix that holds no array.
            BufferError: a device that cannot be exported to, or copy=False where a copy is
                needed.
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
        return f"PyGpuMatrix(shape={self.shape}, dtype=float32, device={self._device!r})"

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
        _require(self, "mul", "self")
        self._legacy_check("mul", B, "B", self.shape)
        self._legacy_check("mul", C, "C", self.shape)
        mul_(self, B, C)

    def negate(self, C):
        """C = -self elementwise (same shape; C may be self)."""
        _require(self, "negate", "self")
        self._legacy_check("negate", C, "C", self.shape)
        mul_scalar_(self, -1.0, C)

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
        """Fills self with uniform samples in [low, high) (gpumat.ops.uniform: the same
        values on every device for one seed). Raises ValueError if low > high or the seed is not
        in [0, 2**64), TypeError for a non-int seed."""
        _require(self, "randomInit", "self")
        if isinstance(seed, _PY_BOOL) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"randomInit: seed must be an int, got {seed!r}")
        if not 0 <= seed < 2**64:
            raise ValueError(f"randomInit: seed must be in [0, 2**64), got {seed}")
        uniform_(self, low, high, int(seed))


# ------------------------------------------------------------------------------------ ops
# Thin: argument types are checked by Cython (TypeError), everything else in C++. One .pxi per
# kernel family, named as extensions/src/{ops,cuda,host}/<family>.* are.

include "_core_ops/pointwise.pxi"
include "_core_ops/elementwise.pxi"
include "_core_ops/activation.pxi"
include "_core_ops/layout.pxi"
include "_core_ops/strided.pxi"
include "_core_ops/reduce.pxi"
include "_core_ops/matmul.pxi"
include "_core_ops/softmax.pxi"
include "_core_ops/attention.pxi"
include "_core_ops/loss.pxi"
include "_core_ops/conv.pxi"
include "_core_ops/pool.pxi"
include "_core_ops/rnn.pxi"
include "_core_ops/random.pxi"
include "_core_ops/sort.pxi"
include "_core_ops/optim.pxi"
include "_core_ops/index.pxi"
include "_core_ops/norm.pxi"


# Op counting (extensions/src/ops/checks.cpp).

def op_count_(int kind, int index):
    return op_count(make_device(kind, index))


# Deterministic algorithms (extensions/src/ops/checks.cpp).

def are_deterministic_algorithms_enabled_():
    return are_deterministic_algorithms_enabled()


def use_deterministic_algorithms_(bint mode):
    use_deterministic_algorithms(mode)


# Host threads (extensions/src/host/parallel.cpp).

def get_num_threads_():
    return get_num_threads()


def set_num_threads_(int n):
    set_num_threads(n)


def effective_num_threads_():
    return effective_num_threads()


# Host BLAS (extensions/src/host/blas.cpp).

def use_onednn_(str path):
    return use_onednn(path.encode()).decode()


def host_blas_():
    return host_blas().decode()


# ------------------------------------------------------------------------- DLPack and CUDA interop
include "_dlpack.pxi"
include "_emu_selftest.pxi"
include "_emu_profile.pxi"


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
            # The full check (and its message) only when the quick one fails: this runs per run.
            if (arr.mat == NULL or <int>arr.mat[0].device().kind != self._kind
                    or arr.mat[0].device().index != self._index):
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
