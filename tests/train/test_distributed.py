"""gpumat.distributed: 2-rank data-parallel training against single-process training.

Each test launches ``mpiexec -n 2 python tests/train/distributed_worker.py ...`` (the MPICH
launcher from the ``mpich`` wheel, installed by the ``test`` and ``distributed`` extras) with a
wall-clock timeout, so a hang fails the test instead of stalling CI.

Tolerance of "distributed weights == single-process weights after K steps" (test_matches_single_
process). Both runs start from the same weights and see the same global batches; they differ only
in the order of float32 additions. A step's batch gradient is the mean of the B per-sample
gradients, g = (1/B) sum_b g_b. One process sums all B terms in one order; two ranks each sum B/2
of them and the allreduce adds the two partial sums. Two float32 summations of the same n terms in
different orders each lie within gamma_n * sum_b |terms| of the exact sum (Higham, "Accuracy and
Stability of Numerical Algorithms", 2nd ed., 2002, eq. (4.4): |fl(sum) - sum| <= gamma_{n-1} sum
|x_i|, gamma_n = n u / (1 - n u), u = 2**-24), so per gradient entry

    |g_dist - g_single| <= 2 gamma_n S_k,    S_k = (1/B) sum_b |g_b|   (float64, per entry)

where n = 784, the longest float32 summation a step performs (the first layer's dot products over
the 784 inputs, which BLAS may also order differently for B/2 rows than for B; 784 > B covers the
batch sum as well). The SGD update adds lr * |g_dist - g_single| to the weight difference, plus one
rounding of W - lr*g per step in each run (u |W| each). Summed over K steps:

    |W_dist - W_single| <= c * (sum_k lr * 2 gamma_n S_k + 2 K u |W_K|),   c = 2,

where c = 2 is a safety factor for what this first-order bound leaves out: a weight difference
made at step k changes the gradients of later steps (by a factor up to (1 + lr L)^(K - k), L the
gradient's Lipschitz constant, small at lr = 0.2 over K = 6 steps). Measured: the worst entry's
error is about 0.1 of the bound (numpy and cpu backends), so the bound is neither violated nor
vacuous. The test also checks that
the bound is tight enough to catch real mistakes: training on one rank's half batch alone (what a
missing or wrong allreduce does) violates it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import DEVICE_PARAMS

import gpumat
from gpumat import datasets, models, optim, train
from gpumat.runtime import Executor

pytest.importorskip("mpi4py", reason="gpumat.distributed needs mpi4py: pip install '.[test]'")

HERE = Path(__file__).resolve().parent
WORKER = HERE / "distributed_worker.py"
sys.path.insert(0, str(HERE))
import distributed_worker as worker  # noqa: E402

STEPS, BATCH, LR = 6, 64, 0.2
U32 = 2.0**-24
LAUNCH_TIMEOUT_S = 120  # the whole mpiexec run; a healthy one takes a few seconds
COLLECTIVE_TIMEOUT_S = 5  # GPUMAT_DISTRIBUTED_TIMEOUT for the failure tests


def _mpiexec() -> str:
    """The launcher next to this Python (a venv's mpich wheel), else the one on PATH."""
    local = Path(sys.executable).parent / "mpiexec"
    found = str(local) if local.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.fail("mpiexec not found: pip install '.[test]' installs the mpich wheel's launcher")
    return found


def launch(tmp_path, backend: str, mode: str = "ok", fail_step: int = 3, timeout_s=None):
    """Run the worker on 2 ranks; return (CompletedProcess, seconds it took)."""
    env = dict(os.environ)
    env["GPUMAT_DISTRIBUTED_TIMEOUT"] = str(COLLECTIVE_TIMEOUT_S)
    env.pop("OMP_NUM_THREADS", None)
    if os.geteuid() == 0:  # Open MPI's mpiexec (a GPU machine's) refuses root without these
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [
        _mpiexec(),
        "-n",
        "2",
        sys.executable,
        str(WORKER),
        str(tmp_path),
        backend,
        str(STEPS),
        str(BATCH),
        str(LR),
        mode,
        str(fail_step),
    ]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout_s or LAUNCH_TIMEOUT_S,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} hung past {exc.timeout} s:\n{exc.stdout}\n{exc.stderr}")
    return proc, time.monotonic() - t0


def single_process_reference(backend: str):
    """SGD on one process over the same global batches; also S_k summed over the steps.

    Returns (initial params, final params, sum_k lr * S_k), numpy float arrays per name.
    """
    ctx = train.get_device(backend)
    model = models.mlp(seed=worker.MODEL_SEED)
    images, labels = worker.make_data(STEPS, BATCH)
    onehot = datasets.one_hot(labels, model.num_classes)
    params = model.init_params(ctx)
    values = [params[k] for k in model.params]
    initial = {
        k: np.array(v if isinstance(v, np.ndarray) else v.asnumpy()) for k, v in params.items()
    }
    executor = Executor([model.loss, *model.grads], device=ctx)
    per_sample = Executor(list(model.grads), device=None)
    opt = optim.SGD(values, LR)
    abs_sum = {k: np.zeros(v.shape) for k, v in initial.items()}
    for k in range(STEPS):
        xb = images[k * BATCH : (k + 1) * BATCH]
        yb = onehot[k * BATCH : (k + 1) * BATCH]
        # S_k at this step's weights: the mean of |per-sample gradient| (numpy, batch of one).
        host = [np.array(v if isinstance(v, np.ndarray) else v.asnumpy()) for v in values]
        feed = dict(zip(model.params.values(), host, strict=True))
        for b in range(BATCH):
            feed[model.x], feed[model.y_] = xb[b : b + 1], yb[b : b + 1]
            for name, g in zip(model.params, per_sample.run(feed), strict=True):
                abs_sum[name] += LR * np.abs(np.asarray(g, dtype=np.float64)) / BATCH
        feed = dict(zip(model.params.values(), values, strict=True))
        feed[model.x], feed[model.y_] = xb, yb
        _, *grads = executor.run(feed)
        opt.step(grads)
    final = {
        k: np.array(v if isinstance(v, np.ndarray) else v.asnumpy()) for k, v in params.items()
    }
    return initial, final, abs_sum


def tolerance(final: dict, lr_s_sum: dict) -> dict:
    """Per-entry bound of the module docstring: c (sum_k lr 2 gamma_n S_k + 2 K u |W_K|)."""
    n = 784
    gamma = n * U32 / (1 - n * U32)
    c = 2.0
    return {
        k: c * (2 * gamma * lr_s_sum[k] + 2 * STEPS * U32 * np.abs(final[k].astype(np.float64)))
        for k in final
    }


BACKENDS = [pytest.param("numpy", id="numpy"), *DEVICE_PARAMS]


@pytest.mark.parametrize("backend", BACKENDS)
def test_matches_single_process(tmp_path, backend):
    proc, _ = launch(tmp_path, backend)
    assert proc.returncode == 0, f"mpiexec exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]
    initial, final, lr_s_sum = single_process_reference(backend)
    tol = tolerance(final, lr_s_sum)
    for name in final:
        w0, w1 = ranks[0][name], ranks[1][name]
        # Every rank holds the same weights bit for bit (compared as raw bytes: NaN-safe).
        assert w0.dtype == w1.dtype == np.float32
        assert np.array_equal(w0.view(np.uint32), w1.view(np.uint32)), f"{name} differs by rank"
        err = np.abs(w0.astype(np.float64) - final[name])
        worst = float(np.max(err / tol[name]))
        assert worst <= 1.0, f"{name}: |dist - single| reaches {worst:.3g} x the bound"
        # The bound is far below what training changes, so it can tell a wrong average apart.
        moved = np.abs(final[name].astype(np.float64) - initial[name])
        assert np.max(tol[name]) < 1e-2 * np.max(moved), name
    assert sorted(int(r["local_rank"]) for r in ranks) == [0, 1]  # one node, two ranks
    # Both ranks report the same (globally averaged) loss.
    assert np.array_equal(ranks[0]["loss"], ranks[1]["loss"])
    # Small buckets: several allreduces, and the result is exactly fl(a0 + a1) * 0.5 per entry
    # (a sum of two float32 values rounds once; the halving is exact).
    n = len(final)
    assert int(ranks[0]["num_buckets"]) > 2
    assert int(ranks[0]["num_allreduce_calls"]) == int(ranks[0]["num_buckets"])
    for i in range(n):
        expected = (ranks[0][f"mine_{i}"] + ranks[1][f"mine_{i}"]) * np.float32(0.5)
        for r in range(2):
            assert np.array_equal(ranks[r][f"avg_{i}"], expected), (i, r)


def test_bound_catches_missing_allreduce():
    """Training on half of each batch (what a rank does with no gradient averaging) breaks the
    bound: the test above is able to fail."""
    _, final, lr_s_sum = single_process_reference("numpy")
    tol = tolerance(final, lr_s_sum)
    model = models.mlp(seed=worker.MODEL_SEED)
    images, labels = worker.make_data(STEPS, BATCH)
    half = BATCH // 2
    keep = np.concatenate([np.arange(k * BATCH, k * BATCH + half) for k in range(STEPS)])
    history = train.fit(
        model,
        ((images[keep], labels[keep]), None),
        device=None,
        epochs=1,
        batch_size=half,
        lr=LR,
        shuffle=False,
        progress=False,
        verbose=False,
    )
    worst = max(float(np.max(np.abs(history.params[k] - final[k]) / tol[k])) for k in final)
    assert worst > 10.0


@pytest.mark.parametrize("mode", ["hang", "exit", "raise", "die", "exit0"])
def test_failed_rank_ends_the_job(tmp_path, mode):
    """Rank 1 fails at step 3; rank 0 must not wait forever in the allreduce, and the job must end
    with a non-zero status and a message.

    hang (no more MPI calls): rank 0's deadline of GPUMAT_DISTRIBUTED_TIMEOUT seconds must fire,
    print what timed out and abort the job. exit (a clean sys.exit, MPI finalised): rank 1 waits in
    the final barrier at exit while rank 0 waits in the allreduce; one of the two deadlines fires.
    raise: the uncaught exception aborts the job at once (gpumat.distributed.init's excepthook).
    die and exit0 (os._exit(3) and os._exit(0), MPI not finalised): init's os._exit wrapper aborts
    the job, naming the rank and the status; before it, MPICH's launcher reported exit0 as a
    success (status 0, no message) after killing rank 0.
    """
    proc, took = launch(tmp_path, "cpu", mode=mode, timeout_s=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert not (tmp_path / "rank0.npz").exists(), "rank 0 finished training without its peer"
    assert took < 60
    if mode == "hang":
        assert f"did not complete within {COLLECTIVE_TIMEOUT_S:g} s" in out, out
        assert "rank 0 of 2: allreduce of bucket 0" in out, out
    elif mode == "exit":
        assert f"did not complete within {COLLECTIVE_TIMEOUT_S:g} s" in out, out
        assert (
            "rank 0 of 2: allreduce of bucket 0" in out or "rank 1 of 2: the final barrier" in out
        ), out
    elif mode == "raise":
        assert "injected failure on rank 1" in out, out
        assert "rank 1 raised RuntimeError; aborting all ranks" in out, out
    else:
        status = 3 if mode == "die" else 0
        assert f"rank 1 of 2 called os._exit({status}) before the end of the run" in out, out


@pytest.mark.parametrize(
    "mode, message",
    [
        ("hang_after", "rank 1 of 2: the final barrier (every rank's end of the run, at exit)"),
        ("late_init", "in _start_mpi_waiting_for_every_rank"),
        ("local_rank", "rank 0 of 2: local_rank (gathering every rank's host name)"),
    ],
)
def test_a_hang_outside_training_ends_the_job(tmp_path, mode, message):
    """Deadlines beyond the training collectives: rank 0 hanging after the last collective (as in
    a final validation) is caught by the others' final barrier at exit; a rank that never starts
    MPI by faulthandler's deadline on MPI_Init; a rank that never joins local_rank() by its
    deadline. Before,
    each of these left the job running until the launcher was killed."""
    proc, took = launch(tmp_path, "cpu", mode=mode, timeout_s=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert took < 60
    assert message in out, out
    if mode == "late_init":
        assert f"Timeout (0:00:0{COLLECTIVE_TIMEOUT_S})!" in out, out
    else:
        assert f"did not complete within {COLLECTIVE_TIMEOUT_S:g} s" in out, out


# --------------------------------------------------------------------------------------------------
# one process (MPI singleton, world size 1): the API's checks and bucketing
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dist():
    from gpumat import distributed

    distributed.init()
    return distributed


def test_single_rank(dist, ctx):
    assert (dist.rank(), dist.world_size(), dist.is_root(), dist.local_rank()) == (0, 1, True, 0)
    rng = np.random.default_rng(5)
    values = [rng.standard_normal((3, 4), dtype=np.float32), rng.standard_normal(7)]
    arrays = [gpumat.array(v, ctx) for v in values]
    avg = dist.GradientAverager([(3, 4), (7,)])
    out = avg.average(arrays)
    assert out[0] is arrays[0] and out[1] is arrays[1]  # one rank: nothing to average
    np.testing.assert_array_equal(out[0].asnumpy(), values[0])
    dist.broadcast_parameters(arrays)  # root 0 keeps its own values
    np.testing.assert_array_equal(arrays[1].asnumpy(), values[1].astype(np.float32))
    assert dist.broadcast_seed(1234) == 1234
    np.testing.assert_allclose(dist.allreduce_mean(np.array([2.5, -1.0])), [2.5, -1.0])
    dist.barrier()
    assert dist.cuda_aware_mpi() in (True, False)


def test_bucketing(dist):
    # Buckets of 30 floats: [10, 20] fills one exactly; 5 starts the next; 100 (over the cap) is
    # alone.
    avg = dist.GradientAverager([(10,), (4, 5), (5,), (10, 10), (3,)], bucket_bytes=120)
    assert avg.buckets == [[0, 1], [2], [3], [4]]
    assert dist.GradientAverager([(784, 256), (256,)]).buckets == [[0, 1]]  # 25 MiB default


def test_cuda_aware_override(dist, monkeypatch):
    monkeypatch.setenv("GPUMAT_MPI_CUDA_AWARE", "1")
    assert dist.cuda_aware_mpi() is True
    monkeypatch.setenv("GPUMAT_MPI_CUDA_AWARE", "0")
    assert dist.cuda_aware_mpi() is False


def test_bad_input(dist, monkeypatch):
    avg = dist.GradientAverager([(2, 3)])
    with pytest.raises(ValueError, match="got 2 gradients for 1 shapes"):
        avg.average([np.zeros((2, 3), np.float32)] * 2)
    with pytest.raises(ValueError, match=r"gradient 0 has shape \(3, 2\), expected \(2, 3\)"):
        avg.average([np.zeros((3, 2), np.float32)])
    with pytest.raises(TypeError, match="array 0 is a list"):
        avg.average([[1.0, 2.0]])
    with pytest.raises(TypeError, match="dtype int64"):
        avg.average([np.zeros((2, 3), np.int64)])
    with pytest.raises(TypeError, match="bucket_bytes must be an int"):
        dist.GradientAverager([(2,)], bucket_bytes=2.5)
    with pytest.raises(ValueError, match="bucket_bytes must be >= 4"):
        dist.GradientAverager([(2,)], bucket_bytes=0)
    with pytest.raises(ValueError, match="negative dimension"):
        dist.GradientAverager([(2, -1)])
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout_s"):
            dist.GradientAverager([(2,)], timeout_s=bad)
    with pytest.raises(TypeError, match="timeout_s"):
        dist.init(timeout_s="soon")
    monkeypatch.setenv("GPUMAT_DISTRIBUTED_TIMEOUT", "ten")
    with pytest.raises(ValueError, match="GPUMAT_DISTRIBUTED_TIMEOUT"):
        dist.init()
    monkeypatch.delenv("GPUMAT_DISTRIBUTED_TIMEOUT")
    with pytest.raises(ValueError, match="root 1 is not a rank of 1"):
        dist.broadcast_parameters([np.zeros(3, np.float32)], root=1)
    with pytest.raises(TypeError, match="root must be an int"):
        dist.broadcast_parameters([np.zeros(3, np.float32)], root="0")
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*63\)"):
        dist.broadcast_seed(-5)
    with pytest.raises(TypeError, match="comm must be an mpi4py.MPI.Comm"):
        dist.init(comm="world")


def test_fit_rejects_uneven_shards(dist, monkeypatch):
    monkeypatch.setattr(dist, "world_size", lambda: 3)  # as if launched on 3 ranks
    images, labels = worker.make_data(2, 64)
    with pytest.raises(ValueError, match="batch_size=64 is not a multiple of the 3 ranks"):
        train.fit(
            models.mlp(), ((images, labels), None), batch_size=64, distributed=True, progress=False
        )
