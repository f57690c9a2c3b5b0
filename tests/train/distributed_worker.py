"""One rank of the 2-rank tests in test_distributed.py, launched there with ``mpiexec -n 2``.

    python distributed_worker.py OUT BACKEND STEPS BATCH LR MODE [FAIL_STEP]

Trains ``gpumat.models.mlp()`` with ``train.fit(..., distributed=True)`` for STEPS steps of global
batch BATCH (plain SGD at LR) on random data that every rank (and the test) regenerates from
:data:`DATA_SEED`, then writes its parameters to ``OUT/rank{r}.npz``, with the mean over
the ranks of per-rank random arrays, averaged in 64 KiB buckets (several allreduces).
MODE ``ok`` trains normally;
``hang``, ``die``, ``exit0``, ``exit`` and ``raise`` make rank 1, at step FAIL_STEP, stop calling
MPI (sleep), exit at once without finalising MPI (``os._exit(3)``, ``os._exit(0)``), exit cleanly
with status 0 (``sys.exit``: MPI is finalised), or raise an exception, to test that the other rank
does not wait forever. ``late_init`` makes rank 1 sleep before ``distributed.init`` (rank 0 waits
in MPI_Init), ``local_rank`` makes rank 1 sleep while rank 0 asks for its local rank, and
``hang_after`` makes rank 0 sleep after its last collective (where a final validation would run).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np

DATA_SEED = 20261123
MODEL_SEED = 7


def make_data(steps: int, batch: int):
    """Images uniform in [0, 1), float32 (steps*batch, 784); labels int64 in 0..9."""
    rng = np.random.default_rng(DATA_SEED)
    n = steps * batch
    return rng.random((n, 784), dtype=np.float32), rng.integers(0, 10, n)


def main(argv: list[str]) -> int:
    out, backend, steps, batch, lr, mode = argv[:6]
    steps, batch, lr = int(steps), int(batch), float(lr)
    fail_step = int(argv[6]) if len(argv) > 6 else 2

    import gpumat
    from gpumat import distributed, models, optim, train

    if mode == "late_init" and os.environ.get("PMI_RANK") == "1":
        time.sleep(600)
    distributed.init()
    rank = distributed.rank()
    if mode == "local_rank":
        if rank == 1:
            time.sleep(600)
        distributed.local_rank()

    class FailingSGD(optim.SGD):
        """SGD whose rank-1 copy fails at ``fail_step`` the way MODE says."""

        count = 0

        def step(self, grads):
            FailingSGD.count += 1
            if rank == 1 and FailingSGD.count == fail_step:
                if mode == "hang":
                    time.sleep(600)
                elif mode == "die":
                    os._exit(3)
                elif mode == "exit0":
                    os._exit(0)
                elif mode == "exit":
                    sys.exit(0)
                elif mode == "raise":
                    raise RuntimeError("injected failure on rank 1")
            super().step(grads)

    model = models.mlp(seed=MODEL_SEED)
    history = train.fit(
        model,
        (make_data(steps, batch), None),
        device=backend,
        epochs=1,
        batch_size=batch,
        optimizer=lambda ps: FailingSGD(ps, lr),
        shuffle=False,
        progress=False,
        verbose=False,
        distributed=True,
    )
    params = {
        k: (v if isinstance(v, np.ndarray) else v.asnumpy()) for k, v in history.params.items()
    }
    # Small buckets (64 KiB) so that several collectives run, one gradient bigger than a bucket
    # among them: each rank averages its own random arrays, on this backend's kind of array.
    shapes = [v.shape for v in params.values()]
    averager = distributed.GradientAverager(shapes, bucket_bytes=64 * 1024)
    mine = [np.random.default_rng(100 + rank).standard_normal(s, dtype=np.float32) for s in shapes]
    ctx = train.get_device(backend)
    arrays = [m.copy() if ctx is None else gpumat.array(m, ctx) for m in mine]
    averaged = averager.average(arrays)
    extra = {f"mine_{i}": m for i, m in enumerate(mine)}
    extra.update({f"avg_{i}": np.array(a) for i, a in enumerate(averaged)})
    extra["local_rank"] = np.array(distributed.local_rank())
    extra["num_buckets"] = np.array(len(averager.buckets))
    extra["num_allreduce_calls"] = np.array(averager.num_allreduce_calls)
    np.savez(Path(out) / f"rank{rank}.npz", loss=np.array(history.loss), **params, **extra)
    distributed.barrier()
    if mode == "hang_after" and rank == 0:
        time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
