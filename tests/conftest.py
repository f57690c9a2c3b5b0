"""Shared pytest configuration: the device fixtures.

Every test that takes ``ctx`` runs once per device: ``cpu`` always, ``gpu`` when libgpumat was built
with CUDA and a CUDA device is present, otherwise that parameter is skipped with the reason (after
needle's ``tests/hw3/test_ndarray.py``). GPU parameters carry ``pytest.mark.gpu`` (registered in
pyproject.toml) so that ``pytest -m gpu`` / ``-m "not gpu"`` select them.
"""

import os
import sys

import pytest

# The shared helpers live next to this file (tests/helpers.py). pytest's default "prepend" import
# mode already puts this folder on sys.path; this keeps `import helpers` working under
# --import-mode=importlib too.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)


def _gpu_skip_reason():
    """None when GPU tests can run, else why not (shown by ``pytest -ra``)."""
    try:
        import gpumat
    except Exception as exc:  # a broken build must not hide the cpu tests' own import errors
        return f"gpumat does not import: {exc!r}"
    if not gpumat.build_info().get("cuda", False):
        return "built without CUDA"
    if not gpumat.cuda_available():
        return "no CUDA device"
    return None


GPU_SKIP_REASON = _gpu_skip_reason()
HAS_GPU = GPU_SKIP_REASON is None

_GPU_MARKS = [pytest.mark.gpu, pytest.mark.skipif(not HAS_GPU, reason=str(GPU_SKIP_REASON))]
DEVICE_PARAMS = [pytest.param("cpu", id="cpu"), pytest.param("gpu", id="gpu", marks=_GPU_MARKS)]


def make_ctx(name):
    import gpumat

    return gpumat.cpu() if name == "cpu" else gpumat.gpu(0)


@pytest.fixture(params=DEVICE_PARAMS, scope="session")
def ctx(request):
    """A gpumat.Context for each available device. Session scope: contexts are immutable values, and
    hypothesis refuses function-scoped fixtures in @given tests."""
    return make_ctx(request.param)


@pytest.fixture(scope="session")
def gpu_ctx():
    """gpumat.gpu(0), for tests that need a GPU next to the host (mixed devices, copies)."""
    if not HAS_GPU:
        pytest.skip(GPU_SKIP_REASON)
    return make_ctx("gpu")
