"""gpumat.get_num_threads / set_num_threads: one thread count for the host kernels' OpenMP loops
and OpenBLAS, starting at OMP_NUM_THREADS (checked in fresh processes), process-wide, lowered
while other processes keep cores busy (unless GPUMAT_DYNAMIC_THREADS=0), with results that agree
across counts (elementwise exactly, sums and products to float32 rounding against float64 numpy)
and bad counts refused without changing the setting."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from helpers import new_rng

import gpumat
import gpumat.ops as ops
from gpumat import _core

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import _common  # noqa: E402  (busy_processes)


@pytest.fixture
def restore_threads():
    before = gpumat.get_num_threads()
    yield
    gpumat.set_num_threads(before)


def _threads_in_fresh_process(env_value):
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if env_value is not None:
        env["OMP_NUM_THREADS"] = env_value
    code = "import gpumat; print(gpumat.get_num_threads())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


@pytest.mark.skipif(not gpumat.build_info()["openmp"], reason="a build without OpenMP: always 1")
@pytest.mark.parametrize("value", ["1", "3"])
def test_default_honours_omp_num_threads(value):
    assert _threads_in_fresh_process(value) == int(value)


def test_default_without_the_variable_is_at_least_one():
    assert _threads_in_fresh_process(None) >= 1


def test_set_and_get_process_wide(restore_threads):
    gpumat.set_num_threads(3)
    assert gpumat.get_num_threads() == 3
    seen = []
    worker = threading.Thread(
        target=lambda: (seen.append(gpumat.get_num_threads()), gpumat.set_num_threads(1))
    )
    worker.start()
    worker.join()
    assert seen == [3] and gpumat.get_num_threads() == 1  # one setting for every thread


@pytest.mark.parametrize(
    "bad, error",
    [(0, ValueError), (-2, ValueError), (2**31, ValueError), (True, TypeError),
     (2.0, TypeError), ("2", TypeError), (None, TypeError)],
)  # fmt: skip
def test_bad_counts_are_refused_and_change_nothing(restore_threads, bad, error):
    gpumat.set_num_threads(2)
    with pytest.raises(error, match="set_num_threads"):
        gpumat.set_num_threads(bad)
    assert gpumat.get_num_threads() == 2


def test_results_agree_across_thread_counts(restore_threads):
    rng, seed = new_rng()
    # sizes past the host kernels' parallel threshold (2**15 elements)
    x = rng.standard_normal((300, 400)).astype(np.float32)
    y = rng.standard_normal((300, 400)).astype(np.float32)
    w = rng.standard_normal((400, 200)).astype(np.float32)
    results = {}
    for n in (1, 3):
        gpumat.set_num_threads(n)
        a, b, c = gpumat.array(x), gpumat.array(y), gpumat.array(w)
        prod = gpumat.empty((300, 400))
        ops.mul(a, b, prod)
        mm = gpumat.empty((300, 200))
        ops.matmul(a, c, mm)
        sm = gpumat.empty((300, 400))
        ops.softmax(a, sm)
        results[n] = [prod.asnumpy(), mm.asnumpy(), sm.asnumpy()]
    np.testing.assert_array_equal(results[1][0], results[3][0])  # elementwise: the same bits
    np.testing.assert_array_equal(results[1][2], results[3][2])  # row-wise: one thread per row
    want = x.astype(np.float64) @ w.astype(np.float64)
    for n in (1, 3):
        np.testing.assert_allclose(
            results[n][1], want, rtol=1e-4, atol=1e-4, err_msg=f"seed {seed}"
        )


BUSY = min(os.cpu_count() or 1, 4)


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="the load is read from /proc/stat")
def test_busy_cores_lower_the_threads_used(restore_threads):
    cores = os.sysconf("SC_NPROCESSORS_ONLN")
    gpumat.set_num_threads(cores)
    assert 1 <= _core.effective_num_threads_() <= cores
    with _common.busy_processes(BUSY):  # it waits 1 s: past the 50 ms sampling period
        used = _core.effective_num_threads_()
    assert 1 <= used <= max(1, cores - BUSY), f"{used} threads beside {BUSY} busy processes"
    gpumat.set_num_threads(1)
    assert _core.effective_num_threads_() == 1


def test_dynamic_threads_can_be_turned_off():
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import _common, gpumat; "
        "from gpumat import _core; gpumat.set_num_threads(3); "
        f"ctx = _common.busy_processes({BUSY}); ctx.__enter__(); "
        "print(_core.effective_num_threads_()); ctx.__exit__(None, None, None)"
    )
    bench = str(Path(__file__).resolve().parents[2] / "benchmarks")
    env = dict(os.environ, GPUMAT_DYNAMIC_THREADS="0")
    out = subprocess.run(
        [sys.executable, "-c", code, bench], env=env, capture_output=True, text=True, check=True
    )
    assert int(out.stdout.strip()) == 3
