"""``gpumat.utils``: PyTorch's ``torch.utils`` spelling, so that ``torch.utils.data.DataLoader``
and ``from torch.utils.data import DataLoader`` port by replacing ``torch`` with ``gpumat``.

A face: it only re-exports (:mod:`gpumat.utils.data` is :mod:`gpumat.data`).
"""

from gpumat.utils import data

__all__ = ["data"]
