"""The emulated device's memory checks, its asynchronous streams and its grid-stride test cap.

Every emulated kernel is instrumented (extensions/src/emu/checks.cpp): memcheck (accesses outside a
live allocation, past a ``__shared__`` array or the dynamic shared memory, misaligned), racecheck
(shared-memory hazards in one barrier interval, plain writes of two blocks to one global address),
initcheck (reads of memory nothing has written), as compute-sanitizer's tools on a GPU; a violation
ends the launch and becomes a ``gpumat.CudaError`` that names the kernel, block, thread, address and
allocation. Each check is shown catching a planted bug (the deliberately wrong kernels of
``extensions/src/emu/selftest.cu``, run through the private ``gpumat._core._emu_selftest``) and
passing its correct twin; the rest of ``pytest -m gpu`` is the clean run of every real kernel.
"""

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpumat
from gpumat import _core, ops

pytestmark = pytest.mark.gpu  # CUDA kernel code, run on the emulated device


def selftest(name):
    return _core._emu_selftest(name, 0)


def expect_fault(name, *fragments):
    """Runs self-test ``name``, expects a CudaError whose message holds every fragment."""
    with pytest.raises(gpumat.CudaError) as info:
        selftest(name)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


# ---------------------------------------------------------------------------- memcheck


def test_memcheck_write_one_past_the_end_names_kernel_block_thread_address_allocation():
    message = expect_fault(
        "write_past_end",
        "memcheck: invalid __global__ write of 4 bytes at 0x",
        "kernel gpumat::emu::{anonymous}::write_past_end_kernel",
        "block (0, 0, 0), thread (10, 0, 0)",
        "4 bytes past the end of the 40-byte allocation",
    )
    assert "rounding slack" in message  # the caching allocator's block holds 512 bytes


def test_memcheck_correct_twin_writes_every_element():
    assert selftest("write") == [1.0] * 10


def test_memcheck_static_shared_index_past_the_end():
    expect_fault(
        "shared_index_past_end",
        "memcheck: invalid array access: index 32 out of bounds for type 'float [32]'",
        "shared_index_kernel",
    )
    assert selftest("shared_index") == [31.0]


def test_memcheck_misaligned_vector_load():
    expect_fault(
        "misaligned_float4", "memcheck: misaligned address 0x", "float4", "16-byte alignment"
    )


def test_memcheck_host_pointer():
    expect_fault(
        "host_pointer",
        "memcheck: invalid __global__ write of 4 bytes",
        "not inside any device allocation",
        "host_pointer_kernel",
    )


# ---------------------------------------------------------------------------- racecheck


def test_racecheck_shared_memory_without_a_barrier():
    expect_fault(
        "shared_race", "racecheck:", "hazard on static shared memory", "neighbour_sum_kernel"
    )


def test_racecheck_correct_twin_with_the_barrier():
    assert selftest("shared_sync") == [float((t + 1) % 128 + 1) for t in range(128)]


def test_racecheck_plain_counter_increments_of_several_blocks():
    expect_fault(
        "block_counter_plain",
        "racecheck: plain writes to the same global memory",
        "by block (",
        "and by this thread, of another block, in one launch",
    )


def test_racecheck_atomic_counter_counts_every_block():
    assert selftest("block_counter_atomic") == [8.0]


# ---------------------------------------------------------------------------- initcheck


def test_initcheck_read_of_memory_nothing_wrote():
    expect_fault(
        "uninitialised_read",
        "initcheck: read of 4 bytes of uninitialised device memory",
        "of the 128-byte allocation",
        "copy_kernel",
    )


def test_initcheck_static_shared_memory_left_by_another_block():
    expect_fault(
        "stale_shared",
        "initcheck:",
        "static shared memory",
        "that no thread of this block has written",
        "block (1, 0, 0)",
    )


def test_static_shared_memory_is_poisoned_in_every_block(monkeypatch):
    # With initcheck off, the slots block 1 does not write read as NaN (poison), not as the 1.0
    # that block 0 left in the worker's copy of the array.
    monkeypatch.setenv("GPUMAT_EMU_CHECKS", "memcheck,racecheck")
    out = np.array(selftest("stale_shared"), dtype=np.float32)
    assert np.all(out[:64] == 1.0)
    assert np.all(out[64:96] == 1.0)
    assert np.all(np.isnan(out[96:]))


def test_checks_can_be_turned_off_for_debugging(monkeypatch):
    # The write past the end lands in the allocation's rounding slack, unreported.
    monkeypatch.setenv("GPUMAT_EMU_CHECKS", "none")
    assert selftest("write_past_end") == [1.0] * 10


@pytest.mark.parametrize(
    "value", ["all", "ALL", "memcheck", " MemCheck , racecheck", "initcheck,all"]
)
def test_checks_setting_values_that_keep_memcheck_on(monkeypatch, value):
    monkeypatch.setenv("GPUMAT_EMU_CHECKS", value)
    expect_fault("write_past_end", "memcheck: invalid __global__ write")


@pytest.mark.parametrize(
    "value", ["memchek", "", "MEMCHECK;racecheck", "memcheck,", "none,memcheck"]
)
def test_checks_setting_refuses_what_it_does_not_know(monkeypatch, value):
    # A typo used to turn every check off silently (the planted bugs then passed).
    monkeypatch.setenv("GPUMAT_EMU_CHECKS", value)
    expect_fault("write_past_end", f'GPUMAT_EMU_CHECKS="{value}"', "use all, none, or a comma list")


# ---------------------------------------------------------------------------- repeated launches
# A launch that repeats one which has passed the checks GPUMAT_EMU_CHECK_REPEATS times (default 3:
# same kernel, geometry, arguments, no allocation made or freed since) runs the kernel's unchecked
# build. The self-test launches a kernel whose blocks write distinct words for its first index data,
# then (same arguments, new index data) one word from both blocks: a race between blocks.


def test_a_repeated_launch_is_checked_until_it_has_passed_three_times(monkeypatch):
    monkeypatch.delenv("GPUMAT_EMU_CHECK_REPEATS", raising=False)  # the default: 3
    expect_fault(
        "repeat:2", "racecheck", "indexed_write_kernel", "plain writes to the same global memory"
    )


def test_later_repeats_run_the_unchecked_build(monkeypatch):
    monkeypatch.delenv("GPUMAT_EMU_CHECK_REPEATS", raising=False)  # the default: 3
    # The fourth identical launch is unchecked: the race that only its data causes goes unseen.
    assert selftest("repeat:3") == [2.0, 2.0]


def test_an_allocation_makes_a_repeat_checked_again(monkeypatch):
    monkeypatch.delenv("GPUMAT_EMU_CHECK_REPEATS", raising=False)  # the default: 3
    # A device allocation in between: the same pointers may name other memory now.
    expect_fault("repeat_after_allocation:3", "racecheck", "indexed_write_kernel")


@pytest.mark.parametrize("value", ["all", "0"])
def test_check_repeats_all_checks_every_launch(monkeypatch, value):
    monkeypatch.setenv("GPUMAT_EMU_CHECK_REPEATS", value)
    expect_fault("repeat:3", "racecheck", "indexed_write_kernel")
    expect_fault("repeat:20", "racecheck", "indexed_write_kernel")


def test_check_repeats_sets_how_many_times(monkeypatch):
    monkeypatch.setenv("GPUMAT_EMU_CHECK_REPEATS", "1")
    assert selftest("repeat:1") == [2.0, 2.0]
    monkeypatch.setenv("GPUMAT_EMU_CHECK_REPEATS", "5")
    expect_fault("repeat:4", "racecheck")
    assert selftest("repeat:5") == [2.0, 2.0]


def test_checked_and_unchecked_builds_compute_the_same_bits():
    # The same launches run checked (the first three) and unchecked (the rest): results identical.
    rng = np.random.default_rng()
    ctx = gpumat.emu(0)
    a = gpumat.array(rng.standard_normal((70, 300)).astype(np.float32), device=ctx)
    b = gpumat.array(rng.standard_normal((300, 50)).astype(np.float32), device=ctx)
    c = gpumat.empty((70, 50), device=ctx)
    s = gpumat.empty((70, 50), device=ctx)
    results = []
    for _ in range(6):
        ops.matmul(a, b, c)
        ops.softmax(c, s)
        results.append((c.asnumpy(), s.asnumpy()))
    for c_i, s_i in results[1:]:
        np.testing.assert_array_equal(c_i, results[0][0])
        np.testing.assert_array_equal(s_i, results[0][1])
    reference = a.asnumpy().astype(np.float64) @ b.asnumpy().astype(np.float64)
    np.testing.assert_allclose(results[-1][0], reference, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------- streams


def test_launches_are_asynchronous():
    # The stream is held; a read of the device memory without synchronizing sees it before the
    # queued fill, a synchronized one after.
    before, after = selftest("unsynchronized_read")
    assert (before, after) == (1.0, 5.0)


def test_launch_blocking_mode_runs_each_launch_before_returning(monkeypatch):
    monkeypatch.setenv("GPUMAT_EMU_LAUNCH_BLOCKING", "1")
    assert selftest("unsynchronized_read") == [5.0, 5.0]
    with pytest.raises(gpumat.CudaError, match="memcheck"):
        selftest("write_past_end")


def test_a_queued_fault_is_reported_by_the_next_synchronization():
    ctx = gpumat.emu(0)
    a = gpumat.array(np.ones(8, dtype=np.float32), ctx)
    with pytest.raises(gpumat.CudaError, match="write_past_end_kernel"):
        selftest("write_past_end")
    # Reported once: the device goes on working.
    ops.fill(a, 3.0)
    np.testing.assert_array_equal(a.asnumpy(), np.full(8, 3.0, dtype=np.float32))


def test_dlpack_export_waits_for_queued_kernels():
    # The emulated device exports its memory as CPU memory (DLPack kDLCPU, zero-copy): the export
    # must wait for the kernels queued before it, as a CPU consumer has no stream to wait on.
    ctx = gpumat.emu(0)
    a = gpumat.array(np.zeros(1000, dtype=np.float32), ctx)
    a.asnumpy()
    selftest("hold:300")  # the fill below stays queued for 300 ms
    ops.fill(a, 7.0)
    view = np.from_dlpack(a)
    np.testing.assert_array_equal(view, np.full(1000, 7.0, dtype=np.float32))


# ---------------------------------------------------------------------------- grid-stride loops


@pytest.mark.parametrize("cap", [1, 2, 3])
def test_grid_stride_loops_iterate_under_the_block_cap(monkeypatch, cap):
    # GPUMAT_EMU_MAX_BLOCKS caps the blocks launchers give grid-stride loops: with 4,099 elements
    # and 256 threads a block, each thread takes up to 17 iterations. A wrong stride would leave
    # NaN (poisoned outputs) or write an element from two blocks (racecheck).
    monkeypatch.setenv("GPUMAT_EMU_MAX_BLOCKS", str(cap))
    rng = np.random.default_rng(cap)
    x = rng.standard_normal((4099,)).astype(np.float32)
    y = rng.standard_normal((4099,)).astype(np.float32)
    ctx = gpumat.emu(0)
    out = gpumat.array(np.full(4099, np.nan, dtype=np.float32), ctx)
    ops.add(gpumat.array(x, ctx), gpumat.array(y, ctx), out)
    np.testing.assert_allclose(out.asnumpy(), x.astype(np.float64) + y, rtol=1e-6)
    logits = rng.standard_normal((700, 10)).astype(np.float32)
    probs = gpumat.array(np.full((700, 10), np.nan, dtype=np.float32), ctx)
    ops.softmax(gpumat.array(logits, ctx), probs)
    ref = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(probs.asnumpy(), ref / ref.sum(axis=1, keepdims=True), rtol=1e-5)


def test_loss_partial_sums_cover_every_element_under_the_block_cap(monkeypatch):
    # The loss kernels' partial sums: one block per partial, capped: every element is still summed.
    monkeypatch.setenv("GPUMAT_EMU_MAX_BLOCKS", "2")
    rng = np.random.default_rng(7)
    p = rng.standard_normal(5000).astype(np.float32)
    t = rng.standard_normal(5000).astype(np.float32)
    ctx = gpumat.emu(0)
    out = gpumat.array(np.full(1, np.nan, dtype=np.float32), ctx)
    ops.mse_loss(gpumat.array(p, ctx), gpumat.array(t, ctx), out)
    ref = float(np.mean((p.astype(np.float64) - t) ** 2))
    assert math.isclose(float(out.asnumpy()[0]), ref, rel_tol=1e-5)


# ---------------------------------------------------------------------------- host memory
# Each case runs in a child process that limits its own address space (RLIMIT_AS), so that what
# runs out is that child's memory, never this machine's.

# The gpumat under test (installed, or built in place), for the children to import.
_GPUMAT_ROOT = str(Path(gpumat.__file__).resolve().parents[1])


def _run_child(code, **env):
    """Runs ``code`` in a fresh interpreter (one OpenMP thread, every check on) and returns its
    stdout lines; fails the test with the child's stderr if it did not exit cleanly."""
    child_env = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    for name in ("GPUMAT_EMU_CHECKS", "GPUMAT_EMU_CHECK_REPEATS"):
        child_env.pop(name, None)
    child_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_GPUMAT_ROOT, os.environ.get("PYTHONPATH")) if p
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env,
        cwd=Path(__file__).resolve().parents[3],  # not the repository: its gpumat/ is sources
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.splitlines()


_STACKS_CHILD = """
import resource, sys
import numpy as np
import gpumat
from gpumat import ops

x = gpumat.array(np.ones((64, 64), np.float32), gpumat.emu(0))
with open("/proc/self/status") as f:
    vm = next(int(line.split()[1]) for line in f if line.startswith("VmSize:")) * 1024
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (vm + (32 << 20), hard))  # no room for the fiber stacks
try:
    ops.relu(x, x)
    gpumat.synchronize(gpumat.emu(0))
    print("FIRST ran")
except MemoryError as exc:
    print("FIRST MemoryError", exc)
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
y = gpumat.array(-np.ones((64, 64), np.float32), gpumat.emu(0))
ops.relu(y, y)
print("SECOND", float(y.asnumpy().sum()))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and RLIMIT_AS")
def test_a_launch_without_memory_for_its_stacks_is_a_memory_error_and_the_next_one_runs():
    # The stacks' address range was reserved once: a first launch that found no memory for it
    # made every later launch fail too, even with memory back; and the error was a CudaError.
    first, second = _run_child(_STACKS_CHILD)
    assert first.startswith("FIRST MemoryError") and "no memory for fiber stacks" in first, first
    assert second == "SECOND 0.0"


# A 64 MiB array (every numpy temporary above glibc's mmap threshold, so freed memory goes back to
# the system and the limit measures what is in use); racecheck's shadow of it is 128 MiB, allocated
# at the first plain kernel write. Two launches with no room for it, then one with room.
_RACE_SHADOW_CHILD = """
import resource
import numpy as np
import gpumat
from gpumat import ops

ctx = gpumat.emu(0)
warm = gpumat.array(np.ones(64, np.float32), ctx)
ops.relu(warm, warm)  # the fiber stacks are reserved by the first launch
x = gpumat.array(-np.ones(16 << 20, np.float32), ctx)
gpumat.synchronize(ctx)
with open("/proc/self/status") as f:
    vm = next(int(line.split()[1]) for line in f if line.startswith("VmSize:")) * 1024
soft, hard = resource.getrlimit(resource.RLIMIT_AS)


def relu(tag):
    try:
        ops.relu(x, x)
        gpumat.synchronize(ctx)
        print(tag, "ran")
    except MemoryError as exc:
        print(tag, "MemoryError", exc)


resource.setrlimit(resource.RLIMIT_AS, (vm + (32 << 20), hard))
relu("FIRST")
relu("AGAIN")
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
relu("ROOM")
print("VALUES", float(x.asnumpy().max()))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and RLIMIT_AS")
def test_no_memory_for_the_racecheck_shadow_fails_the_launch_and_the_next_launch_tries_again():
    # The shadow's allocation was tried at every plain write and, failing, skipped racecheck for
    # the allocation: the launch ran unchecked (with a 256 MiB array, retrying spun for minutes).
    first, again, room, values = _run_child(_RACE_SHADOW_CHILD)
    for line in (first, again):
        assert line.split()[1] == "MemoryError", line
        assert "racecheck: no host memory for the 134217728-byte shadow" in line, line
        assert "of the 67108864-byte allocation at 0x" in line, line
        assert "GPUMAT_EMU_CHECKS=memcheck,initcheck" in line, line
    assert room == "ROOM ran"
    assert values == "VALUES 0.0"


# Allocations under GPUMAT_EMU_HOST_MEMORY_BYTES = 64 MiB: each is charged 13/4 host bytes per byte.
# The 32 MiB device capacity is filled by one 32 MiB tensor, as gpumat.zeros(2**31) fills the
# default 8 GiB; then 8 MiB tensors (26 MiB each), and a 10 MiB one once a cached block is freed.
_HOST_LIMIT_CHILD = """
import gpumat


def zeros(tag, mib):
    try:
        t = gpumat.zeros(mib << 18, device="emu")
        print(tag, "allocated", float(t.numpy().max()))
        return t
    except MemoryError as exc:
        print(tag, "MemoryError", exc)


zeros("CAPACITY", 32)
a = zeros("A", 8)
b = zeros("B", 8)
zeros("C", 8)
del b  # cached by gpumat's allocator, still charged: given back when cudaMalloc refuses
d = zeros("D", 10)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="runs a child process")
def test_an_allocation_the_host_memory_limit_cannot_back_is_a_memory_error():
    # The shadows' host memory was not counted anywhere: a tensor of the emulated device's whole
    # capacity (8 GiB by default) used 26 GiB of host memory, and the OOM killer ended the process.
    lines = _run_child(
        _HOST_LIMIT_CHILD,
        GPUMAT_EMU_MEMORY_BYTES=str(32 << 20),
        GPUMAT_EMU_HOST_MEMORY_BYTES=str(64 << 20),
    )
    capacity, a, b, c, d = lines
    assert capacity.startswith("CAPACITY MemoryError"), capacity
    assert (
        "cudaMalloc of 33554432 bytes: the host cannot back it: it needs 109051904 bytes of host "
        "memory" in capacity
    ), capacity
    assert "hold 0 of the 67108864 bytes GPUMAT_EMU_HOST_MEMORY_BYTES allows" in capacity, capacity
    assert a == "A allocated 0.0" and b == "B allocated 0.0"
    assert c.startswith("C MemoryError"), c
    assert "hold 54525952 of the 67108864 bytes" in c, c  # 2 x 26 MiB
    assert d == "D allocated 0.0"


# A tensor of half the host's available memory, with room for the device (a 1 PiB capacity) but
# not for 3.25 host bytes per byte. The address-space limit keeps a refusal that fails from using
# this machine's memory: an allocation past it fails as the host being out of memory.
_MEM_AVAILABLE_CHILD = """
import resource
import gpumat

with open("/proc/meminfo") as f:
    available = next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:")) * 1024
with open("/proc/self/status") as f:
    vm = next(int(line.split()[1]) for line in f if line.startswith("VmSize:")) * 1024
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), hard))
try:
    gpumat.empty((available // 8,), gpumat.emu(0))  # float32: available / 2 bytes
    print("allocated")
except MemoryError as exc:
    print("MemoryError", exc)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc and RLIMIT_AS")
def test_an_allocation_the_available_host_memory_cannot_back_is_a_memory_error():
    (line,) = _run_child(_MEM_AVAILABLE_CHILD, GPUMAT_EMU_MEMORY_BYTES=str(1 << 50))
    assert line.startswith("MemoryError"), line
    assert "the host cannot back it" in line and "bytes available (MemAvailable)" in line, line
