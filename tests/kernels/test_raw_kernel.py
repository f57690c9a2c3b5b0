"""Users' own CUDA kernels (gpumat.cuda.RawKernel / RawModule): values against float64 numpy on
fresh random inputs with outputs poisoned by NaN, the emulator's reports for planted bugs, compile
errors with the user's line numbers, launches refused before they run, and the compile cache.

Runs on the emulated device always and on a GPU when present (``gpu_ctx``).
"""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest

import gpumat
from gpumat.cuda import CompileError, RawKernel, RawModule, _build

RNG = np.random.default_rng()

AXPY = r"""
extern "C" __global__ void axpy(float a, const float* x, float* y, int n) {
  // a grid-stride loop: every thread takes several elements when the grid is small
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = a * x[i] + y[i];
}
"""

# A shared-memory tree reduction per block, then one atomicAdd per block; BARRIER is the
# __syncthreads() of each halving step (the planted race removes it).
BLOCK_SUM = r"""
extern "C" __global__ void block_sum(const float* x, float* out, int n) {
  extern __shared__ float partial[];
  const int t = threadIdx.x;
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) v += x[i];
  partial[t] = v;
  __syncthreads();
  for (int h = blockDim.x / 2; h > 0; h /= 2) {
    if (t < h) partial[t] += partial[t + h];
    BARRIER
  }
  if (t == 0) atomicAdd(out, partial[0]);
}
"""

MODULE = r"""
#define TILE 16
// C = A @ B for row-major (m, k) @ (k, n): the naive product, one thread per output.
extern "C" __global__ void matmul_naive(const float* a, const float* b, float* c,
                                        int m, int n, int k) {
  int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= m || col >= n) return;
  float acc = 0.0f;
  for (int p = 0; p < k; ++p) acc += a[row * k + p] * b[p * n + col];
  c[row * n + col] = acc;
}
// The same product from TILE x TILE tiles of A and B staged in static shared memory.
extern "C" __global__ void matmul_tiled(const float* a, const float* b, float* c,
                                        int m, int n, int k) {
  __shared__ float ta[TILE][TILE], tb[TILE][TILE];
  int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
  float acc = 0.0f;
  for (int p0 = 0; p0 < k; p0 += TILE) {
    int pa = p0 + threadIdx.x, pb = p0 + threadIdx.y;
    ta[threadIdx.y][threadIdx.x] = row < m && pa < k ? a[row * k + pa] : 0.0f;
    tb[threadIdx.y][threadIdx.x] = pb < k && col < n ? b[pb * n + col] : 0.0f;
    __syncthreads();
    for (int p = 0; p < TILE; ++p) acc += ta[threadIdx.y][p] * tb[p][threadIdx.x];
    __syncthreads();
  }
  if (row < m && col < n) c[row * n + col] = acc;
}
template <typename T>
__global__ void scale(T* y, T factor, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) y[i] *= factor;
}
// Histograms with atomics: of class labels held as floats (gpumat's arrays), counted as unsigned
// ints in a float32 buffer's bits; and of int labels into int counts (CUDA arrays of any dtype).
extern "C" __global__ void histogram(const float* labels, unsigned* counts, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&counts[static_cast<int>(labels[i])], 1u);
}
extern "C" __global__ void histogram_int(const int* labels, int* counts, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&counts[labels[i]], 1);
}
"""


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test compiles into a cache folder of its own (and the process memo is emptied), so
    cache behaviour is the test's own."""
    monkeypatch.setenv("GPUMAT_KERNEL_CACHE_DIR", str(tmp_path / "kernels"))
    monkeypatch.setattr(_build, "_memo", {})
    return tmp_path / "kernels"


def poisoned(shape, device):
    return gpumat.array(np.full(shape, np.nan, np.float32), device=device)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------------------------- values


def test_grid_stride_axpy(gpu_ctx):
    n = 1000 + int(RNG.integers(0, 100))
    x, y = rand(n), rand(n)
    a = float(RNG.standard_normal())
    dx, dy = gpumat.array(x, device=gpu_ctx), gpumat.array(y, device=gpu_ctx)
    # 2 blocks of 64 threads: every thread loops over several elements
    RawKernel(AXPY, "axpy")((2,), (64,), (np.float32(a), dx, dy, np.int32(n)))
    want = np.float32(a).astype(np.float64) * x + y
    np.testing.assert_allclose(dy.asnumpy(), want, rtol=1e-6, atol=1e-6)


def test_dynamic_shared_memory_reduction_with_atomics(gpu_ctx):
    n = 5000 + int(RNG.integers(0, 500))
    x = rand(n)
    out = gpumat.array(np.zeros(1, np.float32), device=gpu_ctx)  # atomicAdd's starting value
    kernel = RawKernel(BLOCK_SUM.replace("BARRIER", "__syncthreads();"), "block_sum")
    kernel((7,), (128,), (gpumat.array(x, device=gpu_ctx), out, np.int32(n)), shared_mem=128 * 4)
    np.testing.assert_allclose(out.asnumpy()[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)


def test_several_kernels_in_one_module(gpu_ctx):
    module = RawModule(code=MODULE, name_expressions=("scale<float>",))
    m, k, n = 37, 29, 45
    a, b = rand(m, k), rand(k, n)
    da, db = gpumat.array(a, device=gpu_ctx), gpumat.array(b, device=gpu_ctx)
    want = a.astype(np.float64) @ b.astype(np.float64)
    grid = ((n + 15) // 16, (m + 15) // 16)
    for name in ("matmul_naive", "matmul_tiled"):
        c = poisoned((m, n), gpu_ctx)
        module.get_function(name)(grid, (16, 16), (da, db, c, m, n, k))
        np.testing.assert_allclose(c.asnumpy(), want, rtol=1e-4, atol=1e-4)
    # a template instance by its name expression; Python scalars converted to T and long long
    factor = float(RNG.uniform(0.5, 2.0))
    module.get_function("scale<float>")((1,), (n,), (c, factor, n))
    np.testing.assert_allclose(c.asnumpy()[0], want[0] * np.float32(factor), rtol=1e-4, atol=1e-4)


def test_atomics(gpu_ctx):
    labels = RNG.integers(0, 10, 3000)
    counts = gpumat.array(np.zeros(10, np.float32), device=gpu_ctx)  # all bits 0: 0u
    dlabels = gpumat.array(labels.astype(np.float32), device=gpu_ctx)
    RawModule(code=MODULE).get_function("histogram")((3,), (128,), (dlabels, counts, 3000))
    np.testing.assert_array_equal(
        counts.asnumpy().view(np.uint32), np.bincount(labels, minlength=10)
    )


@pytest.mark.cuda
def test_atomics_on_integer_cuda_arrays_from_torch():
    torch = pytest.importorskip("torch")
    if not (gpumat.cuda.is_available() and torch.cuda.is_available()):
        pytest.skip("needs a GPU and CUDA torch: integer arrays come from torch here")
    labels = torch.randint(0, 10, (3000,), device="cuda", dtype=torch.int32)
    counts = torch.zeros(10, device="cuda", dtype=torch.int32)
    RawModule(code=MODULE).get_function("histogram_int")((4,), (256,), (labels, counts, 3000))
    gpumat.cuda.synchronize()
    want = np.bincount(labels.cpu().numpy(), minlength=10)
    np.testing.assert_array_equal(counts.cpu().numpy(), want)


def test_cupy_code_runs_unchanged_apart_from_the_import(gpu_ctx):
    # CuPy's RawKernel example (docs: "User-Defined Kernels"), with gpumat arrays
    add_kernel = RawKernel(
        r"""
    extern "C" __global__
    void my_add(const float* x1, const float* x2, float* y) {
        int tid = blockDim.x * blockIdx.x + threadIdx.x;
        y[tid] = x1[tid] + x2[tid];
    }
    """,
        "my_add",
    )
    x1, x2 = rand(5, 5), rand(5, 5)
    y = poisoned((5, 5), gpu_ctx)
    add_kernel((5,), (5,), (gpumat.array(x1, device=gpu_ctx), gpumat.array(x2, device=gpu_ctx), y))
    np.testing.assert_allclose(y.asnumpy(), x1.astype(np.float64) + x2, rtol=1e-6)


@pytest.mark.cuda
def test_cupy_arrays_as_arguments():
    cp = pytest.importorskip("cupy")
    if not gpumat.cuda.is_available():
        pytest.skip("needs a GPU")
    x = cp.asarray(rand(300))
    y = cp.asarray(rand(300))
    want = 3.0 * cp.asnumpy(x).astype(np.float64) + cp.asnumpy(y)
    RawKernel(AXPY, "axpy")((2,), (64,), (np.float32(3.0), x, y, np.int32(300)))
    gpumat.cuda.synchronize()
    np.testing.assert_allclose(cp.asnumpy(y), want, rtol=1e-6)


def test_stream_is_gpumats_stream(gpu_ctx):
    stream = gpumat.cuda.current_stream(gpu_ctx)
    assert stream == gpumat.cuda.Stream(gpu_ctx) and stream.ptr != 0
    assert stream.__cuda_stream__() == (0, stream.ptr)
    x = rand(64)
    dx = gpumat.array(x, device=gpu_ctx)
    RawKernel(AXPY, "axpy")(1, 64, (np.float32(-1.0), dx, dx, np.int32(64)))
    stream.synchronize()  # the kernel ran before this returns, and before gpumat's next op
    np.testing.assert_array_equal((dx.asnumpy()), np.zeros(64, np.float32))
    with pytest.raises(ValueError, match="cpu device has no CUDA stream"):
        gpumat.cuda.Stream("cpu")


# ---------------------------------------------------------------------------------- checks


def emulated():
    return gpumat.emu(0)


def test_missing_barrier_is_reported_by_racecheck():
    kernel = RawKernel(BLOCK_SUM.replace("BARRIER", ""), "block_sum")
    out = gpumat.array(np.zeros(1, np.float32), device=emulated())
    x = gpumat.array(rand(512), device=emulated())
    kernel((2,), (128,), (x, out, np.int32(512)), shared_mem=128 * 4)
    with pytest.raises(
        gpumat.CudaError, match=r"kernel block_sum.*racecheck.*dynamic shared memory"
    ):
        out.asnumpy()


def test_write_past_the_end_is_reported_by_memcheck():
    kernel = RawKernel(
        r"""extern "C" __global__ void fill(float* y, int n) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          if (i <= n) y[i] = 1.0f;  // one past the end
        }""",
        "fill",
    )
    y = gpumat.array(rand(100), device=emulated())
    kernel(1, 128, (y, 100))
    with pytest.raises(
        gpumat.CudaError, match=r"kernel fill.*thread \(100, 0, 0\).*memcheck.*past the end"
    ):
        gpumat.synchronize(emulated())


def test_uninitialised_read_is_reported_by_initcheck():
    kernel = RawKernel(
        r"""extern "C" __global__ void copy(const float* x, float* y, int n) {
          int i = threadIdx.x;
          if (i < n) y[i] = x[i];
        }""",
        "copy",
    )
    x = gpumat.empty((64,), device=emulated())  # never written
    y = gpumat.array(rand(64), device=emulated())
    kernel(1, 64, (x, y, 64))
    with pytest.raises(gpumat.CudaError, match=r"kernel copy.*initcheck.*uninitialised"):
        y.asnumpy()


def test_device_stays_usable_after_a_fault():
    test_write_past_the_end_is_reported_by_memcheck()
    test_grid_stride_axpy(emulated())


# ---------------------------------------------------------------------------------- errors


def test_compile_error_names_the_users_line():
    source = (
        'extern "C" __global__ void bad(float* y) {\n  y[0] = 1.0f;\n  y[1] = not_declared;\n}\n'
    )
    with pytest.raises(CompileError, match=r"kernel\.cu[:(]3") as info:
        RawKernel(source, "bad").compile(emulated())
    assert "not_declared" in info.value.log and info.value.source == source


def test_compile_error_line_numbers_survive_the_shared_memory_rewrite():
    source = (
        "extern __shared__ float buffer[];\n"
        'extern "C" __global__ void bad(float* y) {\n'
        "  buffer[threadIdx.x] = 0.0f;\n"
        "  y[0] = oops;\n"
        "}\n"
    )
    with pytest.raises(CompileError, match=r"kernel\.cu:4:"):
        RawKernel(source, "bad").compile(emulated())


def test_unknown_kernel_name_is_a_compile_error_that_says_so():
    with pytest.raises(CompileError, match="names no __global__ function"):
        RawKernel(AXPY, "no_such_kernel").compile(emulated())


def test_missing_compiler_says_which_and_how(monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    monkeypatch.setattr(_build.shutil, "which", lambda name: None)
    with pytest.raises(CompileError, match="no host C\\+\\+ compiler.*apt install g\\+\\+"):
        RawKernel(AXPY, "axpy").compile(emulated())


@pytest.mark.parametrize(
    "grid, block, args, shared_mem, error, match",
    [
        ((1,), (2048,), None, 0, ValueError, r"block\.x = 2048 is over"),
        ((1,), (1024, 2), None, 0, ValueError, "block of 2048 threads"),
        ((1,), (1, 1, 65), None, 0, ValueError, r"block\.z = 65 is over"),
        ((1, 70000), (32,), None, 0, ValueError, r"grid\.y = 70000 is over"),
        ((0,), (32,), None, 0, ValueError, "dimensions must be >= 1"),
        ((1, 1, 1, 1), (32,), None, 0, TypeError, "tuple of 1 to 3 ints"),
        ((1.5,), (32,), None, 0, TypeError, "tuple of 1 to 3 ints"),
        ((1,), (32,), None, 64 * 1024, ValueError, "shared_mem = 65536 bytes is over"),
        ((1,), (32,), None, -1, ValueError, "shared_mem must be >= 0"),
        ((1,), (32,), "few", 0, TypeError, "takes 4 arguments, got 3"),
        ((1,), (32,), "float64", 0, TypeError, r"argument 0: .*got numpy\.float64"),
        ((1,), (32,), "int_for_pointer", 0, TypeError, "argument 1: the kernel takes a pointer"),
        ((1,), (32,), "array_for_int", 0, TypeError, "argument 3: .*got an array"),
        ((1,), (32,), "float_for_int", 0, TypeError, "argument 3: .*got a float"),
        ((1,), (32,), "too_big", 0, ValueError, "does not fit"),
        ((1,), (32,), "host", 0, TypeError, "argument 1: ndarray is host memory"),
        ((1,), (32,), "cpu", 0, TypeError, "cpu device is host memory"),
        ((1,), (32,), "not_tuple", 0, TypeError, "args must be a tuple"),
    ],
)
def test_bad_launches_raise_before_running(grid, block, args, shared_mem, error, match):
    kernel = RawKernel(AXPY, "axpy")
    device = emulated()
    x = gpumat.array(rand(32), device=device)
    y = gpumat.array(rand(32), device=device)
    before = y.asnumpy().copy()
    good = (np.float32(1.0), x, y, np.int32(32))
    cases = {
        None: good,
        "few": good[:3],
        "float64": (np.float64(1.0),) + good[1:],
        "int_for_pointer": (good[0], 7) + good[2:],
        "array_for_int": good[:3] + (x,),
        "float_for_int": good[:3] + (32.0,),
        "too_big": good[:3] + (2**40,),
        "host": (good[0], rand(32)) + good[2:],
        "cpu": (good[0], gpumat.array(rand(32))) + good[2:],
        "not_tuple": x,
    }
    with pytest.raises(error, match=match):
        kernel(grid, block, cases[args], shared_mem=shared_mem)
    np.testing.assert_array_equal(y.asnumpy(), before)  # nothing ran


def test_arrays_on_two_devices_are_refused():
    if gpumat.build_info()["emu_device_count"] < 2 and not gpumat.cuda.is_available():
        pytest.skip("needs two CUDA-kernel devices (GPUMAT_EMU_DEVICES=2, or a GPU)")
    other = gpumat.gpu(0) if gpumat.cuda.is_available() else gpumat.emu(1)
    x = gpumat.array(rand(8), device=emulated())
    y = gpumat.array(rand(8), device=other)
    with pytest.raises(ValueError, match="arrays on different devices"):
        RawKernel(AXPY, "axpy")(1, 8, (np.float32(1.0), x, y, np.int32(8)))


def test_more_dynamic_shared_memory_once_raised():
    kernel = RawKernel(BLOCK_SUM.replace("BARRIER", "__syncthreads();"), "block_sum")
    x = rand(256)
    out = gpumat.array(np.zeros(1, np.float32), device=emulated())
    args = (gpumat.array(x, device=emulated()), out, np.int32(256))
    with pytest.raises(ValueError, match="max_dynamic_shared_size_bytes"):
        kernel(1, 256, args, shared_mem=64 * 1024)
    kernel.max_dynamic_shared_size_bytes = 64 * 1024
    assert kernel.attributes_on(emulated())["max_dynamic_shared_size_bytes"] == 64 * 1024
    kernel(1, 256, args, shared_mem=64 * 1024)  # extra bytes beyond what the kernel uses
    np.testing.assert_allclose(out.asnumpy()[0], x.astype(np.float64).sum(), rtol=1e-4, atol=1e-4)
    kernel.max_dynamic_shared_size_bytes = 10**7
    with pytest.raises(ValueError, match="opt-in limit"):
        kernel(1, 256, args, shared_mem=0)
    with pytest.raises(ValueError, match="int >= 0"):
        kernel.max_dynamic_shared_size_bytes = -1


def test_bad_constructor_arguments():
    with pytest.raises(TypeError, match="code must be a str"):
        RawModule(code=b"bytes")
    with pytest.raises(TypeError, match="options must be a tuple of str"):
        RawKernel(AXPY, "axpy", options="-O3")
    with pytest.raises(TypeError, match="name must be a non-empty str"):
        RawKernel(AXPY, "")
    with pytest.raises(ValueError, match="not a kernel name"):
        RawKernel(AXPY, "axpy; int x").compile(emulated())
    with pytest.raises(ValueError, match="no meaning on the emulated device"):
        RawKernel(AXPY, "axpy", options=("--no-such-flag",)).compile(emulated())


def test_nvcc_options_are_dropped_on_the_emulated_device():
    kernel = RawKernel(AXPY, "axpy", options=("--use_fast_math", "-lineinfo", "-DUNUSED=1"))
    x = rand(16)
    dx = gpumat.array(x, device=emulated())
    kernel(1, 16, (np.float32(2.0), dx, dx, np.int32(16)))
    np.testing.assert_allclose(dx.asnumpy(), 3.0 * x.astype(np.float64), rtol=1e-6)


# ---------------------------------------------------------------------------------- cache


def test_cache_reused_and_tampered_entry_refused(private_cache, monkeypatch):
    compiled = []
    real = _build._compile
    monkeypatch.setattr(_build, "_compile", lambda *a: compiled.append(1) or real(*a))
    first = RawModule(code=AXPY)
    first.compile(emulated())
    assert first.from_cache is False and len(compiled) == 1
    assert stat.S_IMODE(os.stat(private_cache).st_mode) == 0o700

    monkeypatch.setattr(_build, "_memo", {})  # as a new process would: only the disk cache
    second = RawModule(code=AXPY)
    second.compile(emulated())
    assert second.from_cache is True and len(compiled) == 1  # the second compile was skipped

    (entry,) = private_cache.glob("*.so")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    monkeypatch.setattr(_build, "_memo", {})
    third = RawModule(code=AXPY)
    with pytest.warns(RuntimeWarning, match="does not match its recorded SHA-256"):
        third.compile(emulated())
    assert third.from_cache is False and len(compiled) == 2
    x = rand(8)
    dx = gpumat.array(x, device=emulated())
    third.get_function("axpy")(1, 8, (np.float32(1.0), dx, dx, np.int32(8)))
    np.testing.assert_allclose(dx.asnumpy(), 2.0 * x.astype(np.float64), rtol=1e-6)


def test_cache_folder_that_is_a_link_is_refused(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    monkeypatch.setenv("GPUMAT_KERNEL_CACHE_DIR", str(link))
    with pytest.raises(PermissionError, match="not a folder"):
        RawKernel(AXPY, "axpy").compile(emulated())


def test_cache_folder_open_to_others_is_closed(tmp_path, monkeypatch):
    folder = tmp_path / "open"
    folder.mkdir()
    os.chmod(folder, 0o777)
    monkeypatch.setenv("GPUMAT_KERNEL_CACHE_DIR", str(folder))
    RawKernel(AXPY, "axpy").compile(emulated())
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700


def test_extern_c_kernels_are_found():
    found = _build.extern_c_kernels(MODULE)
    assert found == ["matmul_naive", "matmul_tiled", "histogram", "histogram_int"]
    block = 'extern "C" {\n__global__ void a(float* x) {}\n/* __global__ void c() */\n}\n'
    assert _build.extern_c_kernels(block) == ["a"]


def test_tensors_as_arguments(gpu_ctx):
    x = gpumat.tensor(rand(300), device=gpu_ctx)
    y = gpumat.empty_like(x)
    assert y.dtype == gpumat.float32 and y.shape == x.shape and y.data_ptr() != x.data_ptr()
    copy = RawKernel(
        r"""extern "C" __global__ void twice(const float* x, float* y, long long n) {
          long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
          if (i < n) y[i] = 2.0f * x[i];
        }""",
        "twice",
    )
    copy((3,), (128,), (x, y, x.numel()))
    np.testing.assert_allclose(y.numpy(), 2.0 * x.numpy().astype(np.float64), rtol=1e-7)
    labels = gpumat.tensor(np.arange(4), device=gpu_ctx)  # int64: stored as float32 values
    with pytest.raises(TypeError, match="int64 tensor is stored as float32"):
        copy((1,), (4,), (labels, y, 4))
    with pytest.raises(TypeError, match="empty_like: only float32"):
        gpumat.empty_like(x, dtype=gpumat.int64)


needs_nvcc = pytest.mark.skipif(
    _build.shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc"),
    reason="ptxas' resource report needs nvcc",
)


@needs_nvcc
def test_attributes_on_the_emulated_device_come_from_ptxas():
    module = RawModule(code=MODULE)
    tiled = module.get_function("matmul_tiled").attributes_on(emulated())
    naive = module.get_function("matmul_naive").attributes_on(emulated())
    assert tiled["shared_size_bytes"] == 2 * 16 * 16 * 4  # its two static tiles
    assert naive["shared_size_bytes"] == 0
    assert 0 < naive["num_regs"] <= 255 and 0 < tiled["num_regs"] <= 255
    assert tiled["max_threads_per_block"] == 1024 and tiled["ptx_version"] is None


@needs_nvcc
def test_profile_shows_a_user_kernels_registers_and_occupancy():
    from gpumat.profile import profile

    module = RawModule(code=MODULE)
    a = gpumat.array(rand(32, 32), emulated())
    c = gpumat.empty((32, 32), emulated())
    with profile() as prof:
        module.get_function("matmul_tiled")((2, 2), (16, 16), (a, a, c, 32, 32, 32))
    (row,) = [k for k in prof.kernels("H100") if k["name"] == "matmul_tiled"]
    attributes = module.get_function("matmul_tiled").attributes_on(emulated())
    assert row["resources"]["registers"] == attributes["num_regs"]
    assert row["resources"]["static_smem_bytes"] == 2 * 16 * 16 * 4
    assert row["occupancy"] is not None
