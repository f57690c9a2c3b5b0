"""Registers, static shared memory and spills per kernel from `nvcc -Xptxas -v` output.

usage: python3 ptxas_summary.py ptxas.txt
"""

import re
import shutil
import subprocess
import sys

REPLACE = [("void ", ""), ("tuned::", ""), ("TileConfig", "Cfg"), ("(int)", ""), ("(bool)", "")]
REPLACE += [("sgemm_", ""), ("_kernel", ""), ("true", "1"), ("false", "0")]
SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def demangle(names):
    if not names or not shutil.which("c++filt"):
        return names
    run = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return run.stdout.splitlines()


def short(name):
    """`void tuned::sgemm_warptile_kernel<tuned::TileConfig<128, ...>, true, false, true>(...)`
    -> `warptile<Cfg<128,...>,1,0,1>` (template flags: TransA, TransB, Vec)."""
    name = re.sub(r"\(.*\)$", "", name.replace("(anonymous namespace)::", ""))
    for old, new in REPLACE:
        name = name.replace(old, new)
    return name.replace(" ", "")


def main(path):
    entries, cur = [], None
    for line in open(path, encoding="utf-8", errors="replace"):
        m = re.search(r"Compiling entry function '(\S+)' for '(\w+)'", line)
        if m:
            cur = dict(name=m.group(1), arch=m.group(2), regs="?", smem="0", stack="0", spill="0/0")
            entries.append(cur)
            continue
        if cur is None:
            continue
        m = SPILL.search(line)
        if m:
            cur["stack"], cur["spill"] = m.group(1), f"{m.group(2)}/{m.group(3)}"
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur["regs"] = m.group(1)
            s = re.search(r"(\d+) bytes smem", line)
            cur["smem"] = s.group(1) if s else "0"
    names = demangle([e["name"] for e in entries])
    head = f"{'arch':6s} {'regs':>4s} {'smem':>6s} {'stack':>5s} {'spill st/ld':>11s}"
    print(f"{'kernel <config, TransA, TransB, Vec>':56s} {head}")
    for e, n in zip(entries, names, strict=True):
        cols = f"{e['arch']:6s} {e['regs']:>4s} {e['smem']:>6s} {e['stack']:>5s} {e['spill']:>11s}"
        print(f"{short(n)[:56]:56s} {cols}")
    print("(smem: static bytes; kernels 3-7 use dynamic shared memory, see NOTES.md)")


if __name__ == "__main__":
    main(sys.argv[1])
