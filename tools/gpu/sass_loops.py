#!/usr/bin/env python3
"""Counts the instructions of CUDA kernels' tensor-core loops from their SASS.

Disassembles an object or executable with NVIDIA's cuobjdump (and nvdisasm)
from the pinned Python environment (the nvidia-cuda-cuobjdump and
nvidia-cuda-nvdisasm wheels), so it runs on a machine without a GPU. For each
kernel whose mangled name contains one of the given substrings it finds the
backward branches, takes the loops (branch target .. branch) that hold a
tensor-core instruction (HMMA, HGMMA, QGMMA, IMMA), and reports the smallest
such loop: the K loop of a GEMM-like kernel (its body runs once a stage).
The count is static: every instruction of the loop body, both sides of any
branch inside it.

  sass_loops.py OBJECT [SUBSTRING ...]          # a line a kernel
  sass_loops.py OBJECT SUBSTRING --ops          # and each loop's opcode histogram
  sass_loops.py OBJECT --budget FILE            # exit 1 past a budget

A budget file has lines `SUBSTRING MAX` (# comments): every kernel matching
SUBSTRING must have a tensor-core loop of at most MAX instructions, and at
least one kernel must match each line. A line `total:SUBSTRING MAX` bounds the
whole kernel's instructions instead: straight-line code that runs once a CTA
(an unrolled epilogue) is fetched again by every CTA, and ncu has shown a
kernel waiting on instruction fetch for about a third of its time that way.
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import sysconfig

TENSOR_OPS = ("HMMA", "HGMMA", "QGMMA", "IMMA")
_FUNCTION = re.compile(r"Function : (\S+)")
_INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA\s+(0x[0-9a-f]+)")


def tool_dir():
    """The wheels' bin folder (nvidia/cu13/bin under site-packages)."""
    for key in ("purelib", "platlib"):
        candidate = os.path.join(sysconfig.get_paths()[key], "nvidia", "cu13", "bin")
        if os.path.isfile(os.path.join(candidate, "cuobjdump")):
            return candidate
    sys.exit("sass_loops: cuobjdump not found: install tools/python/requirements.txt")


def disassemble(path):
    bin_dir = tool_dir()
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))
    done = subprocess.run([os.path.join(bin_dir, "cuobjdump"), "-sass", path], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"sass_loops: cuobjdump -sass {path} failed: {done.stderr.strip()}")
    return done.stdout


def kernels(sass):
    """{mangled name: [(address, instruction text)]}."""
    out, current = {}, None
    for line in sass.splitlines():
        found = _FUNCTION.search(line)
        if found:
            current = found.group(1)
            out[current] = []
            continue
        found = _INSTRUCTION.match(line)
        if found and current is not None:
            out[current].append((int(found.group(1), 16), found.group(2)))
    return out


def opcode(text):
    """The opcode with its modifiers stripped: '@!P0 HMMA.16816.F32 ...' -> 'HMMA'."""
    words = text.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def tensor_loop(instructions):
    """The smallest backward-branch loop holding a tensor-core instruction, or None."""
    best = None
    for address, text in instructions:
        found = _BRANCH.search(text)
        if not found:
            continue
        target = int(found.group(1), 16)
        if target >= address:
            continue
        body = [i for i in instructions if target <= i[0] <= address]
        if any(opcode(t) in TENSOR_OPS for _, t in body):
            if best is None or len(body) < len(best):
                best = body
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("object")
    parser.add_argument("substrings", nargs="*")
    parser.add_argument("--ops", action="store_true", help="print each loop's opcode histogram")
    parser.add_argument("--budget", help="file of `SUBSTRING MAX` lines; exit 1 past one")
    args = parser.parse_args()
    found = kernels(disassemble(args.object))
    loops = {name: tensor_loop(body) for name, body in found.items()}

    if args.budget:
        failed = False
        with open(args.budget) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                key, limit = line.split()
                whole = key.startswith("total:")
                substring = key[len("total:"):] if whole else key
                matched = [n for n in loops if substring in n]
                if not matched:
                    print(f"FAIL {key}: no kernel of that name in {args.object}")
                    failed = True
                for name in matched:
                    if whole:
                        count = len(found[name])
                    else:
                        loop = loops[name]
                        count = len(loop) if loop else None
                    ok = count is not None and count <= int(limit)
                    failed |= not ok
                    print(f"{'ok  ' if ok else 'FAIL'} {key}: {count} instructions "
                          f"(budget {limit})")
        return 1 if failed else 0

    for name, loop in sorted(loops.items()):
        if args.substrings and not any(s in name for s in args.substrings):
            continue
        print(f"{len(loop) if loop else '-':>6}  {name}")
        if args.ops and loop:
            for op, n in collections.Counter(opcode(t) for _, t in loop).most_common():
                print(f"        {n:5d} {op}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
