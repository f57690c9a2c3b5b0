"""Attention and transformer layers: ``MultiheadAttention`` (PyTorch's
``torch/nn/modules/activation.py`` and ``torch.nn.functional.multi_head_attention_forward``),
``TransformerEncoderLayer``, ``TransformerEncoder``, ``TransformerDecoderLayer``,
``TransformerDecoder`` and ``Transformer`` (``torch/nn/modules/transformer.py``; Vaswani et al.
2017, "Attention Is All You Need"): the same parameters, state_dict keys, initialisation,
argument order and mask conventions, composed of gpumat's layers (the attention through
``scaled_dot_product_attention``'s fused kernels where no weights are asked for)."""

from __future__ import annotations

import copy
import math

from gpumat.creation import ones as gpumat_ones
from gpumat.creation import zeros
from gpumat.dtypes import bool_, float32
from gpumat.nn import functional as F  # noqa: N812 (PyTorch's convention)
from gpumat.nn import init
from gpumat.nn.activation import Dropout
from gpumat.nn.container import ModuleList
from gpumat.nn.linear import Linear, _factory
from gpumat.nn.module import Module
from gpumat.nn.normalization import LayerNorm
from gpumat.nn.parameter import Parameter
from gpumat.tensor import Tensor

__all__ = [
    "MultiheadAttention",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]


def _empty_param(shape, device) -> Parameter:
    return Parameter(zeros(*shape, device=device))


def _float_mask(mask: Tensor | None, what: str) -> Tensor | None:
    """A bool mask (True: not allowed, MultiheadAttention's convention) as -inf / 0 floats; a float
    mask as it is."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise TypeError(
            f"MultiheadAttention: {what} must be a Tensor or None, got {type(mask).__name__}"
        )
    if mask.dtype is bool_:
        return zeros(*mask.shape, device=mask.device).masked_fill(mask, -math.inf)
    if mask.dtype is not float32:
        raise TypeError(f"MultiheadAttention: {what} must be bool or float32, got {mask.dtype}")
    return mask


class MultiheadAttention(Module):
    """Multi-head attention (Vaswani et al., "Attention Is All You Need", 2017), PyTorch's
    ``nn.MultiheadAttention``: out_proj(concat_h softmax(q_h k_h^T / sqrt(d) + mask) v_h).

    Args:
        embed_dim: E, the model width; num_heads: H, a divisor of E (head dim E / H).
        dropout: on the attention weights, in training mode only.
        bias: learn ``in_proj_bias`` (3E,) and ``out_proj.bias`` (E,).
        batch_first: inputs and output (N, L, E) instead of (L, N, E).
        kdim, vdim: key and value widths (default E); when either differs from E the input
            projections are ``q_proj_weight`` (E, E), ``k_proj_weight`` (E, kdim),
            ``v_proj_weight`` (E, vdim) instead of ``in_proj_weight`` (3E, E).
        device: where the parameters live; dtype: float32 only.

    Initialisation as PyTorch's ``_reset_parameters``: xavier_uniform_ on the input projection
    weights, zeros for both biases, ``out_proj.weight`` as a ``Linear``'s.

    ``forward(query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
    average_attn_weights=True, is_causal=False)``: query (L, N, E) (or (N, L, E), or unbatched
    (L, E)), key (S, N, kdim), value (S, N, vdim); ``key_padding_mask`` (N, S) and
    ``attn_mask`` (L, S) or (N * H, L, S), bool (True: **not** allowed, PyTorch's convention
    here) or float (added). ``is_causal`` is a hint that ``attn_mask`` is the causal mask (an
    attn_mask is required, as PyTorch); with need_weights=False and no key_padding_mask the
    fused causal kernel runs instead of the mask. Returns (output like query, weights): the
    weights (N, L, S) averaged over heads, (N, H, L, S) with ``average_attn_weights=False``, or
    None when ``need_weights`` is False. need_weights=False runs
    :func:`~gpumat.nn.functional.scaled_dot_product_attention` (fused when there is no mask
    and no dropout); need_weights=True the composed path that stores the weights.

    Raises:
        ValueError: E not divisible by H; shapes that do not fit; is_causal without attn_mask.
        TypeError: masks neither bool nor float32.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        device = _factory("MultiheadAttention", device, dtype)
        if isinstance(embed_dim, bool) or not isinstance(embed_dim, int) or embed_dim <= 0:
            raise ValueError(f"MultiheadAttention: embed_dim must be an int > 0, got {embed_dim!r}")
        if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads <= 0:
            raise ValueError(f"MultiheadAttention: num_heads must be an int > 0, got {num_heads!r}")
        if embed_dim % num_heads:
            raise ValueError(
                f"MultiheadAttention: embed_dim {embed_dim} must be divisible by num_heads "
                f"{num_heads}"
            )
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn")
        self.embed_dim = embed_dim
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = float(dropout)
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self._qkv_same_embed_dim:
            self.in_proj_weight = _empty_param((3 * embed_dim, embed_dim), device)
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = _empty_param((embed_dim, embed_dim), device)
            self.k_proj_weight = _empty_param((embed_dim, self.kdim), device)
            self.v_proj_weight = _empty_param((embed_dim, self.vdim), device)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = _empty_param((3 * embed_dim,), device)
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def _projections(self):
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            ws = (w[0:e], w[e : 2 * e], w[2 * e : 3 * e])
        else:
            ws = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        b = self.in_proj_bias
        bs = (None, None, None) if b is None else (b[0:e], b[e : 2 * e], b[2 * e : 3 * e])
        return ws, bs

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ):
        op = "MultiheadAttention"
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, Tensor):
                raise TypeError(f"{op}: {name} must be a Tensor, got {type(t).__name__}")
        batched = query.ndim == 3
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(
                f"{op}: query, key, value must all be 3-D (batched) or 2-D (unbatched), got "
                f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
            )
        if batched and self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        if not batched:
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        lq, n, e = query.shape
        ls = key.shape[0]
        if e != self.embed_dim or key.shape[2] != self.kdim or value.shape[2] != self.vdim:
            raise ValueError(
                f"{op}: expected query (L, N, {self.embed_dim}), key (S, N, {self.kdim}), value "
                f"(S, N, {self.vdim}), got {tuple(query.shape)}, {tuple(key.shape)}, "
                f"{tuple(value.shape)}"
            )
        if key.shape[:2] != value.shape[:2] or key.shape[1] != n:
            raise ValueError(
                f"{op}: key {tuple(key.shape)} and value {tuple(value.shape)} must be (S, N, .) "
                f"with N = {n} of query"
            )
        if is_causal and attn_mask is None:
            raise ValueError(
                f"{op}: is_causal is a hint that attn_mask is causal; give attn_mask too"
            )
        h, hd = self.num_heads, self.head_dim
        (wq, wk, wv), (bq, bk, bv) = self._projections()

        def heads(x, length):  # (length, N, E) -> (N, H, length, hd)
            return x.reshape(length, n, h, hd).permute(1, 2, 0, 3)

        q = heads(F.linear(query, wq, bq), lq)
        k = heads(F.linear(key, wk, bk), ls)
        v = heads(F.linear(value, wv, bv), ls)
        mask = _float_mask(attn_mask, "attn_mask")
        if mask is not None:
            if mask.ndim == 2 and tuple(mask.shape) == (lq, ls):
                pass
            elif mask.ndim == 3 and tuple(mask.shape) == (n * h, lq, ls):
                mask = mask.reshape(n, h, lq, ls)
            else:
                raise ValueError(
                    f"{op}: attn_mask must be ({lq}, {ls}) or ({n * h}, {lq}, {ls}), got "
                    f"{tuple(attn_mask.shape)}"
                )
        kpm = _float_mask(key_padding_mask, "key_padding_mask")
        if kpm is not None:
            if tuple(kpm.shape) != (n, ls):
                raise ValueError(
                    f"{op}: key_padding_mask must be ({n}, {ls}), got "
                    f"{tuple(key_padding_mask.shape)}"
                )
            kpm = kpm.reshape(n, 1, 1, ls)
            mask = kpm if mask is None else mask + kpm
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = q.matmul(k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            if mask is not None:
                scores = scores + mask
            weights = scores.softmax(-1)
            if p > 0.0:
                weights = F.dropout(weights, p)
            out = weights.matmul(v)
            if average_attn_weights:
                weights = weights.mean(1)
            if not batched:
                weights = weights.squeeze(0)
        elif is_causal and key_padding_mask is None:
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        out = self.out_proj(out.permute(2, 0, 1, 3).reshape(lq, n, e))
        if not batched:
            out = out.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def extra_repr(self) -> str:
        e, h, bf = self.embed_dim, self.num_heads, self.batch_first
        return f"embed_dim={e}, num_heads={h}, batch_first={bf}"


def _activation(activation, op: str):
    """``"relu"``, ``"gelu"`` or a callable (PyTorch's choices)."""
    if callable(activation):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise ValueError(f"{op}: activation should be relu/gelu, not {activation!r}")


def _clones(module: Module, n: int) -> ModuleList:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"the number of layers must be an int >= 0, got {n!r}")
    return ModuleList([copy.deepcopy(module) for _ in range(n)])


def _attention_block(attn, dropout, x, kv, attn_mask, key_padding_mask, is_causal):
    """A transformer layer's attention sublayer: ``attn`` of queries ``x`` over keys and values
    ``kv`` (``x`` itself for self-attention), no weights asked for (the fused path), then
    ``dropout``."""
    out = attn(
        x, kv, kv, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
        is_causal=is_causal,
    )[0]  # fmt: skip
    return dropout(out)


class TransformerEncoderLayer(Module):
    """Self-attention then a feed-forward block, each with dropout, a residual connection and a
    LayerNorm (after it, or before it with ``norm_first``): PyTorch's layer, its parameter names
    (``self_attn.*``, ``linear1``, ``linear2``, ``norm1``, ``norm2``) and defaults.

    Args:
        d_model, nhead: the model width and the number of heads (d_model % nhead == 0).
        dim_feedforward: the feed-forward width (2048). dropout: 0.1. activation: "relu",
            "gelu" or a callable. layer_norm_eps: 1e-5. batch_first: inputs (N, S, E) instead
            of (S, N, E). norm_first: pre-norm. bias: in the linear layers and the norms.

    Raises:
        ValueError: a bad activation, sizes that do not divide (from MultiheadAttention).
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.activation = _activation(activation, "TransformerEncoderLayer")

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        """(S, N, E) (or (N, S, E) with batch_first, or unbatched (S, E)) to the same shape;
        masks as :class:`MultiheadAttention`'s ``attn_mask`` and ``key_padding_mask``."""
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        return _attention_block(
            self.self_attn, self.dropout1, x, x, attn_mask, key_padding_mask, is_causal
        )

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerDecoderLayer(Module):
    """Self-attention over the target, attention over the encoder's ``memory``, then a
    feed-forward block, each with dropout, a residual connection and a LayerNorm: PyTorch's
    layer (``self_attn``, ``multihead_attn``, ``linear1``, ``linear2``, ``norm1`` to ``norm3``).
    Arguments as :class:`TransformerEncoderLayer`'s."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw
        )
        self.multihead_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, **kw
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **kw)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **kw)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)
        self.activation = _activation(activation, "TransformerDecoderLayer")

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ):
        """``tgt`` (T, N, E) attending to itself and to ``memory`` (S, N, E) -> (T, N, E)."""
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(
                self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal
            )
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(
            x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal)
        )
        return self.norm3(x + self._ff_block(x))

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        return _attention_block(
            self.self_attn, self.dropout1, x, x, attn_mask, key_padding_mask, is_causal
        )

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        return _attention_block(
            self.multihead_attn, self.dropout2, x, mem, attn_mask, key_padding_mask, is_causal
        )

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoder(Module):
    """``num_layers`` copies (``copy.deepcopy``) of ``encoder_layer`` in sequence (``layers.0``,
    ...), then ``norm`` if given. ``enable_nested_tensor`` and ``mask_check`` are PyTorch's
    fast-path switches, accepted and without effect."""

    def __init__(
        self, encoder_layer, num_layers: int, norm=None, enable_nested_tensor=True, mask_check=True
    ) -> None:
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        """``src`` through every layer with the same masks, then ``norm``."""
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                        is_causal=bool(is_causal))  # fmt: skip
        return self.norm(out) if self.norm is not None else out


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer`` in sequence, then ``norm`` if given."""

    def __init__(self, decoder_layer, num_layers: int, norm=None) -> None:
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(
        self,
        tgt,
        memory,
        tgt_mask=None,
        memory_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        tgt_is_causal=None,
        memory_is_causal: bool = False,
    ):
        """``tgt`` through every layer against ``memory``, then ``norm``."""
        out = tgt
        for layer in self.layers:
            out = layer(
                out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                tgt_key_padding_mask=tgt_key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal,
            )  # fmt: skip
        return self.norm(out) if self.norm is not None else out


class Transformer(Module):
    """The encoder-decoder transformer: ``encoder`` (a :class:`TransformerEncoder` of
    ``num_encoder_layers`` layers and a final LayerNorm) and ``decoder`` (likewise), PyTorch's
    module, parameter names and initialisation (``xavier_uniform_`` for every matrix).

    Args:
        d_model (512), nhead (8), num_encoder_layers (6), num_decoder_layers (6),
        dim_feedforward (2048), dropout (0.1), activation, custom_encoder, custom_decoder,
        layer_norm_eps, batch_first, norm_first, bias, device, dtype: PyTorch's.

    Raises:
        ValueError: d_model not a multiple of nhead; a bad activation.
    """

    def __init__(
        self,
        d_model: int = 512,
        nhead: int = 8,
        num_encoder_layers: int = 6,
        num_decoder_layers: int = 6,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation="relu",
        custom_encoder=None,
        custom_decoder=None,
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        kw = {"device": device, "dtype": dtype}
        layer_kw = dict(
            dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
            layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first,
            bias=bias, **kw,
        )  # fmt: skip
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            layer = TransformerEncoderLayer(d_model, nhead, **layer_kw)
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
            self.encoder = TransformerEncoder(layer, num_encoder_layers, norm)
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            layer = TransformerDecoderLayer(d_model, nhead, **layer_kw)
            norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **kw)
            self.decoder = TransformerDecoder(layer, num_decoder_layers, norm)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.dim() > 1:
                init.xavier_uniform_(p)

    def forward(
        self,
        src,
        tgt,
        src_mask=None,
        tgt_mask=None,
        memory_mask=None,
        src_key_padding_mask=None,
        tgt_key_padding_mask=None,
        memory_key_padding_mask=None,
        src_is_causal=None,
        tgt_is_causal=None,
        memory_is_causal: bool = False,
    ):
        """``src`` (S, N, E) encoded, ``tgt`` (T, N, E) decoded against it -> (T, N, E).

        Raises:
            ValueError: src and tgt of different batch sizes or widths other than d_model.
        """
        batch = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch] != tgt.shape[batch]:
            raise ValueError("Transformer: the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise ValueError(
                "Transformer: the feature number of src and tgt must be equal to d_model "
                f"{self.d_model}, got {tuple(src.shape)} and {tuple(tgt.shape)}"
            )
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)  # fmt: skip
        return self.decoder(
            tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
            tgt_key_padding_mask=tgt_key_padding_mask,
            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
            memory_is_causal=memory_is_causal,
        )  # fmt: skip

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """The (sz, sz) float causal mask: 0 on and below the diagonal, -inf above (PyTorch's)."""
        ones = gpumat_ones(sz, sz, device=device)
        return ones.triu(1).masked_fill(ones.triu(1) > 0, float("-inf"))
