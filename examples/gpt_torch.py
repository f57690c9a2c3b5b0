"""The PyTorch twin of ``examples/gpt.py``: the same character-level GPT, recipe and batches.

    python examples/gpt_torch.py --max-iters 2000
    python examples/gpt_torch.py --init-from out-gpt --sample 500 --max-iters 0

The model classes here are ``gpt.py``'s written against ``torch``; the text, the vocabulary, the
batches (numpy's generator from the same seed), the learning-rate schedule and the command line
are ``gpt.py``'s own functions. ``--init-from`` loads the checkpoint ``gpt.py --out-dir`` wrote
(``ckpt.safetensors`` through ``safetensors.torch``). From the same weights the two programs give
the same losses to float32 rounding (``tests/frontend/test_gpt.py``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: N812 (PyTorch's convention)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpt import GPTConfig, encode_text, get_batch, learning_rate, parse_args, plot_losses  # noqa: E402


class CausalSelfAttention(nn.Module):
    """``gpt.CausalSelfAttention`` in PyTorch."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """``gpt.MLP`` in PyTorch."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """``gpt.Block`` in PyTorch."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """``gpt.GPT`` in PyTorch (the same parameter names, tying and initialisation)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        _, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay: float, learning_rate: float, betas: tuple):
        """AdamW over the decayed (2-D and more) and undecayed parameters."""
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens: int, temperature: float = 1.0, top_k=None):
        """``gpt.GPT.generate`` in PyTorch."""
        for _ in range(max_new_tokens):
            logits, _ = self(idx[:, -self.config.block_size :])
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            probs = F.softmax(logits, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
        return idx


def train(model, optimizer, data, args, rng, iters, start=0, on_step=None):
    """``gpt.train`` in PyTorch: the same schedule, batches, clipping and AdamW step."""
    device = next(model.parameters()).device
    losses = []
    model.train()
    for it in range(start, start + iters):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(it, args)
        x, y = get_batch(data, args.block_size, args.batch_size, rng)
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))
        loss.backward()
        if args.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(it, losses[-1])
    return losses


@torch.no_grad()
def estimate_loss(model, splits: dict, args, rng) -> dict:
    """``gpt.estimate_loss`` in PyTorch."""
    device = next(model.parameters()).device
    model.eval()
    out = {}
    for name, data in splits.items():
        total = 0.0
        for _ in range(args.eval_iters):
            x, y = get_batch(data, args.block_size, args.batch_size, rng)
            _, loss = model(torch.from_numpy(x).to(device), torch.from_numpy(y).to(device))
            total += loss.item()
        out[name] = total / args.eval_iters
    model.train()
    return out


def main(argv=None) -> dict:
    """``gpt.main`` in PyTorch (``--compile``: ``torch.compile`` of the model)."""
    from safetensors.torch import load_file

    from gpumat.datasets import load_shakespeare

    args = parse_args(argv)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    text = Path(args.text).read_text() if args.text else load_shakespeare(progress=args.progress)
    if args.init_from:
        meta = json.loads((Path(args.init_from) / "ckpt.json").read_text())
        chars = meta["vocab"]
        lookup = {c: i for i, c in enumerate(chars)}
        data = np.array([lookup[c] for c in text if c in lookup], dtype=np.int64)
        config = GPTConfig(**meta["config"])
        args.block_size = config.block_size
    else:
        data, chars = encode_text(text)
        config = GPTConfig(
            block_size=args.block_size, vocab_size=len(chars), n_layer=args.n_layer,
            n_head=args.n_head, n_embd=args.n_embd, dropout=args.dropout,
        )  # fmt: skip
    split = int(0.9 * len(data))
    splits = {"train": data[:split], "val": data[split:]}
    device = "cuda" if args.device.startswith("cuda") else "cpu"
    model = GPT(config).to(device)
    if args.init_from:
        model.load_state_dict(load_file(str(Path(args.init_from) / "ckpt.safetensors")))
    optimizer = model.configure_optimizers(args.weight_decay, args.lr, (0.9, args.beta2))
    runner = torch.compile(model) if args.compile else model
    history = {"train": [], "eval": [], "sample": "", "seconds": 0.0}
    start, done = time.perf_counter(), 0
    while done <= args.max_iters:
        if done % args.eval_interval == 0 or done == args.max_iters:
            losses = estimate_loss(runner, splits, args, rng)
            history["eval"].append({"iter": done, **losses})
            print(f"step {done}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if done == args.max_iters:
            break
        chunk = min(args.eval_interval - done % args.eval_interval, args.max_iters - done)
        history["train"] += train(runner, optimizer, splits["train"], args, rng, chunk, done)
        done += chunk
    history["seconds"] = time.perf_counter() - start
    if args.plot:
        plot_losses(history, args.plot)
    if args.sample:
        idx = model.generate(torch.zeros(1, 1, dtype=torch.long, device=device), args.sample,
                             args.temperature, args.top_k)  # fmt: skip
        history["sample"] = "".join(chars[i] for i in idx[0].tolist())
        print(history["sample"])
    return history


if __name__ == "__main__":
    main()
