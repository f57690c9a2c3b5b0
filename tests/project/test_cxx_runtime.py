"""One C++ runtime per process: the extension uses the libstdc++.so.6 that Python's other C++
libraries load (numpy's, torch's), never a static copy of its own.

A GPU machine's C++ compiler (a GCC wrapper that finds only libstdc++.a) once built a gpumat whose
every shape error segfaulted, or printed "cannot sum ( down to (", in std::ostringstream: two
copies of libstdc++ disagreed on the locale's facets. setup.py probes the compiler and links the
system's library instead (BuildWithLibgpumat.static_libstdcxx).
"""

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

import gpumat

ROOT = Path(__file__).resolve().parents[2]
LINUX = sys.platform.startswith("linux")
# std::ostream::operator<<(long)'s worker: what formatting a shape calls.
OSTREAM_INSERT_LONG = "_ZNSo9_M_insertIlEERSoT_"


def _address(lib: ctypes.CDLL, symbol: str) -> int:
    return ctypes.cast(getattr(lib, symbol), ctypes.c_void_p).value


@pytest.mark.skipif(not LINUX, reason="libstdc++ and /proc: Linux only")
def test_the_extension_uses_the_process_libstdcxx():
    # dlsym through the extension's handle finds its own copy first, if it carries one.
    core = ctypes.CDLL(gpumat._core.__file__)
    system = ctypes.CDLL("libstdc++.so.6")
    assert _address(core, OSTREAM_INSERT_LONG) == _address(system, OSTREAM_INSERT_LONG), (
        "gpumat._core carries its own libstdc++: rebuild it (setup.py links the system's)"
    )


CHILD = """
    import numpy as np
    import gpumat
    import torch  # a second C++ library, loaded before gpumat formats its first message
    from gpumat import ops

    def message():
        a = gpumat.array(np.random.rand(4, 5, 6), gpumat.cpu())
        b = gpumat.array(np.random.rand(5), gpumat.cpu())
        try:
            ops.sum_to_size(a, b)
        except ValueError as exc:
            return str(exc)

    print(message())
    print(torch.tensor([1.5]).tolist(), message())
"""


def test_error_messages_format_shapes_beside_torch():
    pytest.importorskip("torch")
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT.parent,  # not the repository: its gpumat/ sources must not shadow the install
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    for line in lines:
        assert "cannot sum (4, 5, 6) down to (5,)" in line, line


def _setup_build_class():
    """setup.py's build_ext class, without running setup()."""
    source = (ROOT / "setup.py").read_text()
    namespace = {"__file__": str(ROOT / "setup.py"), "__name__": "gpumat_setup"}
    exec(source[: source.index("\nextension = Extension(")], namespace)
    return namespace["BuildWithLibgpumat"]


@pytest.mark.skipif(
    not LINUX or shutil.which("g++") is None or not (ROOT / "setup.py").exists(),
    reason="needs Linux, g++ and the source tree",
)
def test_setup_probe_tells_a_static_libstdcxx_compiler(tmp_path):
    pytest.importorskip("Cython")
    pytest.importorskip("setuptools")
    build = _setup_build_class()
    static_gxx = tmp_path / "g++-static"  # a compiler like the GPU machine's wrapper
    static_gxx.write_text('#!/bin/sh\nexec g++ -static-libstdc++ "$@"\n')
    static_gxx.chmod(0o755)
    probe = shutil.which("g++")
    plain = types.SimpleNamespace(compiler=types.SimpleNamespace(compiler_cxx=[probe]))
    wrapped = types.SimpleNamespace(compiler=types.SimpleNamespace(compiler_cxx=[str(static_gxx)]))
    assert build.static_libstdcxx(plain) is None
    loaded = build.static_libstdcxx(wrapped)
    if loaded is None:
        pytest.skip("g++ cannot link libstdc++ statically into a shared object here")
    assert os.path.isabs(loaded) and "libstdc++.so" in os.path.basename(loaded)
