"""One framework's training steps in a process of its own: bench_frontend's ``--own-processes``
rows, measured as users run each library (alone, without the other's runtime loaded).

Run by bench_frontend, not by hand::

    python3 benchmarks/_own_process.py LIB CASE SPEC_JSON

``LIB`` is ``gpumat`` (eager and compiled, bench_frontend.run_case without PyTorch), ``torch``
(eager PyTorch; this module imports no gpumat then, or for the ``gpt`` case only after PyTorch:
gpumat's libgomp, loaded first, would set PyTorch's OpenMP wait policy) or ``gpumat-after-torch``
(gpumat's rows after PyTorch was imported and used; not for ``gpt``). ``SPEC_JSON`` holds the
case's batch, sample shape, MLP widths, optimizer, loss, steps, repeat, warm-up steps, seed and
quick flag (for ``gpt``: seed, quick flag, steps, repeat, the weights' ``.npz`` file and whether
to time ``torch.compile`` too). Prints
one line: ``ROWS`` and the rows as JSON (each with its samples, ``samples_s``, seconds per step).

Also what bench_frontend shares with it: :func:`mlp`, :func:`torch_twin`, :func:`optimizer`
and :func:`training_step`.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import numpy as np
from _common import REPO_ROOT, time_interleaved


def mlp(nn, widths):
    """An MLP in either library (``nn``: ``gpumat.nn`` or ``torch.nn``): Linear layers of
    ``widths`` with ReLU between them."""
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def torch_twin(torch, name, widths):
    """The same network in PyTorch: the MLP of ``widths``, or for ``widths`` None the CNN
    (examples/mnist_net_torch.py's Net)."""
    if widths is not None:
        return mlp(torch.nn, widths)
    if str(REPO_ROOT / "examples") not in sys.path:
        sys.path.insert(0, str(REPO_ROOT / "examples"))
    from mnist_net_torch import Net  # needs torch

    return Net()


def optimizer(lib, kind, params):
    """``lib.optim``'s SGD at lr 0.1 or Adadelta at lr 1.0 (``lib``: gpumat or torch)."""
    if kind == "sgd":
        return lib.optim.SGD(params, lr=0.1)
    return lib.optim.Adadelta(params, lr=1.0)


def training_step(opt, forward):
    """``step(x, y)``: zero_grad, ``loss = forward(x, y)``, backward, ``opt.step()``; returns the
    loss (either library)."""

    def step(x, y):
        opt.zero_grad()
        loss = forward(x, y)
        loss.backward()
        opt.step()
        return loss

    return step


def case_batches(spec: dict) -> list[tuple[np.ndarray, np.ndarray]]:
    """The case's four random batches (images in [0, 1), labels in [0, 10)), from its seed: the
    same in every process and in bench_frontend.run_case."""
    rng = np.random.default_rng(spec["seed"])
    shape = (spec["batch"], *spec["sample_shape"])
    return [
        (rng.random(shape, dtype=np.float32), rng.integers(0, 10, size=spec["batch"]))
        for _ in range(4)
    ]


def torch_rows(name: str, spec: dict) -> list[dict]:
    """Eager PyTorch's step for case ``name`` on the cpu, timed as bench_frontend times it."""
    import torch

    torch.manual_seed(spec["seed"])
    batches = [(torch.tensor(x), torch.tensor(y)) for x, y in case_batches(spec)]
    model = torch_twin(torch, name, spec["widths"])
    opt = optimizer(torch, spec["optimizer"], model.parameters())
    loss_fn = getattr(torch.nn.functional, spec["loss"])
    step = training_step(opt, lambda x, y: loss_fn(model(x), y))
    # recorded so that a test can check it: this process runs PyTorch without gpumat
    row = {"case": name, "batch": spec["batch"], "framework": "torch",
           "gpumat_loaded": "gpumat" in sys.modules}  # fmt: skip
    variant = {"row": row, "step": step, "batches": batches, "sync": lambda: None}
    time_interleaved([variant], spec["steps"], spec["repeat"], spec["warmup"])
    return [row]


def gpumat_rows(name: str, spec: dict) -> list[dict]:
    """gpumat's eager and compiled steps for case ``name`` on the cpu (bench_frontend.run_case
    without PyTorch)."""
    import bench_frontend

    import gpumat

    case = (spec["batch"], tuple(spec["sample_shape"]), spec["widths"], spec["optimizer"],
            spec["loss"])  # fmt: skip
    args = SimpleNamespace(
        seed=spec["seed"], steps={name: spec["steps"]}, repeat=spec["repeat"], quick=False
    )
    return bench_frontend.run_case(name, case, gpumat.cpu(), None, args)


def gpumat_after_torch_rows(name: str, spec: dict) -> list[dict]:
    """gpumat's rows for case ``name`` in a process that imported and used PyTorch first, so that
    gpumat's kernels run on PyTorch's libgomp with PyTorch's OpenMP settings (issue 37's
    "beside PyTorch" case). Frameworks ``gpumat-eager (PyTorch first)`` and
    ``gpumat-compiled (PyTorch first)``."""
    import torch

    a = torch.randn(256, 256)
    for _ in range(20):  # a few parallel regions: PyTorch's OpenMP pool started and used
        torch.relu(a @ a).sum().item()
    rows = gpumat_rows(name, spec)
    for r in rows:
        r["framework"] += " (PyTorch first)"
    return rows


def gpt_rows(lib: str, spec: dict) -> list[dict]:
    """The ``gpt`` case (bench_frontend.gpt_setup's model and batches, the weights of
    ``spec["weights"]``) for ``lib``: PyTorch eager, imported before gpumat (``gpt_torch.py``
    takes its config from ``gpt.py``, which imports gpumat), or gpumat eager and compiled."""
    gpumat_first = None
    if lib == "torch":
        import torch

        gpumat_first = "gpumat" in sys.modules
    import bench_frontend

    import gpumat

    args = SimpleNamespace(seed=spec["seed"], quick=spec["quick"], steps={"gpt": spec["steps"]},
                           repeat=spec["repeat"])  # fmt: skip
    config, data, label, steps, repeat = bench_frontend.gpt_setup(args)
    with np.load(spec["weights"]) as f:
        state = {k: f[k] for k in f.files}
    if lib == "torch":
        frameworks = ["torch"] + (["torch-compile"] if spec["torch_compile"] else [])
        variants = bench_frontend.torch_gpt_variants(
            torch, "cpu", config, data, label, state, frameworks
        )
        for v in variants:
            v["row"]["gpumat_loaded"] = gpumat_first  # gpumat not loaded before PyTorch
    else:
        variants = bench_frontend.gpumat_gpt_variants(gpumat.cpu(), config, data, label, state)
    time_interleaved(variants, steps, repeat, warmup=1)
    return [v["row"] for v in variants]


def main(argv: list[str]) -> int:
    """Runs one worker: ``argv`` is LIB CASE SPEC_JSON; prints ``ROWS <json>``."""
    lib, name, spec = argv[0], argv[1], json.loads(argv[2])
    if lib not in ("gpumat", "torch", "gpumat-after-torch"):
        raise SystemExit(
            f"_own_process.py: LIB must be gpumat, torch or gpumat-after-torch, got {lib!r}"
        )
    if name == "gpt":
        rows = gpt_rows(lib, spec)
    elif lib == "gpumat-after-torch":
        rows = gpumat_after_torch_rows(name, spec)
    else:
        rows = torch_rows(name, spec) if lib == "torch" else gpumat_rows(name, spec)
    print("ROWS " + json.dumps(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
