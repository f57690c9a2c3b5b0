"""gpumat's random generator: :func:`manual_seed`, :func:`generator` and :func:`draw_seed`.

One numpy generator seeds everything random in the front end (``rand``, ``randn``, ``nn.init``,
dropout masks, ``DataLoader`` shuffling); the device kernels take one draw each as the seed of
their counter-based generator, so the values are the same on every device.
"""

from __future__ import annotations

import numpy as np

from gpumat._checks import as_seed

__all__ = ["draw_seed", "generator", "manual_seed"]

# A fixed default, as PyTorch's default generator has, so runs repeat without a manual_seed.
_DEFAULT_SEED = 67280421310721
_generator = np.random.Generator(np.random.PCG64(_DEFAULT_SEED))


def manual_seed(seed: int) -> None:
    """Seed gpumat's random generator (``rand``, ``randn``, ``nn.init``, dropout masks,
    ``DataLoader`` shuffling), so a run repeats exactly.

    Args:
        seed: an int in [0, 2**64).

    The generator is numpy's PCG64 (O'Neill, "PCG: A Family of Simple Fast Space-Efficient
    Statistically Good Algorithms for Random Number Generation", 2014); each random tensor takes
    one 63-bit draw as the seed of gpumat's counter-based device generator
    (``gpumat.ops.uniform``), so the values are the same on every device. They are not
    PyTorch's values for the same seed.

    Raises:
        TypeError / ValueError: a seed that is not an int in range.
    """
    global _generator
    _generator = np.random.Generator(np.random.PCG64(as_seed(seed, "manual_seed")))


def generator() -> np.random.Generator:
    """The numpy generator behind gpumat's randomness (reseeded by :func:`manual_seed`)."""
    return _generator


def draw_seed() -> int:
    """A fresh seed in [0, 2**63) for a device random op (rand, init, dropout), from
    gpumat's generator."""
    return int(_generator.integers(0, 2**63))
