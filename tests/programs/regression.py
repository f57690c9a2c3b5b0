"""The PyTorch polynomial regression example, written our own way.

Follows pytorch/examples ``regression/main.py``: module-level targets ``W_target`` (4, 1) and
``b_target`` (1,); ``make_features`` (``x.unsqueeze(1)``, ``torch.cat([x ** i for i in ...], 1)``),
``f`` (``x.mm(W_target) + b_target.item()``), ``get_batch`` (``torch.randn(batch_size)``), one
``torch.nn.Linear(W_target.size(0), 1)`` trained with ``F.smooth_l1_loss``, ``fc.zero_grad()``,
``output.item()`` and the hand-written update ``param.data.add_(-0.1 * param.grad)``, stopping
when the loss is below 1e-3; ``poly_desc`` formats 0-d tensors with ``'{:+.2f}'.format(w)`` over
``fc.weight.view(-1)`` and ``fc.bias``. The original draws the targets with ``torch.randn``; here
they come from numpy with a seed (``torch.from_numpy``) so that both libraries fit the same
polynomial. It loads no data.
"""

from itertools import count

import numpy as np
import torch
import torch.nn.functional as F

POLY_DEGREE = 4
_rng = np.random.default_rng(0)
W_target = torch.from_numpy((_rng.standard_normal((POLY_DEGREE, 1)) * 5).astype(np.float32))
b_target = torch.from_numpy((_rng.standard_normal(1) * 5).astype(np.float32))


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x**i for i in range(1, POLY_DEGREE + 1)], 1)


def f(x):
    return x.mm(W_target) + b_target.item()


def poly_desc(W, b):
    result = "y = "
    for i, w in enumerate(W):
        result += "{:+.2f} x^{} ".format(w, i + 1)  # noqa: UP032 (the original's)
    result += "{:+.2f}".format(b[0])  # noqa: UP032
    return result


def get_batch(batch_size=32):
    random = torch.randn(batch_size)
    x = make_features(random)
    y = f(x)
    return x, y


def make_data():
    return None  # each step draws its own batch (get_batch)


def build_model():
    return torch.nn.Linear(W_target.size(0), 1)


def train(fc, data, steps):
    """Up to ``steps`` updates (fewer when the loss falls below 1e-3); the float losses."""
    losses = []
    for batch_idx in count(1):
        batch_x, batch_y = get_batch()
        fc.zero_grad()
        output = F.smooth_l1_loss(fc(batch_x), batch_y)
        loss = output.item()
        output.backward()
        for param in fc.parameters():
            param.data.add_(-0.1 * param.grad)
        losses.append(loss)
        if loss < 1e-3 or batch_idx == steps:
            break
    return losses


def main(steps=200):
    torch.manual_seed(1)
    fc = build_model()
    losses = train(fc, None, steps)
    print(f"Loss: {losses[-1]:.6f} after {len(losses)} batches")
    print("==> Learned function:\t" + poly_desc(fc.weight.view(-1), fc.bias))
    print("==> Actual function:\t" + poly_desc(W_target.view(-1), b_target))
    return losses


if __name__ == "__main__":
    main()
