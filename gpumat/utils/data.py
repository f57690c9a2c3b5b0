"""``gpumat.utils.data``: PyTorch's ``torch.utils.data`` spelling of :mod:`gpumat.data`.

A face: it only re-exports gpumat.data's names (``Dataset``, ``TensorDataset``, ``DataLoader``,
``default_collate``).
"""

from gpumat.data import DataLoader, Dataset, TensorDataset, default_collate

__all__ = ["DataLoader", "Dataset", "TensorDataset", "default_collate"]
