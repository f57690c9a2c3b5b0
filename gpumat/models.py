"""Model builders for MNIST: the dlsys course's logistic regression and 3-layer MLP.

A builder returns a :class:`Model`: the graph (input and label placeholders, logits, loss, gradient
nodes) plus the parameters' initial values, drawn once with numpy from a fixed seed so that every
backend (numpy, ``gpumat.cpu()``, ``gpumat.gpu(i)``) starts from the same numbers.
:func:`gpumat.train.fit` trains any :class:`Model`; nothing in it is specific to dense layers, so
builders for other architectures (a CNN with 4-D inputs and parameters, for instance) only need to
fill in the same fields and register themselves in :data:`BUILDERS`.

Sources: the architectures and initialisations are the dlsys course's ``mnist_dlsys.py`` (UW
CSE599G1 "dlsys" assignment 2): logistic regression 784 -> 10 with zero weights and biases; MLP
784 -> 256 -> 100 -> 10 with ReLU after the two hidden layers and every weight and bias drawn from
N(0, 0.1**2), drawn with ``np.random.RandomState(123)`` in the order W1, W2, W3, b1, b2, b3, as
the course does: the MLP starts from the course's own initial values (rounded to float32), so with
the equivalent learning rate (``gpumat.train``) it retraces the course's run. The legacy
``RandomState`` is used on purpose: its stream is frozen by numpy's compatibility policy (NEP 19).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from gpumat import graph, optim
from gpumat.arrays import array

__all__ = ["BUILDERS", "Model", "cnn", "logreg", "mlp"]

# MNIST: 28x28 grey images flattened to 784 values, 10 digit classes.
NUM_PIXELS = 28 * 28
NUM_CLASSES = 10

# The dlsys course's seed for the MLP's random initialisation.
DEFAULT_SEED = 123


@dataclasses.dataclass(eq=False)
class Model:
    """A trainable model: its graph and its parameters' initial values.

    Attributes:
        name: short name (``"logreg"``, ``"mlp"``), used in logs and plots.
        x: the input placeholder; fed float32 batches of shape ``(N, *input_shape)``.
        y_: the label placeholder; fed float32 one-hot labels of shape ``(N, num_classes)``.
        logits: the node of the unnormalised class scores, shape ``(N, num_classes)``.
        loss: the node of the batch-mean softmax cross-entropy, shape ``(1,)``
            (``softmaxcrossentropy_op(logits, y_)``; its gradient carries the 1/N of the mean).
        params: parameter name -> placeholder node, in a fixed order (the order of ``grads``).
        initial_values: parameter name -> float32 numpy array of the parameter's shape (any
            rank), the values training starts from. :meth:`init_params` copies them.
        input_shape: the shape of one sample as fed to ``x``, e.g. ``(784,)``; the training loop
            reshapes flat ``(n, 784)`` images to ``(n, *input_shape)``.
        num_classes: the number of classes (columns of ``logits`` and ``y_``).
        grads: gradient nodes of ``loss`` with respect to each parameter, in ``params`` order
            (built by ``gpumat.autodiff.gradients`` when the model is created).
        optimizer: the optimizer recommended for this model, as a factory called with the list of
            parameter arrays (``lambda ps: gpumat.optim.Adam(ps, lr=1e-3)``); ``None`` means plain
            SGD with ``gpumat.train.DEFAULT_LR``. :func:`gpumat.train.fit` uses it unless given
            an ``lr`` or an ``optimizer`` of its own.
        batch_size: the recommended training batch size; ``None`` means
            ``gpumat.train.DEFAULT_BATCH_SIZE`` (1000, the dlsys course's).
        shuffle: whether training should visit the samples in a new random order each epoch
            (``None``: in order, as the dlsys course does).
        lr_schedule: ``epoch -> factor`` (epochs counted from 0) applied to the recommended
            optimizer's initial ``lr`` at the start of each epoch, e.g. a step decay; ``None``
            keeps the rate constant. Used only with the recommended optimizer.

    Raises:
        ValueError: ``params`` and ``initial_values`` have different names.
    """

    name: str
    x: graph.Node
    y_: graph.Node
    logits: graph.Node
    loss: graph.Node
    params: dict[str, graph.Node]
    initial_values: dict[str, np.ndarray]
    input_shape: tuple[int, ...] = (NUM_PIXELS,)
    num_classes: int = NUM_CLASSES
    grads: list[graph.Node] = dataclasses.field(default_factory=list)
    optimizer: Callable[[list], object] | None = None
    batch_size: int | None = None
    shuffle: bool | None = None
    lr_schedule: Callable[[int], float] | None = None

    def __post_init__(self) -> None:
        if list(self.params) != list(self.initial_values):
            raise ValueError(
                f"Model {self.name!r}: params {list(self.params)} and initial_values "
                f"{list(self.initial_values)} must name the same parameters in the same order"
            )
        self.initial_values = {
            k: np.ascontiguousarray(v, dtype=np.float32) for k, v in self.initial_values.items()
        }
        self.input_shape = tuple(int(d) for d in self.input_shape)
        if not self.grads:
            self.grads = graph.gradients(self.loss, list(self.params.values()))

    def init_params(self, device=None) -> dict:
        """Fresh copies of the initial parameter values.

        Args:
            device: None for numpy arrays (the numpy backend), else a ``gpumat.Device``: each value
                is then a new float32 ``PyGpuMatrix`` on that device (one host-to-device copy).

        Returns:
            parameter name -> float32 array (numpy or ``PyGpuMatrix``), in ``params`` order. The
            arrays are the caller's: training updates them in place.

        Raises:
            gpumat.CudaError: ``device`` is a GPU that does not exist. MemoryError: out of memory.
        """
        if device is None:
            return {k: v.copy() for k, v in self.initial_values.items()}
        return {k: array(v, device) for k, v in self.initial_values.items()}

    @property
    def num_parameters(self) -> int:
        """The total number of scalar parameters (e.g. 7,850 for logreg)."""
        return int(sum(v.size for v in self.initial_values.values()))

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}{tuple(v.shape)}" for k, v in self.initial_values.items())
        return f"Model({self.name!r}, params: {shapes}; {self.num_parameters} values)"


def _dense(h: graph.Node, W: graph.Node, b: graph.Node) -> graph.Node:  # noqa: N803 (math names)
    """h @ W + b, the bias broadcast over the batch (explicit, as autodiff requires)."""
    z = graph.matmul_op(h, W)
    return z + graph.broadcastto_op(b, z)


def logreg(seed: int = DEFAULT_SEED) -> Model:
    """Multinomial logistic regression, 784 -> 10 (the dlsys course's ``logreg``).

    ``logits = x @ W1 + b1`` with W1 (784, 10) and b1 (10,), both initialised to zeros (the loss
    is convex, so zeros are fine and make training deterministic). 7,850 parameters.

    Args:
        seed: unused (zero init draws nothing); accepted so every builder takes ``seed``.
    """
    del seed
    x = graph.Variable("x")
    y_ = graph.Variable("y_")
    W1, b1 = graph.Variable("W1"), graph.Variable("b1")  # noqa: N806
    logits = _dense(x, W1, b1)
    loss = graph.softmaxcrossentropy_op(logits, y_)
    return Model(
        name="logreg",
        x=x,
        y_=y_,
        logits=logits,
        loss=loss,
        params={"W1": W1, "b1": b1},
        initial_values={
            "W1": np.zeros((NUM_PIXELS, NUM_CLASSES), np.float32),
            "b1": np.zeros((NUM_CLASSES,), np.float32),
        },
    )


def _check_dropout(builder: str, dropout) -> float:
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float, np.integer, np.floating)):
        raise TypeError(f"{builder}: dropout must be a number in [0, 1), got {dropout!r}")
    if not 0.0 <= float(dropout) < 1.0:
        raise ValueError(f"{builder}: dropout must be in [0, 1), got {dropout!r}")
    return float(dropout)


def _maybe_dropout(h: graph.Node, p: float, seed: int, layer: int) -> graph.Node:
    """``dropout_op(h, p)`` with a seed derived from the model's seed and the layer index (so a
    model's masks are reproducible and two layers never share one), or h itself when p == 0."""
    if p == 0.0:
        return h
    return graph.dropout_op(h, p, seed=(int(seed) * 1000 + layer) % 2**64)


def mlp(
    seed: int = DEFAULT_SEED,
    hidden: tuple[int, int] = (256, 100),
    std: float = 0.1,
    dropout: float = 0.0,
) -> Model:
    """A 3-layer perceptron, 784 -> 256 -> ReLU -> 100 -> ReLU -> 10 (the dlsys course's ``mlp``).

    Weights W1 (784, 256), W2 (256, 100), W3 (100, 10) and biases b1 (256,), b2 (100,), b3 (10,)
    are drawn from N(0, std**2) with ``numpy.random.RandomState(seed)``, in that order (the course's
    generator and order: ``seed=123`` gives the course's initial values).
    227,670 parameters with the default sizes.

    Args:
        seed: the seed of the initialisation (default 123, the dlsys course's).
        hidden: the two hidden layer widths.
        std: the standard deviation of the initial weights and biases (default 0.1, the course's).
        dropout: p of an inverted ``gpumat.graph.dropout_op`` after each hidden ReLU (0: none, the
            course's model). Active in training only; :func:`gpumat.train.predict` and the
            accuracy evaluations run with dropout off.

    Raises:
        TypeError, ValueError: ``dropout`` is not a number in [0, 1).
    """
    p_drop = _check_dropout("mlp", dropout)
    h1, h2 = (int(h) for h in hidden)
    rng = np.random.RandomState(seed)  # the dlsys course's generator (module docstring)
    shapes = {
        "W1": (NUM_PIXELS, h1),
        "W2": (h1, h2),
        "W3": (h2, NUM_CLASSES),
        "b1": (h1,),
        "b2": (h2,),
        "b3": (NUM_CLASSES,),
    }
    drawn = {k: rng.normal(scale=std, size=s).astype(np.float32) for k, s in shapes.items()}

    x = graph.Variable("x")
    y_ = graph.Variable("y_")
    p = {k: graph.Variable(k) for k in ("W1", "b1", "W2", "b2", "W3", "b3")}
    a1 = _maybe_dropout(graph.relu_op(_dense(x, p["W1"], p["b1"])), p_drop, seed, 1)
    a2 = _maybe_dropout(graph.relu_op(_dense(a1, p["W2"], p["b2"])), p_drop, seed, 2)
    logits = _dense(a2, p["W3"], p["b3"])
    loss = graph.softmaxcrossentropy_op(logits, y_)
    return Model(
        name="mlp",
        x=x,
        y_=y_,
        logits=logits,
        loss=loss,
        params=p,
        initial_values={k: drawn[k] for k in p},
    )


#: Model name -> builder (``builder(seed=...) -> Model``). ``examples/mnist.py -m`` offers these
#: names; a new architecture registers itself here (e.g. ``BUILDERS["cnn"] = cnn``).
BUILDERS: dict[str, Callable[..., Model]] = {"logreg": logreg, "mlp": mlp}


def cnn(
    seed: int = DEFAULT_SEED,
    channels: tuple[int, int] = (32, 64),
    kernel_size: int = 5,
    dropout: float = 0.0,
) -> Model:
    """A LeNet-style convolutional network for 28x28 MNIST images.

    ``conv kxk (C1) -> bias -> ReLU -> max-pool 2 -> conv kxk (C2) -> bias -> ReLU -> max-pool 2
    -> flatten -> dense -> 10``, stride 1 and no padding. With the defaults (k = 5, C1 = 32,
    C2 = 64) the feature maps are 28 -> 24 -> 12 -> 8 -> 4, so the dense layer is 1024 -> 10:
    W1 (32, 1, 5, 5), b1 (32,), W2 (64, 32, 5, 5), b2 (64,), W3 (1024, 10), b3 (10,);
    62,346 parameters. Samples are fed as ``(N, 1, 28, 28)`` (``input_shape``), which
    :func:`gpumat.train.fit` does with flat ``(N, 784)`` images.

    Initialisation, with ``numpy.random.RandomState(seed)`` in the order W1, W2, W3: the
    convolution weights from N(0, 2 / fan_in) with fan_in = C_in * k * k (He et al., "Delving
    Deep into Rectifiers", ICCV 2015, for layers followed by ReLU), the dense weights from
    N(0, 1 / fan_in) (LeCun), biases zero.

    Its training recipe (used by :func:`gpumat.train.fit` unless overridden): Adam (Kingma & Ba,
    2015) at lr 1e-3, divided by 10 from the fourth epoch on, batches of 64 in a new random order
    each epoch. The MLP's SGD at lr 1.0 does not train it (the loss stays at log 10).

    Args:
        seed: the seed of the initialisation.
        channels: (C1, C2), the feature maps of the two convolutions.
        kernel_size: k, the side of both convolutions' square filters (odd or even, >= 1).
        dropout: p of an inverted ``gpumat.graph.dropout_op`` on the flattened features before the
            dense layer (0: none). Active in training only.

    Raises:
        ValueError: a kernel size or channel count that leaves no pixels or no features.
        TypeError, ValueError: ``dropout`` is not a number in [0, 1).
    """
    p_drop = _check_dropout("cnn", dropout)
    c1, c2 = (int(c) for c in channels)
    k = int(kernel_size)
    side = int(np.sqrt(NUM_PIXELS))
    s1 = side - k + 1  # after conv 1
    s2 = s1 // 2 - k + 1  # after pool 1 and conv 2
    if k < 1 or c1 < 1 or c2 < 1 or s2 < 2:
        raise ValueError(
            f"cnn: kernel_size={k} with channels={(c1, c2)} leaves no features for 28x28 images "
            "(need kernel_size >= 1, channels >= 1, and at least 2x2 pixels after the second conv)"
        )
    features = c2 * (s2 // 2) ** 2
    rng = np.random.RandomState(seed)  # the dlsys course's generator (module docstring)
    drawn = {
        "W1": rng.normal(0.0, np.sqrt(2.0 / (k * k)), size=(c1, 1, k, k)),
        "W2": rng.normal(0.0, np.sqrt(2.0 / (c1 * k * k)), size=(c2, c1, k, k)),
        "W3": rng.normal(0.0, np.sqrt(1.0 / features), size=(features, NUM_CLASSES)),
        "b1": np.zeros((c1,)),
        "b2": np.zeros((c2,)),
        "b3": np.zeros((NUM_CLASSES,)),
    }

    x = graph.Variable("x")
    y_ = graph.Variable("y_")
    p = {name: graph.Variable(name) for name in ("W1", "b1", "W2", "b2", "W3", "b3")}
    h = graph.relu_op(graph.add_channel_bias_op(graph.conv2d_op(x, p["W1"]), p["b1"]))
    h = graph.max_pool2d_op(h, 2)
    h = graph.relu_op(graph.add_channel_bias_op(graph.conv2d_op(h, p["W2"]), p["b2"]))
    h = graph.max_pool2d_op(h, 2)
    logits = _dense(_maybe_dropout(graph.flatten_op(h), p_drop, seed, 1), p["W3"], p["b3"])
    loss = graph.softmaxcrossentropy_op(logits, y_)
    return Model(
        name="cnn",
        x=x,
        y_=y_,
        logits=logits,
        loss=loss,
        params=p,
        initial_values={name: drawn[name] for name in p},
        input_shape=(1, side, side),
        optimizer=lambda params: optim.Adam(params, lr=1e-3),
        batch_size=64,
        shuffle=True,
        lr_schedule=_cnn_lr_schedule,
    )


def _cnn_lr_schedule(epoch: int) -> float:
    # Step decay after 3 epochs: at a constant 1e-3 Adam levels off at 0.989 test accuracy; with
    # the step (3 epochs at 1e-3, then 1e-4) it reached 0.9916 after 5 epochs on the cpu backend.
    return 1.0 if epoch < 3 else 0.1


BUILDERS["cnn"] = cnn
