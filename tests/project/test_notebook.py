"""Run examples/mnist_colab.ipynb end to end with nbclient, quickly, on the cpu backend.

The notebook reads its settings from environment variables (GPUMAT_NOTEBOOK_EPOCHS,
GPUMAT_NOTEBOOK_TRAIN_SIZE, GPUMAT_NOTEBOOK_DEVICE, GPUMAT_NOTEBOOK_PLOT); the kernel inherits this
process's environment. Its install cell does nothing here because ``import gpumat`` works.
Needs nbclient, nbformat and ipykernel (the ``test`` extra); skipped with the reason without them.
"""

import json
import sys
from pathlib import Path

import pytest

nbclient = pytest.importorskip(
    "nbclient", reason="nbclient is not installed (pip install '.[test]')"
)
nbformat = pytest.importorskip(
    "nbformat", reason="nbformat is not installed (pip install '.[test]')"
)
pytest.importorskip("ipykernel", reason="ipykernel is not installed (pip install '.[test]')")

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "mnist_colab.ipynb"
KERNEL = "gpumat-test-python"


@pytest.fixture
def kernel_name(tmp_path, monkeypatch):
    """A kernelspec that starts ipykernel with this interpreter (the installed ``python3`` spec
    runs whatever ``python`` is first on PATH, which may be another environment)."""
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "gpumat test",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    return KERNEL


def test_colab_notebook_runs(tmp_path, kernel_name, monkeypatch):
    try:
        from gpumat import datasets

        datasets.load_mnist(progress=False, sources=[])  # local copies only
    except datasets.DatasetError as exc:
        pytest.skip(f"MNIST unavailable: {exc}")
    monkeypatch.setenv("GPUMAT_NOTEBOOK_EPOCHS", "1")
    monkeypatch.setenv("GPUMAT_NOTEBOOK_TRAIN_SIZE", "5000")
    monkeypatch.setenv("GPUMAT_NOTEBOOK_DEVICE", "cpu")
    monkeypatch.setenv("GPUMAT_NOTEBOOK_PLOT", str(tmp_path / "curves.png"))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        kernel_name=kernel_name,
        timeout=120,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()

    text = "\n".join(
        out.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )
    assert "is installed" in text  # the install cell saw gpumat and skipped
    assert "training on cpu(0)" in text
    assert "epoch 1/1  loss" in text
    assert "mlp on cpu(0): 1 epochs, valid accuracy 0." in text
    images = [
        out
        for out in nb.cells[-1].outputs
        if out.get("output_type") == "display_data" and "image/png" in out.get("data", {})
    ]
    assert images, "the last cell should display the plot"
    assert (tmp_path / "curves.png").stat().st_size > 1000
