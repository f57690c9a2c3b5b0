"""DLPack, __cuda_array_interface__ and __array__ against real consumers (numpy, PyTorch, CuPy).

Each exchange is checked for zero copy (the same data pointer, writes seen on both sides) and for
lifetimes: the consumer keeps the producer's memory alive after the producer is deleted, and the
DLPack deleter runs exactly once (the producer's reference count returns to where it was).
CPU tests use the cpu device; the CUDA ones carry the gpu mark and skip, with the reason, without
a GPU or without torch/cupy.
"""

import gc
import json
import os
import signal
import subprocess
import sys

import dlpack_helpers
import numpy as np
import pytest
from conftest import GPU_SKIP_REASON, HAS_GPU

import gpumat

torch = pytest.importorskip("torch")
import torch.utils.dlpack as torch_dlpack  # noqa: E402

RNG = np.random.default_rng(20261123)
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rand(shape):
    return RNG.standard_normal(shape).astype(np.float32)


def data_ptr(a) -> int:
    """The address of a PyGpuMatrix's first element, read through DLPack by numpy (cpu only)."""
    return np.from_dlpack(a).ctypes.data


SHAPES = [(7, 5), (3, 4, 5), (1,), (), (2, 1, 3)]


# ------------------------------------------------------------------------------ export, cpu


def test_dlpack_device_cpu():
    a = gpumat.array(rand((2, 3)))
    assert a.__dlpack_device__() == (1, 0)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_numpy_from_dlpack_shares_memory(shape):
    x = rand(shape)
    a = gpumat.array(x)
    n = np.from_dlpack(a)
    assert n.shape == shape and n.dtype == np.float32
    np.testing.assert_array_equal(n, x)
    assert np.from_dlpack(a).ctypes.data == n.ctypes.data
    n[...] = 5.5  # numpy -> gpumat
    np.testing.assert_array_equal(a.asnumpy(), np.full(shape, 5.5, np.float32))
    gpumat.ops.fill(a, -2.0)  # gpumat -> numpy
    np.testing.assert_array_equal(n, np.full(shape, -2.0, np.float32))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_torch_from_dlpack_shares_memory(shape):
    x = rand(shape)
    a = gpumat.array(x)
    t = torch.from_dlpack(a)
    assert tuple(t.shape) == shape and t.dtype == torch.float32 and t.device.type == "cpu"
    assert t.data_ptr() == data_ptr(a)
    np.testing.assert_array_equal(t.numpy(), x)
    t.mul_(3.0)
    np.testing.assert_array_equal(a.asnumpy(), x * np.float32(3.0))
    gpumat.ops.add_scalar(a, 1.0, a)
    np.testing.assert_array_equal(t.numpy(), x * np.float32(3.0) + np.float32(1.0))


def test_torch_utils_to_dlpack_roundtrip():
    x = rand((4, 6))
    a = gpumat.array(x)
    cap = a.__dlpack__()
    t = torch_dlpack.from_dlpack(cap)
    assert t.data_ptr() == data_ptr(a)
    # and back: torch's capsule into gpumat
    b = gpumat.from_dlpack(torch_dlpack.to_dlpack(t))
    assert data_ptr(b) == data_ptr(a)
    gpumat.ops.fill(b, 9.0)
    assert float(t.sum()) == 9.0 * x.size and float(a.asnumpy().sum()) == 9.0 * x.size


def test_versioned_and_legacy_capsules():
    a = gpumat.array(rand((2, 2)))
    legacy = a.__dlpack__()
    versioned = a.__dlpack__(max_version=(1, 0))
    newer = a.__dlpack__(max_version=(1, 3))
    older = a.__dlpack__(max_version=(0, 8))
    assert "dltensor_versioned" in repr(versioned) and "dltensor_versioned" in repr(newer)
    assert '"dltensor"' in repr(legacy) and '"dltensor"' in repr(older)
    for cap in (legacy, versioned):
        assert gpumat.from_dlpack(cap).shape == (2, 2)
        assert "used_" in repr(cap)


def test_export_lifetime_producer_deleted_first():
    x = rand((50, 40))
    a = gpumat.array(x)
    t, n = torch.from_dlpack(a), np.from_dlpack(a)
    v = a.reshape(2000)
    tv = torch.from_dlpack(v)  # a view's export keeps its base alive too
    del a, v
    gc.collect()
    junk = [gpumat.array(rand((50, 40))) for _ in range(4)]  # would reuse a freed block
    np.testing.assert_array_equal(t.numpy(), x)
    np.testing.assert_array_equal(n, x)
    np.testing.assert_array_equal(tv.numpy(), x.reshape(-1))
    del junk


def test_export_deleter_runs_once():
    a = gpumat.array(rand((3, 3)))
    base = sys.getrefcount(a)
    t = torch.from_dlpack(a)
    n = np.from_dlpack(a)
    assert sys.getrefcount(a) == base + 2  # one reference per live consumer
    del t, n
    gc.collect()
    assert sys.getrefcount(a) == base
    cap = a.__dlpack__(max_version=(1, 0))  # never consumed: the capsule's destructor frees it
    assert sys.getrefcount(a) == base + 1
    del cap
    assert sys.getrefcount(a) == base


def test_export_copy_and_device_arguments():
    x = rand((3, 5))
    a = gpumat.array(x)
    t = torch.from_dlpack(a.__dlpack__(max_version=(1, 0), copy=True))
    assert t.data_ptr() != data_ptr(a)
    np.testing.assert_array_equal(t.numpy(), x)
    same = a.__dlpack__(dl_device=(1, 0), copy=False)
    assert gpumat.from_dlpack(same).shape == (3, 5)
    with pytest.raises(BufferError, match="cannot export"):
        a.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError, match="copy=False"):
        a.__dlpack__(dl_device=(2, 0), copy=False)
    with pytest.raises(ValueError, match="stream must be None"):
        a.__dlpack__(stream=1)


def test_holds_no_array_raises():
    empty = gpumat.PyGpuMatrix.__new__(gpumat.PyGpuMatrix)
    with pytest.raises(ValueError, match="holds no array"):
        empty.__dlpack__()
    with pytest.raises(ValueError, match="holds no array"):
        empty.__dlpack_device__()


# ------------------------------------------------------------------------------ import, cpu


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_from_dlpack_numpy_zero_copy(shape):
    x = rand(shape)
    a = gpumat.from_dlpack(x)
    assert a.shape == shape and a.ctx == gpumat.cpu() and a.is_view
    assert data_ptr(a) == x.ctypes.data
    gpumat.ops.fill(a, 4.0)
    np.testing.assert_array_equal(x, np.full(shape, 4.0, np.float32))
    x[...] = 1.5
    np.testing.assert_array_equal(a.asnumpy(), np.full(shape, 1.5, np.float32))


def test_from_dlpack_torch_zero_copy_and_ops():
    t = torch.from_numpy(rand((8, 16)))
    w = torch.from_numpy(rand((16, 4)))
    a, b = gpumat.from_dlpack(t), gpumat.from_dlpack(w)
    assert data_ptr(a) == t.data_ptr()
    out = gpumat.empty((8, 4))
    gpumat.ops.matmul(a, b, out)
    ref = t.numpy().astype(np.float64) @ w.numpy().astype(np.float64)
    np.testing.assert_allclose(out.asnumpy(), ref, rtol=1e-5, atol=1e-5)
    gpumat.ops.relu(a, a)  # in place on torch's memory
    assert bool((t >= 0).all())


def test_import_lifetime_and_deleter_once():
    x = rand((30, 20))
    ref = x.copy()
    base = sys.getrefcount(x)
    a = gpumat.from_dlpack(x)
    assert sys.getrefcount(x) == base + 1  # numpy's DLPack manager holds the array
    v = a.reshape(600)
    del a
    gc.collect()
    assert sys.getrefcount(x) == base + 1  # the view keeps the owner
    np.testing.assert_array_equal(v.asnumpy(), ref.reshape(-1))
    del v
    gc.collect()
    assert sys.getrefcount(x) == base  # the deleter ran, exactly once


def test_import_torch_producer_deleted_first():
    t = torch.from_numpy(rand((64, 64)))
    ref = t.numpy().copy()
    a = gpumat.from_dlpack(t)
    del t
    gc.collect()
    junk = [torch.empty(64, 64).fill_(7.0) for _ in range(4)]
    np.testing.assert_array_equal(a.asnumpy(), ref)
    del junk


def test_import_gpumat_roundtrip():
    a = gpumat.array(rand((5, 5)))
    b = gpumat.from_dlpack(a)
    assert data_ptr(b) == data_ptr(a)
    del a
    gc.collect()
    assert b.asnumpy().shape == (5, 5)


def test_from_dlpack_copy_argument():
    x = rand((3, 3))
    c = gpumat.from_dlpack(x, copy=True)
    assert not c.is_view and data_ptr(c) != x.ctypes.data
    np.testing.assert_array_equal(c.asnumpy(), x)
    ro = x.copy()
    ro.flags.writeable = False
    r = gpumat.from_dlpack(ro)  # read-only: copied, so gpumat cannot write into it
    assert data_ptr(r) != ro.ctypes.data
    np.testing.assert_array_equal(r.asnumpy(), ro)
    with pytest.raises(BufferError, match="read-only"):
        gpumat.from_dlpack(ro, copy=False)


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(6, dtype=np.float64),
        lambda: np.arange(6, dtype=np.int32),
        lambda: torch.ones(3, dtype=torch.float16),
        lambda: torch.ones(3, dtype=torch.bfloat16),
        lambda: torch.ones(3, dtype=torch.bool),
    ],
    ids=["float64", "int32", "float16", "bfloat16", "bool"],
)
def test_from_dlpack_non_float32_raises(make):
    with pytest.raises(TypeError, match="float32"):
        gpumat.from_dlpack(make())


@pytest.mark.parametrize(
    "make",
    [
        lambda: rand((4, 6)).T,
        lambda: rand((4, 6))[:, ::2],
        lambda: torch.from_numpy(rand((5, 3))).t(),
        lambda: torch.from_numpy(rand((6, 6)))[1:4, 1:4],
    ],
    ids=["numpy_T", "numpy_step", "torch_t", "torch_slice"],
)
def test_from_dlpack_non_contiguous_raises(make):
    with pytest.raises(ValueError, match="contiguous"):
        gpumat.from_dlpack(make())


def test_from_dlpack_contiguous_slices_and_unit_dims():
    x = rand((6, 4))
    a = gpumat.from_dlpack(x[2:5])  # contiguous rows: a byte offset into the buffer
    np.testing.assert_array_equal(a.asnumpy(), x[2:5])
    t = torch.from_numpy(rand((1, 5)))
    b = gpumat.from_dlpack(t.t().contiguous().t())  # a unit dimension with any stride
    np.testing.assert_array_equal(b.asnumpy(), t.numpy())


def test_from_dlpack_bad_input():
    with pytest.raises(TypeError, match="__dlpack__"):
        gpumat.from_dlpack([1.0, 2.0])
    cap = torch_dlpack.to_dlpack(torch.ones(2))
    gpumat.from_dlpack(cap)
    with pytest.raises(ValueError, match="already consumed"):
        gpumat.from_dlpack(cap)


# ------------------------------------------------------------------------------ bad arguments
# Every case runs in one child process per test module (a crash there fails the cases it reached
# instead of ending the run); the child prints each case's name before running it.

_CASES_CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import dlpack_helpers as h
import gpumat

def outcome(fn):
    try:
        fn()
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
    return ["returned", ""]

for case in json.loads(sys.argv[2]):
    print("CASE", json.dumps(case), flush=True)
    kind, name, variant = case
    if kind == "export":
        ctx = gpumat.cpu() if variant == "cpu" else gpumat.emu()
        a = gpumat.array(np.arange(6, dtype=np.float32).reshape(2, 3), ctx)
        result = outcome(lambda: a.__dlpack__(**h.EXPORT_ARGUMENTS[name][0]))
    else:
        result = outcome(lambda: h.import_malformed(name, variant))
    print("RESULT", json.dumps([case, result]), flush=True)
"""

_CASES = [["export", n, d] for n in dlpack_helpers.EXPORT_ARGUMENTS for d in ("cpu", "emu")] + [
    ["import", n, v] for n in dlpack_helpers.MALFORMED for v in (False, True)
]


@pytest.fixture(scope="module")
def bad_argument_outcomes():
    """{(kind, name, versioned): [exception type name, message]}, or a crash description."""
    proc = subprocess.run(
        [sys.executable, "-P", "-c", _CASES_CHILD, str(TESTS_DIR), json.dumps(_CASES)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(TESTS_DIR),
    )
    outcomes = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            case, result = json.loads(line[len("RESULT ") :])
            outcomes[tuple(case)] = result
    crash = None
    if proc.returncode != 0:
        started = [ln for ln in proc.stdout.splitlines() if ln.startswith("CASE ")]
        how = signal.Signals(-proc.returncode).name if proc.returncode < 0 else proc.returncode
        crash = (
            f"the child ended ({how}) in {started[-1] if started else 'setup'}:\n"
            + (proc.stderr[-3000:])
        )
    return outcomes, crash


def _outcome(outcomes_and_crash, case):
    outcomes, crash = outcomes_and_crash
    if tuple(case) not in outcomes:
        pytest.fail(f"no result for {case}: {crash}", pytrace=False)
    return outcomes[tuple(case)]


@pytest.mark.parametrize("device", ["cpu", "emu"])
@pytest.mark.parametrize("name", list(dlpack_helpers.EXPORT_ARGUMENTS))
def test_dlpack_export_rejects_bad_arguments(bad_argument_outcomes, name, device):
    """max_version, stream, dl_device and copy as the array API standard defines them; each bad
    value is a TypeError (wrong type) or ValueError (wrong value), BufferError where the standard
    asks for it (a device gpumat cannot export to). Before, max_version=() read past a tuple."""
    got, message = _outcome(bad_argument_outcomes, ["export", name, device])
    assert got == dlpack_helpers.EXPORT_ARGUMENTS[name][1], (got, message)
    assert message.startswith("__dlpack__: "), message


@pytest.mark.parametrize("versioned", [False, True], ids=["legacy", "versioned"])
@pytest.mark.parametrize("name", list(dlpack_helpers.MALFORMED))
def test_from_dlpack_rejects_malformed_capsules(bad_argument_outcomes, name, versioned):
    """A capsule whose descriptor breaks the DLPack C API (ndim < 0, a NULL shape, a negative
    dimension, a NULL or misaligned data pointer, ...) is refused before any pointer in it is
    followed; before, ndim = -1 was imported as a 0-d array and a NULL shape was dereferenced."""
    got, message = _outcome(bad_argument_outcomes, ["import", name, versioned])
    _, want, fragment = dlpack_helpers.MALFORMED[name]
    assert got == want, (got, message)
    assert message.startswith("from_dlpack: ") and fragment in message, message


def test_a_well_formed_crafted_capsule_imports():
    """The positive control for the malformed cases: the same structs with valid fields import."""
    x = rand((3, 4))
    for versioned in (False, True):
        crafted = dlpack_helpers.Crafted(x, versioned=versioned, null_strides=versioned)
        a = gpumat.from_dlpack(crafted.capsule)
        assert a.shape == (3, 4) and data_ptr(a) == crafted.values.ctypes.data
        np.testing.assert_array_equal(a.asnumpy(), x)
        del a


def test_from_dlpack_checks_copy_and_what_producers_return():
    x = rand((2, 2))
    for bad in ("no", 0, 1, [True]):
        with pytest.raises(TypeError, match="from_dlpack: copy must be True, False or None"):
            gpumat.from_dlpack(x, copy=bad)
    assert gpumat.from_dlpack(x, copy=np.bool_(False)).shape == (2, 2)

    class Producer:
        def __init__(self, device, capsule):
            self.device, self.capsule = device, capsule

        def __dlpack_device__(self):
            return self.device

        def __dlpack__(self, stream=None, max_version=None):
            return self.capsule

    with pytest.raises(TypeError, match=r"Producer.__dlpack__\(\) returned list, not a DLPack"):
        gpumat.from_dlpack(Producer((1, 0), [1, 2]))
    for device in ((1,), "cpu", (1, 0, 0), None):
        with pytest.raises(TypeError, match=r"__dlpack_device__\(\) returned"):
            gpumat.from_dlpack(Producer(device, x.__dlpack__()))
    with pytest.raises(TypeError, match="device_type and device_id must be ints"):
        gpumat.from_dlpack(Producer((1.5, 0), x.__dlpack__()))
    with pytest.raises(ValueError, match="negative device id"):
        gpumat.from_dlpack(Producer((2, -1), x.__dlpack__()))


# ------------------------------------------------------------------------------ __array__, CAI


def test_array_protocol_is_a_view_on_cpu():
    x = rand((4, 3))
    a = gpumat.array(x)
    n = np.asarray(a)
    assert n.ctypes.data == data_ptr(a)
    n[0, 0] = 123.0
    assert a.asnumpy()[0, 0] == 123.0
    del a
    gc.collect()
    assert n[0, 0] == 123.0  # the view keeps the buffer alive
    b = gpumat.array(x)
    c = np.array(b, copy=True)
    assert c.ctypes.data != data_ptr(b)
    assert np.asarray(b, dtype=np.float64).dtype == np.float64
    with pytest.raises(ValueError, match="copy"):
        np.asarray(b, dtype=np.float64, copy=False)
    assert np.asarray(b, copy=False).ctypes.data == data_ptr(b)


def test_no_cuda_array_interface_on_cpu():
    a = gpumat.array(rand((2,)))
    assert not hasattr(a, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match="CUDA memory"):
        a.__cuda_array_interface__  # noqa: B018


# ------------------------------------------------------------------------------ CUDA


gpu = pytest.mark.skipif(not HAS_GPU, reason=str(GPU_SKIP_REASON))


def _torch_cuda():
    if not torch.cuda.is_available():
        pytest.skip("this torch build has no CUDA (a CPU wheel, or no driver)")


def _cupy():
    return pytest.importorskip("cupy", reason="cupy is not installed")


@pytest.mark.cuda
@gpu
def test_cuda_dlpack_device_and_interface():
    a = gpumat.array(rand((16, 8)), gpumat.gpu(0))
    assert a.__dlpack_device__() == (2, 0)
    cai = a.__cuda_array_interface__
    assert cai["version"] == 3 and cai["typestr"] == "<f4" and cai["shape"] == (16, 8)
    assert cai["strides"] is None and cai["data"][1] is False and cai["data"][0] != 0
    assert isinstance(cai["stream"], int) and cai["stream"] not in (0,)
    with pytest.raises(ValueError, match="stream 0"):
        a.__dlpack__(stream=0)
    with pytest.raises(ValueError, match="copy"):
        np.asarray(a, copy=False)
    np.testing.assert_array_equal(np.asarray(a), a.asnumpy())


@pytest.mark.cuda
@gpu
def test_cuda_torch_both_ways():
    _torch_cuda()
    x = rand((256, 128))
    a = gpumat.array(x, gpumat.gpu(0))
    t = torch.from_dlpack(a)
    assert t.device.type == "cuda" and t.data_ptr() == a.__cuda_array_interface__["data"][0]
    torch.testing.assert_close(t.cpu(), torch.from_numpy(x))
    t.mul_(2.0)  # on torch's stream; gpumat reads it through a synchronizing copy
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.asnumpy(), x * np.float32(2.0))
    # torch -> gpumat, then a gpumat kernel writes torch's memory
    u = torch.from_numpy(rand((64, 32))).cuda()
    b = gpumat.from_dlpack(u)
    assert b.ctx == gpumat.gpu(0) and b.__cuda_array_interface__["data"][0] == u.data_ptr()
    gpumat.ops.fill(b, 3.0)
    gpumat.synchronize(gpumat.gpu(0))
    assert float(u.sum()) == 3.0 * u.numel()
    # lifetimes: delete the producers, use the consumers
    del a
    gc.collect()
    torch.testing.assert_close(t.cpu(), torch.from_numpy(x * np.float32(2.0)))
    del u
    gc.collect()
    torch.cuda.empty_cache()
    np.testing.assert_array_equal(b.asnumpy(), np.full((64, 32), 3.0, np.float32))


@pytest.mark.cuda
@gpu
def test_cuda_torch_utils_capsules():
    _torch_cuda()
    a = gpumat.array(rand((10, 10)), gpumat.gpu(0))
    t = torch_dlpack.from_dlpack(a.__dlpack__(stream=1))
    assert t.data_ptr() == a.__cuda_array_interface__["data"][0]
    b = gpumat.from_dlpack(torch_dlpack.to_dlpack(t))
    assert b.__cuda_array_interface__["data"][0] == t.data_ptr()


@pytest.mark.cuda
@gpu
def test_cuda_cupy_both_ways():
    cp = _cupy()
    x = rand((128, 64))
    a = gpumat.array(x, gpumat.gpu(0))
    c = cp.from_dlpack(a)
    assert c.data.ptr == a.__cuda_array_interface__["data"][0]
    d = cp.asarray(a)  # through __cuda_array_interface__
    assert d.data.ptr == c.data.ptr
    np.testing.assert_array_equal(cp.asnumpy(c), x)
    c *= 2
    cp.cuda.get_current_stream().synchronize()
    np.testing.assert_array_equal(a.asnumpy(), x * np.float32(2.0))
    del a
    gc.collect()
    np.testing.assert_array_equal(cp.asnumpy(d), x * np.float32(2.0))
    y = cp.asarray(rand((32, 16)))
    b = gpumat.from_dlpack(y)
    assert b.__cuda_array_interface__["data"][0] == y.data.ptr
    gpumat.ops.fill(b, -1.0)
    gpumat.synchronize(gpumat.gpu(0))
    assert float(y.sum()) == -1.0 * y.size
    del y
    gc.collect()
    np.testing.assert_array_equal(b.asnumpy(), np.full((32, 16), -1.0, np.float32))


# ------------------------------------------------------------------------------ every device


def test_roundtrip_through_gpumat_every_device(ctx):
    """gpumat -> DLPack -> gpumat shares memory on each device (the emulated one included)."""
    x = rand((33, 17))
    a = gpumat.array(x, ctx)
    b = gpumat.from_dlpack(a)
    assert b.__dlpack_device__() == a.__dlpack_device__()
    gpumat.ops.mul_scalar(b, 2.0, b)
    np.testing.assert_array_equal(a.asnumpy(), x * np.float32(2.0))
    del a
    gc.collect()
    np.testing.assert_array_equal(b.asnumpy(), x * np.float32(2.0))


@pytest.mark.parametrize("copy", [None, True])
def test_an_exported_array_holds_the_values_of_work_still_queued(ctx, copy):
    """On the emulated device kernels and copies are queued; its arrays are exported as CPU
    memory, so the export waits for them (the kernel writing the array, and the copy=True copy
    itself) before a consumer without a stream reads the values. On a GPU the export is CUDA
    memory: torch reads it on its current stream, which the export made wait for the work."""
    x = rand((1024, 1024))
    a = gpumat.array(x, ctx)
    y = gpumat.empty(x.shape, ctx)
    for _ in range(3):  # a queue of work still running when the export is asked for
        gpumat.ops.mul_scalar(a, 3.0, y)
    t = torch.from_dlpack(y.__dlpack__(max_version=(1, 0), copy=copy))
    assert t.device.type == ("cuda" if ctx.device_type == "gpu" else "cpu")
    np.testing.assert_array_equal(t.cpu().numpy(), x * np.float32(3.0))
