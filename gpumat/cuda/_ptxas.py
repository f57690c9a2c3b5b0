"""ptxas' resource report (``nvcc -cubin -Xptxas -v``): registers per thread, static shared
memory, stack and spills per kernel, parsed; and names demangled by ``c++filt``.

Used by ``scripts/kernel_resources.py`` (gpumat's own kernels, at build time: it loads this file
by its path, so it imports nothing of gpumat) and by :mod:`gpumat.cuda` (users' kernels, for their
attributes and the profile's occupancy on the emulated device).
"""

from __future__ import annotations

import re
import shutil
import subprocess

ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(sm_\d+)'")
STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers")
SMEM = re.compile(r"(\d+) bytes smem")  # after the barriers and any "cumulative stack size"


def normalise(name: str) -> str:
    """A kernel's name without its namespace, parameter list and spaces: the key both the
    emulator's names ("gpumat::emu::k<false, 1>") and ptxas' ("gpumat::cuda::k<false, 1>(...)")
    map to."""
    name = re.sub(r"\bgpumat::(cuda|emu)::", "", name)
    # before the parameter list is cut: its '(' would otherwise end the name
    name = re.sub(r"\(anonymous namespace\)::", "", name)
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # drop the parameter list: the first '(' outside template args
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    name = name[:cut]
    name = re.sub(r"^void\s+", "", name.strip())  # c++filt prints a template's return type
    return name.replace(" ", "")


def parse(text: str, demangle) -> dict:
    """{arch: {normalised kernel name: resources}} from ptxas -v output."""
    out: dict = {}
    current = None
    for line in text.splitlines():
        if m := ENTRY.search(line):
            current = (demangle(m.group(1)), m.group(2))
            out.setdefault(current[1], {})[normalise(current[0])] = {}
        elif current and (m := STACK.search(line)):
            entry = out[current[1]][normalise(current[0])]
            entry["stack_bytes"] = int(m.group(1))
            entry["spill_bytes"] = int(m.group(2)) + int(m.group(3))
        elif current and (m := USED.search(line)):
            entry = out[current[1]][normalise(current[0])]
            entry["registers"] = int(m.group(1))
            smem = SMEM.search(line)
            entry["static_smem_bytes"] = int(smem.group(1)) if smem else 0
            current = None
    return out


def demangle(names) -> dict[str, str]:
    """{mangled: demangled} through ``c++filt`` (binutils), run without a shell; names it cannot
    read, or all of them without c++filt, map to themselves."""
    names = sorted(set(names))
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    try:
        out = subprocess.run(
            [tool], input="\n".join(names), capture_output=True, text=True, timeout=60, check=True
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {n: n for n in names}
    return dict(zip(names, out, strict=True)) if len(out) == len(names) else {n: n for n in names}
