"""Train the dlsys course's MNIST models with gpumat and report time and accuracy.

    python examples/mnist.py -m mlp -c cpu -e 10 -l --plot mnist.png

Flags follow the course's ``mnist_dlsys.py``: ``-m`` model (``logreg``, ``mlp``, ``cnn``, any model
registered in ``gpumat.models.BUILDERS``, or ``all``), ``-c`` backend (``numpy``, ``cpu``,
``gpu``), ``-e`` epochs (10), ``-l`` print the loss each epoch. Each model trains with its
recommended recipe (``Model.optimizer``, ``batch_size``, ``shuffle``, ``lr_schedule``): for logreg
and mlp the course's, batches of 1000 in order and SGD with lr 1.0 (the dlsys course's 1e-3 with our
1/N-scaled loss gradient, see ``gpumat.train``); for cnn Adam with a step decay, batches of 64,
shuffled. ``--lr`` forces plain SGD, ``--batch-size`` another batch size. ``--dropout P`` adds
inverted dropout (mlp: after each hidden ReLU; cnn: before the dense layer), on only in training.
Per epoch it prints the training time in seconds and the validation accuracy; at the end, the final
validation and test accuracy.

``--distributed`` trains data-parallel over MPI, one process per rank (``gpumat.distributed``)::

    mpiexec -n 2 python examples/mnist.py -m mlp -c cpu --distributed

Each global batch is split evenly over the ranks and the gradients are averaged, so the run follows
single-process training with the same batch size; only rank 0 prints, validates and writes files.

``--save CKPT`` writes a checkpoint (parameters, optimizer state, progress; safetensors,
atomically) after every epoch; ``--resume CKPT`` continues from one for ``-e`` more epochs, so
``-e 5 --save c`` then ``-e 5 --resume c`` ends with bitwise the weights of ``-e 10`` (cpu, numpy).

MNIST (``mnist.pkl.gz``) is found or fetched by ``gpumat.datasets.load_mnist``. Everything else is
in the package; this file only parses flags.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from gpumat import datasets, models, train


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "-m",
        "--model",
        default="all",
        choices=[*models.BUILDERS, "all"],
        help="model to train (default: all, one after the other)",
    )
    parser.add_argument(
        "-c",
        "--device",
        "--device",
        "--executor_context",
        default="numpy",
        choices=["numpy", "cpu", "gpu", "emu", "auto"],
        help="backend: numpy reference, gpumat host device, CUDA, the emulated CUDA device (the "
        "CUDA kernels run on the CPU: slow, for checking them), or auto (gpu if available)",
    )
    parser.add_argument(
        "-e", "--epochs", "--num_epoch", type=int, default=10, help="epochs (default 10)"
    )
    parser.add_argument(
        "-l",
        "--print-loss",
        "--print_loss_val_each_epoch",
        action="store_true",
        help="print the loss per epoch",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help=f"training batch size (default: the model's; {train.DEFAULT_BATCH_SIZE} for logreg "
        "and mlp, 64 for cnn)",
    )
    parser.add_argument(
        "--lr",
        type=float,
        default=None,
        help="train with plain SGD at this rate (default: the model's recommended optimizer; "
        f"SGD with lr {train.DEFAULT_LR} for logreg and mlp)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=models.DEFAULT_SEED,
        help="seed of the initial weights and of the shuffling (123)",
    )
    parser.add_argument(
        "--train-size",
        type=int,
        default=None,
        help="use only the first N training images (quick runs)",
    )
    parser.add_argument(
        "--dropout",
        metavar="P",
        type=float,
        default=None,
        help="inverted dropout with rate P in [0, 1) (mlp: after each hidden ReLU; cnn: before "
        "the dense layer); on while training, off when measuring accuracy",
    )
    parser.add_argument("--plot", metavar="FILE", help="write loss and accuracy curves to FILE")
    parser.add_argument("--json", metavar="FILE", help="write the measurements to FILE as JSON")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="data-parallel over MPI: launch with mpiexec -n N (pip install '.[distributed]')",
    )
    # ---- checkpoints
    parser.add_argument(
        "--save",
        metavar="CKPT",
        help="save a checkpoint (safetensors) to CKPT after every epoch (one model only)",
    )
    parser.add_argument(
        "--resume",
        metavar="CKPT",
        help="continue training from checkpoint CKPT for -e more epochs (one model only)",
    )
    # ---- end checkpoints
    args = parser.parse_args(argv)
    if args.dropout is not None:
        if args.model not in ("mlp", "cnn"):
            parser.error("--dropout needs -m mlp or -m cnn")
        if not 0.0 <= args.dropout < 1.0:
            parser.error(f"--dropout must be in [0, 1), got {args.dropout}")
    if (args.save or args.resume) and args.model == "all":
        parser.error("--save and --resume need one model (-m NAME), not all")

    # --- distributed (gpumat.distributed): rank 0 alone prints, fetches first, writes files ---
    root = True
    if args.distributed:
        from gpumat import distributed

        distributed.init()
        root = distributed.is_root()
        if not root:
            args.plot = args.json = None
            args.no_progress = True
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
        else:
            print(f"distributed: {distributed.world_size()} ranks")
    # ----------------------------------------------------------------------------------------------

    if args.distributed and args.device in ("gpu", "auto"):
        import gpumat

        if args.device == "gpu" or gpumat.cuda_available():
            args.device = f"gpu:{distributed.local_rank()}"  # one GPU per rank on each node
    try:
        device = train.get_device(args.device)
    except RuntimeError as exc:
        parser.error(str(exc))
    if not root:
        distributed.barrier()  # rank 0 fetches MNIST into the cache once, the others then read it
    train_set, valid_set, test_set = datasets.load_mnist(progress=not args.no_progress)
    if args.distributed and root:
        distributed.barrier()
    if args.train_size is not None:
        train_set = (train_set[0][: args.train_size], train_set[1][: args.train_size])

    names = list(models.BUILDERS) if args.model == "all" else [args.model]
    histories = []
    for name in names:
        extra = {} if args.dropout is None else {"dropout": args.dropout}
        model = models.BUILDERS[name](seed=args.seed, **extra)
        backend = "numpy" if device is None else str(device)
        print(f"=== {name} on {backend}: {model.num_parameters} parameters")
        history = train.fit(
            model,
            (train_set, valid_set, test_set),
            device=device,
            epochs=args.epochs,
            batch_size=args.batch_size,
            lr=args.lr,
            seed=args.seed,
            print_loss=args.print_loss,
            progress=not args.no_progress,
            distributed=args.distributed,
            checkpoint=args.save,
            resume=args.resume,
        )
        if root:
            print(f"Validation set accuracy: {history.final_valid_accuracy:.4f}")
            print(history.summary())
        histories.append(history)

    if args.plot:
        train.plot_history(histories, args.plot)
        print(f"wrote {args.plot}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([h.to_dict() for h in histories], f, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
