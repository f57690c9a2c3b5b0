"""The host BLAS: which library runs the cpu() device's matrix products (and the products inside its
convolutions and attention).

gpumat links OpenBLAS (the scipy-openblas32 wheel) and, when the onednn-cpu-gomp wheel is
installed (a dependency on x86-64 Linux), loads oneDNN's ``dnnl_sgemm`` from it at import and uses
that instead: faster a thread on the benchmarks' products (benchmarks/README.md, "The host BLAS"),
on the same GNU OpenMP runtime as the host kernels. Either way each product is cut into
pieces by its shape, each piece one single-threaded sgemm on the host kernels' threads, so results
are the same bits on any thread count (they differ between the two libraries, by rounding).

``GPUMAT_BLAS`` (read once, at import) chooses: ``auto`` (default: oneDNN when installed and it
passes its check, else OpenBLAS), ``onednn`` (oneDNN or an ImportError saying why not), or
``openblas``. :func:`gpumat.build_info`'s ``blas`` names the library in use.
"""

from __future__ import annotations

import os
import warnings
from importlib import metadata

from gpumat import _core

CHOICES = ("auto", "onednn", "openblas")
ONEDNN_DISTRIBUTION = "onednn-cpu-gomp"
ONEDNN_LIBRARY = "libdnnl.so.3"


def onednn_library() -> str | None:
    """The path of the installed onednn-cpu-gomp wheel's ``libdnnl.so.3`` (it installs into
    ``<prefix>/lib``), or None when the wheel is not installed or lacks the file."""
    try:
        dist = metadata.distribution(ONEDNN_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    for file in dist.files or ():
        if file.name == ONEDNN_LIBRARY:
            path = os.path.realpath(str(dist.locate_file(file)))
            return path if os.path.isfile(path) else None
    return None


def load(choice: str | None = None) -> str:
    """Set the host BLAS from ``choice`` (default: the ``GPUMAT_BLAS`` environment variable, else
    ``auto``; see the module docstring) and return its name.

    Raises:
        ValueError: ``choice`` is not one of ``auto``, ``onednn``, ``openblas``.
        ImportError: ``onednn`` was asked for and is not installed, or its library failed to load or
            its check (the message names the path and the reason).
    """
    if choice is None:
        choice = os.environ.get("GPUMAT_BLAS", "auto")
    given, choice = choice, choice.strip().lower()
    if choice not in CHOICES:
        raise ValueError(f"GPUMAT_BLAS must be one of {', '.join(CHOICES)}, got {given!r}")
    if choice == "openblas":
        return _core.host_blas_()
    path = onednn_library()
    if path is None:
        if choice == "onednn":
            raise ImportError(
                f"GPUMAT_BLAS=onednn: the {ONEDNN_DISTRIBUTION} wheel is not installed "
                f"(pip install {ONEDNN_DISTRIBUTION}; x86-64 Linux only)"
            )
        return _core.host_blas_()
    try:
        return _core.use_onednn_(path)
    except ValueError as exc:
        if choice == "onednn":
            raise ImportError(f"GPUMAT_BLAS=onednn: {exc}") from None
        warnings.warn(f"{exc}; gpumat uses OpenBLAS", RuntimeWarning, stacklevel=2)
        return _core.host_blas_()
