"""The example notebooks (examples/NN_*.ipynb): stored without outputs, and each runs end to end
with nbclient, quickly, on the cpu device.

The notebooks read their settings from environment variables (GPUMAT_NOTEBOOK_EPOCHS,
GPUMAT_NOTEBOOK_TRAIN_SIZE, GPUMAT_NOTEBOOK_DEVICE, GPUMAT_NOTEBOOK_PLOT, GPUMAT_NOTEBOOK_QUICK,
GPUMAT_NOTEBOOK_SEEDS); the kernel inherits this process's environment. Their install cell does
nothing here because ``import gpumat`` works. Running them needs nbclient, nbformat and ipykernel
(the ``test`` extra): those tests are skipped with the reason without them. The documentation
site's build executes them too (docs/site/conf.py).
"""

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "examples").glob("*.ipynb"))
KERNEL = "gpumat-test-python"


def test_the_notebooks_are_numbered_and_stored_without_outputs():
    names = [nb.name for nb in NOTEBOOKS]
    assert len(names) >= 4, names
    assert all(re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", n) for n in names), names
    for path in NOTEBOOKS:
        nb = json.loads(path.read_text())
        for i, cell in enumerate(nb["cells"]):
            if cell["cell_type"] != "code":
                continue
            # Outputs belong to a run, not to the repository (strip them before committing).
            assert cell.get("outputs") == [], f"{path.name} cell {i} has outputs"
            assert cell.get("execution_count") is None, f"{path.name} cell {i} has a count"
        first_code = next(c for c in nb["cells"] if c["cell_type"] == "code")
        assert "".join(first_code["source"]).startswith("# Install gpumat unless"), path.name


def _outputs(nb, kind="text"):
    return "\n".join(
        out.get(kind, "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
    )


def _images(nb):
    return [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if "image/png" in out.get("data", {})
    ]


@pytest.fixture
def run_notebook(tmp_path, monkeypatch):
    """Executes a notebook in a kernel running this interpreter (an installed ``python3`` spec
    may start another environment's Python) and returns it with its outputs."""
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (the test extra)")
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (the test extra)")
    pytest.importorskip("ipykernel", reason="ipykernel is not installed (the test extra)")
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "gpumat test",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("GPUMAT_NOTEBOOK_DEVICE", "cpu")
    monkeypatch.setenv("GPUMAT_NOTEBOOK_QUICK", "1")

    def run(name):
        nb = nbformat.read(ROOT / "examples" / name, as_version=4)
        # Run where it is stored, as a reader would: the notebooks find the source tree from there.
        client = nbclient.NotebookClient(
            nb,
            kernel_name=KERNEL,
            timeout=300,
            resources={"metadata": {"path": str(ROOT / "examples")}},
        )
        client.execute()
        assert "is installed" in _outputs(nb)  # the install cell saw gpumat and skipped
        return nb

    return run


def test_kernels_notebook(run_notebook):
    nb = run_notebook("01_kernels.ipynb")
    text = _outputs(nb)
    assert "devices: cpu(0), emu(0)" in text
    table = re.findall(r"^\s+(\w+) \|\s+([\d.e+-]+) \|\s+([\d.e+-]+)$", text, re.M)
    assert {row[0] for row in table} >= {"matmul", "softmax", "sigmoid"}
    assert all(float(e) < 1e-4 for row in table for e in row[1:]), table
    # The CUDA source beside its host twin.
    assert "void relu(int dev, const float* in" in text and "void relu(int, const float* in" in text
    assert len(_images(nb)) >= 2, "the timing plot and the roofline"
    # The profile of the matrix product on the emulated device, with the H100 model's estimate.
    coalesced = r"\| 1 \| 4\.0 \| 100% \| 4\.0 \| 100% \|"  # calls, loads and stores
    row = re.search(r"^\| matmul_tiled_kernel\S* " + coalesced, text, re.M)
    assert row, text[-3000:]
    assert "ESTIMATE (a roofline model, not a measurement) for NVIDIA H100" in text


def test_autodiff_notebook(run_notebook):
    nb = run_notebook("02_autodiff.ipynb")
    text = _outputs(nb)
    assert "largest difference: numpy" in text  # the cell asserts the finite differences
    assert re.search(r"\d+ values in \d+ buffers: \d+ bytes planned", text)
    assert "fusion report: " in text and "rules: " in text
    assert "same results with and without fusion: True" in text
    assert _images(nb), "the memory plan's drawing"


def test_mnist_notebook(run_notebook, tmp_path, monkeypatch):
    try:
        from gpumat import datasets

        datasets.load_mnist(progress=False, sources=[])  # local copies only
    except datasets.DatasetError as exc:
        pytest.skip(f"MNIST unavailable: {exc}")
    monkeypatch.setenv("GPUMAT_NOTEBOOK_EPOCHS", "1")
    monkeypatch.setenv("GPUMAT_NOTEBOOK_TRAIN_SIZE", "5000")
    monkeypatch.setenv("GPUMAT_NOTEBOOK_PLOT", str(tmp_path / "curves.png"))
    nb = run_notebook("03_mnist_training.ipynb")
    text = _outputs(nb)
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


def test_frontend_notebook(run_notebook, monkeypatch):
    try:
        from gpumat import datasets

        datasets.load_mnist(progress=False, sources=[])  # local copies only
    except datasets.DatasetError as exc:
        pytest.skip(f"MNIST unavailable: {exc}")
    monkeypatch.setenv("GPUMAT_NOTEBOOK_STEPS", "12")
    nb = run_notebook("04_frontend.ipynb")
    text = _outputs(nb)
    assert "compiled == eager, bit for bit: True" in text  # the cell asserts it too
    assert "12 steps in" in text and "accuracy on 1000 test images after 12 steps" in text
    assert _images(nb), "the learning curve"
    try:
        import torch  # noqa: F401
    except ImportError:
        assert "the comparison is skipped" in text
    else:
        assert "same predictions:" in text


def test_transformer_notebook(run_notebook):
    nb = run_notebook("06_transformer.ipynb")
    text = _outputs(nb)
    assert "4,850,380 characters, 83 distinct" in text
    before = re.search(r"before: \{'train': ([\d.]+)", text)
    after = re.search(r"after:  \{'train': ([\d.]+)", text)
    assert before and after and float(after.group(1)) < float(before.group(1)), text[-2000:]
    difference = re.search(r"largest difference: (\S+)", text)
    assert difference and float(difference.group(1)) < 1e-4, text[-2000:]
    assert text.count("ESTIMATE") >= 2  # the two profile tables, labelled estimates
    assert len(_images(nb)) >= 2  # the loss curve and the attention maps


@pytest.mark.skipif(shutil.which("g++") is None, reason="the notebook compiles a kernel with g++")
def test_emulator_notebook(run_notebook, monkeypatch):
    monkeypatch.setenv("GPUMAT_NOTEBOOK_SEEDS", "3")
    nb = run_notebook("05_emulator.ipynb")
    text = _outputs(nb)
    assert "fresh emulated memory: [nan nan nan nan]" in text
    original = re.search(r"original kernel, 3 schedules: largest error (\S+)", text)
    assert original and float(original.group(1)) < 1e-4, text[-2000:]
    assert "caught by 3 of 3 schedules" in text
    assert _images(nb)
    assert "original kernel, instrumented: largest error" in text and "no report" in text
    assert "mutant, instrumented: exit code 3" in text
    assert re.search(r"(initcheck|racecheck): .*shared", text), text[-2000:]
    assert "matmul_tiled_kernel" in text and "block (" in text and "thread (" in text
