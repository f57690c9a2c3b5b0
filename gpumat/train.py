"""Train and evaluate :class:`gpumat.models.Model` graphs on MNIST-style data.

:func:`fit` is the dlsys course's training loop (``mnist_dlsys.py``) made into a library call:
mini-batch SGD over the training set for a number of epochs, then accuracy on held-out data. Per
epoch it records the mean training loss, the wall-clock time of the training steps in seconds, and
the validation accuracy, in a :class:`History`; :func:`plot_history` draws the curves.

Backends (``device``): ``None`` or ``"numpy"`` runs the graph with numpy (the reference);
``gpumat.cpu()`` / ``"cpu"`` on gpumat's host kernels; ``gpumat.gpu(i)`` / ``"gpu"`` on CUDA. On a
gpumat device the parameters live on the device for the whole run: they are ``PyGpuMatrix``
arrays fed to the executor as they are and updated in place by the optimizer (one ``axpy`` kernel
each). Per step, only the mini-batch is copied in (images and one-hot labels; on the cpu device
the images are read in place); the loss is summed on the device and read back once per epoch;
validation copies back only the logits of each evaluation batch, to take the argmax.

Learning rate: the loss is the batch *mean* of the softmax cross-entropy and its gradient carries
the 1/N (see :mod:`gpumat.graph.loss`). The dlsys course used ``lr = 1e-3`` with a gradient lacking
the 1/N at batch size N = 1000, so the same updates here use ``lr = 1e-3 * 1000 = 1.0``:
:data:`DEFAULT_LR`. Unlike the course's, this learning rate keeps its meaning when the batch size
changes.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from gpumat import checkpoint, ops
from gpumat import distributed as dist
from gpumat.arrays import array, empty, is_device_array
from gpumat.datasets import iterate_minibatches, one_hot, progress_bar_wanted
from gpumat.devices import as_device, build_info, cuda_available
from gpumat.models import Model
from gpumat.optim import SGD
from gpumat.runtime import Executor

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_LR",
    "History",
    "evaluate",
    "fit",
    "get_device",
    "plot_history",
    "predict",
]

#: The dlsys course's batch size.
DEFAULT_BATCH_SIZE = 1000
#: The dlsys course's lr = 1e-3 times its batch size 1000: its updates with our 1/N-scaled gradient.
DEFAULT_LR = 1e-3 * DEFAULT_BATCH_SIZE


def get_device(device=None):
    """The executor's device for a backend name or device (parsed by
    :func:`gpumat.devices.as_device`, the front end's parser, with the numpy backend added).

    Args:
        device: ``None`` or ``"numpy"`` (the numpy backend), ``"cpu"`` (``gpumat.cpu()``),
            ``"gpu"``, ``"gpu:i"``, ``"cuda"``, ``"cuda:i"`` (``gpumat.gpu(i)``), ``"emu"`` or
            ``"emu:i"`` (the emulated CUDA device ``gpumat.emu(i)``: the CUDA kernels on the
            CPU, slow), ``"auto"`` (``gpu(0)`` when :func:`gpumat.cuda_available`, else
            ``cpu()``), or a ``gpumat.Device`` (returned as is).

    Returns:
        ``None`` for numpy, else a ``gpumat.Device``.

    Raises:
        ValueError: an unknown name. RuntimeError: a GPU was asked for but
            ``gpumat.cuda_available()`` is false (the message says whether gpumat was built
            without CUDA or no device is visible).
    """
    parsed = as_device(device, "get_device", numpy=True)
    if isinstance(device, str) and parsed is not None and parsed.device_type == "gpu":
        if not cuda_available():
            why = (
                "no CUDA device is visible"
                if build_info()["cuda"]
                else "gpumat was built without CUDA"
            )
            raise RuntimeError(f"device {device!r} asked for, but {why}; use 'cpu' or 'numpy'")
    return parsed


_EXECUTOR_OPTIONS = ("fusion", "compiled", "cuda_graph")


def _executor_options(options: Mapping | None) -> dict:
    """fit's ``executor`` mapping, checked: only the Executor's step options, as bools."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(_EXECUTOR_OPTIONS))
    if unknown:
        raise TypeError(f"fit: unknown executor options {unknown}; use {list(_EXECUTOR_OPTIONS)}")
    return {k: bool(v) for k, v in options.items()}


def _backend_name(device) -> str:
    return "numpy" if device is None else str(device)


@dataclasses.dataclass
class History:
    """What :func:`fit` measured, one entry per completed epoch in each list.

    Attributes:
        model: the model's name (``"logreg"``, ``"mlp"``).
        backend: ``"numpy"``, ``"cpu(0)"`` or ``"gpu(i)"``.
        batch_size: training samples per step. lr: the learning rate when training with plain
            SGD from ``lr`` (``None`` when an optimizer factory was used). optimizer: the
            optimizer's ``repr`` (e.g. ``"SGD(2 params, lr=1.0)"``). num_train: training samples
            available (the last ``num_train % batch_size`` are not used in an epoch, as in the
            seed).
        loss: mean training loss (batch-mean softmax cross-entropy, nats) over the epoch's steps.
        epoch_time_s: wall-clock seconds of the epoch's training steps (feeding, forward,
            backward, update; device work included, since the epoch's loss is read back at its
            end), excluding validation.
        valid_time_s: wall-clock seconds of the validation after each epoch (0.0 without data).
        valid_accuracy: fraction of validation samples classified correctly after each epoch
            (empty without validation data).
        final_valid_accuracy: the last entry of ``valid_accuracy`` (None without validation data).
        test_accuracy: accuracy on the test data after training (None when not given).
        params: the trained parameters (name -> numpy array or ``PyGpuMatrix`` on the device),
            the same objects the optimizer updated.
        world_size: the number of data-parallel ranks (1 without ``distributed``).
        allreduce_time_s: with ``distributed``, seconds per epoch this rank spent in gradient
            allreduces (waiting for slower ranks included; staging copies excluded), else empty.
            With ``distributed``, validation and test accuracy are measured on rank 0 only.
        schedule: how the training executor ran its steps, ``str`` of its
            ``gpumat.runtime.ScheduleReport`` (e.g. ``"cuda-graph: 14 op calls per run in a CUDA
            graph of 15 nodes (1 captures)"``); "" before training.
    """

    model: str
    backend: str
    batch_size: int
    lr: float | None
    num_train: int
    optimizer: str = ""
    loss: list[float] = dataclasses.field(default_factory=list)
    epoch_time_s: list[float] = dataclasses.field(default_factory=list)
    valid_time_s: list[float] = dataclasses.field(default_factory=list)
    valid_accuracy: list[float] = dataclasses.field(default_factory=list)
    final_valid_accuracy: float | None = None
    test_accuracy: float | None = None
    params: dict = dataclasses.field(default_factory=dict, repr=False)
    world_size: int = 1
    allreduce_time_s: list[float] = dataclasses.field(default_factory=list)
    schedule: str = ""

    @property
    def epochs(self) -> int:
        """The number of completed epochs."""
        return len(self.loss)

    @property
    def mean_epoch_time_s(self) -> float | None:
        """Mean of ``epoch_time_s`` in seconds, excluding the first epoch when there are two or
        more (it includes one-time planning and warm-up); None before any epoch."""
        times = self.epoch_time_s[1:] if len(self.epoch_time_s) > 1 else self.epoch_time_s
        return float(np.mean(times)) if times else None

    def to_dict(self) -> dict:
        """The measurements as JSON-serialisable built-ins (``params`` left out)."""
        d = dataclasses.asdict(dataclasses.replace(self, params={}))
        del d["params"]
        d["epochs"] = self.epochs
        d["mean_epoch_time_s"] = self.mean_epoch_time_s
        return d

    def summary(self) -> str:
        """One line: model, backend, epochs, final accuracies, mean epoch time, and how the steps
        ran (``python``, ``compiled`` or ``cuda-graph``; see ``schedule``)."""
        parts = [f"{self.model} on {self.backend}: {self.epochs} epochs"]
        if self.final_valid_accuracy is not None:
            parts.append(f"valid accuracy {self.final_valid_accuracy:.4f}")
        if self.test_accuracy is not None:
            parts.append(f"test accuracy {self.test_accuracy:.4f}")
        if self.mean_epoch_time_s is not None:
            parts.append(f"{self.mean_epoch_time_s:.3f} s per epoch")
        if self.schedule:
            parts.append(f"steps {self.schedule.split(':')[0]}")
        return ", ".join(parts)


def _split(pair, name: str) -> tuple[np.ndarray, np.ndarray]:
    try:
        images, labels = pair
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be an (images, labels) pair") from exc
    images, labels = np.asarray(images), np.asarray(labels)
    if len(images) != len(labels):
        raise ValueError(f"{name}: {len(images)} images but {len(labels)} labels")
    return images, labels


def _reshape_images(model: Model, images: np.ndarray, name: str) -> np.ndarray:
    per_sample = int(np.prod(model.input_shape))
    if images.ndim < 2 or int(np.prod(images.shape[1:])) != per_sample:
        raise ValueError(
            f"{name}: images of shape {images.shape} do not fit model {model.name!r}, whose "
            f"samples have shape {model.input_shape} ({per_sample} values)"
        )
    return np.ascontiguousarray(images, dtype=np.float32).reshape((-1, *model.input_shape))


def _param_list(model: Model, params: Mapping) -> list:
    missing = [k for k in model.params if k not in params]
    if missing:
        raise ValueError(f"model {model.name!r}: no value for parameter(s) {missing}")
    return [params[k] for k in model.params]


def _check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return int(value)


class _Predictor:
    """Evaluates ``model.logits`` batch by batch with one executor, reused across calls.

    Every batch has the same shape (the last one is padded with zeros), so the executor plans its
    memory once; only the logits come back to the host.
    """

    def __init__(self, model: Model, device, batch_size: int) -> None:
        self.model = model
        self.device = device
        self.batch_size = _check_positive_int(batch_size, "batch_size")
        # Evaluation mode: dropout layers are the identity when predicting.
        self.executor = Executor([model.logits], device=device, training=False)
        self._pad = None

    def predict(self, params: Mapping, images: np.ndarray) -> np.ndarray:
        model = self.model
        images = _reshape_images(model, images, "images")
        n = len(images)
        out = np.empty(n, dtype=np.int64)
        if n == 0:
            return out
        bs = min(self.batch_size, n)
        feed = dict(zip(model.params.values(), _param_list(model, params), strict=True))
        for start in range(0, n, bs):
            xb = images[start : start + bs]
            m = len(xb)
            if m < bs:
                if self._pad is None or self._pad.shape != (bs, *xb.shape[1:]):
                    self._pad = np.zeros((bs, *xb.shape[1:]), dtype=np.float32)
                self._pad[:m] = xb
                self._pad[m:] = 0.0
                xb = self._pad
            feed[model.x] = xb
            (logits,) = self.executor.run(feed, convert_to_numpy_ret_vals=True)
            out[start : start + m] = np.argmax(logits[:m], axis=1)
        return out


def predict(
    model: Model, params: Mapping, images, device=None, batch_size: int = 1000
) -> np.ndarray:
    """Predicted classes: the argmax of ``model.logits`` for each image.

    Args:
        model: a :class:`~gpumat.models.Model`.
        params: parameter name -> value: numpy arrays (any backend; copied in per batch) or, on a
            gpumat device, ``PyGpuMatrix`` arrays on ``device`` (used in place).
        images: float32-convertible array of shape ``(n, 784)`` or ``(n, *model.input_shape)``.
        device: the backend, as for :func:`get_device` (``None``/"numpy", "cpu", "gpu", a Device).
        batch_size: images per forward pass (the last batch is padded, so one memory plan).

    Returns:
        int64 array of shape ``(n,)`` with class indices in ``0 .. model.num_classes - 1``.

    Raises:
        ValueError: images of the wrong size, a missing parameter, or device arrays on another
            device than ``device``. TypeError: a non-integer ``batch_size``.
    """
    return _Predictor(model, get_device(device), batch_size).predict(params, images)


def evaluate(
    model: Model, params: Mapping, images, labels, device=None, batch_size: int = 1000
) -> float:
    """Classification accuracy of ``model`` with ``params`` on ``(images, labels)``.

    Args:
        model, params, images, device, batch_size: as for :func:`predict`.
        labels: integer class labels of shape ``(n,)``.

    Returns:
        The fraction of images whose predicted class equals the label, a float in [0, 1]
        (NaN for n = 0).

    Raises:
        ValueError: ``images`` and ``labels`` differ in length; as for :func:`predict`.
    """
    images, labels = _split((images, labels), "evaluate")
    if len(labels) == 0:
        return math.nan
    return float(np.mean(predict(model, params, images, device, batch_size) == labels))


def fit(
    model: Model,
    data: Sequence,
    *,
    device=None,
    epochs: int = 10,
    batch_size: int | None = None,
    lr: float | None = None,
    optimizer: Callable[[list], object] | None = None,
    params: Mapping | None = None,
    shuffle: bool | None = None,
    seed: int | None = None,
    print_loss: bool = False,
    verbose: bool = True,
    progress: bool = True,
    eval_batch_size: int = 1000,
    distributed: bool = False,
    checkpoint: str | os.PathLike[str] | None = None,
    resume: str | os.PathLike[str] | None = None,
    executor: Mapping | None = None,
) -> History:
    """Train ``model`` on mini-batches (SGD by default); record loss, time and accuracy per epoch.

    Each epoch visits the training images in order (``shuffle=False``, as the dlsys course does)
    or in a fresh random order, in ``num_train // batch_size`` batches of exactly ``batch_size``
    (the remainder is skipped, as in the course, so the executor's memory plan never changes). A
    step runs ``[loss, *grads]`` on the batch and applies ``optimizer.step(grads)``.

    Args:
        model: a :class:`~gpumat.models.Model` (e.g. ``gpumat.models.mlp()``).
        data: ``(train, valid)`` or ``(train, valid, test)``, each an ``(images, labels)`` pair as
            :func:`gpumat.datasets.load_mnist` returns them: images float32 ``(n, 784)`` (or
            ``(n, *model.input_shape)``), labels integer ``(n,)``. ``valid`` or ``test`` may be
            ``None`` to skip that evaluation.
        device: the backend: ``None``/"numpy", "cpu", "gpu", "gpu:i", "auto" or a ``gpumat.Device``
            (see :func:`get_device`).
        epochs: the number of passes over the training data (>= 1).
        batch_size: training samples per step (<= the number of training samples); default the
            model's recommendation (``model.batch_size``), else :data:`DEFAULT_BATCH_SIZE`.
        lr: train with plain SGD (``gpumat.optim.SGD``) at this learning rate.
        optimizer: a factory called once with the list of parameter arrays (in ``model.params``
            order, on the backend) that returns an object with ``step(grads)`` updating them in
            place, e.g. ``lambda ps: gpumat.optim.Adam(ps, lr=1e-3)``. Give ``lr`` or
            ``optimizer``, not both. With neither, the model's recommendation
            (``model.optimizer``, with its ``model.lr_schedule`` applied per epoch) is used, else
            SGD with :data:`DEFAULT_LR` = 1.0, the dlsys course's 1e-3 at batch size 1000 (module
            docstring).
        params: initial parameter values (name -> numpy array, or ``PyGpuMatrix`` on ``device``);
            default ``model.init_params(device)``. Device arrays given here are updated in place;
            numpy arrays are copied to the device first (on the numpy backend they are updated
            in place).
        shuffle: visit the training samples in a new random order each epoch; default the
            model's recommendation (``model.shuffle``), else False (in order, as the course).
        seed: seed of the shuffling (``None``: fresh entropy).
        print_loss: include the epoch's mean loss in the per-epoch line (the dlsys course's ``-l``).
        verbose: print one line per epoch (time in seconds, validation accuracy, and the loss with
            ``print_loss``) to stdout.
        progress: show a tqdm progress bar over the training steps (on stderr), only when stdout
            is a terminal (a redirected run logs no bar).
        eval_batch_size: images per forward pass when evaluating.
        distributed: data-parallel training over MPI (``gpumat.distributed``; launch with
            ``mpiexec -n N``): every rank starts from rank 0's parameters, trains on its
            ``batch_size // N`` slice of each global batch of ``batch_size`` (same order on every
            rank: one shuffling seed from rank 0), and averages the gradients with bucketed
            allreduce before each optimizer step, so every rank holds the same weights, which
            follow single-process training with ``batch_size``. Only rank 0 validates, tests,
            prints and shows progress; the loss is averaged over the ranks once per epoch.
        checkpoint: a file to save the training state to after every epoch (atomically, in the
            safetensors format, see :mod:`gpumat.checkpoint`): the parameters, the optimizer's
            state (``state_dict``: SGD momentum, Adam moments and step), and the progress (epochs
            and steps done, the history so far, the shuffling generator's state).
        resume: a checkpoint file written by ``checkpoint=`` to continue from: parameters and
            optimizer state are restored (the names and shapes must match ``model``), and
            ``epochs`` *more* epochs are run, numbered (and scheduled by ``model.lr_schedule``)
            after the saved ones; the returned history contains the saved epochs too. With the
            same data, batch size, backend and seed, N epochs then M resumed ones give bitwise the
            same parameters as N + M straight epochs on the cpu device and the numpy backend.
            Checkpoints are taken at epoch ends only.
        executor: options of the training step's :class:`gpumat.runtime.Executor`, a mapping
            with any of ``fusion``, ``compiled`` and ``cuda_graph`` (each default True):
            ``fusion`` runs the fusion pass (fused dense layers, ReLU/bias gradients and loss;
            False trains the graph as built: same values up to float32 rounding, the benchmark
            compares the two); ``compiled`` and ``cuda_graph`` compile steps into one native call
            each and, on a CUDA or emulated device, replay them as one CUDA graph launch (same
            values either way; ``history.schedule`` says what ran).

    Returns:
        A :class:`History`: per-epoch loss, seconds and validation accuracy, final validation and
        test accuracy, and the trained parameters (``history.params``).

    Raises:
        ValueError: both ``lr`` and ``optimizer`` given; fewer training samples than
            ``batch_size``; images that do not fit the model; labels outside
            ``0 .. model.num_classes - 1``; an unknown ``device`` name; a missing parameter; a
            ``resume`` checkpoint that is truncated or corrupt, or was written for another model,
            optimizer, batch size or shuffling (the message names the file).
        TypeError: a non-integer ``epochs`` or ``batch_size``; ``checkpoint`` with an optimizer
            that has no ``state_dict``.
        FileNotFoundError: no ``resume`` file.
        RuntimeError: ``device`` asks for a GPU and none is available.
        ValueError: with ``distributed``, ``batch_size`` not a multiple of the number of ranks.
        ImportError: ``distributed`` without mpi4py (``pip install ".[distributed]"``).
    """
    if lr is not None and optimizer is not None:
        raise ValueError("fit: give lr (plain SGD) or optimizer, not both")
    device = get_device(device)
    batch_size = _check_positive_int(
        batch_size or model.batch_size or DEFAULT_BATCH_SIZE, "batch_size"
    )
    epochs = _check_positive_int(epochs, "epochs")
    shuffle = bool(model.shuffle) if shuffle is None else shuffle
    train_x, train_y, valid, test = _prepare_data(model, data, batch_size)
    values = _param_list(
        model, model.init_params(device) if params is None else _on_device(params, device)
    )
    opt, schedule, sgd_lr = _make_optimizer(model, values, lr, optimizer)
    base_lr = opt.lr if schedule is not None else None  # before a resume restores a scheduled lr
    par = _DataParallel()
    if distributed:
        par, seed = _setup_distributed(values, batch_size, shuffle, seed)
        if par.rank != 0:
            verbose = progress = False
            valid = test = None

    run = _Run(
        model=model,
        device=device,
        opt=opt,
        par=par,
        executor=Executor([model.loss, *model.grads], device=device, **_executor_options(executor)),
        predictor=_Predictor(model, device, eval_batch_size),
        feed=dict(zip(model.params.values(), values, strict=True)),
        rng=np.random.default_rng(seed) if shuffle else None,
        history=History(
            model=model.name,
            backend=_backend_name(device),
            batch_size=batch_size,
            lr=sgd_lr,
            optimizer=repr(opt),
            num_train=len(train_x),
            params=dict(zip(model.params, values, strict=True)),
            world_size=par.world,
        ),
        n_batches=len(train_x) // batch_size,
        loss_sum=None if device is None else empty((1,), device),
    )

    if checkpoint is not None and not hasattr(opt, "state_dict"):
        raise TypeError(
            f"fit: checkpoint= needs an optimizer with state_dict(); {type(opt).__name__} has none"
        )
    first_epoch = 0
    if resume is not None:
        first_epoch = _restore(resume, run, batch_size=batch_size, shuffle=shuffle)
    # Dropout masks use seed + executor.step: a resumed run continues the masks' sequence.
    run.executor.step = first_epoch * run.n_batches

    last_epoch = first_epoch + epochs
    bar = tqdm(
        total=epochs * run.n_batches,
        desc=f"{model.name} [{run.history.backend}]",
        unit="batch",
        disable=not progress_bar_wanted(progress),
        leave=False,
        file=sys.stderr,
    )
    try:
        for epoch in range(first_epoch, last_epoch):
            if schedule is not None:
                opt.lr = base_lr * schedule(epoch)
            batches = iterate_minibatches(
                train_x, train_y, batch_size, shuffle=shuffle, rng=run.rng, drop_last=True
            )
            _train_epoch(run, batches, bar)
            _validate(run, valid)
            bar.set_postfix(loss=f"{run.history.loss[-1]:.4f}")
            if verbose:
                _print_epoch(run.history, epoch, last_epoch, print_loss)
            # Data parallel: every rank holds the same state, and rank 0 alone writes it.
            if checkpoint is not None and par.rank == 0:
                _save_state(checkpoint, run, epoch + 1, shuffle)
    finally:
        bar.close()
    return _finish(run, test)


# ---- the steps of fit


@dataclasses.dataclass
class _DataParallel:
    """How this process takes part in data-parallel training (one process: the defaults)."""

    world: int = 1
    rank: int = 0
    averager: object = None  # a gpumat.distributed.GradientAverager
    shard: slice = dataclasses.field(default_factory=lambda: slice(None))  # rows of each batch


@dataclasses.dataclass
class _Run:
    """What the steps of :func:`fit` share."""

    model: Model
    device: object
    opt: object
    par: _DataParallel
    executor: Executor
    predictor: _Predictor
    feed: dict
    rng: np.random.Generator | None
    history: History
    n_batches: int
    loss_sum: object  # (1,) device array summing the epoch's losses, or None on numpy


def _prepare_data(model: Model, data: Sequence, batch_size: int):
    """(train images, one-hot train labels, valid pair or None, test pair or None), checked."""
    data = list(data)
    if len(data) not in (2, 3):
        raise ValueError(
            f"data must be (train, valid) or (train, valid, test), got {len(data)} items"
        )
    train_x, train_y = _split(data[0], "train")
    valid = None if data[1] is None else _split(data[1], "valid")
    test = None if len(data) < 3 or data[2] is None else _split(data[2], "test")
    train_x = _reshape_images(model, train_x, "train")
    train_y = one_hot(train_y, model.num_classes)
    if len(train_x) < batch_size:
        raise ValueError(
            f"fit: {len(train_x)} training samples, fewer than batch_size={batch_size}"
        )
    return train_x, train_y, valid, test


def _on_device(params: Mapping, device) -> Mapping:
    """Device arrays stay as they are (updated in place); numpy arrays are copied to ``device``."""
    if device is None:
        return params
    return {k: v if is_device_array(v) else array(v, device) for k, v in params.items()}


def _make_optimizer(model: Model, values: list, lr, optimizer):
    """(optimizer, per-epoch lr schedule or None, the lr of plain SGD or None): SGD at ``lr``, the
    given factory, the model's recommendation (with its schedule), else SGD at
    :data:`DEFAULT_LR`."""
    if optimizer is not None:
        return optimizer(values), None, None
    if lr is None and model.optimizer is not None:
        return model.optimizer(values), model.lr_schedule, None
    lr = DEFAULT_LR if lr is None else lr
    return SGD(values, lr), None, float(lr)


def _setup_distributed(values: list, batch_size: int, shuffle: bool, seed):
    """Join the MPI job: rank 0's parameters everywhere, one shuffling seed, a gradient averager.
    Returns (the :class:`_DataParallel`, the shuffling seed)."""
    if not dist.is_initialized():
        dist.init()
    world, rank = dist.world_size(), dist.rank()
    if batch_size % world:
        raise ValueError(
            f"fit: batch_size={batch_size} is not a multiple of the {world} ranks; each rank "
            "takes an equal slice of every batch"
        )
    per_rank = batch_size // world
    dist.broadcast_parameters(values)
    if shuffle:
        seed = dist.broadcast_seed(seed)
    averager = dist.GradientAverager([tuple(v.shape) for v in values])
    shard = slice(rank * per_rank, (rank + 1) * per_rank)
    return _DataParallel(world, rank, averager, shard), seed


def _train_epoch(run: _Run, batches, bar) -> None:
    """One pass over the batches: run the step, average gradients across ranks, update; record
    the epoch's mean loss and time."""
    model, par, feed, opt = run.model, run.par, run.feed, run.opt
    start = time.perf_counter()
    loss_sum = 0.0
    if run.loss_sum is not None:
        ops.fill(run.loss_sum, 0.0)
    if par.averager is not None:
        par.averager.reset_timers()
    for xb, yb in batches:
        feed[model.x] = xb[par.shard]
        feed[model.y_] = yb[par.shard]
        loss_val, *grads = run.executor.run(feed)
        if par.averager is not None:
            grads = par.averager.average(grads)
        opt.step(grads)
        # The loss is summed where it lives: no device-to-host copy (or sync) per step.
        if run.loss_sum is None:
            loss_sum += float(loss_val[0])
        else:
            ops.axpy(1.0, loss_val, run.loss_sum)
        bar.update(1)
    if run.loss_sum is not None:
        loss_sum = float(run.loss_sum.asnumpy()[0])  # waits for the epoch's kernels
    elapsed = time.perf_counter() - start
    if par.averager is not None:
        run.history.allreduce_time_s.append(par.averager.allreduce_time_s)
        # Each rank's loss is its shard's mean; equal shards make their mean the batch's.
        loss_sum = float(dist.allreduce_mean(np.array([loss_sum]))[0])
    run.history.loss.append(loss_sum / run.n_batches)
    run.history.epoch_time_s.append(elapsed)


def _validate(run: _Run, valid) -> None:
    """Accuracy on the validation pair (if any) after an epoch, and the seconds it took."""
    if valid is None:
        run.history.valid_time_s.append(0.0)
        return
    t0 = time.perf_counter()
    acc = float(np.mean(run.predictor.predict(run.history.params, valid[0]) == valid[1]))
    run.history.valid_time_s.append(time.perf_counter() - t0)
    run.history.valid_accuracy.append(acc)


def _print_epoch(history: History, epoch: int, last_epoch: int, print_loss: bool) -> None:
    line = f"epoch {epoch + 1:>{len(str(last_epoch))}}/{last_epoch}"
    if print_loss:
        line += f"  loss {history.loss[-1]:.4f}"
    line += f"  time {history.epoch_time_s[-1]:.3f} s"
    if history.valid_accuracy:
        line += f"  valid acc {history.valid_accuracy[-1]:.4f}"
    tqdm.write(line, file=sys.stdout)


def _finish(run: _Run, test) -> History:
    """The schedule, the final validation accuracy and the test accuracy into the history."""
    history = run.history
    if run.executor.schedule_report is not None:
        history.schedule = str(run.executor.schedule_report)
    if history.valid_accuracy:
        history.final_valid_accuracy = history.valid_accuracy[-1]
    if test is not None:
        history.test_accuracy = float(
            np.mean(run.predictor.predict(history.params, test[0]) == test[1])
        )
    return history


# ---- checkpoints: the training state in and out of a gpumat.checkpoint file


def _save_state(path, run: _Run, epochs_done: int, shuffle) -> None:
    """Write the run's training state after ``epochs_done`` epochs to the checkpoint ``path``."""
    history, rng = run.history, run.rng
    progress = {
        "model": history.model,
        "epoch": epochs_done,
        "step": epochs_done * run.n_batches,
        "batch_size": history.batch_size,
        "shuffle": bool(shuffle),
        "rng_state": None if rng is None else rng.bit_generator.state,
        "history": {
            "loss": history.loss,
            "epoch_time_s": history.epoch_time_s,
            "valid_time_s": history.valid_time_s,
            "valid_accuracy": history.valid_accuracy,
        },
    }
    checkpoint.save_training_state(
        path, params=history.params, optimizer=run.opt, progress=progress
    )


def _restore(path, run: _Run, *, batch_size, shuffle):
    """Load a training checkpoint into the run's parameters, optimizer, history and generator.

    Returns the number of epochs already done. All or nothing: the metadata is checked by
    load_training_state and here (the generator's state on a scratch generator of the same kind)
    before the first change, and the optimizer, which checks its own state, goes first.
    """
    model, opt, history, rng = run.model, run.opt, run.history, run.rng
    name = os.fspath(path)
    if not hasattr(opt, "load_state_dict"):
        raise TypeError(f"fit: resume= needs an optimizer with load_state_dict(); got {opt!r}")
    state = checkpoint.load_training_state(path, expected_params=model.initial_values)
    progress = state["progress"]
    if "epoch" not in progress:
        raise ValueError(f"fit: checkpoint {name!r} records no epoch in its progress")
    for key, want in (("model", model.name), ("batch_size", batch_size), ("shuffle", shuffle)):
        if progress.get(key) != want:
            raise ValueError(
                f"fit: checkpoint {name!r} was written with {key}={progress.get(key)!r}, this "
                f"run has {key}={want!r}"
            )
    opt_type = state["optimizer"].get("type")
    if opt_type != type(opt).__name__:
        raise ValueError(
            f"fit: checkpoint {name!r} holds a {opt_type} state, this run uses {type(opt).__name__}"
        )
    if rng is not None and progress.get("rng_state") is not None:
        try:
            type(rng.bit_generator)().state = progress["rng_state"]
        except (TypeError, ValueError, KeyError) as exc:
            raise ValueError(
                f"fit: checkpoint {name!r} holds a generator state this run's "
                f"{type(rng.bit_generator).__name__} cannot take: {exc}"
            ) from None
    opt.load_state_dict(state["optimizer"])
    for k, dst in zip(model.params, run.feed.values(), strict=True):
        src = state["params"][k]
        if isinstance(dst, np.ndarray):
            dst[...] = src
        else:
            dst.copyfrom(src)
    if rng is not None and progress.get("rng_state") is not None:
        rng.bit_generator.state = progress["rng_state"]
    saved = progress.get("history", {})
    for field in ("loss", "epoch_time_s", "valid_time_s", "valid_accuracy"):
        getattr(history, field).extend(float(v) for v in saved.get(field, []))
    return int(progress["epoch"])


# ---- end checkpoints


def plot_history(history, path: str | os.PathLike[str] | None = None):
    """Draw training loss and validation accuracy per epoch; write the figure to ``path``.

    Uses matplotlib's object API with the Agg canvas, so it works headless and does not change the
    pyplot backend (safe inside notebooks).

    Args:
        history: a :class:`History`, or a sequence of them (one line per history, labelled
            "model [backend]").
        path: the image file to write (the format follows the suffix: ``.png``, ``.pdf``,
            ``.svg``); ``None`` writes nothing. Parent folders must exist.

    Returns:
        The ``matplotlib.figure.Figure`` (display it in a notebook, or ignore it).

    Raises:
        ValueError: no histories. OSError: the file cannot be written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    histories = [history] if isinstance(history, History) else list(history)
    if not histories:
        raise ValueError("plot_history: no history to plot")
    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)
    ax_loss, ax_acc = fig.subplots(1, 2)
    for h in histories:
        label = f"{h.model} [{h.backend}]"
        ax_loss.plot(range(1, len(h.loss) + 1), h.loss, marker="o", label=label)
        if h.valid_accuracy:
            ax_acc.plot(
                range(1, len(h.valid_accuracy) + 1), h.valid_accuracy, marker="o", label=label
            )
    ax_loss.set(xlabel="epoch", ylabel="mean training loss (cross-entropy)", title="Training loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy", title="Validation accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(True, alpha=0.3)
        ax.legend()
    if path is not None:
        fig.savefig(os.fspath(path), dpi=100)
    return fig
