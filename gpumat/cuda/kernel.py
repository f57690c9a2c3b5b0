"""Users' own CUDA kernels: :class:`RawKernel` and :class:`RawModule` with CuPy's conventions, on a
GPU (nvcc) and on the emulated device (the host compiler against gpumat's emulator, with memcheck,
racecheck, initcheck and the profile's counters, exactly as for gpumat's own kernels).

A launch ``kernel(grid, block, args, shared_mem=0)`` is checked before it is made: the arguments
against the kernel's parameter types (read from launchers compiled beside the kernel, so a wrong
count or type is a TypeError, never a misread argument), all arrays on one device, the grid, block
and shared memory against the device's limits. It is queued on gpumat's stream for that device
(:func:`current_stream`), so it is ordered with gpumat's own work there; as on a GPU, a fault inside
the kernel is raised (``gpumat.CudaError``) by the next call that waits for the stream.

Build and cache: :mod:`gpumat.cuda._build`.
"""

from __future__ import annotations

import ctypes
import math
import threading

import numpy as np

from gpumat import _core
from gpumat._core import CudaError, PyGpuMatrix
from gpumat.cuda import _build
from gpumat.cuda._build import BOOL, FLOATING, OTHER, POINTER, SIGNED, UNSIGNED, CompileError
from gpumat.devices import Device, as_device, cuda_available, synchronize

__all__ = ["CompileError", "RawKernel", "RawModule", "Stream", "current_stream"]

# numpy's type for a parameter of this (kind, size).
_SCALAR_TYPES = {
    (FLOATING, 4): np.float32,
    (FLOATING, 8): np.float64,
    (SIGNED, 1): np.int8,
    (SIGNED, 2): np.int16,
    (SIGNED, 4): np.int32,
    (SIGNED, 8): np.int64,
    (UNSIGNED, 1): np.uint8,
    (UNSIGNED, 2): np.uint16,
    (UNSIGNED, 4): np.uint32,
    (UNSIGNED, 8): np.uint64,
    (BOOL, 1): np.bool_,
    (OTHER, 2): np.float16,  # __half
}
_KIND_NAMES = {
    POINTER: "a pointer",
    FLOATING: "a floating-point number",
    SIGNED: "a signed integer",
    UNSIGNED: "an unsigned integer",
    BOOL: "a bool",
    OTHER: "a struct",
}
_DEFAULT_DYNAMIC_SMEM = 48 * 1024  # CUDA's limit until cudaFuncSetAttribute raises it


# ---------------------------------------------------------------------------------- streams


class Stream:
    """gpumat's stream for a device: the one queue all of gpumat's work on that device runs on,
    and where user kernels are launched, so they are ordered with it.

    Args:
        device: a CUDA GPU or an emulated device (``"cuda:0"``, ``"emu"``, a
            :class:`gpumat.Device`, ...).

    Attributes:
        device: the :class:`gpumat.Device`.
        ptr: the ``cudaStream_t`` handle as an int (CuPy's ``Stream.ptr``; PyTorch's
            ``cuda_stream``), to order foreign work with gpumat's: e.g.
            ``torch.cuda.ExternalStream(s.ptr)`` on a GPU.

    Raises:
        ValueError: a device that is not a CUDA or emulated device.
        gpumat.CudaError: no such device.
    """

    def __init__(self, device):
        device = as_device(device, "Stream")
        if device.device_type == "cpu":
            raise ValueError(
                "Stream: the cpu device has no CUDA stream; use a 'cuda' or 'emu' device"
            )
        self.device = device
        self.ptr = int(_core.cuda_stream_(*device._native))

    def __repr__(self):
        return f"<gpumat.cuda.Stream {self.ptr:#x} on {self.device}>"

    @property
    def cuda_stream(self) -> int:
        """PyTorch's name for :attr:`ptr`."""
        return self.ptr

    def __cuda_stream__(self):
        """The CUDA stream protocol: (version 0, the handle)."""
        return (0, self.ptr)

    def synchronize(self) -> None:
        """Waits until the stream's queued work is done.

        Raises:
            gpumat.CudaError: an asynchronous fault of that work (a user kernel's memcheck
                report on the emulated device, an illegal address on a GPU).
        """
        synchronize(self.device)

    def __eq__(self, other):
        # one stream per device: equal devices, equal streams
        return isinstance(other, Stream) and (other.device, other.ptr) == (self.device, self.ptr)

    def __hash__(self):
        return hash((self.device, self.ptr))


def current_stream(device=None) -> Stream:
    """gpumat's stream for ``device`` (default: ``cuda:0`` when a GPU is usable, else ``emu:0``):
    the stream user kernels and gpumat's own work on that device are queued on."""
    return Stream(_default_device() if device is None else device)


def _default_device() -> Device:
    return Device("gpu", 0) if cuda_available() else Device("emu", 0)


# ---------------------------------------------------------------------------------- arguments


def _cuda_pointer_device(ptr: int) -> int:
    """The CUDA device ordinal of a device pointer, from the driver."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise ValueError(f"a CUDA array, but the CUDA driver could not be loaded: {e}") from e
    ordinal = ctypes.c_int(-1)
    # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
    if cuda.cuPointerGetAttribute(ctypes.byref(ordinal), 9, ctypes.c_uint64(ptr)):
        raise ValueError(f"address {ptr:#x} is not CUDA device memory the driver knows")
    return ordinal.value


def _array(arg, where: str):
    """(pointer, Device, producer's stream or None) of an array argument; None for a scalar.

    Raises:
        TypeError: host memory (a numpy array, a cpu tensor), a non-float32 gpumat tensor.
        ValueError: a non-contiguous array, an object that holds no array.
    """
    if isinstance(arg, (np.generic, int, float)):
        return None
    if not isinstance(arg, PyGpuMatrix):
        as_arg = getattr(arg, "_kernel_argument", None)
        if as_arg is not None and callable(as_arg):
            arg = as_arg(where)
    if isinstance(arg, PyGpuMatrix):
        if arg.device is None:
            raise ValueError(f"{where}: this PyGpuMatrix holds no array")
        if arg.device.device_type == "cpu":
            raise TypeError(
                f"{where}: an array on the cpu device is host memory, not device memory: move it "
                "to the emulated device or a GPU first (e.g. gpumat.asarray(x, device='emu'))"
            )
        return arg._address_range()[0], arg.device, None
    cai = (
        getattr(arg, "__cuda_array_interface__", None) if not isinstance(arg, np.ndarray) else None
    )
    if isinstance(cai, dict):
        shape, typestr = tuple(cai["shape"]), np.dtype(cai["typestr"])
        strides = cai.get("strides")
        if strides is not None and math.prod(shape) > 1:
            expected, step = [], typestr.itemsize
            for d in reversed(shape):
                expected.append(step)
                step *= d
            if any(
                d != 1 and s != e
                for d, s, e in zip(shape, strides, reversed(expected), strict=True)
            ):
                raise ValueError(
                    f"{where}: a non-contiguous CUDA array (strides {tuple(strides)}); pass a "
                    "contiguous copy (.contiguous(), cupy.ascontiguousarray)"
                )
        ptr = int(cai["data"][0])
        dev_fn = getattr(arg, "__dlpack_device__", None)
        if dev_fn is not None:
            kind, index = dev_fn()
            if int(kind) != 2:
                raise TypeError(f"{where}: DLPack device type {kind} is not CUDA memory")
            index = int(index)
        else:
            index = _cuda_pointer_device(ptr) if ptr else 0
        stream = cai.get("stream")
        # CUDA array interface v3: work on the producer's stream (1: legacy default, 2: per-thread
        # default, else a handle) must be done before a consumer's stream uses the memory.
        ordered = int(stream) if isinstance(stream, int) and stream >= 1 else None
        return ptr, Device("gpu", index), ordered
    if (
        isinstance(arg, np.ndarray)
        or hasattr(arg, "__array_interface__")
        or hasattr(arg, "__dlpack__")
    ):
        raise TypeError(
            f"{where}: {type(arg).__name__} is host memory, not device memory: pass a gpumat "
            "array or tensor on the emulated device or a GPU, or a CUDA array (CuPy, PyTorch)"
        )
    return None


def _scalar_bytes(arg, kind: int, size: int, where: str) -> bytes:
    """The bytes of a scalar argument for a parameter of (kind, size), exactly typed.

    CuPy passes a Python int as an int64 and a float as a double whatever the parameter is;
    gpumat reads the parameter's type and converts (or refuses), so a ``float`` or ``int``
    parameter never reads half of a wider value.
    """
    ctype = _SCALAR_TYPES.get((kind, size))
    want = f"{_KIND_NAMES[kind]} of {size} bytes" + (
        f" (numpy.{np.dtype(ctype).name})" if ctype is not None else ""
    )
    if kind == OTHER and ctype is None:
        if isinstance(arg, np.generic) and arg.dtype.itemsize == size:
            return arg.tobytes()
        raise TypeError(f"{where}: the kernel takes {want}: pass a numpy scalar of that size")
    if isinstance(arg, np.generic):
        if arg.dtype != np.dtype(ctype):
            raise TypeError(
                f"{where}: the kernel takes {want}, got numpy.{arg.dtype.name}: pass "
                f"numpy.{np.dtype(ctype).name}(...) (or a Python number, converted)"
            )
        return arg.tobytes()
    if isinstance(arg, bool):
        if kind != BOOL:
            raise TypeError(f"{where}: the kernel takes {want}, got a bool")
        return np.bool_(arg).tobytes()
    if isinstance(arg, int):
        if kind not in (SIGNED, UNSIGNED, FLOATING):
            raise TypeError(f"{where}: the kernel takes {want}, got an int")
        if kind != FLOATING:
            info = np.iinfo(ctype)
            if not info.min <= arg <= info.max:
                raise ValueError(f"{where}: {arg} does not fit the kernel's {want}")
        return np.array(arg, dtype=ctype).tobytes()
    if isinstance(arg, float):
        if kind != FLOATING:
            raise TypeError(f"{where}: the kernel takes {want}, got a float")
        return np.array(arg, dtype=ctype).tobytes()
    raise TypeError(f"{where}: the kernel takes {want}, got {type(arg).__name__}")


def _dims(value, what: str) -> tuple[int, int, int]:
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        value = (value,)
    if not isinstance(value, tuple) or not 1 <= len(value) <= 3:
        raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    dims = []
    for v in value:
        if not isinstance(v, (int, np.integer)) or isinstance(v, (bool, np.bool_)):
            raise TypeError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
        if v < 1:
            raise ValueError(f"{what} dimensions must be >= 1, got {value!r}")
        dims.append(int(v))
    return tuple(dims + [1] * (3 - len(dims)))


# ---------------------------------------------------------------------------------- modules


class RawModule:
    """A CUDA C++ source of one or more kernels, compiled for the device its kernels are launched
    on (CuPy's ``RawModule``).

    Args:
        code: CUDA C++ source. Its ``extern "C"`` ``__global__`` functions are found by name;
            a C++ kernel (a template instance, a kernel in a namespace) by a name expression
            (``"my_kernel<float>"``) given in ``name_expressions`` or to :meth:`get_function`.
        options: compiler options as a tuple of strings. On a GPU they go to nvcc; on the
            emulated device ``-D``, ``-U``, ``-I``, ``-std=``, ``-O``, ``-w`` and ``-Werror``
            go to the host compiler and nvcc's own (``--use_fast_math``, ``-lineinfo``,
            ``-arch``, ...) are dropped.
        name_expressions: C++ name expressions of kernels to build launchers for.
        jitify: accepted for CuPy's signature; it has no effect (CuPy needs Jitify to give NVRTC
            the standard headers; nvcc and the host compiler have them).

    The first launch on a device type compiles (nvcc for a GPU's compute capability; the host
    compiler against the emulator for ``emu``) or takes the library from the cache
    (:mod:`gpumat.cuda._build`).

    Raises:
        TypeError: ``code`` not a str, ``options`` not a tuple/list of str.
    """

    def __init__(self, code: str | None = None, *, options=(), name_expressions=None, jitify=False):
        if not isinstance(code, str):
            raise TypeError(
                f"RawModule: code must be a str of CUDA C++ source, got {type(code).__name__}"
            )
        if isinstance(options, str) or not all(isinstance(o, str) for o in options):
            raise TypeError(f"RawModule: options must be a tuple of str, got {options!r}")
        if not isinstance(jitify, bool):
            raise TypeError(f"RawModule: jitify must be a bool, got {jitify!r}")
        self.code, self.options, self.jitify = code, tuple(options), jitify
        exprs = list(name_expressions or ())
        if not all(isinstance(e, str) for e in exprs):
            raise TypeError(f"RawModule: name_expressions must be str, got {name_expressions!r}")
        self._names = list(dict.fromkeys(_build.extern_c_kernels(code) + exprs))
        self._lock = threading.RLock()
        self._libraries: dict[tuple[str, int], _build.Library] = {}

    def get_function(self, name: str) -> RawKernel:
        """The kernel ``name`` (an ``extern "C"`` name or a C++ name expression) of this module."""
        if not isinstance(name, str):
            raise TypeError(f"get_function: name must be a str, got {type(name).__name__}")
        return RawKernel(self.code, name, self.options, self.jitify, _module=self)

    def compile(self, device=None) -> None:
        """Compiles (or loads from the cache) now for ``device`` (default as
        :func:`current_stream`), so that compile errors show before the first launch.

        Raises:
            CompileError: the source does not compile (``.log`` holds the diagnostics).
        """
        self._library(as_device(device, "compile") if device is not None else _default_device())

    @property
    def from_cache(self) -> bool | None:
        """True when the library last built came from the cache (no compiler ran), False when it
        was compiled in this process, None before any build."""
        with self._lock:
            libs = list(self._libraries.values())
        return libs[-1].from_cache if libs else None

    def _library(self, device: Device, name: str | None = None) -> tuple[_build.Library, int]:
        """The library for ``device``'s target with a launcher for ``name``, and its index."""
        if device.device_type == "cpu":
            raise ValueError("a CUDA kernel runs on a GPU or the emulated device, not on cpu")
        target = "gpu" if device.device_type == "gpu" else "emu"
        slot = (target, device.index if target == "gpu" else 0)
        with self._lock:
            lib = self._libraries.get(slot)
            if lib is not None and (name is None or name in lib.names):
                return lib, (lib.names.index(name) if name is not None else -1)
            names = self._names + ([name] if name is not None and name not in self._names else [])
            if not names:
                raise ValueError(
                    'RawModule: no kernel to build: the source has no extern "C" __global__ '
                    "function; name one with get_function(name) or name_expressions"
                )
            lib = _build.build(self.code, names, self.options, target, slot[1])
            self._names = names
            self._libraries[slot] = lib
            return lib, (names.index(name) if name is not None else -1)


class RawKernel:
    """One CUDA kernel, launched as ``kernel(grid, block, args, shared_mem=0)`` (CuPy's
    ``RawKernel``).

    Args:
        code: CUDA C++ source holding the kernel.
        name: the kernel's name: its ``extern "C"`` name, or a C++ name expression
            (``"axpy<float>"``).
        options: compiler options (see :class:`RawModule`).
        jitify: accepted for CuPy's signature; no effect (see :class:`RawModule`).

    A call ``kernel(grid, block, args, shared_mem=0)`` launches it. ``grid`` and ``block`` are
    ints or tuples of 1 to 3 ints (missing ones are 1). ``args`` is a tuple, one entry per kernel
    parameter. A pointer parameter takes a device array: a :class:`gpumat.PyGpuMatrix` or float32
    :class:`gpumat.Tensor` on a GPU or the emulated device, or a CUDA array of any dtype from CuPy
    or PyTorch (``__cuda_array_interface__``); its device pointer is passed, and it must be
    contiguous. A scalar parameter takes a numpy scalar of exactly its type (``numpy.int32`` for
    ``int``, ``numpy.float32`` for ``float``, ``numpy.uint64`` for ``unsigned long long``, ...),
    or a Python int, float or bool, converted to the parameter's type (range-checked). The arrays
    decide the device (all on one; with none: ``cuda:0`` if usable, else ``emu:0``).
    ``shared_mem`` is the dynamic shared memory in bytes (``extern __shared__``), at most
    :attr:`max_dynamic_shared_size_bytes`.

    The launch is queued on gpumat's stream for the device (:func:`current_stream`) and returns
    at once; on the emulated device every load and store of the kernel is checked (memcheck,
    racecheck, initcheck: docs/emulator.md) and a fault is raised as ``gpumat.CudaError`` by the
    next call that waits for the stream (``gpumat.synchronize(device)``, reading an array back).

    Raises:
        TypeError: (at launch, before anything runs) a wrong number of arguments; an argument
            of the wrong type for its parameter (an array for a scalar, a numpy.float64 for a
            ``float``, host memory for a pointer); grid/block/shared_mem of the wrong type.
        ValueError: arrays on different devices; a grid, block or shared memory size outside
            the device's or the kernel's limits; a scalar out of its parameter's range.
        CompileError: the source does not compile, or the compiler is missing.
        gpumat.CudaError: the runtime refused the launch.
    """

    def __init__(self, code: str, name: str, options=(), jitify=False, *, _module=None):
        if not isinstance(name, str) or not name.strip():
            raise TypeError(f"RawKernel: name must be a non-empty str, got {name!r}")
        self.name = name.strip()
        self.module = (
            _module if _module is not None else RawModule(code, options=options, jitify=jitify)
        )
        self.code, self.options = self.module.code, self.module.options
        self._max_dynamic_smem: int | None = None
        self._applied: dict[tuple[str, int], int] = {}

    def __repr__(self):
        return f"<gpumat.cuda.RawKernel {self.name!r}>"

    def compile(self, device=None) -> None:
        """Compiles (or loads from the cache) now for ``device`` (see :meth:`RawModule.compile`).

        Raises:
            CompileError: the source does not compile, or it has no kernel of this name.
        """
        self.module._library(
            as_device(device, "compile") if device is not None else _default_device(), self.name
        )

    # ------------------------------------------------------------------ attributes

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        """The most dynamic shared memory (bytes) a launch may ask for: 49,152 (48 KiB) unless
        set higher, up to the device's opt-in limit (227 KiB on an H100; checked at launch), as
        ``cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize)`` does."""
        return _DEFAULT_DYNAMIC_SMEM if self._max_dynamic_smem is None else self._max_dynamic_smem

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
            raise ValueError(f"max_dynamic_shared_size_bytes must be an int >= 0, got {value!r}")
        self._max_dynamic_smem = int(value)

    @property
    def attributes(self) -> dict:
        """The kernel's attributes on the default device (``cudaFuncGetAttributes``; CuPy's keys):
        ``max_threads_per_block``, ``shared_size_bytes`` (static shared memory),
        ``const_size_bytes``, ``local_size_bytes``, ``num_regs``, ``ptx_version``,
        ``binary_version``, ``max_dynamic_shared_size_bytes``. On the emulated device, which
        allocates no registers, ``num_regs``, ``shared_size_bytes`` and ``local_size_bytes``
        (its stack frame) are what ptxas reports for an H100 (sm_90) when nvcc is installed
        (None without it), beside the launch limits; the others are None."""
        return self.attributes_on(_default_device())

    def attributes_on(self, device) -> dict:
        """:attr:`attributes` on ``device`` (a GPU or the emulated device)."""
        device = as_device(device, "attributes_on")
        lib, index = self.module._library(device, self.name)
        out = (ctypes.c_longlong * 8)()
        code = lib.function("attributes", index)(ctypes.c_int(device.index), out)
        keys = (
            "max_threads_per_block",
            "shared_size_bytes",
            "const_size_bytes",
            "local_size_bytes",
            "num_regs",
            "ptx_version",
            "binary_version",
            "max_dynamic_shared_size_bytes",
        )
        if code == -1:  # the emulated device: what ptxas would allocate on an H100 (sm_90)
            limits = lib.device_limits(device.index)
            values = dict.fromkeys(keys)
            values["max_threads_per_block"] = int(limits[0])
            values["max_dynamic_shared_size_bytes"] = self.max_dynamic_shared_size_bytes
            res = _build.ptxas_resources(self.code, [self.name], self.options, "sm_90").get(
                self.name
            )
            if res is not None:
                values["num_regs"] = res.get("registers")
                values["shared_size_bytes"] = res.get("static_smem_bytes")
                values["local_size_bytes"] = res.get("stack_bytes")
            return values
        if code:
            raise CudaError(f"{self.name}: cudaFuncGetAttributes: {lib.error_string(code)}")
        return dict(zip(keys, (int(v) for v in out), strict=True))

    # ------------------------------------------------------------------ launch

    def __call__(self, grid, block, args, *, shared_mem: int = 0):
        grid3, block3 = _dims(grid, "grid"), _dims(block, "block")
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, (int, np.integer)):
            raise TypeError(f"shared_mem must be an int (bytes), got {shared_mem!r}")
        if shared_mem < 0:
            raise ValueError(f"shared_mem must be >= 0 bytes, got {shared_mem}")
        if not isinstance(args, (tuple, list)):
            raise TypeError(
                f"{self.name}: args must be a tuple of arguments, got {type(args).__name__}"
            )
        args = tuple(args)
        arrays = [(i, _array(a, f"{self.name} argument {i}")) for i, a in enumerate(args)]
        devices = {}
        for i, found in arrays:
            if found is not None:
                devices.setdefault(found[1], []).append(i)
        if len(devices) > 1:
            listed = "; ".join(f"{d}: arguments {v}" for d, v in devices.items())
            raise ValueError(f"{self.name}: arrays on different devices ({listed})")
        device = next(iter(devices)) if devices else _default_device()
        lib, index = self.module._library(device, self.name)
        signature = lib.signature(index)
        if len(signature) != len(args):
            raise TypeError(
                f"{self.name}: the kernel takes {len(signature)} arguments, got {len(args)}"
            )
        buffers = []
        for (i, found), (kind, size) in zip(arrays, signature, strict=True):
            where = f"{self.name} argument {i}"
            if kind == POINTER:
                if found is None:
                    raise TypeError(
                        f"{where}: the kernel takes a pointer: pass a device array, got "
                        f"{type(args[i]).__name__}"
                    )
                buffers.append(ctypes.create_string_buffer(np.uint64(found[0]).tobytes(), 8))
            else:
                if found is not None:
                    raise TypeError(
                        f"{where}: the kernel takes {_KIND_NAMES[kind]} of {size} bytes, "
                        "got an array"
                    )
                data = _scalar_bytes(args[i], kind, size, where)
                buffers.append(ctypes.create_string_buffer(data, len(data)))
        self._check_limits(lib, index, device, grid3, block3, int(shared_mem))
        for _, found in arrays:  # a foreign producer's pending work comes first
            if found is not None and found[2] is not None:
                code = lib.dll.gpumat_rawkernel_stream_synchronize(ctypes.c_void_p(found[2]))
                if code:
                    raise CudaError(f"{self.name}: the producer's stream: {lib.error_string(code)}")
        pointers = (ctypes.c_void_p * max(len(buffers), 1))(*[ctypes.addressof(b) for b in buffers])
        g = (ctypes.c_uint * 3)(*grid3)
        b = (ctypes.c_uint * 3)(*block3)
        stream = ctypes.c_void_p(current_stream(device).ptr)
        code = lib.function("launch", index)(
            ctypes.c_int(device.index), g, b, ctypes.c_size_t(int(shared_mem)), stream, pointers
        )
        if code:
            raise CudaError(
                f"{self.name}: launch of grid {grid3}, block {block3}, {int(shared_mem)} bytes of "
                f"dynamic shared memory on {device} failed: {lib.error_string(code)}"
            )

    def _check_limits(self, lib, index, device, grid3, block3, shared_mem: int) -> None:
        (max_threads, bx, by, bz, gx, gy, gz, _smem, smem_optin, _major, _minor) = (
            lib.device_limits(device.index)
        )
        for what, dims, limits in (("block", block3, (bx, by, bz)), ("grid", grid3, (gx, gy, gz))):
            for axis, d, lim in zip("xyz", dims, limits, strict=True):
                if d > lim:
                    raise ValueError(
                        f"{self.name}: {what}.{axis} = {d} is over {device}'s limit of {lim}"
                    )
        threads = block3[0] * block3[1] * block3[2]
        kernel_max = max_threads
        # On a GPU the kernel's own limits (registers, static shared memory): one query a launch.
        attributes = self.attributes_on(device) if lib.target == "gpu" else None
        if attributes is not None:
            kernel_max = min(kernel_max, attributes["max_threads_per_block"])
        if threads > kernel_max:
            raise ValueError(
                f"{self.name}: a block of {threads} threads {block3} is over the limit of "
                f"{kernel_max} threads per block for this kernel on {device}"
            )
        limit = self.max_dynamic_shared_size_bytes
        if limit > smem_optin:
            raise ValueError(
                f"{self.name}: max_dynamic_shared_size_bytes = {limit} is over {device}'s "
                f"opt-in limit of {smem_optin} bytes per block"
            )
        slot = (lib.target, device.index)
        if self._max_dynamic_smem is not None and self._applied.get(slot) != limit:
            code = lib.function("set_max_dynamic_smem", index)(
                ctypes.c_int(device.index), ctypes.c_int(limit)
            )
            if code:
                raise CudaError(
                    f"{self.name}: cudaFuncSetAttribute(MaxDynamicSharedMemorySize, {limit}): "
                    f"{lib.error_string(code)}"
                )
            self._applied[slot] = limit
        if attributes is not None:  # static shared memory does not move with the attribute
            limit = min(limit, smem_optin - attributes["shared_size_bytes"])
        if shared_mem > limit:
            raise ValueError(
                f"{self.name}: shared_mem = {shared_mem} bytes is over the kernel's limit of "
                f"{limit} bytes of dynamic shared memory on {device} (raise "
                f"max_dynamic_shared_size_bytes, at most {smem_optin})"
            )
