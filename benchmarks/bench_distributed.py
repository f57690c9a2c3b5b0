#!/usr/bin/env python3
"""Benchmark data-parallel MNIST training (``gpumat.distributed``): 1 process against N ranks.

Usage::

    python3 benchmarks/bench_distributed.py                     # mlp, cpu, 1 and 2 ranks, 10 epochs
    python3 benchmarks/bench_distributed.py --ranks 1,2,4 --epochs 5
    python3 benchmarks/bench_distributed.py --quick --out /tmp/  # CI smoke run

For each rank count N it trains ``gpumat.models.mlp()`` (its recipe, the dlsys course's: batch
1000 in order, SGD lr 1.0, the model's seed) with ``gpumat.train.fit``: N = 1 is one plain
process (no MPI, the single-process reference), N > 1 is ``mpiexec -n N`` with
``fit(distributed=True)``: each rank takes 1000 / N images of each global batch and the gradients
are averaged by one bucketed allreduce per step. The same global batches in the same order, so
the N-rank run should reach the single-process accuracy.

Measured per run (every rank's numbers are kept; the table shows rank 0's):

- ``epoch s``: seconds of one epoch's training steps, validation excluded, **median over the epochs
  after the first** (the first includes planning and MPI warm-up).
- ``allreduce s`` and ``allreduce share``: seconds per epoch inside the gradient allreduce calls
  (``History.allreduce_time_s``: from posting the non-blocking allreduce to its completion, so the
  wait for a slower rank is included; copying gradients into and out of the host bucket is not),
  and that time over the epoch time. Median after the first epoch, like ``epoch s``.
- ``valid acc`` and ``test acc``: after the last epoch (rank 0 evaluates).

Output: a table, and a JSON file plus markdown in ``benchmarks/results/`` (``"benchmark":
"distributed"`` with the ledger's common header, see ``benchmarks/results/README.md``);
``make_table.py`` builds the ledger's table of these runs from them. Each rank
gets its share of the cores (``gpumat/__init__.py`` sets ``OMP_NUM_THREADS`` = cores / local ranks
under an MPI launcher); the 1-process run uses all of them. No speed is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import (
    DISTRIBUTED_LEGEND,
    distributed_table,
    header_markdown,
    resolve_out,
    run_header,
    software_info,
    write_results,
)

HERE = Path(__file__).resolve().parent


def median_after_first(values):
    values = list(values)
    rest = values[1:] if len(values) > 1 else values
    return statistics.median(rest) if rest else None


# --------------------------------------------------------------------------------------------------
# one rank (run under mpiexec, or alone for N = 1)
# --------------------------------------------------------------------------------------------------


def worker(args) -> int:
    from gpumat import datasets, models, train

    distributed = args.ranks_here > 1
    rank = 0
    if distributed:
        from gpumat import distributed as dist

        dist.init()
        rank = dist.rank()
        if rank:
            dist.barrier()  # rank 0 fills the MNIST cache first
    train_set, valid_set, test_set = datasets.load_mnist(progress=False)
    if distributed and rank == 0:
        dist.barrier()
    if args.train_size:
        train_set = tuple(a[: args.train_size] for a in train_set)
        valid_set = tuple(a[: args.valid_size] for a in valid_set)
        test_set = tuple(a[: args.valid_size] for a in test_set)
    hist = train.fit(
        models.mlp(),
        (train_set, valid_set, test_set),
        device=args.ctx,
        epochs=args.epochs,
        verbose=False,
        progress=False,
        distributed=distributed,
    )
    record = {
        "rank": rank,
        "world_size": hist.world_size,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "epoch_time_s": hist.epoch_time_s,
        "allreduce_time_s": hist.allreduce_time_s,
        "loss": hist.loss,
        "valid_accuracy": hist.valid_accuracy,
        "final_valid_accuracy": hist.final_valid_accuracy,
        "test_accuracy": hist.test_accuracy,
        "batch_size": hist.batch_size,
        "optimizer": hist.optimizer,
        "num_train": hist.num_train,
    }
    with open(Path(args.worker_out) / f"rank{rank}.json", "w") as f:
        json.dump(record, f)
    return 0


# --------------------------------------------------------------------------------------------------
# the driver
# --------------------------------------------------------------------------------------------------


def _mpiexec() -> str | None:
    local = Path(sys.executable).parent / "mpiexec"
    return str(local) if local.exists() else shutil.which("mpiexec")


def run_one(n: int, args) -> dict:
    out = Path(tempfile.mkdtemp(prefix="bench_distributed_"))
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker-out",
        str(out),
        "--ranks-here",
        str(n),
        "--ctx",
        args.ctx,
        "--epochs",
        str(args.epochs),
    ]
    if args.quick:
        cmd += ["--train-size", "5000", "--valid-size", "1000"]
    if n > 1:
        launcher = _mpiexec()
        if launcher is None:
            return {"ranks": n, "error": "mpiexec not found (pip install '.[distributed]')"}
        cmd = [launcher, "-n", str(n), *cmd]
    env = dict(os.environ)
    if os.geteuid() == 0:  # Open MPI's mpiexec (a GPU machine's) refuses root without these
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, env=env)
    if proc.returncode != 0:
        return {"ranks": n, "error": f"exit {proc.returncode}: {proc.stderr[-2000:]}"}
    per_rank = [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]
    shutil.rmtree(out, ignore_errors=True)
    r0 = per_rank[0]
    epoch_s = median_after_first(r0["epoch_time_s"])
    allreduce_s = median_after_first(r0["allreduce_time_s"]) if n > 1 else 0.0
    return {
        "ranks": n,
        "epoch_s": epoch_s,
        "allreduce_s": allreduce_s,
        "allreduce_share": allreduce_s / epoch_s if epoch_s else None,
        "final_valid_accuracy": r0["final_valid_accuracy"],
        "test_accuracy": r0["test_accuracy"],
        "per_rank": per_rank,
    }


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="1,2", help="rank counts to run, comma-separated (1,2)")
    p.add_argument("--ctx", default="cpu", choices=["cpu", "gpu", "numpy"], help="backend (cpu)")
    p.add_argument("--epochs", type=int, default=None, help="epochs (10; quick: 2)")
    p.add_argument("--quick", action="store_true", help="2 epochs on 5,000 images (CI smoke run)")
    p.add_argument("--out", default=None, help="JSON path or folder (default benchmarks/results/)")
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    p.add_argument("--ranks-here", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--train-size", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--valid-size", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.epochs is None:
        args.epochs = 2 if args.quick else 10
    if args.worker_out:
        return worker(args)

    try:
        ranks = [int(r) for r in args.ranks.split(",")]
    except ValueError:
        p.error(f"--ranks must be comma-separated ints, got {args.ranks!r}")
    if any(r < 1 or 1000 % r for r in ranks):
        p.error("each rank count must divide the batch size 1000")
    header = run_header(
        "distributed",
        "gpu" if args.ctx == "gpu" else "cpu",
        args.quick,
        [
            "benchmarks/bench_distributed.py",
            *argv,
        ],
    )
    # The machine may be shared: the 1-minute load averages around the runs say how busy it was.
    load_before = os.getloadavg()[0]
    runs = []
    for n in ranks:
        print(f"training mlp on {args.ctx} with {n} rank(s), {args.epochs} epochs ...", flush=True)
        runs.append(run_one(n, args))
    data = {
        **header,
        "software": software_info(),
        "settings": {
            "model": "mlp",
            "ctx": args.ctx,
            "epochs": args.epochs,
            "batch_size": 1000,
            "lr": 1.0,
            "ranks": ranks,
            "num_train": 5000 if args.quick else 50000,
            "bucket_bytes": __import__("gpumat.distributed").distributed.DEFAULT_BUCKET_BYTES,
            "mpi": _mpi_version(),
        },
        "load_average_1min": {"before": load_before, "after": os.getloadavg()[0]},
        "runs": runs,
    }
    text = distributed_table(runs)
    print(text)
    print(DISTRIBUTED_LEGEND)
    title = "Data-parallel MNIST MLP (benchmarks/bench_distributed.py)"
    load = data["load_average_1min"]
    md = (
        header_markdown(header, title)
        + f"- 1-minute load average: {load['before']:.2f} before, {load['after']:.2f} after\n\n"
        + text
        + "\n"
        + DISTRIBUTED_LEGEND
    )
    path, md_path = write_results(resolve_out(args.out, "distributed", header), data, md)
    print(f"wrote {path} and {md_path}")
    return 1 if any("error" in r for r in runs) else 0


def _mpi_version() -> str | None:
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.Get_library_version().splitlines()[0].strip()


if __name__ == "__main__":
    sys.exit(main())
