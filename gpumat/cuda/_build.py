"""Builds users' CUDA sources into libraries gpumat can launch from: nvcc for a GPU, the host C++
compiler against gpumat's CUDA emulator for the emulated device; a private on-disk cache.

One translation unit per module: the user's source, then generated launchers (``extern "C"``
functions, one set per kernel name) that know each kernel's parameter types because they are
compiled beside it. Python reads a kernel's signature from them (so arguments are checked and
converted before a launch) and launches through them: ``cudaLaunchKernel`` on a GPU, the emulator's
``launch_kernel`` (memcheck, racecheck, initcheck, the profile's counters) on the emulated device,
with exactly the instrumentation flags libgpumat's own emulated kernels are built with (recorded in
``gpumat._build_config`` by setup.py from extensions/Makefile).

The cache (``$GPUMAT_KERNEL_CACHE_DIR``, default ``~/.cache/gpumat/kernels``) is a folder only its
owner may enter (0700, refused if another user owns it or may write it). An entry is a library and
the SHA-256 of its bytes; a library is loaded only from bytes read once, hashed, found equal to the
recorded hash and then handed to the dynamic loader from memory (a memfd), so a file swapped after
the check is never what runs. A mismatch refuses the entry (a RuntimeWarning) and compiles afresh.
Compilers run without a shell, from an argument list.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path

from gpumat import _build_config, _core
from gpumat.cuda import _ptxas
from gpumat.devices import __version__

__all__ = [
    "CompileError",
    "Library",
    "build",
    "cache_dir",
    "extern_c_kernels",
    "ptxas_resources",
    "user_kernel_resources",
]

# Compilers' own time limit (seconds): a template explosion must not hang a notebook forever.
COMPILE_TIMEOUT_S = 600
SOURCE_NAME = "kernel.cu"
LAUNCHERS_NAME = "<gpumat launchers>"
_MAX_PARAMS = 256

# Parameter kinds, as the launchers' gpumat_rawkernel::kind<T>() numbers them.
POINTER, FLOATING, SIGNED, UNSIGNED, BOOL, OTHER = 1, 2, 3, 4, 5, 6

# nvcc options the host compiler has no use for: accepted (so one options tuple serves a GPU and
# the emulated device) and dropped there. Each is a flag or a flag=value.
_NVCC_ONLY = (
    "--use_fast_math",
    "-use_fast_math",
    "-lineinfo",
    "--generate-line-info",
    "-G",
    "--device-debug",
    "--ftz",
    "--prec-div",
    "--prec-sqrt",
    "--fmad",
    "-ftz",
    "-prec-div",
    "-prec-sqrt",
    "-fmad",
    "-arch",
    "--gpu-architecture",
    "-gencode",
    "--extra-device-vectorization",
    "-restrict",
    "--restrict",
    "-rdc=false",
    "--relocatable-device-code=false",
)


class CompileError(RuntimeError):
    """A user's CUDA source did not compile, or no compiler was found.

    Attributes:
        log: the compiler's whole diagnostic output ('' when no compiler ran). Its locations
            name ``kernel.cu`` with the line numbers of the source as the user wrote it; a
            location in ``<gpumat launchers>`` is the code gpumat generated for a kernel name.
        source: the user's source.
        compiler: the compiler's path, or None when none was found.
    """

    def __init__(self, message: str, log: str = "", source: str = "", compiler: str | None = None):
        super().__init__(message)
        self.log, self.source, self.compiler = log, source, compiler


# Documented and caught as gpumat.cuda.CompileError, its public home (this module is private).
CompileError.__module__ = "gpumat.cuda"


# ---------------------------------------------------------------------------------- compilers


def _emu_include_dir() -> Path:
    """The emulator's headers: installed beside the package, or in a source checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_emu_include", here.parent / "extensions" / "src" / "emu"):
        if (candidate / "cuda_runtime.h").is_file() and (candidate / "emulator.h").is_file():
            return candidate
    raise CompileError(
        "the emulated device's headers (cuda_runtime.h, emulator.h) are missing from this "
        f"gpumat installation ({here}); reinstall gpumat with `pip install .`"
    )


def _host_compiler() -> str:
    cxx = os.environ.get("CXX", "").strip()
    for candidate in ([cxx] if cxx else []) + ["g++", "c++"]:
        found = shutil.which(candidate)
        if found:
            return found
    raise CompileError(
        "no host C++ compiler found for the emulated device (looked for $CXX, g++, c++): install "
        "g++ (Debian/Ubuntu: apt install g++; conda: conda install gxx) or set CXX to a GCC that "
        "supports -fsanitize=thread"
    )


def _nvcc() -> str:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    for candidate in (shutil.which("nvcc"), str(Path(home, "bin", "nvcc"))):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise CompileError(
        "nvcc, the CUDA compiler, was not found (looked on PATH and in $CUDA_HOME/bin): install "
        "the CUDA toolkit (e.g. pip install nvidia-cuda-nvcc-cu12, or your distribution's "
        "cuda-toolkit) and put nvcc on PATH or set CUDA_HOME"
    )


_identity_lock = threading.Lock()
_identities: dict[str, str] = {}


def _compiler_identity(path: str) -> str:
    """The compiler's ``--version`` text: part of the cache key, so a new compiler rebuilds."""
    with _identity_lock:
        if path not in _identities:
            try:
                out = subprocess.run(
                    [path, "--version"], capture_output=True, text=True, timeout=60, check=False
                )
                _identities[path] = path + "\n" + out.stdout
            except (OSError, subprocess.SubprocessError) as e:
                raise CompileError(f"could not run the compiler {path}: {e}", compiler=path) from e
        return _identities[path]


def _core_library() -> Path:
    return Path(_core.__file__).resolve()


# ---------------------------------------------------------------------------------- sources

# `extern __shared__ T name[];` (dynamic shared memory). The emulator's shared memory is
# per-block thread_local storage, so the emulated build reads the launch's dynamic shared memory
# through emulator::dynamic_smem() instead; #line keeps the user's line numbers.
_DYNAMIC_SHARED = re.compile(
    r"extern\s+__shared__\s+([^;\[\]{}()]*?(?:\([^;()]*\)[^;\[\]{}()]*?)*)\[\s*\]\s*;"
)
_ALIGN = re.compile(r"__align__\s*\(\s*\d+\s*\)")
_EXTERN_C_KERNEL = re.compile(
    r'extern\s+"C"\s*(?:\{[^}]*?)?(?:__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void'
    r"|void\s+__global__)\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\("
)
_EXTERN_C_BLOCK = re.compile(r'extern\s+"C"\s*\{')
_GLOBAL_KERNEL = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
    r"(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)\s*\("
)


def _strip_comments(code: str) -> str:
    code = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group()), code, flags=re.S)
    return re.sub(r"//[^\n]*", "", code)


def extern_c_kernels(code: str) -> list[str]:
    """The names of the ``extern "C"`` ``__global__`` functions of ``code``, in order: those
    ``RawModule.get_function`` finds without ``name_expressions`` (as CuPy's)."""
    text = _strip_comments(code)
    names = [m.group(1) for m in _EXTERN_C_KERNEL.finditer(text)]
    for block in _EXTERN_C_BLOCK.finditer(text):
        depth, i = 1, block.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        names += [m.group(1) for m in _GLOBAL_KERNEL.finditer(text, block.end(), i)]
    return list(dict.fromkeys(names))


def _in_function_body(code: str, pos: int) -> bool:
    """Whether ``pos`` is inside a function body: its innermost open brace follows a ``)`` (a
    function's or a statement's parameter list) or opens a nested block; a namespace's, an
    ``extern "C"`` block's or a class's brace follows a name or a string."""
    text = _strip_comments(code[:pos])
    opens = []
    for i, ch in enumerate(text):
        if ch == "{":
            opens.append(i)
        elif ch == "}" and opens:
            opens.pop()
    if not opens:
        return False
    before = text[: opens[-1]].rstrip()
    return before.endswith((")", "{", ";", "}", "else", "do"))


def _emulated_source(code: str) -> tuple[str, list[str]]:
    """The user's source as the emulated build compiles it, and the names of the file-scope
    dynamic shared arrays (macros, to be undefined before the launchers).

    ``extern __shared__ T name[];`` becomes a pointer to the launch's dynamic shared memory
    (``emulator::dynamic_smem()``): a local ``T* const name`` inside a function, a macro at file
    scope (where every kernel sees the same memory). #line keeps the user's line numbers."""
    macros = []

    def replace(m: re.Match) -> str:
        line = code.count("\n", 0, m.end()) + 1
        decl = _ALIGN.sub(" ", m.group(1)).replace("*", " * ").split()
        if len(decl) < 2 or not re.fullmatch(r"[A-Za-z_]\w*", decl[-1]):
            return m.group()  # not a declaration this rewrite understands: the compiler will say
        ctype, name = " ".join(decl[:-1]).replace(" *", "*"), decl[-1]
        pointer = f"reinterpret_cast<{ctype}*>(::gpumat::emulator::dynamic_smem())"
        if _in_function_body(code, m.start()):
            return f"{ctype}* const {name} = {pointer};"
        macros.append(name)
        return f'\n#undef {name}\n#define {name} ({pointer})\n#line {line} "{SOURCE_NAME}"\n'

    return _DYNAMIC_SHARED.sub(replace, code), macros


_LAUNCHER_COMMON = r"""
#include <cstddef>
#include <type_traits>
#include <utility>
namespace gpumat_rawkernel {
template <typename T>
constexpr int kind() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_pointer_v<U>) return 1;
  else if constexpr (std::is_same_v<U, bool>) return 5;
  else if constexpr (std::is_floating_point_v<U>) return 2;
  else if constexpr (std::is_integral_v<U> && std::is_signed_v<U>) return 3;
  else if constexpr (std::is_integral_v<U>) return 4;
  else return 6;
}
template <typename... P>
int signature(void (*)(P...), int* kinds, long long* sizes, int max) {
  constexpr int n = static_cast<int>(sizeof...(P));
  if constexpr (n > 0) {
    const int k[] = {kind<P>()...};
    const long long s[] = {static_cast<long long>(sizeof(std::decay_t<P>))...};
    for (int i = 0; i < n && i < max; ++i) kinds[i] = k[i], sizes[i] = s[i];
  }
  return n;
}
#ifdef GPUMAT_EMULATED
template <typename... P, size_t... I>
int launch_params(void (*f)(P...), const char* name, dim3 g, dim3 b, size_t smem, void* stream,
                  void** args, std::index_sequence<I...>) {
  return static_cast<int>(::gpumat::emulator::launch_kernel(
      f, name, g, b, smem, static_cast<cudaStream_t>(stream),
      *static_cast<std::decay_t<P>*>(args[I])...));
}
#endif
template <typename... P>
int launch(void (*f)(P...), const char* name, int device, const unsigned* g, const unsigned* b,
           size_t smem, void* stream, void** args) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return static_cast<int>(e);
#ifdef GPUMAT_EMULATED
  return launch_params(f, name, dim3(g[0], g[1], g[2]), dim3(b[0], b[1], b[2]), smem, stream, args,
                       std::index_sequence_for<P...>{});
#else
  (void)name;
  return static_cast<int>(cudaLaunchKernel(reinterpret_cast<const void*>(f), dim3(g[0], g[1], g[2]),
                                           dim3(b[0], b[1], b[2]), args, smem,
                                           static_cast<cudaStream_t>(stream)));
#endif
}
template <typename F>
int attributes(F* f, int device, long long* out) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return static_cast<int>(e);
#ifdef GPUMAT_EMULATED
  (void)f;
  (void)out;
  return -1;  // the emulator has no register allocation; Python says so
#else
  cudaFuncAttributes a;
  e = cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(f));
  if (e != cudaSuccess) return static_cast<int>(e);
  const long long v[] = {a.maxThreadsPerBlock, static_cast<long long>(a.sharedSizeBytes),
                         static_cast<long long>(a.constSizeBytes),
                         static_cast<long long>(a.localSizeBytes),
                         a.numRegs, a.ptxVersion, a.binaryVersion, a.maxDynamicSharedSizeBytes};
  for (int i = 0; i < 8; ++i) out[i] = v[i];
  return 0;
#endif
}
template <typename F>
int set_max_dynamic_smem(F* f, int device, int bytes) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return static_cast<int>(e);
  e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  return static_cast<int>(e);
}
}  // namespace gpumat_rawkernel

extern "C" const char* gpumat_rawkernel_error_string(int e) {
  return cudaGetErrorString(static_cast<cudaError_t>(e));
}

// maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], sharedMemPerBlock, sharedMemPerBlockOptin,
// major, minor
extern "C" int gpumat_rawkernel_device_limits(int device, long long* out) {
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) return static_cast<int>(e);
  const long long v[] = {p.maxThreadsPerBlock,
                         p.maxThreadsDim[0], p.maxThreadsDim[1], p.maxThreadsDim[2],
                         p.maxGridSize[0],     p.maxGridSize[1],   p.maxGridSize[2],
                         static_cast<long long>(p.sharedMemPerBlock),
                         static_cast<long long>(p.sharedMemPerBlockOptin), p.major, p.minor};
  for (int i = 0; i < 11; ++i) out[i] = v[i];
  return 0;
}

extern "C" int gpumat_rawkernel_stream_synchronize(void* stream) {
  return static_cast<int>(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}
"""

_LAUNCHER_PER_KERNEL = r"""
extern "C" int gpumat_rawkernel_signature_{i}(int* kinds, long long* sizes, int max) {{
  return gpumat_rawkernel::signature(&{expr}, kinds, sizes, max);
}}
extern "C" int gpumat_rawkernel_launch_{i}(int device, const unsigned* g, const unsigned* b,
                                           size_t smem, void* stream, void** args) {{
  return gpumat_rawkernel::launch(&{expr}, {label}, device, g, b, smem, stream, args);
}}
extern "C" int gpumat_rawkernel_attributes_{i}(int device, long long* out) {{
  return gpumat_rawkernel::attributes(&{expr}, device, out);
}}
extern "C" int gpumat_rawkernel_set_max_dynamic_smem_{i}(int device, int bytes) {{
  return gpumat_rawkernel::set_max_dynamic_smem(&{expr}, device, bytes);
}}
"""

_NAME_EXPRESSION = re.compile(r"^[A-Za-z_:][\w:<>,\s\*&().+-]*$")


def _translation_unit(code: str, names: list[str], emulated: bool) -> str:
    for name in names:
        if not _NAME_EXPRESSION.match(name) or "//" in name or "/*" in name:
            raise ValueError(f"not a kernel name or C++ name expression: {name!r}")
    user, macros = _emulated_source(code) if emulated else (code, [])
    undefs = "".join(f"#undef {name}\n" for name in macros)
    parts = [f'#line 1 "{SOURCE_NAME}"\n', user, "\n", undefs]
    parts += [f'#line 1 "{LAUNCHERS_NAME}"\n', _LAUNCHER_COMMON]
    for i, name in enumerate(names):
        label = json.dumps(name)  # a C string literal for the emulator's fault reports
        parts.append(_LAUNCHER_PER_KERNEL.format(i=i, expr=name, label=label))
    return "".join(parts)


# ---------------------------------------------------------------------------------- commands


def _split_options(options: tuple[str, ...], emulated: bool) -> list[str]:
    """The options for the compiler that builds for this target."""
    if not emulated:
        return list(options)
    kept = []
    for opt in options:
        flag = opt.split("=", 1)[0]
        if opt.startswith(("-D", "-U", "-I", "-std=", "-O")) or opt in ("-w", "-Werror"):
            kept.append(opt)
        elif flag in _NVCC_ONLY or opt in _NVCC_ONLY:
            continue
        else:
            raise ValueError(
                f"option {opt!r} has no meaning on the emulated device: it takes -D, -U, -I, "
                "-std=, -O, -w, -Werror and drops nvcc's own ("
                + ", ".join(_NVCC_ONLY[:6])
                + ", ...)"
            )
    return kept


def _emulated_commands(cxx: str, options: list[str], workdir: Path) -> list[list[str]]:
    # Its -I names the source tree's folder; the installed headers' folder is named below.
    flags = [f for f in _build_config.EMU_KERNEL_FLAGS if not f.startswith("-I")]
    compile_ = [
        cxx,
        "-x",
        "c++",
        "-std=c++17",
        "-O2",
        "-fPIC",
        "-I",
        str(_emu_include_dir()),
        "-include",
        "cuda_runtime.h",
        *flags,
        *options,
        "-c",
        SOURCE_NAME,
        "-o",
        "kernel.o",
    ]
    # No -fsanitize when linking: the instrumentation's hooks are the emulator's, in gpumat._core,
    # which the library names by its path (the loader finds it already loaded).
    link = [cxx, "-shared", "-o", "kernel.so", "kernel.o", str(_core_library())]
    return [compile_, link]


def _gpu_commands(nvcc: str, options: list[str], arch: str) -> list[list[str]]:
    has_arch = any(o.split("=")[0] in ("-arch", "--gpu-architecture", "-gencode") for o in options)
    target = [] if has_arch else ["-gencode", f"arch=compute_{arch},code=sm_{arch}"]
    return [
        [
            nvcc,
            "-std=c++17",
            "-O3",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-cudart",
            "static",
            *target,
            *options,
            SOURCE_NAME,
            "-o",
            "kernel.so",
        ]
    ]


# ---------------------------------------------------------------------------------- cache


def cache_dir() -> Path:
    """The kernel cache folder, created 0700 if missing.

    Raises:
        PermissionError: it exists but is not a folder owned by this user and closed to others
            (a folder someone else could write is never read).
    """
    root = os.environ.get("GPUMAT_KERNEL_CACHE_DIR")
    path = Path(root) if root else Path.home() / ".cache" / "gpumat" / "kernels"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"kernel cache {path} is not a folder (a link?): refusing to use it")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise PermissionError(
            f"kernel cache {path} belongs to another user: refusing to use it (set "
            "GPUMAT_KERNEL_CACHE_DIR to a folder of your own)"
        )
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def _read_private(path: Path) -> bytes | None:
    """The bytes of a regular file of this user's (no link followed), or None if absent."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (hasattr(os, "geteuid") and st.st_uid != os.geteuid()):
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ---------------------------------------------------------------------------------- loading

# Libraries stay loaded for the life of the process (ctypes never unloads), and so do the memfds
# they were loaded from: a closed descriptor's number, reused, would make the loader hand back
# the first library for the second's /proc/self/fd path.
_loaded_fds: list[int] = []


def _load(data: bytes) -> ctypes.CDLL:
    """Loads a library from verified bytes, never from a path another process could change."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("gpumat-kernel", 0)
        os.write(fd, data)
        _loaded_fds.append(fd)
        return ctypes.CDLL(f"/proc/self/fd/{fd}", mode=os.RTLD_LOCAL | os.RTLD_NOW)
    folder = tempfile.mkdtemp(prefix="gpumat-kernel-")  # 0700, ours
    path = Path(folder, "kernel.so")
    path.write_bytes(data)
    return ctypes.CDLL(str(path), mode=os.RTLD_LOCAL | os.RTLD_NOW)


class Library:
    """A loaded module: its launchers, by kernel index (the order of the names it was built for).

    Attributes:
        names: the kernel names (or name expressions) it has launchers for.
        from_cache: True when the library came from the cache (no compiler ran).
        target: "gpu" or "emu".
    """

    def __init__(self, dll: ctypes.CDLL, names: list[str], from_cache: bool, target: str):
        self.dll, self.names, self.from_cache, self.target = dll, names, from_cache, target
        self._lock = threading.Lock()
        self._signatures: dict[int, tuple[tuple[int, int], ...]] = {}
        self._limits: dict[int, tuple[int, ...]] = {}

    def function(self, kind: str, index: int):
        return getattr(self.dll, f"gpumat_rawkernel_{kind}_{index}")

    def error_string(self, code: int) -> str:
        f = self.dll.gpumat_rawkernel_error_string
        f.restype = ctypes.c_char_p
        return (f(ctypes.c_int(code)) or b"").decode(errors="replace")

    def signature(self, index: int) -> tuple[tuple[int, int], ...]:
        """((kind, size in bytes), ...) of kernel ``index``'s parameters."""
        with self._lock:
            if index not in self._signatures:
                kinds = (ctypes.c_int * _MAX_PARAMS)()
                sizes = (ctypes.c_longlong * _MAX_PARAMS)()
                n = self.function("signature", index)(kinds, sizes, _MAX_PARAMS)
                if n > _MAX_PARAMS:
                    raise ValueError(f"kernel has {n} parameters; at most {_MAX_PARAMS}")
                self._signatures[index] = tuple((kinds[i], sizes[i]) for i in range(n))
            return self._signatures[index]

    def device_limits(self, device: int) -> tuple[int, ...]:
        """The device's launch limits (see gpumat_rawkernel_device_limits)."""
        with self._lock:
            if device not in self._limits:
                out = (ctypes.c_longlong * 11)()
                code = self.dll.gpumat_rawkernel_device_limits(ctypes.c_int(device), out)
                if code:
                    raise _core.CudaError(
                        f"cudaGetDeviceProperties({device}): {self.error_string(code)}"
                    )
                self._limits[device] = tuple(out)
            return self._limits[device]


_memo_lock = threading.Lock()
_memo: dict[str, Library] = {}


def _gpu_arch(device: int) -> str:
    """The compute capability of CUDA device ``device`` as nvcc spells it ("90"), from the
    driver."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise _core.CudaError(f"the CUDA driver (libcuda.so.1) could not be loaded: {e}") from e
    major, minor = ctypes.c_int(), ctypes.c_int()
    dev = ctypes.c_int()
    if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), device):
        raise _core.CudaError(f"the CUDA driver has no device {device}")
    if cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev) or cuda.cuDeviceGetAttribute(
        ctypes.byref(minor), 76, dev
    ):
        raise _core.CudaError(f"the CUDA driver gave no compute capability for device {device}")
    return f"{major.value}{minor.value}"


def build(
    code: str, names: list[str], options: tuple[str, ...], target: str, device: int
) -> Library:
    """The library of ``code`` with launchers for ``names``, for ``target`` ("gpu" or "emu"),
    from this process's memo, the cache, or the compiler.

    Raises:
        CompileError: the source does not compile (diagnostics in ``.log``), or the compiler
            is missing.
        ValueError: an option the target cannot take; a name that is no C++ name expression.
        PermissionError: the cache folder is not private to this user.
    """
    emulated = target == "emu"
    opts = _split_options(options, emulated)
    tu = _translation_unit(code, names, emulated)
    if emulated:
        compiler = _host_compiler()
        extra = [
            _build_config.EMU_KERNEL_FLAGS,
            hashlib.sha256(
                (_emu_include_dir() / "cuda_runtime.h").read_bytes()
                + (_emu_include_dir() / "emulator.h").read_bytes()
            ).hexdigest(),
            str(_core_library()),
            os.stat(_core_library()).st_mtime_ns,
        ]
    else:
        compiler = _nvcc()
        extra = [_gpu_arch(device)]
    key_data = [target, tu, opts, _compiler_identity(compiler), __version__, sys.platform, extra]
    key = hashlib.sha256(json.dumps(key_data, default=str).encode()).hexdigest()[:40]
    with _memo_lock:
        if key in _memo:
            return _memo[key]
        folder = cache_dir()
        so_path, hash_path = folder / f"{key}.so", folder / f"{key}.sha256"
        data, recorded = _read_private(so_path), _read_private(hash_path)
        if data is not None:
            if recorded is not None and hashlib.sha256(data).hexdigest() == recorded.decode(
                errors="replace"
            ):
                lib = Library(_load(data), names, True, target)
                if emulated:
                    remember_user_kernels(code, names, options)
                _memo[key] = lib
                return lib
            warnings.warn(
                f"gpumat.cuda: the cached kernel library {so_path} does not match its recorded "
                "SHA-256 (changed or damaged): refused, compiling again",
                RuntimeWarning,
                stacklevel=4,
            )
        data = _compile(code, tu, compiler, opts, emulated, extra)
        if emulated:
            remember_user_kernels(code, names, options)
        _write_atomic(so_path, data)
        _write_atomic(hash_path, hashlib.sha256(data).hexdigest().encode())
        lib = Library(_load(data), names, False, target)
        _memo[key] = lib
        return lib


def _compile(code: str, tu: str, compiler: str, opts: list[str], emulated: bool, extra) -> bytes:
    with tempfile.TemporaryDirectory(prefix="gpumat-build-") as tmp:
        work = Path(tmp)
        (work / SOURCE_NAME).write_text(tu)
        if emulated:
            commands = _emulated_commands(compiler, opts, work)
        else:
            commands = _gpu_commands(compiler, opts, extra[0])
        for command in commands:
            try:
                run = subprocess.run(
                    command,
                    cwd=work,
                    capture_output=True,
                    text=True,
                    timeout=COMPILE_TIMEOUT_S,
                    check=False,
                )
            except subprocess.TimeoutExpired as e:
                raise CompileError(
                    f"{Path(compiler).name} took over {COMPILE_TIMEOUT_S} s: stopped",
                    source=code,
                    compiler=compiler,
                ) from e
            except OSError as e:
                raise CompileError(
                    f"could not run {compiler}: {e}", source=code, compiler=compiler
                ) from e
            if run.returncode != 0:
                log = (run.stderr + run.stdout).replace(str(work) + os.sep, "")
                raise CompileError(_summary(log, compiler), log=log, source=code, compiler=compiler)
        return (work / "kernel.so").read_bytes()


def _summary(log: str, compiler: str) -> str:
    """The first errors of a compiler log, for the exception's message."""
    lines = [ln for ln in log.splitlines() if "error" in ln.lower()] or log.splitlines()
    head = "\n".join(lines[:8])
    more = "" if len(lines) <= 8 else f"\n... ({len(lines) - 8} more lines in .log)"
    hint = ""
    if LAUNCHERS_NAME in head:
        hint = (
            "\n(an error in <gpumat launchers>: a kernel name that names no __global__ function, "
            'or more than one; give an extern "C" name or a C++ name expression such as '
            "'my_kernel<float>')"
        )
    return f"{Path(compiler).name} could not compile the kernel source:\n{head}{more}{hint}"


# ---------------------------------------------------------------------------------- resources

_resources_lock = threading.Lock()
_resources: dict[tuple, dict] = {}
# The emulated launches' kernel names -> (source, names, options) of the module that built them,
# so the profile can ask ptxas about a user's kernel it saw run (user_kernel_resources).
_user_kernels: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {}


def ptxas_resources(code: str, names: list[str], options: tuple[str, ...], arch: str) -> dict:
    """{name: resources} of the kernels ``names`` of ``code`` compiled for ``arch`` ("sm_90"), as
    ptxas reports them: ``registers`` (per thread), ``static_smem_bytes``, ``stack_bytes``,
    ``spill_bytes``. Empty when nvcc is missing or the source does not compile for a GPU. One
    nvcc run per (source, options, arch), remembered for the process.
    """
    key = (code, tuple(names), tuple(options), arch)
    with _resources_lock:
        if key in _resources:
            return _resources[key]
    result: dict = {}
    try:
        nvcc = _nvcc()
    except CompileError:
        nvcc = None
    if nvcc is not None:
        opts = [o for o in options if o.split("=")[0] not in ("-arch", "--gpu-architecture")]
        with tempfile.TemporaryDirectory(prefix="gpumat-ptxas-") as tmp:
            (Path(tmp) / SOURCE_NAME).write_text(_translation_unit(code, names, False))
            command = [nvcc, "-std=c++17", "-O3", f"-arch={arch}", "-cubin", "-Xptxas", "-v"]
            command += [*opts, "-o", "kernel.cubin", SOURCE_NAME]
            try:
                run = subprocess.run(
                    command, cwd=tmp, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S
                )
            except (OSError, subprocess.SubprocessError):
                run = None
        if run is not None and run.returncode == 0:
            report = run.stderr + run.stdout
            table = _ptxas.demangle(m[0] for m in _ptxas.ENTRY.findall(report))
            found = _ptxas.parse(report, lambda m: table.get(m, m)).get(arch, {})
            for name in names:
                entry = found.get(_ptxas.normalise(name))
                if entry is not None:
                    result[name] = entry
    with _resources_lock:
        _resources[key] = result
    return result


def remember_user_kernels(code: str, names: list[str], options: tuple[str, ...]) -> None:
    """Notes which source built the emulated kernels ``names`` (for user_kernel_resources)."""
    with _resources_lock:
        for name in names:
            _user_kernels[name] = (code, tuple(names), tuple(options))


def user_kernel_resources(kernel: str, arch: str) -> dict | None:
    """ptxas' resources for ``arch`` of a user's kernel that ran on the emulated device under this
    name (its ``extern "C"`` name or name expression), or None: not a user's kernel, or no nvcc.
    """
    with _resources_lock:
        built = _user_kernels.get(kernel)
    if built is None:
        return None
    code, names, options = built
    return ptxas_resources(code, list(names), options, arch).get(kernel)
