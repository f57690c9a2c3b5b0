"""Shared pytest configuration: the device fixtures.

Every test that takes ``ctx`` runs once per device: ``cpu`` always; ``emu``, the emulated CUDA
device (gpumat's CUDA kernel sources run on the CPU by its emulator), always; and ``gpu`` when
libgpumat was built with CUDA and a CUDA device is present. Without a GPU the ``gpu`` parameter is
not generated at all, and the session header says why, so that ``pytest -m gpu`` runs every GPU
test on the emulated device with none skipped for want of a GPU (after needle's
``tests/hw3/test_ndarray.py`` for the fixture). The ``emu`` and ``gpu`` parameters carry
``pytest.mark.gpu`` (registered in pyproject.toml): they run the CUDA code. The ``gpu`` parameter
and the tests that need a real GPU and a CUDA library (torch, CuPy) also carry
``pytest.mark.cuda``: ``-m cuda`` selects what only a GPU machine can run (scripts/gpu_check.sh).

The emulator runs the threads of a block in a seeded random order between barriers. A session
draws a fresh seed unless ``GPUMAT_EMU_SEED`` is set, prints it in the header, and names it in the
report of every failing emulated test, so a race found once can be replayed.
"""

import gc
import os
import random
import sys

import pytest

# The shared helpers live next to this file (tests/helpers.py). pytest's default "prepend" import
# mode already puts this folder on sys.path; this keeps `import helpers` working under
# --import-mode=importlib too.
_TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)

# Before gpumat loads: the emulator reads the seed once.
os.environ.setdefault("GPUMAT_EMU_SEED", str(random.SystemRandom().randrange(1, 2**31)))
EMU_SEED = os.environ["GPUMAT_EMU_SEED"]


def _gpu_skip_reason():
    """None when GPU tests can run, else why not (shown in the session header)."""
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

#: The devices that run the CUDA kernels: the emulated one always, a real GPU when present.
CUDA_DEVICE_PARAMS = [pytest.param("emu", id="emu", marks=[pytest.mark.gpu])]
if HAS_GPU:
    CUDA_DEVICE_PARAMS.append(
        pytest.param("gpu", id="gpu", marks=[pytest.mark.gpu, pytest.mark.cuda])
    )
DEVICE_PARAMS = [pytest.param("cpu", id="cpu"), *CUDA_DEVICE_PARAMS]


def make_ctx(name):
    import gpumat

    return {"cpu": gpumat.cpu, "emu": gpumat.emu, "gpu": gpumat.gpu}[name](0)


@pytest.fixture(params=DEVICE_PARAMS, scope="session")
def ctx(request):
    """A gpumat.Device for each available device. Session scope: contexts are immutable values, and
    hypothesis refuses function-scoped fixtures in @given tests."""
    return make_ctx(request.param)


@pytest.fixture(params=CUDA_DEVICE_PARAMS, scope="session")
def gpu_ctx(request):
    """A device that runs the CUDA kernels (emulated always, the GPU when present), for tests that
    need one next to the host (mixed devices, copies)."""
    return make_ctx(request.param)


def pytest_report_header(config):
    gpu = "gpu(0)" if HAS_GPU else f"not tested ({GPU_SKIP_REASON})"
    return [
        f"gpumat devices: cpu, emu (emulated CUDA), gpu: {gpu}",
        f"emulator schedule seed: GPUMAT_EMU_SEED={EMU_SEED}",
    ]


def pytest_collection_finish(session):
    # The modules and collected tests live until the end: moved out of the collector's reach, so
    # that the automatic full collections, which thousands of tests' garbage triggers, do not walk
    # torch's and hypothesis's objects each time (gc.freeze's documented use).
    gc.collect()
    gc.freeze()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and "emu" in item.nodeid:
        report.sections.append(
            ("emulated device", f"rerun with GPUMAT_EMU_SEED={EMU_SEED} to replay the schedule")
        )
