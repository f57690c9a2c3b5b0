"""One PyTorch run of bench_mnist in a process of its own (the default for its ``torch`` and
``torch-compile`` rows).

Run by bench_mnist, not by hand::

    python3 benchmarks/_mnist_torch_process.py SPEC_JSON

PyTorch is imported before anything else, so its libgomp loads with PyTorch's own OpenMP settings
(or the user's environment): in bench_mnist's process gpumat has loaded the one libgomp first, with
its own wait policy. gpumat is imported afterwards only for the images, the model's initial values
and the recipe. ``SPEC_JSON`` holds the model name, backend, epochs, batch size, learning rate,
whether to compile, the quick flag and the MLP's hidden widths. Prints one line: ``RUN`` and the
run's record as JSON (bench_mnist.run_torch's).
"""

from __future__ import annotations

import json
import sys

import torch  # first of all: see the module docstring

GPUMAT_LOADED_FIRST = "gpumat" in sys.modules  # recorded in the run: False unless run wrongly

# isort: split
import bench_mnist  # noqa: E402  (imports gpumat, after PyTorch)


def main(argv: list[str]) -> int:
    """Runs the spec in ``argv[0]``; prints ``RUN <json>``."""
    spec = json.loads(argv[0])
    if spec["mlp_hidden"]:
        bench_mnist.MLP_HIDDEN = tuple(spec["mlp_hidden"])
    data = bench_mnist.mnist_data(spec["quick"])
    rec = bench_mnist.run_torch(
        torch, spec["name"], data, spec["ctx"], spec["epochs"], spec["batch_size"], spec["lr"],
        compile_loss=spec["compile_loss"],
    )  # fmt: skip
    rec["gpumat_loaded_before_torch"] = GPUMAT_LOADED_FIRST
    print("RUN " + json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
