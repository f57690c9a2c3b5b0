"""gpumat core: contexts, arrays (creation, conversion, copies), the caching allocator, errors and
build information. Kernels are in test_ops.py."""

import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import GPU_SKIP_REASON, HAS_GPU
from helpers import nan_array, rand

import gpumat
from gpumat import ndarray

MiB = 1 << 20


def _gpu_hardware_present():
    """Independent of gpumat: does this machine expose an NVIDIA GPU at all?"""
    return any(os.path.exists(p) for p in ("/dev/nvidia0", "/proc/driver/nvidia/gpus"))


# --------------------------------------------------------------------------------------------------
# Build information and availability
# --------------------------------------------------------------------------------------------------


def test_build_info_keys_and_types():
    info = gpumat.build_info()
    assert isinstance(info, dict)
    for key in ("cuda", "cuda_arch", "blas", "openmp", "version"):
        assert key in info, f"build_info() lacks {key!r}: {sorted(info)}"
    assert isinstance(info["cuda"], bool)
    assert isinstance(info["cuda_arch"], list)
    assert all(isinstance(a, str) for a in info["cuda_arch"])
    if info["cuda"]:
        assert info["cuda_arch"], "built with CUDA but no architectures listed"
    assert isinstance(info["version"], str) and info["version"]
    if hasattr(gpumat, "__version__"):
        assert info["version"] == gpumat.__version__


def test_build_info_returns_a_fresh_dict():
    info = gpumat.build_info()
    info["cuda"] = "tampered"
    assert gpumat.build_info()["cuda"] != "tampered"


def test_cuda_available_is_bool():
    avail = gpumat.cuda_available()
    assert isinstance(avail, bool)
    if not gpumat.build_info()["cuda"]:
        assert avail is False


@pytest.mark.skipif(_gpu_hardware_present(), reason="this machine has an NVIDIA GPU")
def test_cuda_not_available_without_gpu_hardware():
    assert gpumat.cuda_available() is False


def test_cuda_error_is_runtime_error():
    assert issubclass(gpumat.CudaError, RuntimeError)


# --------------------------------------------------------------------------------------------------
# Contexts
# --------------------------------------------------------------------------------------------------


def test_context_attributes():
    c = gpumat.cpu()
    assert c.device_type == "cpu" and c.index == 0
    g = gpumat.gpu(1)  # constructing a context never touches the device
    assert g.device_type == "gpu" and g.index == 1
    assert gpumat.gpu().index == 0


def test_context_equality_and_hash():
    assert gpumat.cpu() == gpumat.cpu()
    assert gpumat.gpu(0) == gpumat.gpu(0)
    assert gpumat.cpu() != gpumat.gpu(0)
    assert gpumat.gpu(0) != gpumat.gpu(1)
    assert hash(gpumat.gpu(0)) == hash(gpumat.gpu(0))
    d = {gpumat.cpu(): "c", gpumat.gpu(0): "g"}
    assert d[gpumat.cpu()] == "c" and d[gpumat.gpu(0)] == "g"
    assert len({gpumat.cpu(), gpumat.cpu(), gpumat.gpu(0)}) == 2
    assert gpumat.cpu() != "cpu" and gpumat.cpu() is not None


def test_context_repr_names_device():
    r = repr(gpumat.gpu(0))
    assert "gpu" in r.lower() or "cuda" in r.lower()
    assert "cpu" in repr(gpumat.cpu()).lower() or "host" in repr(gpumat.cpu()).lower()


def test_ndarray_seed_names():
    assert ndarray.cpu is gpumat.cpu or ndarray.cpu() == gpumat.cpu()
    assert ndarray.gpu(0) == gpumat.gpu(0)
    assert ndarray.NDArray is gpumat._core.PyGpuMatrix
    a = ndarray.array(np.ones((2, 3)), ctx=ndarray.cpu())
    assert isinstance(a, ndarray.NDArray) and a.shape == (2, 3)
    e = ndarray.empty((4, 5), ndarray.cpu())
    assert isinstance(e, ndarray.NDArray) and e.shape == (4, 5)
    assert ndarray.is_gpu_ctx(ndarray.gpu(0))
    assert not ndarray.is_gpu_ctx(ndarray.cpu())
    assert not ndarray.is_gpu_ctx(None)


def test_gpu_op_is_an_alias_of_ops():
    import gpumat.gpu_op
    import gpumat.ops

    for name in ("matmul", "cross_entropy", "broadcast_to", "fill", "relu"):
        assert getattr(gpumat.gpu_op, name) is getattr(gpumat.ops, name)


# --------------------------------------------------------------------------------------------------
# No GPU: clear errors, never a crash
# --------------------------------------------------------------------------------------------------


@pytest.mark.skipif(HAS_GPU, reason="a CUDA device is available")
def test_gpu_array_without_gpu_raises_cuda_error():
    ctx = gpumat.gpu(0)
    with pytest.raises(gpumat.CudaError) as info:
        gpumat.array(np.ones((2, 2)), ctx)
    msg = str(info.value).lower()
    assert "cuda" in msg or "gpu" in msg, f"unclear message: {info.value}"
    with pytest.raises(gpumat.CudaError):
        gpumat.empty((2, 2), ctx)
    with pytest.raises(gpumat.CudaError):
        gpumat.empty((0,), ctx)  # even a zero-size array needs its device to exist
    with pytest.raises(gpumat.CudaError):
        gpumat.memory_stats(ctx)
    # the host keeps working afterwards
    assert gpumat.array([1.0, 2.0]).asnumpy().tolist() == [1.0, 2.0]


def test_nonexistent_gpu_index_raises_cuda_error():
    with pytest.raises(gpumat.CudaError):
        gpumat.empty((3,), gpumat.gpu(10_000))


def test_negative_gpu_index_is_rejected():
    with pytest.raises((ValueError, gpumat.CudaError)):
        gpumat.empty((3,), gpumat.gpu(-1))


def test_cuda_error_can_be_caught_as_runtime_error():
    with pytest.raises(RuntimeError):
        gpumat.empty((3,), gpumat.gpu(10_000))


def test_interpreter_exit_with_live_arrays_is_clean(tmp_path):
    """Arrays alive at exit are freed during interpreter shutdown; the allocator must outlive them
    and a failed GPU call must leave no sticky state that crashes at exit."""
    code = textwrap.dedent(
        """
        import numpy as np, gpumat, gpumat.ops as ops
        keep = [gpumat.array(np.ones((100, 100))) for _ in range(5)]
        out = gpumat.empty((100, 100), gpumat.cpu())
        ops.matmul(keep[0], keep[1], out, False, True)
        try:
            gpumat.array(np.ones(3), gpumat.gpu(10_000))
        except gpumat.CudaError:
            pass
        try:
            gpumat.array(np.ones(3), gpumat.gpu(0))
        except gpumat.CudaError:
            pass
        gpumat.empty_cache(gpumat.cpu())
        print("ok", float(out.asnumpy()[0, 0]))
        """
    )
    # cwd outside the checkout: `python -c` puts the cwd first on sys.path, and the source tree's
    # gpumat/ (no compiled _core after a non-editable install) would shadow the installed package.
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, f"rc={proc.returncode}\nstdout:{proc.stdout}\nstderr:{proc.stderr}"
    assert proc.stdout.strip() == "ok 100.0"
    assert "terminate" not in proc.stderr and "Segmentation" not in proc.stderr


# --------------------------------------------------------------------------------------------------
# Arrays: creation, attributes, conversion
# --------------------------------------------------------------------------------------------------


def test_array_attributes(ctx):
    x = rand((3, 4))
    a = gpumat.array(x, ctx)
    assert isinstance(a, gpumat._core.PyGpuMatrix)
    assert a.shape == (3, 4) and type(a.shape) is tuple
    assert all(type(d) is int for d in a.shape)
    assert a.ctx == ctx
    assert a.size == 12 and a.ndim == 2 and a.nbytes == 48
    r = repr(a)
    assert "3, 4" in r, r
    assert ("cpu" in r or "host" in r) if ctx.device_type == "cpu" else (ctx.device_type in r), r


def test_array_default_context_is_cpu():
    a = gpumat.array(np.ones(3))
    assert a.ctx == gpumat.cpu()


@pytest.mark.parametrize(
    "shape", [(7,), (1, 1), (513, 257), (72, 73, 74), (2, 3, 4, 5), (1, 1, 1, 1, 1, 3)], ids=str
)
def test_roundtrip_exact(ctx, shape):
    x = rand(shape)
    a = gpumat.array(x, ctx)
    y = a.asnumpy()
    assert y.dtype == np.float32 and y.shape == shape
    assert y.flags.c_contiguous and y.flags.writeable and y.flags.owndata
    np.testing.assert_array_equal(y, x)


def test_roundtrip_special_values(ctx):
    x = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, 3.4e38, -3.4e38], dtype=np.float32)
    y = gpumat.array(x, ctx).asnumpy()
    np.testing.assert_array_equal(y, x)
    assert np.signbit(y[3]) and not np.signbit(y[4])


def test_scalar_rank0_array(ctx):
    a = gpumat.array(np.float32(2.5), ctx)
    assert a.shape == () and a.size == 1 and a.ndim == 0 and a.nbytes == 4
    y = a.asnumpy()
    assert y.shape == () and y.dtype == np.float32 and float(y) == 2.5


def test_array_copies_its_input(ctx):
    x = rand((5, 6))
    a = gpumat.array(x, ctx)
    x0 = x.copy()
    x[...] = 123.0
    np.testing.assert_array_equal(a.asnumpy(), x0)


def test_copyfrom_and_setitem_read_a_read_only_numpy_array(ctx):
    # A read-only source (np.frombuffer, a memory map, flags.writeable = False) is only read; it
    # once raised "buffer source array is read-only" from the memoryview taking its pointer.
    src = np.random.default_rng().normal(size=(3, 5)).astype(np.float32)
    src.flags.writeable = False
    a = gpumat.empty((3, 5), ctx)
    a.copyfrom(src)
    np.testing.assert_array_equal(a.asnumpy(), src)
    b = gpumat.empty((3, 5), ctx)
    b[:] = src
    np.testing.assert_array_equal(b.asnumpy(), src)


def test_asnumpy_returns_a_new_array_each_time(ctx):
    x = rand((5, 6))
    a = gpumat.array(x, ctx)
    y1 = a.asnumpy()
    y1[...] = -7.0
    y2 = a.asnumpy()
    assert y1 is not y2
    np.testing.assert_array_equal(y2, x)


@pytest.mark.parametrize(
    "dtype",
    [np.float64, np.float16, np.int32, np.int64, np.uint8, np.int8, np.bool_],
    ids=lambda d: np.dtype(d).name,
)
def test_array_converts_to_float32(ctx, dtype):
    x = (np.arange(24).reshape(4, 6) % 7 - 3).astype(dtype)
    a = gpumat.array(x, ctx)
    y = a.asnumpy()
    assert y.dtype == np.float32 and y.shape == (4, 6)
    np.testing.assert_array_equal(y, x.astype(np.float32))


def test_array_float64_rounds_to_nearest_float32(ctx):
    x = np.array([0.1, 1 / 3, 1e-40, 1e39, -1e39], dtype=np.float64)
    with np.errstate(over="ignore"):  # 1e39 -> inf is the expected float32 rounding
        y = gpumat.array(x, ctx).asnumpy()
        np.testing.assert_array_equal(y, x.astype(np.float32))


@pytest.mark.parametrize(
    "x",
    [[1, 2, 3], [[1.5, 2.5], [3.5, 4.5]], [[True, False]], 3.0, 7, [[[1], [2]], [[3], [4]]]],
    ids=["ints", "floats2d", "bools", "pyfloat", "pyint", "nested3d"],
)
def test_array_from_python_values(ctx, x):
    y = gpumat.array(x, ctx).asnumpy()
    expected = np.asarray(x, dtype=np.float32)
    assert y.dtype == np.float32 and y.shape == expected.shape
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x[:, ::2],
        lambda x: x.T,
        lambda x: np.asfortranarray(x),
        lambda x: x[::-1, 3:17],
        lambda x: x.astype(np.float64)[::3, ::-2],
        lambda x: np.broadcast_to(x[0], (5, x.shape[1])),
    ],
    ids=["strided", "transposed", "fortran", "reversed", "strided_f64", "zero_stride"],
)
def test_array_from_non_contiguous(ctx, make):
    x = rand((20, 30))
    v = make(x)
    assert not v.flags.c_contiguous
    y = gpumat.array(v, ctx).asnumpy()
    np.testing.assert_array_equal(y, np.asarray(v, dtype=np.float32))


def test_array_from_byteswapped(ctx):
    x = rand((4, 5)).astype(">f4")
    np.testing.assert_array_equal(gpumat.array(x, ctx).asnumpy(), x.astype(np.float32))


@pytest.mark.parametrize(
    "x",
    [
        np.array([1 + 2j, 3j]),
        np.array([1.0, 2.0], dtype=np.complex64),
        np.array([object(), 1], dtype=object),
        np.array([1.0, 2.0], dtype=object),
        np.array(["a", "b"]),
        np.array([b"a"]),
        "abc",
        [1 + 1j],
    ],
    ids=[
        "complex128",
        "complex64",
        "object",
        "object_numbers",
        "str",
        "bytes",
        "pystr",
        "pycomplex",
    ],
)
def test_array_rejects_non_real_dtypes(ctx, x):
    with pytest.raises(TypeError):
        gpumat.array(x, ctx)


def test_array_rejects_none(ctx):
    with pytest.raises(TypeError):
        gpumat.array(None, ctx)


def test_array_ragged_list_raises(ctx):
    with pytest.raises((TypeError, ValueError)):
        gpumat.array([[1.0, 2.0], [3.0]], ctx)


def test_array_bad_ctx_raises_type_error():
    with pytest.raises(TypeError):
        gpumat.array(np.ones(3), "cpu")


def test_array_from_pygpumatrix_copies(ctx):
    x = rand((3, 5))
    a = gpumat.array(x, ctx)
    try:
        b = gpumat.array(a, ctx)
    except TypeError:
        pytest.skip("gpumat.array does not take a PyGpuMatrix (allowed by the contract)")
    assert b is not a
    gpumat.ops.fill(a, 0.0)
    np.testing.assert_array_equal(b.asnumpy(), x)


def test_numpy_asarray_protocol(ctx):
    x = rand((6, 7))
    a = gpumat.array(x, ctx)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy 2 warns when __array__ lacks the copy keyword
        y = np.asarray(a)
        assert y.dtype == np.float32
        np.testing.assert_array_equal(y, x)
        z = np.asarray(a, dtype=np.float64)
        assert z.dtype == np.float64
        np.testing.assert_array_equal(z, x.astype(np.float64))
        w = np.array(a)
        np.testing.assert_array_equal(w, x)
    assert np.allclose(np.sum(a), x.sum(dtype=np.float64), rtol=1e-5)


# --------------------------------------------------------------------------------------------------
# empty and zero-size arrays
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3,), (2, 3, 4), (1,), ()], ids=str)
def test_empty(ctx, shape):
    e = gpumat.empty(shape, ctx)
    assert e.shape == shape and e.ctx == ctx
    assert e.size == int(np.prod(shape)) and e.nbytes == 4 * e.size
    assert e.asnumpy().shape == shape


def test_empty_accepts_list_shape(ctx):
    assert gpumat.empty([2, 3], ctx).shape == (2, 3)


@pytest.mark.parametrize("shape", [(-1,), (3, -2), (0, -1)], ids=str)
def test_empty_negative_dims_raise(ctx, shape):
    with pytest.raises(ValueError):
        gpumat.empty(shape, ctx)


@pytest.mark.parametrize(
    "shape",
    [(2**33, 2**33), (2**31, 2**31, 4), (2**40 + 1, 2**24), (2**62, 4), (2**50,)],
    ids=str,
)
def test_empty_impossible_sizes_raise(ctx, shape):
    # (2**33, 2**33) has 2**66 elements: the element count overflows int64 and wraps to 0 if
    # unchecked; (2**40 + 1, 2**24) wraps to 2**24, a small buffer behind a huge shape.
    with pytest.raises((ValueError, MemoryError)):
        gpumat.empty(shape, ctx)


def test_empty_bad_shape_types(ctx):
    with pytest.raises(TypeError):
        gpumat.empty("abc", ctx)
    with pytest.raises(TypeError):
        gpumat.empty((2.5, 3), ctx)
    with pytest.raises(TypeError):
        gpumat.empty(None, ctx)


@pytest.mark.parametrize("shape", [(0,), (0, 5), (5, 0), (3, 0, 4), (0, 0)], ids=str)
def test_zero_size_arrays(ctx, shape):
    x = np.zeros(shape, dtype=np.float32)
    a = gpumat.array(x, ctx)
    assert a.shape == shape and a.size == 0 and a.nbytes == 0
    y = a.asnumpy()
    assert y.shape == shape and y.dtype == np.float32
    e = gpumat.empty(shape, ctx)
    e.copyfrom(x)
    e.copyfrom(a)
    assert e.asnumpy().shape == shape
    assert repr(e)


# --------------------------------------------------------------------------------------------------
# copyfrom
# --------------------------------------------------------------------------------------------------


def test_copyfrom_numpy(ctx):
    x = rand((4, 9))
    a = nan_array((4, 9), ctx)
    a.copyfrom(x)
    np.testing.assert_array_equal(a.asnumpy(), x)


def test_copyfrom_converts_and_accepts_non_contiguous(ctx):
    x = rand((9, 4)).astype(np.float64)
    a = nan_array((4, 9), ctx)
    a.copyfrom(x.T)
    np.testing.assert_array_equal(a.asnumpy(), x.T.astype(np.float32))


def test_copyfrom_array(ctx):
    x = rand((4, 9))
    src = gpumat.array(x, ctx)
    dst = nan_array((4, 9), ctx)
    dst.copyfrom(src)
    np.testing.assert_array_equal(dst.asnumpy(), x)
    gpumat.ops.fill(src, 1.0)  # a copy, not a view
    np.testing.assert_array_equal(dst.asnumpy(), x)


def test_copyfrom_self_is_harmless(ctx):
    x = rand((4, 9))
    a = gpumat.array(x, ctx)
    a.copyfrom(a)
    np.testing.assert_array_equal(a.asnumpy(), x)


@pytest.mark.parametrize(
    "n", [1, 50_000, 1 << 20, (1 << 20) + 1], ids=["1", "200KB", "4MiB", "over-4MiB"]
)
def test_copies_and_kernels_stay_in_order(ctx, n):
    # On a device, copies up to 4 MiB return before the device has read them (through pinned
    # staging buffers reused in turn); larger ones synchronize. Either way the host source may be
    # overwritten at once, and each kernel sees the copy queued before it.
    src = np.empty(n, np.float32)
    buf = gpumat.empty((n,), ctx)
    acc = gpumat.array(np.zeros(n, np.float32), ctx)
    expected = np.zeros(n)
    for _ in range(6):  # more than the staging buffers
        src[...] = rand((n,))
        buf.copyfrom(src)
        expected += src
        gpumat.ops.axpy(1.0, buf, acc)
    np.testing.assert_allclose(acc.asnumpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "src_shape",
    [(4, 8), (4, 10), (36,), (9, 4), (1, 4, 9), (0,)],
    ids=["fewer", "more", "flat", "swapped", "extra1", "empty"],
)
def test_copyfrom_mismatch_raises(ctx, src_shape):
    a = gpumat.array(rand((4, 9)), ctx)
    before = a.asnumpy()
    with pytest.raises(ValueError):
        a.copyfrom(rand(src_shape) if src_shape != (0,) else np.zeros(0, np.float32))
    with pytest.raises(ValueError):
        a.copyfrom(gpumat.array(np.ones(src_shape, np.float32), ctx))
    np.testing.assert_array_equal(a.asnumpy(), before)


@pytest.mark.parametrize(
    "bad",
    [None, "abc", np.array([1 + 1j] * 36).reshape(4, 9), object()],
    ids=["None", "str", "complex-array", "object"],  # stable ids: xdist workers must agree
)
def test_copyfrom_bad_types_raise(ctx, bad):
    a = gpumat.array(rand((4, 9)), ctx)
    with pytest.raises(TypeError):
        a.copyfrom(bad)


@pytest.mark.gpu
def test_copyfrom_across_devices(gpu_ctx):
    x = rand((33, 65))
    h = gpumat.array(x, gpumat.cpu())
    g = nan_array((33, 65), gpu_ctx)
    g.copyfrom(h)
    np.testing.assert_array_equal(g.asnumpy(), x)
    h2 = nan_array((33, 65), gpumat.cpu())
    h2.copyfrom(g)
    np.testing.assert_array_equal(h2.asnumpy(), x)


# --------------------------------------------------------------------------------------------------
# Caching allocator
# --------------------------------------------------------------------------------------------------

STAT_KEYS = (
    "device_malloc_calls",
    "device_free_calls",
    "bytes_in_use",
    "peak_bytes_in_use",
    "bytes_reserved",
    "num_alloc_requests",
)


@pytest.fixture
def no_gc():
    """Exact byte counts need no collection in between that frees someone else's arrays."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def _stats(ctx):
    s = gpumat.memory_stats(ctx)
    for k in STAT_KEYS:
        assert k in s, f"memory_stats lacks {k!r}"
        assert isinstance(s[k], int) and s[k] >= 0, f"{k} = {s[k]!r}"
    assert s["bytes_reserved"] >= s["bytes_in_use"]
    assert s["peak_bytes_in_use"] >= s["bytes_in_use"]
    return s


def _rounded(nbytes):
    """The allocator's documented rounding: 512-B multiples under 1 MiB, 2-MiB multiples above."""
    if nbytes == 0:
        return 0
    r = 512 if nbytes < MiB else 2 * MiB
    return -(-nbytes // r) * r


def test_memory_stats_keys(ctx):
    _stats(ctx)


@pytest.mark.parametrize(
    "shape", [(1,), (128,), (129,), (1000, 1000), (512, 512), (262143,), (262145,), (0, 7)], ids=str
)
def test_allocation_rounding(ctx, shape, no_gc):
    before = _stats(ctx)
    a = gpumat.empty(shape, ctx)
    during = _stats(ctx)
    assert during["bytes_in_use"] - before["bytes_in_use"] == _rounded(a.nbytes)
    del a
    after = _stats(ctx)
    assert after["bytes_in_use"] == before["bytes_in_use"]


def test_allocate_free_loop_stops_calling_malloc(ctx, no_gc):
    shapes = [(1000, 1000), (37,), (300, 301), (5, 7, 9)]
    for s in shapes:  # warm the cache
        gpumat.empty(s, ctx)
    s0 = _stats(ctx)
    for _ in range(50):
        arrs = [gpumat.empty(s, ctx) for s in shapes]
        del arrs
    s1 = _stats(ctx)
    assert s1["device_malloc_calls"] == s0["device_malloc_calls"]
    assert s1["num_alloc_requests"] - s0["num_alloc_requests"] == 50 * len(shapes)
    assert s1["bytes_in_use"] == s0["bytes_in_use"]
    assert s1["bytes_reserved"] == s0["bytes_reserved"]


def test_same_rounded_size_reuses_block(ctx, no_gc):
    gpumat.empty((300,), ctx)  # 1200 B -> 1536 B block, now cached
    s0 = _stats(ctx)
    a = gpumat.empty((301,), ctx)  # 1204 B -> the same 1536 B bin
    s1 = _stats(ctx)
    assert s1["device_malloc_calls"] == s0["device_malloc_calls"]
    del a


def test_peak_and_in_use_bookkeeping(ctx, no_gc):
    gpumat.reset_peak_memory_stats(ctx)
    s0 = _stats(ctx)
    assert s0["peak_bytes_in_use"] == s0["bytes_in_use"]
    a = gpumat.empty((1000, 1000), ctx)  # 4 MB
    b = gpumat.empty((100,), ctx)
    s1 = _stats(ctx)
    grown = _rounded(a.nbytes) + _rounded(b.nbytes)
    assert s1["bytes_in_use"] == s0["bytes_in_use"] + grown
    assert s1["peak_bytes_in_use"] == s1["bytes_in_use"]
    del a, b
    s2 = _stats(ctx)
    assert s2["bytes_in_use"] == s0["bytes_in_use"]
    assert s2["peak_bytes_in_use"] == s0["bytes_in_use"] + grown  # the peak remembers
    gpumat.reset_peak_memory_stats(ctx)
    assert _stats(ctx)["peak_bytes_in_use"] == s2["bytes_in_use"]


def test_empty_cache_returns_cached_blocks(ctx, no_gc):
    keep = gpumat.empty((3000, 1000), ctx)  # in use: must survive empty_cache
    x = rand((3000, 1000))
    keep.copyfrom(x)
    for s in [(1000, 1000), (77,), (2000, 3)]:
        gpumat.empty(s, ctx)  # allocated and freed: cached
    s0 = _stats(ctx)
    assert s0["bytes_reserved"] > s0["bytes_in_use"]
    gpumat.empty_cache(ctx)
    s1 = _stats(ctx)
    assert s1["bytes_reserved"] == s1["bytes_in_use"] == s0["bytes_in_use"]
    assert s1["device_free_calls"] > s0["device_free_calls"]
    np.testing.assert_array_equal(keep.asnumpy(), x)
    # the cache is empty now: the next allocation goes to the device
    a = gpumat.empty((1000, 1000), ctx)
    s2 = _stats(ctx)
    assert s2["device_malloc_calls"] == s1["device_malloc_calls"] + 1
    del a
    gpumat.empty_cache(ctx)
    gpumat.empty_cache(ctx)  # idempotent
    s3 = _stats(ctx)
    assert s3["bytes_reserved"] == s3["bytes_in_use"]


def test_zero_size_allocations_touch_no_memory(ctx, no_gc):
    s0 = _stats(ctx)
    z = [gpumat.empty((0, 9), ctx) for _ in range(10)]
    s1 = _stats(ctx)
    assert s1["bytes_in_use"] == s0["bytes_in_use"]
    assert s1["device_malloc_calls"] == s0["device_malloc_calls"]
    del z


def test_ops_in_steady_state_do_not_allocate(ctx, no_gc):
    """A training-step-like loop: after the first iteration no device allocation happens (the
    dlsys course's rule that cudaMalloc calls do not grow with epochs)."""
    ops = gpumat.ops
    x = gpumat.array(rand((64, 784)), ctx)
    w = gpumat.array(rand((784, 100)), ctx)
    b = gpumat.array(rand((100,)), ctx)
    y = gpumat.array(np.eye(100, dtype=np.float32)[np.arange(64) % 100], ctx)
    h = gpumat.empty((64, 100), ctx)
    hb = gpumat.empty((64, 100), ctx)
    p = gpumat.empty((64, 100), ctx)
    loss = gpumat.empty((1,), ctx)
    gw = gpumat.empty((784, 100), ctx)
    gb = gpumat.empty((100,), ctx)
    ht = gpumat.empty((100, 64), ctx)

    def step():
        ops.matmul(x, w, h)
        ops.broadcast_to(b, hb)
        ops.add(h, hb, h)
        ops.relu(h, h)
        ops.softmax(h, p)
        ops.cross_entropy(h, y, loss)
        ops.relu_gradient(h, p, hb)
        ops.matmul(x, hb, gw, True, False)
        ops.sum_to_size(hb, gb)
        ops.transpose(hb, ht)
        ops.axpy(-0.01, gw, w)
        ops.mul_scalar(gb, 0.5, gb)
        ops.add_scalar(gb, 0.1, gb)
        ops.mul(gb, gb, gb)
        ops.uniform(hb, -1.0, 1.0, 3)
        ops.normal(hb, 0.0, 1.0, 4)
        ops.copy(hb, p)
        ops.fill(hb, 0.0)
        return float(loss.asnumpy()[0])

    step()
    s0 = _stats(ctx)
    for _ in range(5):
        assert np.isfinite(step())
    s1 = _stats(ctx)
    assert s1["device_malloc_calls"] == s0["device_malloc_calls"]
    assert s1["bytes_in_use"] == s0["bytes_in_use"]


def test_memory_stats_bad_argument():
    with pytest.raises(TypeError):
        gpumat.memory_stats("cpu")
    with pytest.raises(TypeError):
        gpumat.empty_cache("cpu")


@pytest.mark.gpu
def test_gpu_and_cpu_pools_are_separate(gpu_ctx, no_gc):
    c0, g0 = _stats(gpumat.cpu()), _stats(gpu_ctx)
    a = gpumat.empty((1000, 1000), gpu_ctx)
    c1, g1 = _stats(gpumat.cpu()), _stats(gpu_ctx)
    assert c1["bytes_in_use"] == c0["bytes_in_use"]
    assert g1["bytes_in_use"] == g0["bytes_in_use"] + _rounded(a.nbytes)
    del a


def test_skip_reason_is_recorded():
    # documents, in -ra output, why gpu-parametrized tests were skipped on this machine
    if HAS_GPU:
        assert GPU_SKIP_REASON is None
    else:
        assert (
            GPU_SKIP_REASON in ("built without CUDA", "no CUDA device")
            or "gpumat" in GPU_SKIP_REASON
        )


# ---------------------------------------------------------------------------- views


def test_reshape_is_a_view_sharing_storage(ctx):
    rng = np.random.default_rng()
    x = rng.standard_normal((6, 4)).astype(np.float32)
    a = gpumat.array(x, ctx)
    v = a.reshape(3, 8)
    assert v.shape == (3, 8) and v.is_view and not a.is_view and v.ctx == ctx
    np.testing.assert_array_equal(v.asnumpy(), x.reshape(3, 8))
    gpumat.ops.fill(v, 2.5)  # writes through the view land in the base
    np.testing.assert_array_equal(a.asnumpy(), np.full((6, 4), 2.5, np.float32))
    assert a.reshape((24,)).shape == (24,)


def test_view_keeps_its_base_alive(ctx):
    rng = np.random.default_rng()
    x = rng.standard_normal(10).astype(np.float32)
    a = gpumat.array(x, ctx)
    v = a.reshape(2, 5)._view((3,))  # a view of a view points at the owning array
    before = gpumat.memory_stats(ctx)["bytes_in_use"]
    del a
    assert gpumat.memory_stats(ctx)["bytes_in_use"] == before  # storage not freed
    np.testing.assert_array_equal(v.asnumpy(), x[:3])


def test_reshape_and_view_reject_more_elements(ctx):
    a = gpumat.empty((2, 3), ctx)
    with pytest.raises(ValueError, match="reshape"):
        a.reshape(7)
    with pytest.raises(
        ValueError, match=r"shape \(7,\) at offset 0 does not fit in its base \(2, 3\)"
    ):
        a._view((7,))
    with pytest.raises(ValueError, match="negative dimension"):
        a._view((-1,))
    for offset in (-1, 5, 7, 2**62):  # (2, 2) from 5 would end past the 6 elements
        with pytest.raises(ValueError, match=f"at offset {offset} does not fit"):
            a._view((2, 2) if offset == 5 else (1,), offset)


def test_view_at_an_offset_shares_those_elements(ctx):
    """``_view(shape, offset)`` (eager backward's parts of attention's flat gradient): the
    elements from ``offset`` on, shared with the base, also through a view of a view."""
    x = np.random.default_rng().standard_normal(24).astype(np.float32)
    a = gpumat.array(x, ctx)
    v = a._view((2, 3), 10)
    np.testing.assert_array_equal(v.asnumpy(), x[10:16].reshape(2, 3))
    assert v.is_view and v.shares_memory(a)
    w = v._view((4,), 2)  # elements 12..15 of a
    np.testing.assert_array_equal(w.asnumpy(), x[12:16])
    gpumat.ops.fill(w, 7.0)
    np.testing.assert_array_equal(a.asnumpy()[[11, 12, 15, 16]], [x[11], 7.0, 7.0, x[16]])
    assert a._view((0,), 24).size == 0  # an empty view at the end


def test_views_are_aliases_for_non_inplace_ops(ctx):
    a = gpumat.array(np.random.default_rng().standard_normal((4, 4)), ctx)
    with pytest.raises(ValueError, match="must not be one of the inputs"):
        gpumat.ops.transpose(a, a.reshape(4, 4))
