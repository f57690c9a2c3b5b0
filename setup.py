"""Build gpumat: libgpumat (C++ and, when nvcc is found, CUDA) through extensions/Makefile, then
the Cython extension gpumat._core linked against it.

Environment:
    GPUMAT_CUDA       "0": host only; "1": CUDA required (fail without nvcc); unset: CUDA if nvcc
                      is found.
    GPUMAT_CUDA_ARCH  compute capabilities, e.g. "80 90" (default in the Makefile: 75 80 86 89 90,
                      plus PTX of the last, covering Colab's T4/L4/A100 and H100/H200).
    CUDA_HOME         the CUDA toolkit (default /usr/local/cuda, else found from nvcc on PATH).
    MAX_JOBS          parallel compile jobs (default: CPU count).
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).parent.resolve()
EXT_DIR = ROOT / "extensions"


def cuda_wanted() -> bool:
    flag = os.environ.get("GPUMAT_CUDA", "").strip()
    has_nvcc = (
        shutil.which("nvcc") is not None
        or Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc").exists()
    )
    if flag == "0":
        print("gpumat: GPUMAT_CUDA=0, building the host device only")
        return False
    if flag == "1" and not has_nvcc:
        sys.exit("gpumat: GPUMAT_CUDA=1 but nvcc was not found (set CUDA_HOME or PATH)")
    if not has_nvcc:
        print("gpumat: nvcc not found, building the host device only (no GPU support)")
    return has_nvcc


def build_summary(cuda: bool, cuda_arch) -> str:
    """The one-line build report: CUDA or not, and for which compute capabilities."""
    if cuda:
        archs = " ".join(cuda_arch)
        return f"gpumat: built with CUDA for compute capabilities {archs} (and PTX of the last)"
    return "gpumat: built WITHOUT CUDA (host device only: no nvcc, or GPUMAT_CUDA=0)"


def source_commit() -> str:
    """The checkout's commit (``+dirty`` when tracked files changed), or "unknown" outside git."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=30
        )
        if sha.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


class BuildWithLibgpumat(build_ext):
    """Runs `make` for libgpumat.a into build_temp, then links the extension against it."""

    def run(self):
        cuda = cuda_wanted()
        import scipy_openblas32

        build_dir = Path(self.build_temp).resolve() / (
            "libgpumat-cuda" if cuda else "libgpumat-host"
        )
        make_vars = [
            f"BUILD_DIR={build_dir}",
            f"CUDA={int(cuda)}",
            f"PYTHON={sys.executable}",
            f"BLAS_INCLUDE={scipy_openblas32.get_include_dir()}",
            f"BLAS_LIBDIR={scipy_openblas32.get_lib_dir()}",
        ]
        arch = os.environ.get("GPUMAT_CUDA_ARCH", "").replace(",", " ").split()
        if arch:
            make_vars.append("CUDA_ARCH=" + " ".join(arch))
        jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
        make = ["make", "-C", str(EXT_DIR), *make_vars]
        subprocess.check_call([*make, f"-j{jobs}", str(build_dir / "libgpumat.a")])
        ldlibs = subprocess.check_output([*make, "-s", "print-ldlibs"], text=True).split()
        cuda_arch = subprocess.check_output([*make, "-s", "print-cuda-arch"], text=True).split()
        openmp = "-fopenmp" in ldlibs
        emu_flags = subprocess.check_output(
            [*make, "-s", "print-emu-kernel-flags"], text=True
        ).split()
        self.write_build_config(cuda, cuda_arch if cuda else [], openmp, emu_flags)
        if cuda:
            self.record_kernel_resources()
        # One line that says what was built. NOTE: pip shows a build's output only with -v (or
        # when it fails); `python -m gpumat` prints the same line from an installed gpumat.
        print(build_summary(cuda, cuda_arch), file=sys.stderr, flush=True)

        archive = str(build_dir / "libgpumat.a")
        # Every object of the archive, also those nothing references: the unchecked builds of the
        # emulated kernels register themselves when the library loads (extensions/Makefile).
        if sys.platform == "darwin":
            whole_archive = [f"-Wl,-force_load,{archive}"]
        else:
            whole_archive = ["-Wl,--whole-archive", archive, "-Wl,--no-whole-archive"]
        for ext in self.extensions:
            ext.extra_link_args += whole_archive
            # A rebuilt libgpumat.a must relink the extension (setuptools checks only `depends`).
            ext.depends.append(str(build_dir / "libgpumat.a"))
            # The installed extension finds OpenBLAS beside it in site-packages first.
            ext.extra_link_args += ldlibs + ["-Wl,-rpath,$ORIGIN/../scipy_openblas32/lib"]
        super().run()

    def build_extension(self, ext):
        runtime = self.static_libstdcxx()
        if runtime:
            # Link the C++ runtime Python's other extensions use, named before the driver's own
            # -lstdc++: the archive then contributes nothing.
            print(
                f"gpumat: {self.compiler.compiler_cxx[0]} links libstdc++ statically; linking "
                f"the extension against {runtime} instead",
                file=sys.stderr,
                flush=True,
            )
            ext.extra_link_args.append(runtime)
        super().build_extension(ext)

    def static_libstdcxx(self):
        """The path of the libstdc++.so.6 Python loads, when the C++ compiler would put its own
        static libstdc++ into a shared object; else None.

        A copy of libstdc++ inside the extension, its symbols exported, mixes with the system's
        libstdc++.so.6 that numpy's or torch's libraries load: the two disagree on the locale's
        facets, and formatting a number into an ostringstream (every error message that names a
        shape) segfaulted or printed garbage. Seen on a GPU machine whose CXX was a GCC wrapper
        that finds only libstdc++.a. The probe: a small shared object built by the compiler, loaded
        beside libstdc++.so.6; a different address for ``std::ostream::_M_insert<long>`` means a
        static copy. Linux and GCC's libstdc++ only; any failure of the probe leaves the link as
        it is.
        """
        cxx = getattr(self.compiler, "compiler_cxx", None)
        if not sys.platform.startswith("linux") or not cxx:
            return None
        check = (
            "import ctypes, sys\n"
            "probe, lib = ctypes.CDLL(sys.argv[1]), ctypes.CDLL('libstdc++.so.6')\n"
            "sym = '_ZNSo9_M_insertIlEERSoT_'\n"
            "same = ctypes.cast(getattr(probe, sym), ctypes.c_void_p).value == "
            "ctypes.cast(getattr(lib, sym), ctypes.c_void_p).value\n"
            "path = next(l.split()[-1] for l in open('/proc/self/maps') if 'libstdc++.so' in l)\n"
            "print('shared' if same else 'static', path)\n"
        )
        with tempfile.TemporaryDirectory() as tmp:
            src, so = Path(tmp, "probe.cpp"), Path(tmp, "probe.so")
            src.write_text(
                "#include <sstream>\n"
                'extern "C" int probe(long v) { std::ostringstream s; s << v; '
                "return static_cast<int>(s.str().size()); }\n"
            )
            try:
                build = [cxx[0], "-shared", "-fPIC", str(src), "-o", str(so)]
                subprocess.run(build, check=True, capture_output=True, timeout=120)
                run = [sys.executable, "-c", check, str(so)]
                out = subprocess.run(run, check=True, capture_output=True, text=True, timeout=60)
                out = out.stdout.split()
            except (OSError, subprocess.SubprocessError):
                return None
        if len(out) == 2 and out[0] == "static" and os.path.isabs(out[1]):
            return out[1]
        return None

    def write_build_config(self, cuda: bool, cuda_arch, openmp: bool, emu_flags):
        text = (
            '"""Written by setup.py at build time: what this build of gpumat contains."""\n\n'
            f"CUDA = {cuda!r}\n"
            f"CUDA_ARCH = {tuple(cuda_arch)!r}\n"
            'BLAS = "OpenBLAS (scipy-openblas32)"\n'
            f"OPENMP = {openmp!r}\n"
            "# The flags the emulated kernels are compiled with (extensions/Makefile's\n"
            "# EMU_KERNEL_FLAGS): gpumat.cuda builds users' emulated kernels with them too.\n"
            f"EMU_KERNEL_FLAGS = {tuple(emu_flags)!r}\n"
            "# The commit the sources were built from (git rev-parse HEAD, '+dirty' for local\n"
            "# changes to tracked files; 'unknown' outside a git checkout): benchmarks/_common.py\n"
            "# checks that a run measures the commit its ledger file names.\n"
            f"GIT_COMMIT = {source_commit()!r}\n"
        )
        for target in (ROOT / "gpumat", Path(self.build_lib) / "gpumat"):
            target.mkdir(parents=True, exist_ok=True)
            (target / "_build_config.py").write_text(text)

    def record_kernel_resources(self):
        """Registers and static shared memory per kernel from ptxas (sm_75/80/90), for
        gpumat.profile's occupancy: gpumat/kernel_resources.json, rewritten with this nvcc. The
        committed file serves builds without nvcc."""
        script = ROOT / "scripts" / "kernel_resources.py"
        out = ROOT / "gpumat" / "kernel_resources.json"
        if not script.exists():
            return
        try:
            subprocess.check_call([sys.executable, str(script), "--out", str(out)])
        except subprocess.CalledProcessError as e:
            print(f"gpumat: kernel_resources.py failed ({e}); keeping {out}", file=sys.stderr)
            return
        target = Path(self.build_lib) / "gpumat"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(out, target / out.name)


extension = Extension(
    "gpumat._core",
    sources=["gpumat/_core.pyx"],
    include_dirs=[str(EXT_DIR / "include"), "gpumat"],
    language="c++",
    extra_compile_args=["-std=c++17", "-O2"],
)


class BuildPyFresh(build_py):
    """Copies the Python sources into a clean build/lib/gpumat: setuptools only adds files there,
    so a module deleted or moved in the source tree would otherwise still be installed from an
    earlier build. Also installs the emulated device's two headers as gpumat/_emu_include/, which
    gpumat.cuda compiles users' kernels against."""

    def run(self):
        stale = Path(self.build_lib) / "gpumat"
        for path in sorted(stale.rglob("*.py")) if stale.exists() else []:
            path.unlink()
        super().run()
        include = stale / "_emu_include"
        include.mkdir(parents=True, exist_ok=True)
        for name in ("cuda_runtime.h", "emulator.h"):
            shutil.copy(EXT_DIR / "src" / "emu" / name, include / name)


setup(
    ext_modules=cythonize([extension], language_level=3),
    cmdclass={"build_ext": BuildWithLibgpumat, "build_py": BuildPyFresh},
)
