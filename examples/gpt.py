"""A character-level GPT trained on Shakespeare's plays, written with gpumat's front end.

    python examples/gpt.py --max-iters 2000            # eager, on the host
    python examples/gpt.py --max-iters 2000 --compile  # forward and backward traced once
    python examples/gpt.py --init-from out-gpt --sample 500 --max-iters 0

The model is GPT-2's shape at a small size, our own code after reading nanoGPT's ``model.py``
(Karpathy) and llm.c's ``train_gpt2``: token and position embeddings (``nn.Embedding``), pre-norm
blocks (``nn.LayerNorm``) of causal self-attention through ``F.scaled_dot_product_attention`` and
a GELU MLP, a last LayerNorm and an output head tied to the token embedding. Weights start as
GPT-2's (normal with std 0.02, the residual projections' std scaled by 1/sqrt(2 n_layer); Radford
et al. 2019). Training: AdamW (Loshchilov & Hutter 2019) over two parameter groups (matrices
decayed, biases and norm weights not), a learning rate that warms up linearly then follows a cosine
down to ``--min-lr``, gradients clipped to norm 1.0 (``nn.utils.clip_grad_norm_``), batches of
``--block-size`` characters at random offsets drawn from numpy's generator (so the PyTorch twin
``examples/gpt_torch.py`` draws the same batches from the same seed).

The text is :func:`gpumat.datasets.load_shakespeare` (37 plays, verified by SHA-256) or
``--text FILE``; its first 90% trains and the rest validates. ``--device`` picks cpu, cuda or emu;
``--compile`` traces the forward and backward pass with ``gpumat.compile`` (clipping and the AdamW
step run eagerly after it); ``--plot FILE`` writes the loss curves; ``--out-dir`` keeps a
checkpoint (``ckpt.safetensors``, PyTorch's names, and ``ckpt.json``: configuration, vocabulary,
losses) whose weights ``gpt_torch.py --init-from`` loads; ``--sample N`` prints N generated
characters (``multinomial`` over the ``--top-k`` most likely).

Quality: with the defaults (2000 steps) on an NVIDIA H200 (2026-11-27), the validation loss
reached 1.7160 against 1.7165 for ``gpt_torch.py`` with the same arguments, and both samples read
as verse (the run's logs, loss curves and samples are in
``benchmarks/results/gpu_check/20261127_055924_nvidia-h200/``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np

import gpumat
import gpumat.nn as nn
import gpumat.nn.functional as F  # noqa: N812 (PyTorch's convention)


@dataclasses.dataclass
class GPTConfig:
    """The model's sizes: context ``block_size``, ``vocab_size`` characters, ``n_layer`` blocks of
    ``n_head`` heads over ``n_embd`` features, ``dropout`` (0: none) and biases in the linear
    layers and norms (``bias``)."""

    block_size: int = 64
    vocab_size: int = 65
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = True


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention over (B, T, C) in which position t sees positions <= t: one
    projection to queries, keys and values (``c_attn``), ``scaled_dot_product_attention`` with
    ``is_causal=True`` per head, and the output projection ``c_proj``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if config.n_embd % config.n_head:
            raise ValueError(f"n_embd {config.n_embd} is not a multiple of n_head {config.n_head}")
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
    """The block's feed-forward part: n_embd -> 4 n_embd, GELU, -> n_embd."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """A pre-norm transformer block: x + attn(ln_1(x)), then + mlp(ln_2(x))."""

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
    """The language model: (B, T) int64 character indices to (B, T, vocab_size) logits, and
    the mean cross-entropy against ``targets`` (B, T) when given."""

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
        self.transformer.wte.weight = self.lm_head.weight  # weight tying (one parameter)
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):  # GPT-2: residual projections scaled down
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
        b, t = idx.size()
        if t > self.config.block_size:
            raise ValueError(
                f"a sequence of {t} is longer than block_size {self.config.block_size}"
            )
        pos = gpumat.arange(0, t, dtype=gpumat.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay: float, learning_rate: float, betas: tuple):
        """AdamW over two groups: the matrices (2-D and more) with ``weight_decay``, the biases
        and norm weights without (nanoGPT's split)."""
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        return gpumat.optim.AdamW(groups, lr=learning_rate, betas=betas)

    @gpumat.no_grad()
    def generate(self, idx, max_new_tokens: int, temperature: float = 1.0, top_k=None):
        """``idx`` (B, T) extended by ``max_new_tokens`` characters, each drawn from the softmax
        of the last position's logits / temperature, restricted to the ``top_k`` largest."""
        for _ in range(max_new_tokens):
            context = (
                idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size :]
            )
            logits, _ = self(context)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = gpumat.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            probs = F.softmax(logits, dim=-1)
            idx = gpumat.cat((idx, gpumat.multinomial(probs, num_samples=1)), dim=1)
        return idx


# --------------------------------------------------------------------------------------------------
# data and training
# --------------------------------------------------------------------------------------------------


def encode_text(text: str) -> tuple[np.ndarray, list[str]]:
    """(the text as int64 character indices, the sorted characters: the vocabulary)."""
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    return np.array([lookup[c] for c in text], dtype=np.int64), chars


def get_batch(data: np.ndarray, block_size: int, batch_size: int, rng: np.random.Generator):
    """(x, y) int64 numpy arrays (batch_size, block_size): windows at random offsets of ``data``
    and the same windows one character on."""
    ix = rng.integers(0, len(data) - block_size, size=batch_size)
    x = np.stack([data[i : i + block_size] for i in ix])
    y = np.stack([data[i + 1 : i + 1 + block_size] for i in ix])
    return x, y


def learning_rate(it: int, args) -> float:
    """Linear warm-up over ``warmup_iters``, then a cosine from ``lr`` to ``min_lr`` at
    ``lr_decay_iters`` (nanoGPT's schedule), ``min_lr`` after."""
    if it < args.warmup_iters:
        return args.lr * (it + 1) / (args.warmup_iters + 1)
    if it > args.lr_decay_iters:
        return args.min_lr
    ratio = (it - args.warmup_iters) / max(1, args.lr_decay_iters - args.warmup_iters)
    return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (args.lr - args.min_lr)


def train(model, optimizer, data, args, rng, iters, start=0, on_step=None, compile_step=False):
    """``iters`` training steps from iteration ``start``: the learning rate set in every group,
    forward and backward (traced once with ``compile_step``), the gradients clipped to
    ``args.grad_clip``, the AdamW step. Returns the training losses (floats)."""
    device = next(model.parameters()).device

    def forward_backward(x, y):
        _, loss = model(x, y)
        loss.backward()
        return loss

    step = gpumat.compile(forward_backward) if compile_step else forward_backward
    losses = []
    model.train()
    for it in range(start, start + iters):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(it, args)
        x, y = get_batch(data, args.block_size, args.batch_size, rng)
        optimizer.zero_grad(set_to_none=True)
        loss = step(gpumat.tensor(x, device=device), gpumat.tensor(y, device=device))
        if args.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(it, losses[-1])
    return losses


@gpumat.no_grad()
def estimate_loss(model, splits: dict, args, rng) -> dict:
    """The mean loss of ``args.eval_iters`` random batches of each split, in eval mode."""
    device = next(model.parameters()).device
    model.eval()
    out = {}
    for name, data in splits.items():
        total = 0.0
        for _ in range(args.eval_iters):
            x, y = get_batch(data, args.block_size, args.batch_size, rng)
            _, loss = model(gpumat.tensor(x, device=device), gpumat.tensor(y, device=device))
            total += loss.item()
        out[name] = total / args.eval_iters
    model.train()
    return out


def parse_args(argv=None):
    """The command line (defaults: a 4-layer, 128-wide model, 64-character context)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--text", default=None, help="train on this text file (default: Shakespeare)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or emu (cpu)")
    p.add_argument("--compile", action="store_true", help="trace forward and backward once")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--n-embd", type=int, default=128)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-iters", type=int, default=2000)
    p.add_argument("--eval-interval", type=int, default=250)
    p.add_argument("--eval-iters", type=int, default=20)
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup-iters", type=int, default=100)
    p.add_argument("--lr-decay-iters", type=int, default=2000)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--beta2", type=float, default=0.99)
    p.add_argument("--grad-clip", type=float, default=1.0, help="0: no clipping")
    p.add_argument("--out-dir", default=None, help="write ckpt.safetensors and ckpt.json here")
    p.add_argument("--init-from", default=None, help="start from the checkpoint in this folder")
    p.add_argument("--sample", type=int, default=0, help="characters to generate at the end")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=20)
    p.add_argument("--plot", default=None, help="write the loss curves to this image file")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    """Train, evaluate, checkpoint and sample as the options say. Returns ``{"train": [loss per
    step], "eval": [{"iter", "train", "val"}], "sample": text, "seconds": training time}``."""
    from tqdm.auto import tqdm

    from gpumat.datasets import load_shakespeare

    args = parse_args(argv)
    gpumat.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    text = Path(args.text).read_text() if args.text else load_shakespeare(progress=args.progress)
    meta = None
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
    model = GPT(config).to(args.device)
    if meta is not None:
        state = gpumat.load(str(Path(args.init_from) / "ckpt.safetensors"), args.device)
        state["transformer.wte.weight"] = state["lm_head.weight"]  # one tied parameter
        model.load_state_dict(state)
    optimizer = model.configure_optimizers(args.weight_decay, args.lr, (0.9, args.beta2))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"gpumat GPT: {n_params / 1e6:.2f}M parameters, {len(chars)} characters, "
          f"{len(data):,} in the text; device {args.device}")  # fmt: skip

    history = {"train": [], "eval": [], "sample": "", "seconds": 0.0}
    bar = tqdm(total=args.max_iters, disable=not args.progress, desc="training")
    done = 0
    start = time.perf_counter()
    while done <= args.max_iters:
        if done % args.eval_interval == 0 or done == args.max_iters:
            losses = estimate_loss(model, splits, args, rng)
            history["eval"].append({"iter": done, **losses})
            bar.write(
                f"step {done}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}"
            )
        if done == args.max_iters:
            break
        chunk = min(args.eval_interval - done % args.eval_interval, args.max_iters - done)
        history["train"] += train(
            model, optimizer, splits["train"], args, rng, chunk, start=done,
            on_step=lambda it, loss: (bar.update(1), bar.set_postfix(loss=f"{loss:.3f}")),
            compile_step=args.compile,
        )  # fmt: skip
        done += chunk
    bar.close()
    history["seconds"] = time.perf_counter() - start
    if args.out_dir:
        out = Path(args.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        gpumat.save(model.state_dict(), str(out / "ckpt.safetensors"))
        info = {"config": dataclasses.asdict(config), "vocab": chars, "eval": history["eval"]}
        (out / "ckpt.json").write_text(json.dumps(info, indent=1))
    if args.plot:
        plot_losses(history, args.plot)
    if args.sample:
        start_idx = gpumat.zeros(1, 1, dtype=gpumat.long, device=args.device)
        out_idx = model.generate(start_idx, args.sample, args.temperature, args.top_k)
        history["sample"] = "".join(chars[i] for i in out_idx[0].tolist())
        print(history["sample"])
    return history


def plot_losses(history: dict, path: str) -> None:
    """The training loss per step and the evaluated train / validation losses, to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(history["train"], lw=0.6, alpha=0.6, label="training batch")
    for split in ("train", "val"):
        ax.plot([e["iter"] for e in history["eval"]], [e[split] for e in history["eval"]],
                marker="o", label=f"{split} (estimated)")  # fmt: skip
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per character)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
