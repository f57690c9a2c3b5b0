"""nanoGPT's GPT model and a small version of its training loop, written our own way.

Follows karpathy/nanoGPT ``model.py`` and ``train.py``. Model: a ``@dataclass`` ``GPTConfig``; a
``LayerNorm`` module with an optional bias (``F.layer_norm(input, self.weight.shape, self.weight,
self.bias, 1e-5)``); ``CausalSelfAttention`` (``nn.Linear(..., bias=config.bias)``,
``self.c_attn(x).split(self.n_embd, dim=2)``, ``view(...).transpose(1, 2)``, the
``hasattr(torch.nn.functional, 'scaled_dot_product_attention')`` test choosing
``F.scaled_dot_product_attention(..., is_causal=True)`` or the explicit path with a
``register_buffer``-ed ``torch.tril(torch.ones(T, T)).view(1, 1, T, T)`` mask,
``q @ k.transpose(-2, -1)``, ``masked_fill(... == 0, float('-inf'))``, ``F.softmax``,
``y.transpose(1, 2).contiguous().view(B, T, C)``); ``MLP`` with ``nn.GELU``; ``Block`` with
residual sums; ``GPT`` with ``nn.ModuleDict(dict(wte=nn.Embedding, wpe=nn.Embedding,
drop=nn.Dropout, h=nn.ModuleList, ln_f=LayerNorm))``, weight tying
(``self.transformer.wte.weight = self.lm_head.weight``), ``self.apply(self._init_weights)`` with
``torch.nn.init.normal_`` / ``zeros_``, the scaled ``c_proj.weight`` init over
``named_parameters()``, ``get_num_params`` (``p.numel()``), ``forward`` with
``torch.arange(0, t, dtype=torch.long, device=device)``, ``F.cross_entropy(logits.view(-1,
logits.size(-1)), targets.view(-1), ignore_index=-1)`` and the inference path
``self.lm_head(x[:, [-1], :])``; ``configure_optimizers`` (parameter groups by ``p.dim() >= 2``,
``inspect.signature(torch.optim.AdamW)``, ``torch.optim.AdamW(optim_groups, lr=..., betas=...)``)
and ``@torch.no_grad()`` ``generate`` (``idx[:, -block_size:]``, ``torch.topk``, mask assignment
``logits[logits < v[:, [-1]]] = -float('Inf')``, ``torch.multinomial``, ``torch.cat``). Training
(``train.py``): ``get_batch`` with ``torch.randint`` and ``torch.stack([torch.from_numpy(
(data[i:i + block_size]).astype(np.int64)) for i in ix])``, the warm-up and cosine ``get_lr`` set
on every ``param_group['lr']``, ``contextlib.nullcontext()`` on the CPU,
``torch.nn.utils.clip_grad_norm_``, ``optimizer.zero_grad(set_to_none=True)`` and
``estimate_loss`` under ``model.eval()``. The original trains on a tokenised text file read with
``np.memmap(..., dtype=np.uint16)``; here the token array is a synthetic uint16 Markov-chain
stream made with numpy from a seed.
"""

import inspect
import math
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


class LayerNorm(nn.Module):
    """LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False"""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = hasattr(torch.nn.functional, "scaled_dot_product_attention")
        if not self.flash:
            mask = torch.tril(torch.ones(config.block_size, config.block_size))
            self.register_buffer("bias", mask.view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = torch.nn.functional.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=None,
                dropout_p=self.dropout if self.training else 0,
                is_causal=True,
            )
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 32
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = True


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
        print("number of parameters: %.2fM" % (self.get_num_params() / 1e6,))  # noqa: UP031

    def get_num_params(self, non_embedding=True):
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n_params -= self.transformer.wpe.weight.numel()
        return n_params

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.config.block_size
        pos = torch.arange(0, t, dtype=torch.long, device=device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1
            )
        else:
            logits = self.lm_head(x[:, [-1], :])
            loss = None
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        param_dict = {pn: p for pn, p in self.named_parameters()}
        param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
        use_fused = fused_available and device_type == "cuda"
        extra_args = dict(fused=True) if use_fused else dict()
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            block_size = self.config.block_size
            idx_cond = idx if idx.size(1) <= block_size else idx[:, -block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def make_data(n=2000, seed=0, vocab_size=32):
    """A uint16 token array (as nanoGPT's memmap of train.bin) from a random Markov chain."""
    rng = np.random.default_rng(seed)
    successors = rng.integers(0, vocab_size, (vocab_size, 2))
    tokens = [0]
    for _ in range(n - 1):
        tokens.append(successors[tokens[-1], rng.integers(0, 2)])
    return np.array(tokens, dtype=np.uint16)


def get_batch(data, block_size=16, batch_size=8):
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy((data[i : i + block_size]).astype(np.int64)) for i in ix])
    y = torch.stack(
        [torch.from_numpy((data[i + 1 : i + 1 + block_size]).astype(np.int64)) for i in ix]
    )
    return x, y


def get_lr(it, learning_rate=1e-2, warmup_iters=2, lr_decay_iters=20, min_lr=1e-3):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def build_model(dropout=0.1):
    return GPT(GPTConfig(dropout=dropout))


def train(model, data, steps, grad_clip=1.0, device_type="cpu"):
    optimizer = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95), device_type)
    ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type)
    losses = []
    model.train()
    for it in range(steps):
        lr = get_lr(it)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        X, Y = get_batch(data)
        with ctx:
            logits, loss = model(X, Y)
        loss.backward()
        if grad_clip != 0.0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


@torch.no_grad()
def estimate_loss(model, data, eval_iters=2):
    model.eval()
    losses = torch.zeros(eval_iters)
    for k in range(eval_iters):
        X, Y = get_batch(data)
        logits, loss = model(X, Y)
        losses[k] = loss.item()
    model.train()
    return losses.mean()


def main(steps=10):
    torch.manual_seed(1337)
    data = make_data()
    model = build_model()
    losses = train(model, data, steps)
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}, val {estimate_loss(model, data):.4f}")
    out = model.generate(torch.zeros((1, 1), dtype=torch.long), 20, temperature=0.8, top_k=5)
    print(out[0].tolist())
    return losses


if __name__ == "__main__":
    main()
