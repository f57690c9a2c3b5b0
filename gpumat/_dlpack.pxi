# DLPack and the CUDA array interface for PyGpuMatrix (included by _core.pyx).
#
# Export (PyGpuMatrix.__dlpack__): a malloc'd DLManagedTensor[Versioned] whose manager_ctx is a
# strong reference to the exported PyGpuMatrix (a view holds its base), so the consumer keeps
# gpumat's memory alive after every Python reference to the array is gone; the deleter drops that
# reference and frees the struct. The capsule's destructor calls the deleter only when no consumer
# took the tensor (the capsule still has its original name), as the Python specification requires.
#
# Import (gpumat.from_dlpack): the capsule is renamed "used_..." at once and the managed tensor is
# given to a _DLPackOwner, whose __dealloc__ calls the producer's deleter exactly once; the result is
# a foreign GpuMatrix view (it never frees, the allocator never sees it) whose _base is that owner.
#
# Source: the DLPack C API v1.0 and the Python specification
# (https://dmlc.github.io/dlpack/latest/python_spec.html), and the array API standard's
# __dlpack__ / __dlpack_device__ (stream, max_version, dl_device and copy arguments).

from cpython.pycapsule cimport (
    PyCapsule_GetPointer,
    PyCapsule_IsValid,
    PyCapsule_New,
    PyCapsule_SetName,
)
from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free, malloc

import operator

from gpumat._dlpack cimport *

# The DLPack version gpumat produces; consumers asking for max_version >= (1, 0) get it.
DLPACK_VERSION = (1, 0)
_DLPACK_DTYPE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "opaque", 4: "bfloat", 5: "complex",
                       6: "bool"}

# Set by gpumat/__init__.py: (kind, index) -> gpumat.Device, so that arrays made here know their
# device without _core importing the Python package.
_device_from_native = None


def _dlpack_device_of(int kind, int index):
    """The DLPack (device_type, device_id) of gpumat's native device (kind, index).

    The one place where gpumat devices map to DLPack devices: __dlpack_device__, __dlpack__,
    __array__ (zero-copy where this says kDLCPU) and __cuda_array_interface__ (only kDLCUDA) all
    follow it. The emulated CUDA device (kind 2) exports as kDLCPU: its memory is host memory, so
    a CPU consumer may read and write it in place once the export has synchronized the device
    (its kernels are asynchronous, as on a GPU); its __cuda_array_interface__ does not exist: no
    CUDA library could use the pointer. Raises BufferError for a kind with no mapping.
    """
    if kind == 0 or kind == 2:
        return (<int>kDLCPU, 0)
    if kind == 1:
        return (<int>kDLCUDA, index)
    raise BufferError(f"gpumat device kind {kind} has no DLPack device")


def _native_device_of_dlpack(int device_type, int device_id):
    """gpumat's (kind, index) for a foreign DLPack device; BufferError for one gpumat cannot use."""
    if device_type == <int>kDLCPU:
        return (0, 0)
    if device_type == <int>kDLCUDA:
        return (1, device_id)
    raise BufferError(
        f"from_dlpack: DLPack device type {device_type} (device {device_id}) is not supported; "
        "gpumat takes kDLCPU (1) and kDLCUDA (2) tensors"
    )


cdef void _export_deleter_legacy(DLManagedTensor* m) noexcept nogil:
    if m == NULL:
        return
    with gil:
        Py_DECREF(<object>m.manager_ctx)
    free(m)


cdef void _export_deleter_versioned(DLManagedTensorVersioned* m) noexcept nogil:
    if m == NULL:
        return
    with gil:
        Py_DECREF(<object>m.manager_ctx)
    free(m)


cdef void _capsule_destructor_legacy(object capsule) noexcept:
    # A capsule no consumer renamed still owns its tensor.
    cdef DLManagedTensor* m
    if PyCapsule_IsValid(capsule, b"dltensor"):
        m = <DLManagedTensor*>PyCapsule_GetPointer(capsule, b"dltensor")
        if m != NULL and m.deleter != NULL:
            m.deleter(m)


cdef void _capsule_destructor_versioned(object capsule) noexcept:
    cdef DLManagedTensorVersioned* m
    if PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        m = <DLManagedTensorVersioned*>PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        if m != NULL and m.deleter != NULL:
            m.deleter(m)


cdef object _make_capsule(PyGpuMatrix arr, bint versioned, bint copied):
    """A DLPack capsule over arr's buffer; the capsule (then its consumer) holds a reference to arr."""
    cdef int nd = <int>arr.mat.ndim()
    cdef size_t head = sizeof(DLManagedTensorVersioned) if versioned else sizeof(DLManagedTensor)
    head = (head + 7) // 8 * 8  # the shape array after the struct stays 8-byte aligned
    # One block: the struct, then shape[nd] and strides[nd], freed together by the deleter.
    cdef char* block = <char*>malloc(head + 2 * <size_t>(nd if nd > 0 else 1) * sizeof(int64_t))
    if block == NULL:
        raise MemoryError("__dlpack__: cannot allocate the DLPack tensor descriptor")
    cdef int64_t* shape = <int64_t*>(block + head)
    cdef int64_t* strides = shape + nd
    cdef int64_t stride = 1
    cdef int i
    for i in range(nd - 1, -1, -1):
        shape[i] = arr.mat.shape()[i]
        strides[i] = stride
        stride *= shape[i] if shape[i] > 0 else 1
    cdef DLTensor* t
    cdef DLManagedTensorVersioned* mv
    cdef DLManagedTensor* ml
    if versioned:
        mv = <DLManagedTensorVersioned*>block
        mv.version.major = 1
        mv.version.minor = 0
        mv.manager_ctx = <void*>arr
        mv.deleter = _export_deleter_versioned
        mv.flags = GPUMAT_DLPACK_FLAG_IS_COPIED if copied else 0
        t = &mv.dl_tensor
    else:
        ml = <DLManagedTensor*>block
        ml.manager_ctx = <void*>arr
        ml.deleter = _export_deleter_legacy
        t = &ml.dl_tensor
    dev_type, dev_id = _dlpack_device_of(<int>arr.mat.device().kind, arr.mat.device().index)
    t.data = <void*>arr.mat.data()
    t.device.device_type = <DLDeviceType>dev_type
    t.device.device_id = dev_id
    t.ndim = nd
    t.dtype.code = <uint8_t>kDLFloat
    t.dtype.bits = 32
    t.dtype.lanes = 1
    t.shape = shape
    t.strides = strides
    t.byte_offset = 0
    Py_INCREF(arr)
    try:
        if versioned:
            return PyCapsule_New(block, b"dltensor_versioned", _capsule_destructor_versioned)
        return PyCapsule_New(block, b"dltensor", _capsule_destructor_legacy)
    except BaseException:
        Py_DECREF(arr)
        free(block)
        raise


cdef int _check_has_array(PyGpuMatrix arr, str what) except -1:
    if arr.mat == NULL:
        raise ValueError(f"{what}: this PyGpuMatrix holds no array (create arrays with "
                         "gpumat.array or gpumat.empty)")
    return 0


# DLPack device types (the DLDeviceType enum of dlpack.h v1.0): a dl_device naming any other
# number is not a DLPack device at all (ValueError); one of these that gpumat cannot export to is a
# BufferError, as the array API standard asks.
_DLPACK_DEVICE_TYPES = frozenset({1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
# The largest rank an imported tensor may have: numpy 2's limit (NPY_MAXDIMS). A capsule claiming
# more is malformed, and its shape array cannot be read safely.
_DLPACK_MAX_NDIM = 64
_INT32_MAX = 2**31 - 1
_UINT64_MAX = 2**64 - 1
_PY_BOOL = type(True)  # the builtin (the C++ bool is cimported under that name)


def _dlpack_int(value, str what):
    """value as a Python int (numpy integers and IntEnums included); TypeError for anything else.

    bool is refused: True is an int to Python but never a meaningful stream, device or version.
    """
    if isinstance(value, (_PY_BOOL, np.bool_)):
        raise TypeError(f"{what} must be an int, got bool {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{what} must be an int, got {type(value).__name__} {value!r}") from None


def _dlpack_pair(value, str what, str names):
    """A (a, b) pair of ints from a tuple or list of two; TypeError / ValueError otherwise."""
    if not isinstance(value, (tuple, list)):
        raise TypeError(f"{what} must be a tuple {names} of two ints or None, got "
                        f"{type(value).__name__} {value!r}")
    if len(value) != 2:
        raise ValueError(f"{what} must have two entries {names}, got {len(value)}: {value!r}")
    return _dlpack_int(value[0], f"{what}[0]"), _dlpack_int(value[1], f"{what}[1]")


def _dlpack_check_max_version(max_version):
    """The consumer's (major, minor), or None; TypeError / ValueError for anything malformed."""
    if max_version is None:
        return None
    major, minor = _dlpack_pair(max_version, "__dlpack__: max_version", "(major, minor)")
    if major < 0 or minor < 0:
        raise ValueError(f"__dlpack__: max_version must be non-negative, got {max_version!r}")
    return major, minor


def _dlpack_check_dl_device(dl_device):
    """The (device_type, device_id) asked for, or None; TypeError / ValueError if malformed."""
    if dl_device is None:
        return None
    dev_type, dev_id = _dlpack_pair(dl_device, "__dlpack__: dl_device", "(device_type, device_id)")
    if dev_type not in _DLPACK_DEVICE_TYPES:
        raise ValueError(f"__dlpack__: dl_device {dl_device!r}: {dev_type} is not a DLPack device "
                         f"type (one of {sorted(_DLPACK_DEVICE_TYPES)})")
    if not 0 <= dev_id <= _INT32_MAX:
        raise ValueError(f"__dlpack__: dl_device {dl_device!r}: the device id must be in "
                         f"[0, 2**31), got {dev_id}")
    return dev_type, dev_id


def _dlpack_check_copy(copy, str what):
    """copy as True, False or None; TypeError for anything else (no truthiness: "no" is not False)."""
    if copy is None or copy is True or copy is False:
        return copy
    if isinstance(copy, np.bool_):
        return copy.item()
    raise TypeError(f"{what}: copy must be True, False or None, got {type(copy).__name__} "
                    f"{copy!r}")


def _dlpack_check_stream(stream, int dev_type):
    """The consumer's stream, checked against the DLPack device type the capsule will be on.

    The array API standard: on the CPU (and every device without streams) only None; on CUDA None,
    -1 (no synchronization), 1 (legacy default), 2 (per-thread default) or a cudaStream_t handle
    (> 2) as an int; 0 is disallowed as ambiguous.
    """
    if stream is None:
        return None
    stream = _dlpack_int(stream, "__dlpack__: stream")
    if dev_type != <int>kDLCUDA:
        raise ValueError(f"__dlpack__: stream must be None for a capsule on DLPack device type "
                         f"{dev_type} (the CPU has no streams), got {stream!r}")
    if stream == 0:
        raise ValueError("__dlpack__: stream 0 is ambiguous and disallowed by the DLPack "
                         "specification; use 1 (legacy default), 2 (per-thread default) "
                         "or a cudaStream_t handle")
    if stream < -1 or stream > _UINT64_MAX:
        raise ValueError(f"__dlpack__: stream must be -1, 1, 2 or a cudaStream_t handle (an int "
                         f"in (2, 2**64)), got {stream}")
    return stream


def _dlpack_export(PyGpuMatrix self, stream, max_version, dl_device, copy):
    """PyGpuMatrix.__dlpack__: every argument is checked before anything is copied or synchronized.

    Raises TypeError for an argument of the wrong type (max_version / dl_device not a pair of ints,
    stream not an int, copy not a bool or None); ValueError for a malformed value (a pair without
    two entries, a negative version, a number that is no DLPack device type, a negative device id,
    stream 0 or below -1, any stream for a CPU capsule) or a PyGpuMatrix that holds no array;
    BufferError for a device gpumat cannot export to, or copy=False where a copy is needed.
    """
    _check_has_array(self, "__dlpack__")
    version = _dlpack_check_max_version(max_version)
    wanted = _dlpack_check_dl_device(dl_device)
    copy = _dlpack_check_copy(copy, "__dlpack__")
    cdef int kind = <int>self.mat.device().kind
    cdef int index = self.mat.device().index
    own = _dlpack_device_of(kind, index)
    target = own if wanted is None else wanted
    if target != own:
        if copy is False:
            raise BufferError(f"__dlpack__: the array is on DLPack device {own}; exporting to "
                              f"{target} needs a copy and copy=False was given")
        if target != (<int>kDLCPU, 0):
            raise BufferError(f"__dlpack__: cannot export an array on DLPack device {own} to "
                              f"{target}; only a copy to the CPU (1, 0) is supported")
    stream = _dlpack_check_stream(stream, target[0])
    src = self
    copied = False
    if target != own:
        src = PyGpuMatrix._empty(self.shape, _device_from_native(0, 0), 0, 0)
        src._copy_from_array(self)  # a device-to-host copy waits for gpumat's stream
        copied = True
    elif copy is True:
        src = PyGpuMatrix._empty(self.shape, self._device, kind, index)
        src._copy_from_array(self)
        copied = True
    if own[0] == <int>kDLCUDA and target == own and stream != -1:
        # NOTE: one host-side wait for gpumat's stream orders every queued write before any
        # work the consumer enqueues on its stream, whichever stream that is.
        synchronize_(kind, index)
    elif kind == 2:
        # The emulated device's memory is exported as CPU memory: a CPU consumer has no stream to
        # wait on, so the queued work that writes the array (its kernels, or the copy=True copy
        # just queued) must finish first.
        synchronize_(kind, index)
    # DLPack >= 1.0 consumers get the versioned struct; older ones (or None) the legacy one.
    versioned = version is not None and version[0] >= 1
    return _make_capsule(<PyGpuMatrix>src, versioned, copied)


cdef class _DLPackOwner:
    """Holds a managed DLPack tensor taken from a capsule; calls its deleter once when collected.

    The _base of every PyGpuMatrix made by gpumat.from_dlpack (and of its reshape views), so the
    producer's memory lives exactly as long as the last of them.
    """

    cdef void* managed
    cdef bint versioned

    def __cinit__(self):
        self.managed = NULL

    def __dealloc__(self):
        # NOTE: never raises; the deleter may free the producer's memory, so it runs once.
        cdef DLManagedTensorVersioned* mv
        cdef DLManagedTensor* ml
        if self.managed == NULL:
            return
        if self.versioned:
            mv = <DLManagedTensorVersioned*>self.managed
            self.managed = NULL
            if mv.deleter != NULL:
                mv.deleter(mv)
        else:
            ml = <DLManagedTensor*>self.managed
            self.managed = NULL
            if ml.deleter != NULL:
                ml.deleter(ml)


def _dtype_name(int code, int bits, int lanes):
    name = f"{_DLPACK_DTYPE_NAMES.get(code, f'code {code}')}{bits}"
    return name if lanes == 1 else f"{name}x{lanes}"


def _from_dlpack_capsule(capsule):
    """A PyGpuMatrix over the memory of a DLPack capsule, and whether the tensor is read-only.

    Takes ownership of the capsule's tensor (renames it "used_..."). Raises TypeError for something
    that is not an unused DLPack capsule or a tensor that is not float32; ValueError for a
    consumed capsule, a non-contiguous tensor or a malformed descriptor (ndim outside [0, 64], a
    null shape, a negative dimension, a byte size beyond int64, a negative device id, a null or
    misaligned data pointer); BufferError for an unsupported DLPack major version or device.
    """
    cdef void* ptr
    cdef bint versioned
    if PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        versioned = True
        ptr = PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    elif PyCapsule_IsValid(capsule, b"dltensor"):
        versioned = False
        ptr = PyCapsule_GetPointer(capsule, b"dltensor")
    elif PyCapsule_IsValid(capsule, b"used_dltensor") or PyCapsule_IsValid(
            capsule, b"used_dltensor_versioned"):
        raise ValueError("from_dlpack: this DLPack capsule was already consumed "
                         "(a capsule can be imported once)")
    else:
        raise TypeError(f"from_dlpack: expected an object with __dlpack__ or a DLPack capsule, "
                        f"got {type(capsule).__name__}")
    # From here on the owner calls the deleter on every path, errors included.
    cdef _DLPackOwner owner = _DLPackOwner.__new__(_DLPackOwner)
    owner.managed = ptr
    owner.versioned = versioned
    PyCapsule_SetName(capsule, b"used_dltensor_versioned" if versioned else b"used_dltensor")

    cdef DLTensor* t
    cdef DLManagedTensorVersioned* mv
    read_only = False
    if versioned:
        mv = <DLManagedTensorVersioned*>ptr
        if mv.version.major > 1:
            raise BufferError(f"from_dlpack: DLPack version {mv.version.major}.{mv.version.minor} "
                              "is newer than the 1.x gpumat reads")
        read_only = (mv.flags & GPUMAT_DLPACK_FLAG_READ_ONLY) != 0
        t = &mv.dl_tensor
    else:
        t = &(<DLManagedTensor*>ptr).dl_tensor

    # A malformed descriptor is refused before any of its pointers is followed.
    cdef int nd = t.ndim
    if nd < 0 or nd > _DLPACK_MAX_NDIM:
        raise ValueError(f"from_dlpack: malformed DLPack tensor: ndim {nd} is not in "
                         f"[0, {_DLPACK_MAX_NDIM}]")
    if nd > 0 and t.shape == NULL:
        raise ValueError(f"from_dlpack: malformed DLPack tensor: ndim {nd} with a null shape")
    shape = tuple(t.shape[i] for i in range(nd))
    if any(d < 0 for d in shape):
        raise ValueError(f"from_dlpack: malformed DLPack tensor: negative dimension in shape "
                         f"{shape}")
    size = 1
    for d in shape:
        size *= d
    if size * 4 > 2**63 - 1:
        raise ValueError(f"from_dlpack: malformed DLPack tensor: shape {shape} holds more "
                         "bytes than an int64 can count")
    if not (t.dtype.code == kDLFloat and t.dtype.bits == 32 and t.dtype.lanes == 1):
        raise TypeError(
            f"from_dlpack: gpumat arrays are float32, the tensor of shape {shape} is "
            f"{_dtype_name(t.dtype.code, t.dtype.bits, t.dtype.lanes)}; convert it first "
            "(e.g. .float() in PyTorch, .astype(numpy.float32) in numpy)"
        )
    kind, index = _native_device_of_dlpack(<int>t.device.device_type, t.device.device_id)
    if t.device.device_id < 0:
        raise ValueError(f"from_dlpack: malformed DLPack tensor: device id {t.device.device_id}")
    cdef int64_t expected = 1
    cdef int i
    if t.strides != NULL and 0 not in shape:
        for i in range(nd - 1, -1, -1):
            if t.shape[i] != 1 and t.strides[i] != expected:
                strides = tuple(t.strides[j] for j in range(nd))
                raise ValueError(
                    f"from_dlpack: the tensor of shape {shape} has strides {strides} (elements), "
                    "not row-major contiguous; gpumat arrays are contiguous: pass a contiguous "
                    "copy (.contiguous() in PyTorch, numpy.ascontiguousarray)"
                )
            expected *= t.shape[i]
    cdef vector[int64_t] dims
    for d in shape:
        dims.push_back(d)
    if size > 0 and t.data == NULL:
        raise ValueError(f"from_dlpack: malformed DLPack tensor: a null data pointer for shape "
                         f"{shape}")
    if t.byte_offset > <uint64_t>(<uintptr_t>-1 - <uintptr_t>t.data):
        raise ValueError(f"from_dlpack: malformed DLPack tensor: byte_offset {t.byte_offset} "
                         "runs past the end of the address space")
    if (<uintptr_t>t.data + <uintptr_t>t.byte_offset) % sizeof(float) != 0:
        raise ValueError(f"from_dlpack: the DLPack tensor's data (data + byte_offset "
                         f"{t.byte_offset}) is not aligned to a float32 (4 bytes)")
    cdef float* data = <float*>(<char*>t.data + t.byte_offset)
    cdef PyGpuMatrix out = PyGpuMatrix.__new__(PyGpuMatrix)
    out.mat = new GpuMatrix(data, dims, make_device(kind, index))
    out._device = _device_from_native(kind, index)
    out._base = owner
    return out, read_only


def cuda_stream_(int kind, int index):
    """The integer handle of gpumat's CUDA stream on (kind, index); 0 for the host."""
    return cuda_stream(make_device(kind, index))


def _cuda_array_interface(PyGpuMatrix self):
    _check_has_array(self, "__cuda_array_interface__")
    cdef int kind = <int>self.mat.device().kind
    cdef int index = self.mat.device().index
    if _dlpack_device_of(kind, index)[0] != <int>kDLCUDA:
        raise AttributeError(
            f"__cuda_array_interface__: only arrays in CUDA memory have it; this one is on "
            f"{self._device!r} (use __dlpack__ or __array__)"
        )
    return {
        "shape": self.shape,
        "typestr": "<f4",
        "data": (<uintptr_t>self.mat.data(), False),
        "version": 3,
        "strides": None,
        # NOTE: gpumat's kernels run on its own non-blocking stream; a consumer synchronizes with
        # it (CuPy waits on it with an event) before touching the data.
        "stream": cuda_stream(make_device(kind, index)),
    }


def _array_export(PyGpuMatrix self, dtype, copy):
    _check_has_array(self, "__array__")
    cdef int kind = <int>self.mat.device().kind
    cdef int index = self.mat.device().index
    host = _dlpack_device_of(kind, index)[0] == <int>kDLCPU
    if host and copy is not True and self.mat.size() > 0:
        out = np.from_dlpack(self)  # a view; its base (the capsule's owner) keeps self alive
    else:
        if copy is False and not host:
            raise ValueError(f"__array__: an array on {self._device!r} cannot be viewed by numpy "
                             "without a copy (copy=False)")
        out = self.asnumpy()
    if dtype is not None and np.dtype(dtype) != out.dtype:
        if copy is False:
            raise ValueError(f"__array__: converting float32 to {np.dtype(dtype)} needs a copy "
                             "(copy=False)")
        out = out.astype(dtype)
    return out
