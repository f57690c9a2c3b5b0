"""``gpumat.data``: datasets and mini-batches of tensors (PyTorch's ``torch.utils.data``).

:class:`TensorDataset` holds tensors that share their first axis; :class:`DataLoader` iterates a
dataset in mini-batches, shuffled by gpumat's generator (:func:`gpumat.manual_seed`) when asked.
A dataset that holds whole arrays (``TensorDataset`` and :class:`gpumat.datasets.MNIST`) is
batched by one gather of rows on the host and one copy to the device per tensor; any other
dataset (``__getitem__`` and ``__len__``) is batched by stacking its items.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import numpy as np

from gpumat.arrays import array
from gpumat.creation import tensor
from gpumat.dtypes import bool_, float32, int64
from gpumat.random import generator
from gpumat.tensor import Tensor

__all__ = ["DataLoader", "Dataset", "TensorDataset", "default_collate"]


class Dataset:
    """A sized, indexable collection of samples: subclasses define ``__getitem__(i)`` and
    ``__len__`` (PyTorch's ``torch.utils.data.Dataset``)."""

    def __getitem__(self, index):
        raise NotImplementedError(f"{type(self).__name__}.__getitem__")

    def __len__(self) -> int:
        raise NotImplementedError(f"{type(self).__name__}.__len__")


class TensorDataset(Dataset):
    """Samples that are rows of tensors: ``dataset[i]`` is ``(t[i] for t in tensors)``.

    Args:
        *tensors: tensors (or numpy arrays) with the same length along axis 0, at least one.
            They are copied to the host once (batches are gathered there); each batch is made on
            the tensor's device (the host for numpy data).

    Attributes:
        tensors: the tensors given (numpy arrays become host tensors).

    Raises:
        ValueError: no tensors, a 0-d tensor, or lengths that differ. TypeError: non-numeric data.
    """

    def __init__(self, *tensors) -> None:
        if not tensors:
            raise ValueError("TensorDataset: needs at least one tensor")
        made = [t if isinstance(t, Tensor) else tensor(t) for t in tensors]
        for t in made:
            t._concrete("TensorDataset")
        self._set_columns([(t._data.asnumpy(), t.dtype, t.device, t._range) for t in made])
        self._tensors = tuple(made)

    @classmethod
    def _from_host(cls, columns: list) -> TensorDataset:
        """A dataset over host arrays: ``columns`` of (values, dtype, device, range); the tensors
        are made on first use of ``tensors`` (batches never need them)."""
        self = cls.__new__(cls)
        self._set_columns(columns)
        self._tensors = None
        return self

    def _set_columns(self, columns: list) -> None:
        for values, *_ in columns:
            if values.ndim == 0:
                raise ValueError("TensorDataset: tensors need a leading sample axis, got a 0-d one")
        lengths = [values.shape[0] for values, *_ in columns]
        if len(set(lengths)) != 1:
            raise ValueError(f"Size mismatch between tensors: lengths {lengths} differ")
        self._columns = columns

    @property
    def tensors(self) -> tuple:
        """The dataset's tensors, one per column."""
        if self._tensors is None:
            self._tensors = tuple(
                Tensor._make(array(v, device), dt, device, bounds)
                for v, dt, device, bounds in self._columns
            )
        return self._tensors

    def __len__(self) -> int:
        return self._columns[0][0].shape[0]

    def __getitem__(self, index):
        """``(t[index] for t in tensors)``: an int gives one sample; a slice, an int list or
        array, or an int64 / bool tensor a batch of rows (as PyTorch's TensorDataset, whose
        ``dataset[i:j]`` the tutorials use).

        Raises:
            IndexError: an index out of range. TypeError: another kind of index.
        """
        n = len(self)
        if isinstance(index, numbers.Integral) and not isinstance(index, (bool, np.bool_)):
            if not -n <= index < n:
                raise IndexError(f"index {index} is out of range for {n} samples")
            return self._batch(np.array([int(index) % n]), squeeze=True)
        if isinstance(index, Tensor):
            index = index.detach().numpy()
        if isinstance(index, slice) or isinstance(index, (list, tuple, np.ndarray)):
            try:
                rows = np.arange(n)[np.asarray(index) if not isinstance(index, slice) else index]
            except IndexError as exc:
                raise IndexError(f"TensorDataset: {exc}") from None
            if rows.ndim != 1:
                raise TypeError(f"TensorDataset: an index of {rows.ndim} dims picks no rows")
            return self._batch(rows)
        raise TypeError(f"TensorDataset indices must be ints, slices or int arrays, got {index!r}")

    def _batch(self, rows: np.ndarray, squeeze: bool = False) -> tuple:
        """The samples at ``rows`` (an int array), one tensor per column, stacked on axis 0."""
        out = []
        for values, dt, device, bounds in self._columns:
            part = values[rows]
            if squeeze:
                part = part[0]
            # The column's range bounds every batch's (class checks need no device read).
            out.append(Tensor._make(array(part, device), dt, device, bounds))
        return tuple(out)


def _stack(items: list, field: str):
    """One batch tensor from a list of samples' values (tensors, arrays or numbers), its dtype
    from every sample's (as ``torch.tensor`` infers it), not only the first's."""
    first = items[0]
    if isinstance(first, Tensor):
        if any(not isinstance(t, Tensor) for t in items):
            raise TypeError(f"DataLoader: {field} mixes tensors and other values")
        devices = {t.device for t in items}
        dtypes = {t.dtype for t in items}
        if len(devices) > 1 or len(dtypes) > 1:
            raise ValueError(
                f"DataLoader: the samples' {field} tensors are on several devices or of several "
                f"dtypes ({sorted(map(str, devices))}, {sorted(map(str, dtypes))}); a batch has one"
            )
        values = np.stack([t.detach().numpy() for t in items])
        return tensor(values, dtype=first.dtype, device=first.device)
    if isinstance(first, np.ndarray):
        return tensor(np.stack(items))
    if all(isinstance(x, (bool, np.bool_)) for x in items):
        return tensor(np.array(items, dtype=bool), dtype=bool_)
    if all(isinstance(x, (numbers.Integral, np.bool_)) for x in items):  # bools count as 0 and 1
        return tensor(np.array([int(x) for x in items], dtype=np.int64), dtype=int64)
    if all(isinstance(x, (numbers.Real, np.bool_)) for x in items):
        return tensor(np.array([float(x) for x in items], dtype=np.float64), dtype=float32)
    kinds = sorted({type(x).__name__ for x in items})
    raise TypeError(f"DataLoader: cannot batch samples of type {', '.join(kinds)} ({field})")


def _collate(samples: list, field: str):
    first = samples[0]
    if isinstance(first, str):
        return list(samples)
    if isinstance(first, Mapping):
        if any(not isinstance(s, Mapping) or s.keys() != first.keys() for s in samples):
            raise ValueError(f"DataLoader: the samples' {field} dicts have different keys")
        return {k: _collate([s[k] for s in samples], f"{field}[{k!r}]") for k in first}
    if isinstance(first, (tuple, list)):
        if any(not isinstance(s, (tuple, list)) or len(s) != len(first) for s in samples):
            raise ValueError("DataLoader: the samples have different numbers of fields")
        fields = [_collate([s[k] for s in samples], f"{field}[{k}]") for k in range(len(first))]
        if hasattr(first, "_fields"):  # a namedtuple keeps its type, as in PyTorch
            return type(first)(*fields)
        return tuple(fields)
    return _stack(samples, field)


def default_collate(samples: list):
    """Stack a list of samples into a batch, as PyTorch's ``default_collate``: dicts key by key
    (a dict of batches), tuples and lists field by field (a tuple; a namedtuple keeps its type),
    nested to any depth; tensors, arrays and numbers into tensors with a leading batch axis;
    strings into a list. Numbers take their dtype from all the samples: bool if all are bools,
    int64 if all are integers (bools as 0 and 1), else float32.

    Raises:
        TypeError: samples of a kind that cannot be batched, or tensors mixed with other values.
        ValueError: samples whose fields differ in number, keys or shape, or tensors on several
            devices or of several dtypes.
    """
    return _collate(samples, "sample")


class DataLoader:
    """Mini-batches of a dataset (PyTorch's ``torch.utils.data.DataLoader``).

    Args:
        dataset: a :class:`Dataset` (anything with ``__getitem__`` and ``__len__``).
        batch_size: samples per batch, an int >= 1 (default 1).
        shuffle: visit the samples in a fresh random order each epoch (each ``iter``), drawn
            from gpumat's generator (:func:`gpumat.manual_seed`), or from ``generator``.
        drop_last: skip the last batch when it is smaller than ``batch_size``.
        generator: a ``numpy.random.Generator`` for the shuffling (default gpumat's).

    Iterating yields batches: for a dataset of tuples, a tuple of tensors with a leading batch
    axis. ``len(loader)`` is the number of batches.

    Raises:
        TypeError: a dataset without ``__getitem__``/``__len__``, a non-int batch size, non-bool
            flags. ValueError: ``batch_size`` < 1.
    """

    def __init__(
        self,
        dataset,
        batch_size: int = 1,
        shuffle: bool = False,
        drop_last: bool = False,
        generator: np.random.Generator | None = None,
    ) -> None:
        if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise TypeError(
                f"DataLoader: dataset must have __getitem__ and __len__, got "
                f"{type(dataset).__name__}"
            )
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
            raise TypeError(f"DataLoader: batch_size must be an int, got {batch_size!r}")
        if batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be >= 1, got {batch_size}")
        for what, flag in (("shuffle", shuffle), ("drop_last", drop_last)):
            if not isinstance(flag, bool):
                raise TypeError(f"DataLoader: {what} must be a bool, got {flag!r}")
        if generator is not None and not isinstance(generator, np.random.Generator):
            raise TypeError("DataLoader: generator must be a numpy.random.Generator")
        self.dataset = dataset
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.drop_last = drop_last
        self.generator = generator

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            order = (self.generator or generator()).permutation(n)
        else:
            order = np.arange(n)
        stop = n - n % self.batch_size if self.drop_last else n
        batch = getattr(self.dataset, "_batch", None)
        for start in range(0, stop, self.batch_size):
            rows = order[start : start + self.batch_size]
            if batch is not None:
                yield batch(rows)
            else:
                yield default_collate([self.dataset[int(i)] for i in rows])
