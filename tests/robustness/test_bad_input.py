"""Bad input never crashes the process: hypothesis-generated calls of every public entry point.

The cases live in ``bad_input_cases.py``: every gpumat.ops function, gpumat.array / empty,
PyGpuMatrix's constructors and methods, the cuda-project methods, the dlsys contexts and helpers,
graph op constructors, gradients, the Executor, the optimizers, gpumat's device functions, the
front end (tensor creation, Tensor operators and methods, gpumat.nn.functional, the layers, the
optimizers over parameters, DataLoader, save / load, backward and compile), and the DLPack entry
points (``__dlpack__``'s max_version, stream, dl_device and copy;
``__dlpack_device__``; ``from_dlpack`` with its copy argument and with malformed capsules).
Each batch runs in a child process, so a segfault or abort fails its test here instead of ending
the pytest run. The child reports how many cases it ran and which failed: a wrong exception type,
a silent message, an argument changed by a call that raised, or an accepted call whose result
differs from the float64 numpy reference.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import gpumat

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bad_input_cases  # noqa: E402

BATCHES = sorted(b for b in bad_input_cases.BATCHES if not b.startswith("_"))


def _run_batch(batch: str) -> dict:
    env = dict(os.environ)
    # NOTE: -P keeps the checkout's gpumat/ (no built extension) from shadowing the installed one.
    proc = subprocess.run(
        [sys.executable, "-P", "-X", "faulthandler", str(HERE / "bad_input_cases.py"), batch],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE,
        env=env,
    )
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        pytest.fail(
            f"batch {batch} crashed the process with {name}:\n{proc.stderr[-4000:]}",
            pytrace=False,
        )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert lines, (
        f"batch {batch} printed no result (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    )
    return json.loads(lines[-1])


@pytest.mark.parametrize("batch", BATCHES)
def test_bad_input_batch_never_crashes(batch, record_property):
    result = _run_batch(batch)
    record_property("cases", result["cases"])
    print(f"{batch}: {result['cases']} cases")
    assert result["cases"] > 0
    assert not result["failures"], "\n".join(result["failures"])


def test_every_ops_function_is_covered():
    # Not kernels: a process-wide setting and the executor's tracing context (no array input).
    covered = bad_input_cases.covered_ops() | {"set_conv_workspace_limit", "trace_calls"}
    assert set(gpumat.ops.__all__) <= covered, set(gpumat.ops.__all__) - covered
    # gpumat.gpu_op is the same functions under the dlsys course's module name.
    assert all(getattr(gpumat.gpu_op, n) is getattr(gpumat.ops, n) for n in gpumat.ops.__all__)


def test_a_crash_in_a_batch_fails_its_test_and_not_the_run():
    with pytest.raises(pytest.fail.Exception, match="crashed the process with SIGSEGV"):
        _run_batch("_crash")


def test_gpumat_namespace_exports_only_its_own_names():
    leaked = {"np", "os", "annotations", "_np", "_os"} & set(n for n in dir(gpumat) if n[0] != "_")
    assert not leaked, leaked
    assert set(gpumat.__all__) <= set(dir(gpumat))


@pytest.mark.parametrize(
    "build, op",
    [
        (lambda x: gpumat.autodiff.add_op(x, 3), "add_op"),
        (lambda x: gpumat.autodiff.matmul_op(x, [[1.0]]), "matmul_op"),
        (lambda x: gpumat.autodiff.relu_op("x"), "relu_op"),
        (lambda x: gpumat.autodiff.broadcastto_op(None, x), "broadcastto_op"),
        (lambda x: gpumat.autodiff.softmaxcrossentropy_op(x, 1.0), "softmaxcrossentropy_op"),
        (lambda x: gpumat.graph.conv2d_op(x, 2.0), "conv2d_op"),
        (lambda x: gpumat.graph.max_pool2d_op(None, 2), "max_pool2d_op"),
    ],
)
def test_graph_ops_reject_non_nodes_with_a_type_error_naming_the_op(build, op):
    x = gpumat.autodiff.Variable("x")
    with pytest.raises(TypeError, match=rf"^{op}: argument '\w+' must be a graph Node"):
        build(x)


def test_transpose_flags_must_be_bools(ctx):
    a, c = gpumat.empty((2, 2), ctx), gpumat.empty((2, 2), ctx)
    for flag in (1, "yes", None, [True]):
        with pytest.raises(TypeError, match="trans_a must be a bool"):
            gpumat.ops.matmul(a, a, c, flag, False)
        with pytest.raises(TypeError, match="trans_B must be a bool"):
            gpumat.autodiff.matmul_op(
                gpumat.autodiff.Variable("a"), gpumat.autodiff.Variable("b"), False, flag
            )


def test_gradients_rejects_non_nodes():
    x = gpumat.autodiff.Variable("x")
    with pytest.raises(TypeError, match="gradients: output_node must be a graph Node"):
        gpumat.autodiff.gradients("loss", [x])
    with pytest.raises(TypeError, match="gradients: node_list must hold graph Nodes"):
        gpumat.autodiff.gradients(x, [x, 3.0])
    with pytest.raises(TypeError, match="gradients: node_list must be a sequence"):
        gpumat.autodiff.gradients(x, 3)


def test_pooling_reference_handles_an_empty_batch():
    # Found by the bad-input suite: the numpy backend could not reshape an empty batch's windows.
    import numpy as np

    x = np.zeros((0, 4, 3, 3))
    out = np.full((0, 4, 2, 2), np.nan)
    gpumat.reference.max_pool2d(x, out, (2, 2), (1, 1), (0, 0))
    dy = np.zeros((0, 4, 2, 2))
    dx = np.full(x.shape, np.nan)
    gpumat.reference.max_pool2d_gradient(x, dy, dx, (2, 2), (1, 1), (0, 0))
