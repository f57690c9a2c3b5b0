"""The PyTorch word-level language model example, written our own way.

Follows pytorch/examples ``word_language_model/model.py`` and ``main.py``. ``RNNModel``:
``nn.Dropout``, ``nn.Embedding`` encoder, ``getattr(nn, rnn_type)(ninp, nhid, nlayers,
dropout=...)`` for ``LSTM``/``GRU`` or ``nn.RNN(..., nonlinearity='tanh'|'relu')``, an
``nn.Linear`` decoder (optionally weight-tied, ``self.decoder.weight = self.encoder.weight``),
``nn.init.uniform_`` / ``nn.init.zeros_``, ``decoded.view(-1, ntoken)``, ``F.log_softmax`` and
``init_hidden`` from ``next(self.parameters()).new_zeros(...)`` (a tuple for LSTM).
``PositionalEncoding``: ``torch.zeros``, ``torch.arange(..., dtype=torch.float)``, ``.float()``,
strided slice assignment ``pe[:, 0::2] = torch.sin(...)``, ``register_buffer``.
``TransformerModel`` subclasses ``nn.Transformer`` and runs ``self.encoder(src,
mask=self.src_mask)`` with the mask ``torch.log(torch.tril(torch.ones(sz, sz)))``. ``main.py``'s
``batchify`` (``narrow``, ``view(bsz, -1).t().contiguous()``), ``get_batch`` (slices, ``view(-1)``),
``repackage_hidden`` (``isinstance(h, torch.Tensor)``, ``detach``), ``nn.NLLLoss``,
``model.zero_grad()``, ``torch.nn.utils.clip_grad_norm_`` and the hand-written update
``p.data.add_(p.grad, alpha=-lr)``, and an evaluation under ``model.eval()`` / ``torch.no_grad()``
with ``len(data) * criterion(output, targets).item()``. The original reads the Wikitext-2 text
files through its ``data.Corpus``; here the corpus is a synthetic token stream from a seeded numpy
Markov chain, turned into a LongTensor with ``torch.tensor``.
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VARIANTS = ("RNN_TANH", "LSTM", "GRU", "Transformer")
NTOKENS = 24


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ["LSTM", "GRU"]:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == "LSTM":
            return (
                weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid),
            )
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


class PositionalEncoding(nn.Module):
    """Adds sine and cosine position codes to (seq, batch, d_model) embeddings."""

    def __init__(self, d_model, dropout=0.1, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[: x.size(0), :]
        return self.dropout(x)


class TransformerModel(nn.Transformer):
    """An nn.Transformer whose encoder alone runs, over embedded, position-coded tokens."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super().__init__(
            d_model=ninp,
            nhead=nhead,
            dim_feedforward=nhid,
            num_encoder_layers=nlayers,
            num_decoder_layers=1,
        )
        self.model_type = "Transformer"
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        self.init_weights()

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                self.src_mask = self._generate_square_subsequent_mask(len(src)).to(device)
        else:
            self.src_mask = None
        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=self.src_mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


def make_data(n=800, seed=0):
    """A token stream (n,) int64 from a sparse random Markov chain over NTOKENS tokens."""
    rng = np.random.default_rng(seed)
    successors = rng.integers(0, NTOKENS, (NTOKENS, 3))
    tokens = [0]
    for _ in range(n - 1):
        tokens.append(successors[tokens[-1], rng.integers(0, 3)])
    return torch.tensor(np.array(tokens, dtype=np.int64))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt=8):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].view(-1)
    return data, target


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def build_model(variant="LSTM", dropout=0.2):
    if variant == "Transformer":
        return TransformerModel(NTOKENS, 16, 2, 32, 2, dropout)
    return RNNModel(variant, NTOKENS, 16, 16, 2, dropout, tie_weights=variant == "GRU")


def train(model, data, steps, variant="LSTM", lr=5.0, clip=0.25, bsz=4, bptt=8):
    """``steps`` truncated-BPTT updates (plain SGD after gradient clipping); the float losses."""
    train_data = batchify(data, bsz)
    criterion = nn.NLLLoss()
    is_transformer = variant == "Transformer"
    losses = []
    model.train()
    if not is_transformer:
        hidden = model.init_hidden(bsz)
    for i in range(0, train_data.size(0) - 1, bptt):
        batch, targets = get_batch(train_data, i, bptt)
        model.zero_grad()
        if is_transformer:
            output = model(batch)
            output = output.view(-1, NTOKENS)
        else:
            hidden = repackage_hidden(hidden)
            output, hidden = model(batch, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        losses.append(loss.item())
        if len(losses) == steps:
            break
    return losses


def evaluate(model, data, variant, bsz=4, bptt=8):
    source = batchify(data, bsz)
    model.eval()
    criterion = nn.NLLLoss()
    total_loss = 0.0
    if variant != "Transformer":
        hidden = model.init_hidden(bsz)
    with torch.no_grad():
        for i in range(0, source.size(0) - 1, bptt):
            batch, targets = get_batch(source, i, bptt)
            if variant == "Transformer":
                output = model(batch).view(-1, NTOKENS)
            else:
                output, hidden = model(batch, hidden)
                hidden = repackage_hidden(hidden)
            total_loss += len(batch) * criterion(output, targets).item()
    return total_loss / (len(source) - 1)


def main(steps=6, variants=VARIANTS):
    torch.manual_seed(1)
    losses = []
    for variant in variants:
        model = build_model(variant)
        losses += train(model, make_data(), steps, variant)
        val_loss = evaluate(model, make_data(200, seed=1), variant)
        print(f"{variant}: loss {losses[-1]:.3f}, valid ppl {math.exp(val_loss):.2f}")
    return losses


if __name__ == "__main__":
    main()
