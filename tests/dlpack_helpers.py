"""Hand-made DLPack capsules and bad interop arguments, for the tests that must not crash.

The structs follow the DLPack C API v1.0 (https://dmlc.github.io/dlpack/latest/c_api.html):
``DLManagedTensor`` in a ``"dltensor"`` capsule and ``DLManagedTensorVersioned`` in a
``"dltensor_versioned"`` one. A capsule made here has a NULL deleter (the specification allows
it): its memory belongs to the :class:`Crafted` object, which must outlive every array imported
from it.

Used by tests/interop/test_dlpack.py (each case in a child process, so a crash fails a test
instead of ending the run) and by the bad-input generator (tests/robustness/bad_input_cases.py).
"""

from __future__ import annotations

import ctypes

import numpy as np

KDLCPU, KDLCUDA, KDLROCM = 1, 2, 10
KDLFLOAT, KDLINT = 2, 0


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class Crafted:
    """A DLPack capsule over ``values`` (float32) whose descriptor fields can be set to anything.

    Args:
        values: the data; its buffer is what ``data`` points to unless ``data`` is given.
        versioned: make a ``"dltensor_versioned"`` capsule (version 1.0) instead of a legacy one.
        ndim, shape, strides: the descriptor's rank and arrays (default: ``values``' own, row-major
            strides in elements); ``shape=None`` / ``strides=None`` with ``null_shape`` /
            ``null_strides`` set store NULL pointers.
        data, byte_offset, device, dtype, major: the remaining fields, default a valid CPU float32
            tensor at the start of ``values``.
    """

    def __init__(
        self,
        values=None,
        *,
        versioned=False,
        ndim=None,
        shape=None,
        strides=None,
        null_shape=False,
        null_strides=True,
        data=None,
        byte_offset=0,
        device=(KDLCPU, 0),
        dtype=(KDLFLOAT, 32, 1),
        major=1,
    ):
        self.values = np.ascontiguousarray(
            np.arange(6, dtype=np.float32) if values is None else values, dtype=np.float32
        )
        dims = self.values.shape if shape is None else tuple(shape)
        self.ndim = len(dims) if ndim is None else ndim
        self._shape = (ctypes.c_int64 * max(len(dims), 1))(*dims)
        if strides is None:
            strides = [int(np.prod(dims[i + 1 :], dtype=np.int64)) for i in range(len(dims))]
        self._strides = (ctypes.c_int64 * max(len(strides), 1))(*strides)
        tensor = DLTensor()
        tensor.data = self.values.ctypes.data if data is None else data
        tensor.device = DLDevice(*device)
        tensor.ndim = self.ndim
        tensor.dtype = DLDataType(*dtype)
        shape_ptr = ctypes.cast(self._shape, ctypes.POINTER(ctypes.c_int64))
        strides_ptr = ctypes.cast(self._strides, ctypes.POINTER(ctypes.c_int64))
        tensor.shape = ctypes.POINTER(ctypes.c_int64)() if null_shape else shape_ptr
        tensor.strides = ctypes.POINTER(ctypes.c_int64)() if null_strides else strides_ptr
        tensor.byte_offset = byte_offset
        if versioned:
            self.managed = DLManagedTensorVersioned()
            self.managed.version = DLPackVersion(major, 0)
            self.managed.flags = 0
            name = b"dltensor_versioned"
        else:
            self.managed = DLManagedTensor()
            name = b"dltensor"
        self.managed.dl_tensor = tensor
        self.managed.manager_ctx = None
        self.managed.deleter = None
        self.capsule = _capsule_new(ctypes.addressof(self.managed), name, None)


# Malformed descriptors, each with the error gpumat.from_dlpack must raise and a fragment of its
# message: name -> (keyword arguments of Crafted, exception type name, message fragment).
MALFORMED = {
    "ndim_negative": (dict(ndim=-1), "ValueError", "ndim -1"),
    "ndim_min_int32": (dict(ndim=-(2**31)), "ValueError", "ndim"),
    "ndim_too_large": (dict(ndim=1000), "ValueError", "ndim 1000"),
    "null_shape": (dict(null_shape=True), "ValueError", "null shape"),
    "negative_dim": (dict(shape=(-2, 3)), "ValueError", "negative dimension"),
    "int64_overflow": (dict(shape=(2**62, 8)), "ValueError", "more bytes than an int64"),
    "null_data": (dict(data=0), "ValueError", "null data pointer"),
    "misaligned_data": (dict(byte_offset=2), "ValueError", "not aligned"),
    "offset_past_address_space": (dict(byte_offset=2**64 - 4), "ValueError", "address space"),
    "negative_cuda_device": (dict(device=(KDLCUDA, -1)), "ValueError", "device id -1"),
    "rocm_device": (dict(device=(KDLROCM, 0)), "BufferError", "not supported"),
    "unknown_device": (dict(device=(99, 0)), "BufferError", "not supported"),
    "int32_dtype": (dict(dtype=(KDLINT, 32, 1)), "TypeError", "float32"),
    "vector_lanes": (dict(dtype=(KDLFLOAT, 32, 4)), "TypeError", "float32x4"),
    "non_contiguous": (
        dict(values=np.zeros((2, 3)), strides=(1, 2), null_strides=False),
        "ValueError",
        "contiguous",
    ),
    "version_2": (dict(versioned=True, major=2), "BufferError", "newer"),
}

# Bad arguments of PyGpuMatrix.__dlpack__ on a cpu array: name -> (kwargs, exception type name).
EXPORT_ARGUMENTS = {
    "max_version_empty_tuple": (dict(max_version=()), "ValueError"),
    "max_version_empty_list": (dict(max_version=[]), "ValueError"),
    "max_version_one": (dict(max_version=(1,)), "ValueError"),
    "max_version_three": (dict(max_version=(1, 0, 0)), "ValueError"),
    "max_version_negative": (dict(max_version=(-1, 0)), "ValueError"),
    "max_version_str": (dict(max_version="10"), "TypeError"),
    "max_version_int": (dict(max_version=1), "TypeError"),
    "max_version_float": (dict(max_version=(1.0, 0)), "TypeError"),
    "max_version_none_entry": (dict(max_version=(None, 0)), "TypeError"),
    "max_version_bool": (dict(max_version=(True, 0)), "TypeError"),
    "max_version_ndarray": (dict(max_version=np.array([1, 0])), "TypeError"),
    "stream_on_cpu": (dict(stream=1), "ValueError"),
    "stream_minus_one_on_cpu": (dict(stream=-1), "ValueError"),
    "stream_str": (dict(stream="1"), "TypeError"),
    "stream_bool": (dict(stream=True), "TypeError"),
    "stream_float": (dict(stream=1.0), "TypeError"),
    "dl_device_short": (dict(dl_device=(1,)), "ValueError"),
    "dl_device_long": (dict(dl_device=(1, 0, 0)), "ValueError"),
    "dl_device_empty": (dict(dl_device=()), "ValueError"),
    "dl_device_str": (dict(dl_device="cpu"), "TypeError"),
    "dl_device_float": (dict(dl_device=(1.0, 0)), "TypeError"),
    "dl_device_unknown_type": (dict(dl_device=(99, 0)), "ValueError"),
    "dl_device_negative_id": (dict(dl_device=(1, -1)), "ValueError"),
    "dl_device_huge_id": (dict(dl_device=(1, 2**40)), "ValueError"),
    "dl_device_cuda": (dict(dl_device=(2, 0)), "BufferError"),
    "dl_device_cuda_no_copy": (dict(dl_device=(2, 0), copy=False), "BufferError"),
    "copy_str": (dict(copy="no"), "TypeError"),
    "copy_int": (dict(copy=1), "TypeError"),
    "copy_none_list": (dict(copy=[None]), "TypeError"),
}


def import_malformed(name: str, versioned: bool):
    """Imports the malformed capsule ``name`` (legacy or versioned) with gpumat.from_dlpack.

    Returns ``(array, crafted)``, the crafted capsule's owner to keep alive while the array is
    used; a correct gpumat raises instead (see MALFORMED).
    """
    import gpumat

    kwargs = dict(MALFORMED[name][0])
    kwargs.setdefault("versioned", versioned)
    crafted = Crafted(**kwargs)
    return gpumat.from_dlpack(crafted.capsule), crafted
