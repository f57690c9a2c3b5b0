"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` and their one-step cells ``RNNCell``,
``LSTMCell``, ``GRUCell`` (PyTorch's ``torch/nn/modules/rnn.py``: names, arguments, parameter
names, shapes, initialisation and gate order).

A layer's input projection over the whole sequence is one ``linear`` (one matmul) per layer and
direction; each time step then adds ``h @ weight_hh.T + bias_hh`` and applies the gates (the
LSTM and GRU gates in one fused kernel, :func:`gpumat.graph.lstm_cell_op` /
:func:`gpumat.graph.gru_cell_op`, with its gradient kernel):

- RNN: ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``, act ``tanh`` or ``relu``;
- LSTM (gates i, f, g, o in that order along the 4H rows): ``c' = sigmoid(f) * c +
  sigmoid(i) * tanh(g)``, ``h' = sigmoid(o) * tanh(c')`` (then ``h' @ weight_hr.T`` with
  ``proj_size``);
- GRU (gates r, z, n): ``r = sigmoid(gi_r + gh_r)``, ``z = sigmoid(gi_z + gh_z)``,
  ``n = tanh(gi_n + r * gh_n)``, ``h' = (1 - z) * n + z * h`` with ``gi = x W_ih^T + b_ih``,
  ``gh = h W_hh^T + b_hh``.
"""

from __future__ import annotations

import math
import numbers
import warnings

from gpumat.creation import zeros
from gpumat.dtypes import float32
from gpumat.graph.node import shape_str
from gpumat.graph.rnn import gru_cell_op, lstm_cell_op
from gpumat.nn import functional as F  # noqa: N812 (PyTorch's convention)
from gpumat.nn import init
from gpumat.nn.linear import _factory, _positive
from gpumat.nn.module import Module
from gpumat.nn.parameter import Parameter
from gpumat.tensor import Tensor, apply_op, cat, stack

__all__ = ["GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNBase", "RNNCell", "RNNCellBase"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _float_tensor(x, op: str, what: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {what} must be a Tensor, got {type(x).__name__}")
    if x.dtype is not float32:
        raise TypeError(f"{op}: {what} must be float32, got {x.dtype} {shape_str(x.shape)}")
    return x


def _rnn_cell(gi: Tensor, gh: Tensor, relu: bool) -> Tensor:
    s = gi + gh
    return s.relu() if relu else s.tanh()


def _lstm_cell(gi: Tensor, gh: Tensor, c: Tensor, size: int) -> tuple:
    """(h', c') from the fused ``lstm_cell_op`` ([h' | c'] in one kernel)."""
    hc = apply_op("LSTM cell", lstm_cell_op, [gi + gh, c])
    return hc.narrow(1, 0, size), hc.narrow(1, size, size)


def _gru_cell(gi: Tensor, gh: Tensor, h: Tensor, size: int) -> Tensor:
    """h' from the fused ``gru_cell_op``."""
    return apply_op("GRU cell", gru_cell_op, [gi, gh, h])


def _step(mode: str, gi: Tensor, h: Tensor, c, w_hh, b_hh, w_hr, size: int) -> tuple:
    """One time step from the input's projection gi (N, G * size) and the state (h, c)."""
    gh = F.linear(h, w_hh, b_hh)
    if mode == "LSTM":
        h, c = _lstm_cell(gi, gh, c, size)
        if w_hr is not None:
            h = F.linear(h, w_hr)
        return h, c
    if mode == "GRU":
        return _gru_cell(gi, gh, h, size), None
    return _rnn_cell(gi, gh, mode == "RNN_RELU"), None


class RNNBase(Module):
    """The layers' shared machinery (PyTorch's ``RNNBase``): parameters per layer and direction
    and the time loop. Use :class:`RNN`, :class:`LSTM` or :class:`GRU`."""

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        op = self._op_name(mode)
        device = _factory(op, device, dtype)
        self.mode = mode
        self.input_size = _positive(input_size, "input_size", op)
        self.hidden_size = _positive(hidden_size, "hidden_size", op)
        self.num_layers = _positive(num_layers, "num_layers", op)
        if self.num_layers == 0:
            raise ValueError(f"{op}: num_layers must be at least 1, got 0")
        if self.hidden_size == 0:
            raise ValueError(f"{op}: hidden_size must be positive, got 0")
        if (
            isinstance(dropout, bool)
            or not isinstance(dropout, numbers.Real)
            or not 0 <= dropout <= 1
        ):
            raise ValueError(f"{op}: dropout must be a number in [0, 1], got {dropout!r}")
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                f"{op}: dropout={dropout} and num_layers=1: dropout acts between layers only, "
                "so it does nothing here",
                UserWarning,
                stacklevel=3,
            )
        self.proj_size = _positive(proj_size, "proj_size", op)
        if proj_size and mode != "LSTM":
            raise ValueError(f"{op}: proj_size is an LSTM option, got proj_size={proj_size}")
        if proj_size >= hidden_size and proj_size:
            raise ValueError(
                f"{op}: proj_size ({proj_size}) must be smaller than hidden_size ({hidden_size})"
            )
        self.bias = bool(bias)
        self.batch_first = bool(batch_first)
        self.dropout = float(dropout)
        self.bidirectional = bool(bidirectional)
        directions = 2 if bidirectional else 1
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size or hidden_size
        self._flat_weights_names = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else real_hidden * directions
            for d in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if d else "")
                shapes = [
                    ("weight_ih", (gate_size, layer_input)),
                    ("weight_hh", (gate_size, real_hidden)),
                ]
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                for name, shape in shapes:
                    setattr(self, name + suffix, Parameter(zeros(*shape, device=device)))
                    self._flat_weights_names.append(name + suffix)
        self.reset_parameters()

    @staticmethod
    def _op_name(mode: str) -> str:
        return {"RNN_TANH": "RNN", "RNN_RELU": "RNN"}.get(mode, mode)

    def reset_parameters(self) -> None:
        """Every parameter drawn from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as PyTorch's
        ``RNNBase.reset_parameters``."""
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for name in self._flat_weights_names:
            init.uniform_(getattr(self, name), -stdv, stdv)

    @property
    def all_weights(self) -> list:
        """The parameters as lists per layer and direction (PyTorch's ``all_weights``)."""
        per = len(self._flat_weights_names) // (self.num_layers * (2 if self.bidirectional else 1))
        names = self._flat_weights_names
        return [[getattr(self, n) for n in names[i : i + per]] for i in range(0, len(names), per)]

    def _check_state(self, h, shape: tuple, what: str, input: Tensor) -> Tensor:  # noqa: A002
        op = self._op_name(self.mode)
        _float_tensor(h, op, what)
        if h.shape != shape:
            raise ValueError(
                f"{op}: {what} has shape {shape_str(h.shape)}, expected {shape_str(shape)} for "
                f"input {shape_str(input.shape)}"
            )
        if h.device != input.device:
            raise ValueError(f"{op}: {what} is on {h.device}, input on {input.device}")
        return h

    def forward(self, input: Tensor, hx=None):  # noqa: A002
        """input (L, N, input_size) ((N, L, input_size) with batch_first, or unbatched
        (L, input_size)) and the optional initial state -> ``(output, h_n)`` (``(output,
        (h_n, c_n))`` for LSTM).

        output (L, N, D * H_out) (batch_first: (N, L, D * H_out)), h_n (D * num_layers, N, H_out),
        c_n (D * num_layers, N, hidden_size), with D = 2 when bidirectional and H_out = proj_size
        or hidden_size; the unbatched forms drop N. The initial state has the shapes of h_n and
        c_n (zeros when omitted).

        Raises:
            TypeError: a non-Tensor or non-float32 input or state. ValueError: an input that is
            not 2-D or 3-D or whose last dim is not input_size, a state of the wrong shape or
            device (naming the layer and the shapes).
        """
        op = self._op_name(self.mode)
        _float_tensor(input, op, "input")
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            raise ValueError(
                f"{op}: input must be (L, N, {self.input_size}) (batch_first: (N, L, "
                f"{self.input_size})) or unbatched (L, {self.input_size}), got "
                f"{shape_str(input.shape)}"
            )
        batched = input.ndim == 3
        x = input if batched else input.unsqueeze(1)
        if batched and self.batch_first:
            x = x.transpose(0, 1)
        seq, n = x.shape[0], x.shape[1]
        directions = 2 if self.bidirectional else 1
        h_out = self.proj_size or self.hidden_size
        h_shape = (self.num_layers * directions, n, h_out)
        c_shape = (self.num_layers * directions, n, self.hidden_size)
        lstm = self.mode == "LSTM"
        if lstm and hx is not None and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise TypeError(f"{op}: hx must be a tuple (h_0, c_0), got {type(hx).__name__}")
        if hx is None:
            h0 = zeros(*h_shape, device=x.device)
            c0 = zeros(*c_shape, device=x.device) if lstm else None
        else:
            h0, c0 = hx if lstm else (hx, None)
            unb = (lambda s: s[:1] + s[2:]) if not batched else (lambda s: s)
            h0 = self._check_state(h0, unb(h_shape), "h_0" if lstm else "hx", input)
            if lstm:
                c0 = self._check_state(c0, unb(c_shape), "c_0", input)
            if not batched:
                h0 = h0.unsqueeze(1)
                c0 = c0.unsqueeze(1) if lstm else None
        h_last, c_last = [], []
        for layer in range(self.num_layers):
            outputs = []
            for d in range(directions):
                k = layer * directions + d
                suffix = f"_l{layer}" + ("_reverse" if d else "")
                w_ih = getattr(self, "weight_ih" + suffix)
                w_hh = getattr(self, "weight_hh" + suffix)
                b_ih = getattr(self, "bias_ih" + suffix) if self.bias else None
                b_hh = getattr(self, "bias_hh" + suffix) if self.bias else None
                w_hr = getattr(self, "weight_hr" + suffix) if self.proj_size else None
                gi_all = F.linear(x, w_ih, b_ih)  # (L, N, G * H): the whole sequence at once
                h, c = h0[k], (c0[k] if lstm else None)
                steps = [None] * seq
                for t in range(seq - 1, -1, -1) if d else range(seq):
                    h, c = _step(self.mode, gi_all[t], h, c, w_hh, b_hh, w_hr, self.hidden_size)
                    steps[t] = h
                outputs.append(stack(steps) if seq else zeros(0, n, h_out, device=x.device))
                h_last.append(h)
                c_last.append(c)
            x = outputs[0] if directions == 1 else cat(outputs, 2)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        h_n = stack(h_last)
        c_n = stack(c_last) if lstm else None
        out = x
        if not batched:
            out, h_n = out.squeeze(1), h_n.squeeze(1)
            c_n = c_n.squeeze(1) if lstm else None
        elif self.batch_first:
            out = out.transpose(0, 1)
        return (out, (h_n, c_n)) if lstm else (out, h_n)

    def flatten_parameters(self) -> None:
        """Nothing to do (PyTorch's cuDNN weight-packing hook, accepted for ported code)."""

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s


_LAYER_DOC = """
    Args:
        input_size, hidden_size: ints (hidden_size > 0).
        num_layers: stacked layers (>= 1), each fed the previous one's output.
        bias: learn ``bias_ih`` and ``bias_hh``.
        batch_first: input and output (N, L, feature) instead of (L, N, feature) (the states
            stay (D * num_layers, N, H)).
        dropout: probability of dropout on each layer's output but the last, in training mode.
        bidirectional: a second direction per layer run from the last step to the first; its
            output is concatenated after the forward one's (D = 2).
        device: where the parameters live (default the host); dtype: float32 only.

    Parameters, PyTorch's names and shapes (state_dict keys as torch's), layer k and suffix
    ``_reverse`` for the second direction: ``weight_ih_l{k}`` (G * hidden_size, input_size for
    layer 0 else D * H_out), ``weight_hh_l{k}`` (G * hidden_size, H_out), ``bias_ih_l{k}`` and
    ``bias_hh_l{k}`` (G * hidden_size,), all drawn from U(-1/sqrt(hidden_size),
    1/sqrt(hidden_size)).

    Raises:
        ValueError: bad sizes or dropout; TypeError: a dtype other than float32 (at
            construction). See :meth:`RNNBase.forward` for the call's shapes and errors.
"""


class RNN(RNNBase):
    """Elman RNN, ``h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` with act ``tanh``
    (``nonlinearity='tanh'``, the default) or ``relu``; G = 1. ``forward(input, hx=None)`` returns
    ``(output, h_n)``.
    """

    __doc__ += _LAYER_DOC

    def __init__(self, *args, nonlinearity: str = "tanh", **kwargs) -> None:
        if len(args) > 3:  # PyTorch's positional order: (input, hidden, layers, nonlinearity, ...)
            nonlinearity, args = args[3], args[:3] + args[4:]
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", *args, **kwargs)


class LSTM(RNNBase):
    """Long short-term memory (gates i, f, g, o along the 4 * hidden_size rows: PyTorch's order):
    ``c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)``, ``h_t = sigmoid(o) * tanh(c_t)``;
    G = 4. ``forward(input, (h_0, c_0)=None)`` returns ``(output, (h_n, c_n))``.

    ``proj_size`` > 0 (smaller than hidden_size) projects each h_t by ``weight_hr_l{k}``
    (proj_size, hidden_size), as PyTorch's LSTM with projections: H_out = proj_size.
    """

    __doc__ += _LAYER_DOC

    def __init__(self, *args, **kwargs) -> None:
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    """Gated recurrent unit (gates r, z, n: PyTorch's order): ``r = sigmoid(gi_r + gh_r)``,
    ``z = sigmoid(gi_z + gh_z)``, ``n = tanh(gi_n + r * gh_n)``, ``h_t = (1 - z) * n + z *
    h_{t-1}`` with ``gi = x_t W_ih^T + b_ih``, ``gh = h_{t-1} W_hh^T + b_hh``; G = 3.
    ``forward(input, hx=None)`` returns ``(output, h_n)``.
    """

    __doc__ += _LAYER_DOC

    def __init__(self, *args, **kwargs) -> None:
        super().__init__("GRU", *args, **kwargs)


class RNNCellBase(Module):
    """The cells' shared machinery (PyTorch's ``RNNCellBase``): one step of a layer.
    Use :class:`RNNCell`, :class:`LSTMCell` or :class:`GRUCell`."""

    def __init__(
        self, op: str, gates: int, input_size, hidden_size, bias=True, device=None, dtype=None
    ) -> None:
        super().__init__()
        self._op = op
        device = _factory(op, device, dtype)
        self.input_size = _positive(input_size, "input_size", op)
        self.hidden_size = _positive(hidden_size, "hidden_size", op)
        if self.hidden_size == 0:
            raise ValueError(f"{op}: hidden_size must be positive, got 0")
        self.bias = bool(bias)
        g = gates * hidden_size
        self.weight_ih = Parameter(zeros(g, input_size, device=device))
        self.weight_hh = Parameter(zeros(g, hidden_size, device=device))
        if bias:
            self.bias_ih = Parameter(zeros(g, device=device))
            self.bias_hh = Parameter(zeros(g, device=device))
        else:
            self.bias_ih = self.bias_hh = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Every parameter drawn from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)), as
        PyTorch's ``RNNCellBase.reset_parameters``."""
        stdv = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    def _input(self, input: Tensor) -> tuple:  # noqa: A002
        _float_tensor(input, self._op, "input")
        if input.ndim not in (1, 2) or input.shape[-1] != self.input_size:
            raise ValueError(
                f"{self._op}: input must be (N, {self.input_size}) or ({self.input_size},), got "
                f"{shape_str(input.shape)}"
            )
        batched = input.ndim == 2
        return (input if batched else input.unsqueeze(0)), batched

    def _state(self, h, x: Tensor, batched: bool, what: str) -> Tensor:
        if h is None:
            return zeros(x.shape[0], self.hidden_size, device=x.device)
        _float_tensor(h, self._op, what)
        want = (x.shape[0], self.hidden_size) if batched else (self.hidden_size,)
        if h.shape != want:
            raise ValueError(
                f"{self._op}: {what} has shape {shape_str(h.shape)}, expected {shape_str(want)} "
                f"for input {shape_str(x.shape if batched else x.shape[1:])}"
            )
        if h.device != x.device:
            raise ValueError(f"{self._op}: {what} is on {h.device}, input on {x.device}")
        return h if batched else h.unsqueeze(0)

    def _gates(self, x: Tensor, h: Tensor) -> tuple:
        return F.linear(x, self.weight_ih, self.bias_ih), F.linear(h, self.weight_hh, self.bias_hh)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if not self.bias:
            s += ", bias=False"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


_CELL_DOC = """
    Args:
        input_size, hidden_size: ints (hidden_size > 0); bias: learn ``bias_ih`` and
        ``bias_hh``; device: where the parameters live; dtype: float32 only.

    Parameters (PyTorch's names and shapes): ``weight_ih`` (G * hidden_size, input_size),
    ``weight_hh`` (G * hidden_size, hidden_size), ``bias_ih`` and ``bias_hh``
    (G * hidden_size,), drawn from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).

    Input (N, input_size) or unbatched (input_size,), states (N, hidden_size) or (hidden_size,)
    (zeros when omitted).

    Raises:
        TypeError: a non-Tensor or non-float32 input or state. ValueError: bad sizes, an input
        or state of the wrong shape or device (naming the cell and the shapes).
"""


class RNNCell(RNNCellBase):
    """One Elman RNN step: ``h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)``, act ``tanh`` or
    ``relu`` (``nonlinearity``); G = 1. ``forward(input, hx=None)`` returns h'.
    """

    __doc__ += _CELL_DOC

    def __init__(
        self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(
                f"RNNCell: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}"
            )
        self.nonlinearity = nonlinearity
        super().__init__("RNNCell", 1, input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        x, batched = self._input(input)
        h = self._state(hx, x, batched, "hx")
        out = _rnn_cell(*self._gates(x, h), self.nonlinearity == "relu")
        return out if batched else out.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step (gates i, f, g, o): ``c' = sigmoid(f) * c + sigmoid(i) * tanh(g)``,
    ``h' = sigmoid(o) * tanh(c')``; G = 4. ``forward(input, (h, c)=None)`` returns (h', c').
    """

    __doc__ += _CELL_DOC

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None) -> None:
        super().__init__("LSTMCell", 4, input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Tensor, hx=None) -> tuple:  # noqa: A002
        x, batched = self._input(input)
        if hx is not None and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise TypeError(f"LSTMCell: hx must be a tuple (h, c), got {type(hx).__name__}")
        h = self._state(None if hx is None else hx[0], x, batched, "h")
        c = self._state(None if hx is None else hx[1], x, batched, "c")
        h, c = _lstm_cell(*self._gates(x, h), c, self.hidden_size)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    """One GRU step (gates r, z, n): ``n = tanh(gi_n + r * gh_n)``, ``h' = (1 - z) * n +
    z * h``; G = 3. ``forward(input, hx=None)`` returns h'.
    """

    __doc__ += _CELL_DOC

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None) -> None:
        super().__init__("GRUCell", 3, input_size, hidden_size, bias, device, dtype)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> Tensor:  # noqa: A002
        x, batched = self._input(input)
        h = self._state(hx, x, batched, "hx")
        out = _gru_cell(*self._gates(x, h), h, self.hidden_size)
        return out if batched else out.squeeze(0)
