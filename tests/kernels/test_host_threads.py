"""gpumat.get_num_threads / set_num_threads: one thread count for the host kernels' parallel loops
on gpumat's thread pool (the BLAS runs single-threaded inside them; loops started from several
Python threads at once, or in a child made by fork(), give the same results), starting at
OMP_NUM_THREADS (checked in fresh processes), process-wide, fixed by default and lowered while
other processes keep cores busy with GPUMAT_DYNAMIC_THREADS=1, with results that are the same
bits on every count (elementwise ops, products split into pieces by shape alone, sums in fixed
blocks) and right against float64 numpy, and bad counts refused without changing the setting."""

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


@pytest.fixture
def restore_threads():
    before = gpumat.get_num_threads()
    yield
    gpumat.set_num_threads(before)


def _run_python(code, env, cwd, *args):
    """stdout of a fresh interpreter run in cwd (not the repository root: there `import gpumat`
    would find the unbuilt source tree instead of the installed package)."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, cwd=cwd, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _threads_in_fresh_process(env_value, cwd):
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if env_value is not None:
        env["OMP_NUM_THREADS"] = env_value
    return int(_run_python("import gpumat; print(gpumat.get_num_threads())", env, cwd))


_WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def _openmp_wait_settings(cwd, **env_values):
    """(libgomp's wait settings as it displays them when it loads, the two variables as a child
    process of `import gpumat` sees them) in a fresh process with `env_values` set."""
    env = {k: v for k, v in os.environ.items() if k not in _WAIT_VARS}
    env.update(env_values, OMP_DISPLAY_ENV="VERBOSE")
    child = f"import os; print([os.environ.get(v) for v in {_WAIT_VARS!r}])"
    code = (
        f"import subprocess, sys\nimport gpumat\nchild = {child!r}\n"
        "print(subprocess.run([sys.executable, '-c', child], capture_output=True, text=True,"
        " check=True).stdout.strip())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    shown = {}
    for line in out.stderr.splitlines():  # libgomp's display: "  NAME = 'VALUE'"
        name, _, value = line.strip().partition(" = ")
        if name in _WAIT_VARS:
            shown[name] = value.strip("'")
    return shown, out.stdout.strip()


@pytest.mark.skipif(not gpumat.build_info()["openmp"], reason="a build without OpenMP")
def test_openmp_wait_defaults_reach_libgomp_only(tmp_path):
    # gpumat's libgomp spins briefly, then sleeps; the settings do not stay in os.environ, where
    # every child process (a PyTorch program, say) would inherit gpumat's wait policy
    shown, child = _openmp_wait_settings(tmp_path)
    assert shown == {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "2000"}
    assert child == "[None, None]"
    # a user's own setting wins, and stays for the children
    shown, child = _openmp_wait_settings(tmp_path, OMP_WAIT_POLICY="ACTIVE", GOMP_SPINCOUNT="77")
    assert shown == {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "77"}
    assert child == "['ACTIVE', '77']"


@pytest.mark.parametrize("value", ["1", "3"])
def test_default_honours_omp_num_threads(value, tmp_path):
    assert _threads_in_fresh_process(value, tmp_path) == int(value)


def test_default_without_the_variable_is_at_least_one(tmp_path):
    assert _threads_in_fresh_process(None, tmp_path) >= 1


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


# (M, N, K, trans_a, trans_b): products past the host matmul's split threshold (2**21
# multiply-adds), cut along M or N, with every transpose, edges off the 16-wide pieces, and one
# below the threshold; cut along K (weight gradients: c's sides short, or K at least twice the
# longer side), the last piece ragged.
PRODUCTS = [
    (128, 128, 2048, True, False),
    (65, 100, 3001, True, True),
    (128, 512, 2050, False, True),
    (1000, 256, 784, False, True),
    (257, 784, 300, False, False),
    (256, 784, 1000, True, False),
    (64, 4099, 288, False, False),
    (200, 130, 900, True, True),
    (20, 30, 40, False, False),
]


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_products_and_sums_are_the_same_bits_on_any_thread_count(restore_threads, threads):
    rng, seed = new_rng()
    results = {}
    for n in (1, threads):
        gpumat.set_num_threads(n)
        got = []
        for m, nn, k, ta, tb in PRODUCTS:
            a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
            b = rng.standard_normal((nn, k) if tb else (k, nn)).astype(np.float32)
            out = gpumat.empty((m, nn))
            ops.matmul(gpumat.array(a), gpumat.array(b), out, trans_a=ta, trans_b=tb)
            want = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
            got.append(out.asnumpy())
            np.testing.assert_allclose(got[-1], want, rtol=1e-4, atol=1e-3, err_msg=f"seed {seed}")
        # batched: a product per item, and one summed over the batch (a shared operand's gradient)
        a = rng.standard_normal((6, 120, 300)).astype(np.float32)
        b = rng.standard_normal((6, 300, 150)).astype(np.float32)
        for batch_out in ((6, 120, 150), (1, 120, 150)):
            out = gpumat.empty(batch_out)
            ops.bmm(gpumat.array(a), gpumat.array(b), out)
            want = np.einsum("bmk,bkn->bmn", a.astype(np.float64), b.astype(np.float64))
            if batch_out[0] == 1:
                want = want.sum(axis=0, keepdims=True)
            got.append(out.asnumpy())
            np.testing.assert_allclose(got[-1], want, rtol=1e-4, atol=2e-3, err_msg=f"seed {seed}")
        # convolutions: the image-by-image schedule (at least a CPU's worth of images; its filter
        # gradient sums fixed groups) and the chunked one (one image)
        for batch in (1, os.sysconf("SC_NPROCESSORS_ONLN") + 1):
            x = rng.standard_normal((batch, 6, 13, 11)).astype(np.float32)
            w = rng.standard_normal((8, 6, 3, 3)).astype(np.float32)
            dy = rng.standard_normal((batch, 8, 7, 6)).astype(np.float32)
            xs, ws, dys = gpumat.array(x), gpumat.array(w), gpumat.array(dy)
            for op, args, shape in (
                (ops.conv2d, (xs, ws), dy.shape),
                (ops.conv2d_gradient_input, (dys, ws), x.shape),
                (ops.conv2d_gradient_filter, (xs, dys), w.shape),
            ):
                out = gpumat.empty(shape)
                op(*args, out, stride=2, padding=1)
                got.append(out.asnumpy())
        # attention in tiles (several query and key tiles, causal and not) and its gradient,
        # whose dK, dV and dQ sums run over the tiles in order
        q, k, v = (rng.standard_normal((3, 130, 24)).astype(np.float32) for _ in range(3))
        qkv = [gpumat.array(a) for a in (q, k, v)]
        for causal in (False, True):
            out = gpumat.empty((3, 130, 25))
            ops.attention(*qkv, out, 0.2, causal)
            dout = gpumat.array(rng.standard_normal((3, 130, 25)).astype(np.float32))
            dqkv = gpumat.empty((3 * q.size,))
            ops.attention_gradient(*qkv, out, dout, dqkv, 0.2, causal)
            got += [out.asnumpy(), dqkv.asnumpy()]
        # layer norm: row sums in lanes, the weight gradient's column sums over 3000 rows
        x = rng.standard_normal((3000, 100)).astype(np.float32)
        dy = rng.standard_normal((3000, 100)).astype(np.float32)
        stats, dw = gpumat.empty((3000, 2)), gpumat.empty((100,))
        ops.layer_norm_stats(gpumat.array(x), stats, 1e-5)
        ops.layer_norm_weight_gradient(gpumat.array(x), stats, gpumat.array(dy), dw)
        got += [stats.asnumpy(), dw.asnumpy()]
        # clip_grad_norm_'s norms: per tensor a double sum in fixed blocks
        tensors = [gpumat.array(rng.standard_normal(k).astype(np.float32)) for k in (70000, 9)]
        for norm_type in (2.0, 1.0, 3.0):
            norm = gpumat.empty((1,))
            ops.total_norm_multi(tensors, norm_type, norm)
            got.append(norm.asnumpy())
        # a double sum over rows past the parallel threshold
        logits = rng.standard_normal((5000, 10)).astype(np.float32)
        target = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 5000)]
        loss = gpumat.empty((1,))
        ops.cross_entropy(gpumat.array(logits), gpumat.array(target), loss)
        got.append(loss.asnumpy())
        results[n] = got
        rng = np.random.default_rng(seed)  # the same inputs for the next count
    for i, (one, many) in enumerate(zip(results[1], results[threads], strict=True)):
        np.testing.assert_array_equal(one, many, err_msg=f"result {i}, seed {seed}")


def _pool_workload(rng):
    """Inputs, and a function of them that runs loops past every parallel threshold (a product
    cut into pieces, a column-sum in fixed blocks, an elementwise loop, a transpose)."""
    a = rng.standard_normal((300, 500)).astype(np.float32)
    b = rng.standard_normal((500, 200)).astype(np.float32)

    def run():
        x, y = gpumat.array(a), gpumat.array(b)
        mm, sums, prod, t = (gpumat.empty(s) for s in ((300, 200), (200,), (300, 500), (500, 300)))
        ops.matmul(x, y, mm)
        ops.sum(mm, sums, 0)
        ops.mul(x, x, prod)
        ops.transpose(x, t)
        return [mm.asnumpy(), sums.asnumpy(), prod.asnumpy(), t.asnumpy()]

    want = a.astype(np.float64) @ b.astype(np.float64)
    return run, [want, want.sum(axis=0), a.astype(np.float64) ** 2, a.T]


def test_parallel_loops_from_several_python_threads(restore_threads):
    # The kernels release the GIL: loops started from several threads at once share the pool (a
    # caller that finds it busy runs its tasks alone), with the one-thread bits and no hang.
    rng, seed = new_rng()
    run, want = _pool_workload(rng)
    gpumat.set_num_threads(1)
    alone = run()
    for got, ref in zip(alone, want, strict=True):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3, err_msg=f"seed {seed}")
    gpumat.set_num_threads(os.cpu_count() or 2)
    results, errors = [], []

    def worker():
        try:
            for _ in range(5):
                results.append(run())
        except Exception as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung in a parallel loop"
    assert errors == [] and len(results) == 20
    for got in results:
        for i, (g, one) in enumerate(zip(got, alone, strict=True)):
            np.testing.assert_array_equal(g, one, err_msg=f"result {i}, seed {seed}")


# In a fresh process: run the workload on the pool, fork, run it again in the child (which has
# none of the parent's pool threads) and in the parent; each compares with float64 numpy.
_FORKED = """
import os, sys
import numpy as np
sys.path[:0] = [sys.argv[1], os.path.dirname(sys.argv[1])]  # the test module and tests/helpers
import gpumat
from test_host_threads import _pool_workload

gpumat.set_num_threads(max(2, os.cpu_count() or 2))
run, want = _pool_workload(np.random.default_rng(int(sys.argv[2])))

def check(tag):
    for i, (got, ref) in enumerate(zip(run(), want, strict=True)):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3, err_msg=f"{tag} {i}")

check("parent before fork")
pid = os.fork()
if pid == 0:
    try:
        check("child")
        code = 0
    except BaseException as e:
        print("child failed:", e, file=sys.stderr)
        code = 1
    os._exit(code)
check("parent after fork")
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, status
print("ok")
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork() on this platform")
def test_parallel_loops_run_in_a_forked_child(tmp_path):
    # A child of fork() has only the forking thread: its first loop starts a pool of its own
    # (multiprocessing's default start method on Linux, DataLoader-style workers).
    _, seed = new_rng()
    out = subprocess.run(
        [sys.executable, "-c", _FORKED, str(Path(__file__).parent), str(seed)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


BUSY = min(os.cpu_count() or 1, 4)
BENCH_DIR = str(Path(__file__).resolve().parents[2] / "benchmarks")
# In a fresh process: set n threads, start BUSY core-spinning processes (busy_processes waits 1 s,
# past the 50 ms sampling period), print the threads the next loop would use.
_UNDER_LOAD = (
    "import sys; sys.path.insert(0, sys.argv[1]); import _common, gpumat; "
    "from gpumat import _core; gpumat.set_num_threads(int(sys.argv[2])); "
    f"ctx = _common.busy_processes({BUSY}); ctx.__enter__(); "
    "print(_core.effective_num_threads_()); ctx.__exit__(None, None, None)"
)


def _used_under_load(tmp_path, n, dynamic):
    env = dict(os.environ)
    env.pop("GPUMAT_DYNAMIC_THREADS", None)
    if dynamic is not None:
        env["GPUMAT_DYNAMIC_THREADS"] = dynamic
    return int(_run_python(_UNDER_LOAD, env, tmp_path, BENCH_DIR, str(n)))


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="the load is read from /proc/stat")
def test_dynamic_threads_follow_the_load(tmp_path):
    cores = os.sysconf("SC_NPROCESSORS_ONLN")
    used = _used_under_load(tmp_path, cores, "1")
    assert 1 <= used <= max(1, cores - BUSY), f"{used} threads beside {BUSY} busy processes"
    assert _used_under_load(tmp_path, 1, "1") == 1


@pytest.mark.parametrize("dynamic", [None, "0"], ids=["unset", "0"])
def test_threads_are_fixed_by_default(tmp_path, dynamic):
    # the default: the count set_num_threads gave, whatever the load
    assert _used_under_load(tmp_path, 3, dynamic) == 3


def test_simd_loops_give_the_scalar_formulas_bits():
    # The loops compiled also for AVX2 and AVX-512 (GPUMAT_SIMD_CLONES: the SGD, momentum, Adam
    # and Adadelta updates, the channel sums) give, on whatever version this CPU runs, the bits
    # of the scalar formulas: each IEEE operation in the kernels' order (numpy float32, one
    # rounding per operation), and the channel sums' fixed eight double partials. Sizes cross
    # the parallel threshold and the 16384-element blocks, with ragged ends.
    rng, seed = new_rng()
    n = 3 * 16384 + 37
    f32 = np.float32
    g = rng.standard_normal(n).astype(f32)
    sq, acc = (np.abs(rng.standard_normal(n)).astype(f32) for _ in range(2))
    p = rng.standard_normal(n).astype(f32)
    lr, rho, eps = f32(0.7), f32(0.9), f32(1e-6)
    arrays = [gpumat.array(a) for a in (p, g, sq, acc)]
    ops.adadelta_update_multi([arrays[0]], [arrays[1]], [arrays[2]], [arrays[3]], lr, rho, eps)
    s = rho * sq + (f32(1) - rho) * g * g
    d = np.sqrt(acc + eps) / np.sqrt(s + eps) * g
    want = (p - lr * d, s, rho * acc + (f32(1) - rho) * d * d)
    for got, ref, name in zip(
        (arrays[0], arrays[2], arrays[3]), want, ("p", "sq", "acc"), strict=True
    ):
        np.testing.assert_array_equal(got.asnumpy(), ref, err_msg=f"adadelta {name}, seed {seed}")

    # Adam, multi-tensor (the SIMD loop) against the single-tensor op (a scalar loop)
    m, v = rng.standard_normal(n).astype(f32), np.abs(rng.standard_normal(n)).astype(f32)
    multi = [gpumat.array(a) for a in (p, g, m, v)]
    single = [gpumat.array(a) for a in (p, g, m, v)]
    args = (0.003, 0.8, 0.99, 1e-6, 3)
    ops.adam_update_multi(*([a] for a in multi), *args)
    ops.adam_update(*single, *args)
    for a, b, name in zip(multi, single, ("p", "g", "m", "v"), strict=True):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy(), err_msg=f"adam {name}, seed {seed}")

    # SGD and momentum SGD over several tensors in one region (blocks of different tensors
    # shared out together; sizes below, at and past a block, one empty)
    sizes = (5, 16384, 0, n, 1000)
    ps = [rng.standard_normal(k).astype(f32) for k in sizes]
    gs = [rng.standard_normal(k).astype(f32) for k in sizes]
    vs = [rng.standard_normal(k).astype(f32) for k in sizes]
    lr, wd, mom, damp = f32(0.05), f32(0.01), f32(0.9), f32(0.1)
    for decay in (f32(0), wd):
        gp = [gpumat.array(a) for a in ps]
        ops.sgd_update(gp, [gpumat.array(a) for a in gs], lr, decay)
        for t, (got, p0, g0) in enumerate(zip(gp, ps, gs, strict=True)):
            ref = p0 - lr * (g0 + decay * p0) if decay else p0 - lr * g0
            np.testing.assert_array_equal(got.asnumpy(), ref, err_msg=f"sgd {t}, seed {seed}")
    for nesterov in (False, True):
        gp, gv = [gpumat.array(a) for a in ps], [gpumat.array(a) for a in vs]
        ops.momentum_sgd_update(gp, [gpumat.array(a) for a in gs], gv, lr, mom, damp, wd, nesterov)
        for t, (p0, g0, v0) in enumerate(zip(ps, gs, vs, strict=True)):
            g1 = g0 + wd * p0
            v1 = mom * v0 + (f32(1) - damp) * g1
            p1 = p0 - lr * (g1 + mom * v1 if nesterov else v1)
            np.testing.assert_array_equal(
                gv[t].asnumpy(), v1, err_msg=f"momentum v {t}, seed {seed}"
            )
            np.testing.assert_array_equal(
                gp[t].asnumpy(), p1, err_msg=f"momentum p {t}, seed {seed}"
            )

    # channel sums of (outer, channels, inner): element k of a row to partial k % 8, in order
    x = rng.standard_normal((5, 3, 4099)).astype(f32)
    out = gpumat.empty((3,))
    ops.reduce_sum_channels(gpumat.array(x), out)
    lanes = np.zeros((3, 8))
    for row in range(5):
        for k in range(4099):
            lanes[:, k % 8] += x[row, :, k].astype(np.float64)
    want = ((lanes[:, 0] + lanes[:, 1]) + (lanes[:, 2] + lanes[:, 3])) + (
        (lanes[:, 4] + lanes[:, 5]) + (lanes[:, 6] + lanes[:, 7])
    )
    np.testing.assert_array_equal(
        out.asnumpy(), want.astype(f32), err_msg=f"channel sums, seed {seed}"
    )
