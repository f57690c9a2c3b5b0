"""One example program in a process of its own: bench_frontend's ``mnist-net (own process)`` rows,
each program run as users run it.

Run by bench_frontend, not by hand::

    python3 benchmarks/_program_process.py SCRIPT ARGV_JSON

``SCRIPT`` is an example's file name (``mnist_net.py`` or ``mnist_net_torch.py``); its ``main`` is
called with the argument list in ``ARGV_JSON``. Nothing else is imported first: the PyTorch twin
imports PyTorch first (gpumat only for the images, after it: PyTorch's OpenMP settings stand),
and gpumat's program runs without PyTorch. Prints one line: ``RUN`` and the program's result as
JSON (``main``'s ``{"epochs": [...]}`` and ``libraries_loaded``, gpumat and torch in the order
they were imported).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PROGRAMS = {"mnist_net.py", "mnist_net_torch.py"}


def main(argv: list[str]) -> int:
    """Runs ``argv[0]``'s main with the arguments in ``argv[1]``; prints ``RUN <json>``."""
    script, args = argv[0], json.loads(argv[1])
    if script not in PROGRAMS:
        raise SystemExit(f"_program_process.py: unknown program {script!r}")
    sys.path.insert(0, str(EXAMPLES))
    program = importlib.import_module(script.removesuffix(".py"))
    result = program.main(args)
    loaded = [m for m in sys.modules if m in ("gpumat", "torch")]  # in import order
    print("RUN " + json.dumps({**result, "libraries_loaded": loaded}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
