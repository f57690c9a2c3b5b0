"""Lookup layers: ``Embedding`` (PyTorch's ``torch/nn/modules/sparse.py``)."""

from __future__ import annotations

from gpumat.autograd import no_grad
from gpumat.creation import zeros
from gpumat.dtypes import float32
from gpumat.graph.node import shape_str
from gpumat.nn import functional as F  # noqa: N812 (PyTorch's convention)
from gpumat.nn import init
from gpumat.nn.linear import _factory, _positive
from gpumat.nn.module import Module
from gpumat.nn.parameter import Parameter
from gpumat.tensor import Tensor

__all__ = ["Embedding"]


class Embedding(Module):
    """A table of ``num_embeddings`` vectors of size ``embedding_dim`` looked up by int64
    indices: input ``(*)`` -> ``(*, embedding_dim)`` (see :func:`gpumat.nn.functional.embedding`).

    Args:
        num_embeddings, embedding_dim: ints >= 0.
        padding_idx: a row (negative counts from the end) zeroed at initialisation and never
            updated by the gradient (it receives none), or None.
        max_norm, norm_type, scale_grad_by_freq, sparse: PyTorch's options; only their defaults
            are supported.
        _weight: an initial weight (num_embeddings, embedding_dim), float32, used as given.
        device: where the weight lives (default the host); dtype: float32 only.

    Parameter: ``weight`` (num_embeddings, embedding_dim), initialised N(0, 1) with the padding
    row zeroed (PyTorch's ``Embedding.reset_parameters``); the state_dict key is ``weight``, as
    torch.nn.Embedding's.

    Raises:
        ValueError: bad sizes, a padding_idx outside the table, an unsupported option, a
            ``_weight`` of the wrong shape. TypeError: a non-float32 dtype or ``_weight``.
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm=None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight: Tensor | None = None,
        _freeze: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        device = _factory("Embedding", device, dtype)
        self.num_embeddings = _positive(num_embeddings, "num_embeddings", "Embedding")
        self.embedding_dim = _positive(embedding_dim, "embedding_dim", "Embedding")
        self.padding_idx = F._padding_index(padding_idx, num_embeddings, "Embedding")
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise ValueError(
                "Embedding: max_norm, scale_grad_by_freq and sparse are not supported (use their "
                "defaults)"
            )
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            self.weight = Parameter(zeros(num_embeddings, embedding_dim, device=device))
            self.reset_parameters()
        else:
            if not isinstance(_weight, Tensor) or _weight.dtype is not float32:
                raise TypeError(f"Embedding: _weight must be a float32 Tensor, got {_weight!r}")
            if _weight.shape != (num_embeddings, embedding_dim):
                raise ValueError(
                    f"Embedding: _weight has shape {shape_str(_weight.shape)}, expected "
                    f"({num_embeddings}, {embedding_dim})"
                )
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self) -> None:
        """Draw the weight again from N(0, 1) and zero the padding row (PyTorch's)."""
        init.normal_(self.weight)
        self._fill_padding_idx_with_zero()

    def _fill_padding_idx_with_zero(self) -> None:
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input: Tensor) -> Tensor:  # noqa: A002
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s if self.padding_idx is None else s + f", padding_idx={self.padding_idx}"

    @classmethod
    def from_pretrained(
        cls,
        embeddings: Tensor,
        freeze: bool = True,
        padding_idx: int | None = None,
        max_norm=None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
    ) -> Embedding:
        """An Embedding whose weight is ``embeddings`` (2-D float32, used as given, its padding
        row not zeroed: PyTorch's), frozen (no gradient) unless ``freeze=False``.

        Raises:
            ValueError: embeddings not 2-D; as the constructor otherwise.
        """
        if not isinstance(embeddings, Tensor) or embeddings.ndim != 2:
            shape = shape_str(embeddings.shape) if isinstance(embeddings, Tensor) else embeddings
            raise ValueError(f"Embedding.from_pretrained: embeddings must be 2-D, got {shape}")
        rows, cols = embeddings.shape
        return cls(
            rows,
            cols,
            padding_idx,
            max_norm,
            norm_type,
            scale_grad_by_freq,
            sparse,
            _weight=embeddings,
            _freeze=freeze,
        )
