"""The cuda-project contract of PyGpuMatrix: PyGpuMatrix(host, rows, cols[, ctx]), mul,
loadFromDevice / loadToDevice and the to-do list methods, against float64 numpy; and no object
without an array can crash the process."""

import subprocess
import sys

import numpy as np
import pytest
from helpers import new_rng

import gpumat
from gpumat import PyGpuMatrix


def test_readme_snippet_prints_the_product(ctx):
    M, N, K = 3, 5, 4
    A = PyGpuMatrix(np.ones((M, K), dtype=np.float32), M, K, ctx)
    B = PyGpuMatrix(np.ones((K, N), dtype=np.float32), K, N, ctx)
    c_host = np.zeros((M, N), dtype=np.float32)
    C = PyGpuMatrix(c_host, M, N, ctx)
    A.mul(M, N, K, B, C)
    assert C.loadFromDevice() is c_host  # written in place into the array C was made from
    np.testing.assert_array_equal(c_host, np.full((M, N), float(K)))


def test_default_device_is_a_usable_gpu_else_cpu():
    A = PyGpuMatrix(np.ones((2, 2), dtype=np.float32), 2, 2)
    assert A.ctx == (gpumat.gpu(0) if gpumat.cuda_available() else gpumat.cpu())


def test_mul_matches_float64_on_random_inputs(ctx):
    rng, _ = new_rng()
    M, N, K = 7, 3, 5
    a, b = rng.uniform(-1, 1, (M, K)), rng.uniform(-1, 1, (K, N))
    A = PyGpuMatrix(a.astype(np.float32), M, K, ctx)
    B = PyGpuMatrix(b.astype(np.float32), K, N, ctx)
    C = PyGpuMatrix(np.full((M, N), np.nan, dtype=np.float32), M, N, ctx)
    A.mul(M, N, K, B, C)
    np.testing.assert_allclose(C.loadFromDevice(), a @ b, rtol=1e-5, atol=1e-6)


def test_to_do_list_methods_match_float64(ctx):
    rng, _ = new_rng()
    a, b = rng.uniform(-1, 1, (4, 6)), rng.uniform(-1, 1, (4, 6))
    A = PyGpuMatrix(a.astype(np.float32), 4, 6, ctx)
    B = PyGpuMatrix(b.astype(np.float32), 4, 6, ctx)
    out = PyGpuMatrix(np.zeros((4, 6), dtype=np.float64), 4, 6, ctx)
    A.add(B, out)
    np.testing.assert_allclose(out.loadFromDevice(), a + b, rtol=1e-6, atol=1e-7)
    A.multiply(B, out)
    np.testing.assert_allclose(out.loadFromDevice(), a * b, rtol=1e-6, atol=1e-7)
    A.negate(out)
    np.testing.assert_allclose(out.loadFromDevice(), -a, rtol=1e-6)
    A.relu(out)
    np.testing.assert_allclose(out.loadFromDevice(), np.maximum(a, 0), rtol=1e-6)
    T = PyGpuMatrix(np.zeros((6, 4), dtype=np.float32), 6, 4, ctx)
    A.transpose(T)
    np.testing.assert_allclose(T.loadFromDevice(), a.T, rtol=1e-6)
    A.randomInit(-2.0, 3.0, seed=7)
    vals = A.asnumpy()
    assert vals.min() >= -2.0 and vals.max() <= 3.0 and np.unique(vals).size > 20
    again = gpumat.empty((4, 6), ctx)
    gpumat.ops.uniform(again, -2.0, 3.0, seed=7)
    np.testing.assert_array_equal(vals, again.asnumpy())


def test_load_to_device_sends_host_changes():
    host = np.zeros((2, 3), dtype=np.float32)
    A = PyGpuMatrix(host, 2, 3, gpumat.cpu())
    host[:] = 5.0
    A.loadToDevice()
    np.testing.assert_array_equal(A.asnumpy(), host)


def test_every_dimension_is_checked():
    A = PyGpuMatrix(np.ones((2, 3), dtype=np.float32), 2, 3, gpumat.cpu())
    B = PyGpuMatrix(np.ones((3, 4), dtype=np.float32), 3, 4, gpumat.cpu())
    C = PyGpuMatrix(np.ones((2, 4), dtype=np.float32), 2, 4, gpumat.cpu())
    with pytest.raises(ValueError, match=r"A \(self\) has shape \(2, 3\), expected \(2, 4\)"):
        A.mul(2, 4, 4, B, C)
    with pytest.raises(ValueError, match=r"B has shape \(3, 4\), expected \(3, 5\)"):
        A.mul(2, 5, 3, B, C)
    with pytest.raises(ValueError, match=r"C has shape"):
        A.mul(2, 4, 3, B, A)
    with pytest.raises(TypeError, match="N must be an int"):
        A.mul(2, 4.0, 3, B, C)
    with pytest.raises(TypeError, match="B must be a PyGpuMatrix"):
        A.mul(2, 4, 3, np.ones((3, 4)), C)
    with pytest.raises(ValueError, match="host_array has shape"):
        PyGpuMatrix(np.ones((2, 3), dtype=np.float32), 3, 2)
    with pytest.raises(TypeError, match="floating-point"):
        PyGpuMatrix(np.ones((2, 3), dtype=np.int32), 2, 3)
    with pytest.raises(TypeError, match="rows must be an int"):
        PyGpuMatrix(np.ones((2, 3), dtype=np.float32), True, 3)
    with pytest.raises(ValueError, match="not made from a host array"):
        gpumat.empty((2, 2)).loadFromDevice()
    with pytest.raises(TypeError, match="already initialised"):
        A.__init__(np.ones((2, 3), dtype=np.float32), 2, 3)


@pytest.mark.parametrize(
    "use",
    [
        "repr(x)",
        "x.shape",
        "x.size",
        "x.asnumpy()",
        "len(x)",
        "x.reshape(1)",
        "x.copyto(gpumat.cpu())",
        "x[:] = 1.0",
        "gpumat.array(x)",
        "gpumat.ops.relu(gpumat.empty((2,)), x)",
        "gpumat.ops.matmul(x, x, x)",
        "gpumat.ops.adam_update(x, x, x, x, 0.1, 0.9, 0.99, 1e-8, 1)",
        "x.mul(1, 1, 1, x, x)",
        "x.loadFromDevice()",
    ],
)
def test_objects_without_an_array_raise_and_never_crash(use):
    # A subprocess, so that a crash fails this test instead of the run.
    code = (
        "import numpy as np, gpumat\n"
        "from gpumat import PyGpuMatrix\n"
        "objects = [PyGpuMatrix.__new__(PyGpuMatrix)]\n"
        "for args in [(), (np.ones((3, 4), dtype=np.float32), 4, 3), (None, 3, 4)]:\n"
        "    try:\n"
        "        objects.append(PyGpuMatrix(*args))\n"
        "    except (TypeError, ValueError) as exc:\n"
        "        assert str(exc)\n"
        "assert len(objects) == 1\n"
        "x = objects[0]\n"
        "try:\n"
        f"    r = {use}\n"
        "    assert 'empty' in r, r\n"
        "except ValueError as exc:\n"
        "    assert 'holds no array' in str(exc), exc\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
