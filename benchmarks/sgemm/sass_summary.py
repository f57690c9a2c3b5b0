"""Per kernel counts of the instructions that matter in `cuobjdump -sass` output: FFMA, 128-bit
shared loads (LDS.128), cp.async (LDGSTS), 128-bit global loads/stores, local memory (LDL/STL).

usage: python3 sass_summary.py sgemm_ladder.sass
"""

import collections
import re
import sys

from ptxas_summary import demangle, short

KEYS = "FFMA LDS.128 LDS STS.128 STS LDGSTS LDG.128 LDG STG.128 STG LDL STL BAR".split()
OPCODE = re.compile(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


def classify(op):
    base = op.split(".")[0]
    if base == "LDGSTS":
        return base
    if base in ("LDG", "STG", "LDS", "STS"):
        return base + (".128" if ".128" in op else "")
    if base in ("FFMA", "LDL", "STL"):
        return base
    if base == "BAR" and ".SYNC" in op:
        return "BAR"
    return None


def main(path):
    text = open(path, encoding="utf-8", errors="replace").read()
    funcs = re.split(r"\n\s*Function : ", text)[1:]
    names = demangle([f.split("\n", 1)[0].strip() for f in funcs])
    print(f"{'kernel <config, TransA, TransB, Vec>':56s} " + " ".join(f"{k:>7s}" for k in KEYS))
    for name, body in zip(names, funcs, strict=True):
        counts = collections.Counter()
        for line in body.split("\n"):
            m = OPCODE.search(line)
            # @!PT: never-executed filler that ptxas puts before LDGSTS
            if m and "@!PT" not in line and classify(m.group(1)):
                counts[classify(m.group(1))] += 1
        print(f"{short(name)[:56]:56s} " + " ".join(f"{counts[k]:>7d}" for k in KEYS))


if __name__ == "__main__":
    main(sys.argv[1])
