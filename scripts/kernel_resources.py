"""Records each CUDA kernel's registers per thread and static shared memory, as ptxas reports them.

    python scripts/kernel_resources.py [--out gpumat/kernel_resources.json] [--arch 80 90]

Compiles every ``extensions/src/cuda/*.cu`` with ``nvcc -cubin -Xptxas -v`` for each compute
capability and parses ptxas' "Used N registers, ... M bytes smem" lines (names demangled by
``c++filt``). ``gpumat.profile`` reads the JSON for its occupancy figures; setup.py reruns this
script when it builds with CUDA, and the committed file serves builds without nvcc. Needs nvcc
(CUDA_HOME, else PATH) and c++filt; exits with a message otherwise.
"""

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXT = ROOT / "extensions"

# The report's parser, shared with gpumat.cuda (users' kernels); loaded by path, since gpumat
# itself is not importable while setup.py builds it.
_spec = importlib.util.spec_from_file_location("_ptxas", ROOT / "gpumat" / "cuda" / "_ptxas.py")
ptxas = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ptxas)


def nvcc_path() -> str:
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    for cand in (Path(home) / "bin" / "nvcc", shutil.which("nvcc")):
        if cand and Path(cand).exists():
            return str(cand)
    sys.exit("kernel_resources: nvcc not found (set CUDA_HOME or PATH)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "gpumat" / "kernel_resources.json"))
    p.add_argument("--arch", nargs="+", default=["75", "80", "90"])
    args = p.parse_args(argv)
    nvcc = nvcc_path()
    if shutil.which("c++filt") is None:
        sys.exit("kernel_resources: c++filt not found (binutils)")
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    version = version.strip().splitlines()[-1] if version.strip() else "unknown"
    names: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:

        def ptxas_report(job):
            src, arch = job
            cmd = [nvcc, "-O3", "-std=c++17", "--extended-lambda", "-Iinclude", "-Isrc"]
            cmd += ["-DGPUMAT_WITH_CUDA", f"-arch=sm_{arch}", "-cubin", "-Xptxas", "-v"]
            cmd += ["-o", str(Path(tmp) / f"{src.stem}.{arch}.cubin"), str(src)]
            r = subprocess.run(cmd, cwd=EXT, capture_output=True, text=True)
            return cmd, r

        jobs = [(s, a) for s in sorted((EXT / "src" / "cuda").glob("*.cu")) for a in args.arch]
        # One nvcc per (file, arch), run side by side: each is single-threaded, and setup.py runs
        # this on every CUDA build. map() keeps the jobs' order, so the JSON does not depend on it.
        workers = int(os.environ.get("MAX_JOBS") or os.cpu_count() or 1)
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            results = list(pool.map(ptxas_report, jobs))
    raw = []
    for cmd, r in results:
        if r.returncode != 0:
            sys.exit(f"kernel_resources: {' '.join(cmd)} failed:\n{r.stderr}")
        raw.append(r.stderr)
        names.update(m[0] for m in ptxas.ENTRY.findall(r.stderr))
    table = ptxas.demangle(names)
    result: dict = {}
    for text in raw:
        for arch, kernels in ptxas.parse(text, lambda m: table.get(m, m)).items():
            result.setdefault(arch, {}).update(kernels)
    doc = {
        "source": "ptxas -v (nvcc -O3 -cubin -Xptxas -v), per kernel",
        "nvcc": version,
        "archs": {arch: dict(sorted(k.items())) for arch, k in sorted(result.items())},
    }
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    count = sum(len(k) for k in result.values())
    print(f"kernel_resources: {count} kernel entries for {sorted(result)} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
