"""The host BLAS (gpumat/_host_blas.py): oneDNN's sgemm when the onednn-cpu-gomp wheel is
installed, OpenBLAS otherwise or with GPUMAT_BLAS=openblas (checked in fresh processes); a library
that is not an OpenMP oneDNN, or fails to load, refused with a message naming it and OpenBLAS left
in use; and the two libraries' products, convolutions and attention agreeing with each other and
with float64 numpy on fresh inputs. (Every other host test runs on the library in use; CI runs the
kernel tests once more with GPUMAT_BLAS=openblas.)"""

import ctypes.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import new_rng

import gpumat
from gpumat import _host_blas

ONEDNN = _host_blas.onednn_library()


def _fresh(code, tmp_path, blas=None, check=True):
    env = dict(os.environ)
    env.pop("GPUMAT_BLAS", None)
    if blas is not None:
        env["GPUMAT_BLAS"] = blas
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    if check:
        assert out.returncode == 0, out.stderr
    return out


def test_the_library_in_use_follows_gpumat_blas():
    name = gpumat.build_info()["blas"]
    wanted = os.environ.get("GPUMAT_BLAS", "auto").strip().lower()
    if ONEDNN is not None and wanted != "openblas":
        assert name.startswith("oneDNN "), name
    else:
        assert name.startswith("OpenBLAS"), name


def test_choices_in_fresh_processes(tmp_path):
    code = "import gpumat; print(gpumat.build_info()['blas'])"
    assert _fresh(code, tmp_path, "openblas").stdout.startswith("OpenBLAS")
    assert _fresh(code, tmp_path, " OpenBLAS ").stdout.startswith("OpenBLAS")
    auto = _fresh(code, tmp_path).stdout
    assert auto.startswith("oneDNN " if ONEDNN else "OpenBLAS"), auto
    asked = _fresh(code, tmp_path, "onednn", check=ONEDNN is not None)
    if ONEDNN is not None:
        assert asked.stdout.startswith("oneDNN 3."), asked.stdout
    else:
        assert "ImportError" in asked.stderr and "onednn-cpu-gomp" in asked.stderr
    bad = _fresh(code, tmp_path, "mkl", check=False)
    assert bad.returncode != 0
    assert "GPUMAT_BLAS must be one of auto, onednn, openblas, got 'mkl'" in bad.stderr


def test_libraries_that_are_not_oneDNN_are_refused(tmp_path):
    libm = ctypes.util.find_library("m")
    code = f"""
import json, gpumat
from gpumat import _core, _host_blas
out = {{}}
for path in ("/nonexistent/libdnnl.so.3", {libm!r}):
    try:
        _core.use_onednn_(path)
        out[path] = "loaded"
    except ValueError as exc:
        out[path] = str(exc)
out["after"] = _core.host_blas_()
print(json.dumps(out))
"""
    out = json.loads(_fresh(code, tmp_path, "openblas").stdout)
    assert "cannot load /nonexistent/libdnnl.so.3" in out["/nonexistent/libdnnl.so.3"]
    if libm is not None:
        assert "has no dnnl_sgemm or dnnl_version: not oneDNN" in out[libm], out[libm]
    assert out["after"].startswith("OpenBLAS")


PROGRAM = """
import json, sys
import numpy as np, gpumat, gpumat.ops as ops
rng = np.random.default_rng(int(sys.argv[1]))
out = {"blas": gpumat.build_info()["blas"]}
shapes = [(300, 200, 500, False, True), (128, 128, 2048, True, False), (7, 5, 3, True, True)]
for m, n, k, ta, tb in shapes:
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    c = gpumat.empty((m, n))
    ops.matmul(gpumat.array(a), gpumat.array(b), c, ta, tb)
    ref = (a.T if ta else a).astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    out[f"matmul {m}x{n}x{k}"] = [c.asnumpy().tolist(), ref.tolist()]
x = rng.standard_normal((4, 3, 12, 12)).astype(np.float32)
w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
y = gpumat.empty((4, 5, 10, 10))
ops.conv2d(gpumat.array(x), gpumat.array(w), y)
ref = np.zeros((4, 5, 10, 10))
for i in range(3):
    for j in range(3):
        patch = x[:, :, i:i + 10, j:j + 10].astype(np.float64)
        ref += np.einsum("nchw,fc->nfhw", patch, w[:, :, i, j])
out["conv2d"] = [y.asnumpy().tolist(), ref.tolist()]
q, k, v = (rng.standard_normal((2, 40, 16)).astype(np.float32) for _ in range(3))
o = gpumat.empty((2, 40, 17))
ops.attention(gpumat.array(q), gpumat.array(k), gpumat.array(v), o, 0.25, False)
s = np.einsum("bqd,bkd->bqk", q.astype(np.float64), k.astype(np.float64)) * 0.25
p = np.exp(s - s.max(-1, keepdims=True))
p /= p.sum(-1, keepdims=True)
out["attention"] = [o.asnumpy()[..., :16].tolist(), np.einsum("bqk,bkd->bqd", p, v).tolist()]
print(json.dumps(out))
"""


def test_both_libraries_agree_with_float64_and_each_other(tmp_path):
    _, seed = new_rng()
    program = PROGRAM.replace("sys.argv[1]", str(seed))
    runs = {
        blas: json.loads(_fresh(program, tmp_path, blas).stdout) for blas in ("openblas", "auto")
    }
    assert runs["openblas"]["blas"].startswith("OpenBLAS")
    for key in runs["auto"].keys() - {"blas"}:
        ref = np.asarray(runs["auto"][key][1])
        tol = 2e-5 * max(1.0, float(np.abs(ref).max()))
        got = {blas: np.asarray(run[key][0]) for blas, run in runs.items()}
        for blas in runs:
            np.testing.assert_allclose(
                got[blas], ref, rtol=0, atol=tol, err_msg=f"{blas} {key}, seed {seed}"
            )
        np.testing.assert_allclose(
            got["openblas"], got["auto"], rtol=0, atol=tol, err_msg=f"{key}, seed {seed}"
        )


def test_a_bad_choice_changes_nothing():
    before = gpumat.build_info()["blas"]
    with pytest.raises(
        ValueError, match="GPUMAT_BLAS must be one of auto, onednn, openblas, got 'cuBLAS'"
    ):
        _host_blas.load("cuBLAS")
    assert gpumat.build_info()["blas"] == before
