#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's source page.

Reads what `ncu -i REPORT --page source --csv --print-source sass` prints for
a report taken with `--set full` (one or more kernels), and for each kernel
finds the tensor-core loop (the smallest backward branch whose body holds an
HGMMA, QGMMA, HMMA or IMMA, as sass_loops.py does on the SASS alone) and
reports:

  * the kernel's samples by stall reason (ncu's `stall_*` columns; samples no
    column names are `unattributed`: on Hopper the wgmma issue stalls land
    there);
  * the share of all warp samples the loop holds;
  * the loop's samples by stall reason and by opcode;
  * the code outside the loop by REGION bytes (4 KB by default) of offsets,
    each region holding at least 1 % of the samples, with its leading reasons:
    straight-line code run once a CTA (an unrolled epilogue) shows up here as
    a run of regions waiting on `no_inst` (instruction fetch);
  * the instructions with the most samples, anywhere in the kernel, at their
    offset from the kernel's first instruction (the offsets cuobjdump prints).

Runs without a GPU (the report is copied back from the GPU machine).

  ncu_stalls.py SOURCE_CSV [--top N] [--region BYTES]
"""

import argparse
import collections
import csv
import re
import sys

TENSOR_OPS = ("HGMMA", "QGMMA", "HMMA", "IMMA")
ALL_SAMPLES = "Warp Stall Sampling (All Samples)"
_BRANCH = re.compile(r"\bBRA(?:\.[A-Z.]+)?\s+(0x[0-9a-fA-F]+)")


class Instruction:
    def __init__(self, address, text, samples, stalls):
        self.address = address
        self.text = text
        self.samples = samples
        self.stalls = stalls  # reason -> samples

    @property
    def opcode(self):
        words = self.text.split()
        if not words:
            return ""
        word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        return word.split(".")[0]


def _number(cell):
    cell = (cell or "").replace(",", "").strip()
    try:
        return float(cell)
    except ValueError:
        return 0.0


def read_kernels(lines):
    """[(kernel name, [Instruction])] from the source page's CSV lines."""
    kernels = []
    name = None
    header = None
    for row in csv.reader(lines):
        if not row:
            continue
        if row[0] == "Kernel Name":
            name = row[1] if len(row) > 1 else ""
            header = None
            kernels.append((name, []))
            continue
        if header is None:
            if "Address" in row and "Source" in row:
                header = {column: i for i, column in enumerate(row)}
                if name is None:
                    kernels.append(("", []))
            continue
        address = row[header["Address"]].strip()
        if not address:
            continue
        stalls = {
            column[len("stall_"):]: _number(row[i])
            for column, i in header.items()
            if column.startswith("stall_") and "Not Issued" not in column and i < len(row)
        }
        kernels[-1][1].append(
            Instruction(
                int(address, 16),
                row[header["Source"]].strip(),
                _number(row[header[ALL_SAMPLES]]) if ALL_SAMPLES in header else 0.0,
                stalls,
            )
        )
    return kernels


def tensor_loop(instructions):
    """(first, last) indices of the smallest loop holding a tensor op, or None."""
    index_of = {ins.address: i for i, ins in enumerate(instructions)}
    tensor = [i for i, ins in enumerate(instructions) if ins.opcode in TENSOR_OPS]
    best = None
    for i, ins in enumerate(instructions):
        match = _BRANCH.search(ins.text)
        if not match:
            continue
        target = index_of.get(int(match.group(1), 16))
        if target is None or target > i:
            continue
        if any(target <= t <= i for t in tensor):
            if best is None or i - target < best[1] - best[0]:
                best = (target, i)
    return best


def _reasons(instructions):
    """Samples by stall reason over `instructions` (unnamed ones `unattributed`)."""
    reasons = collections.Counter()
    for ins in instructions:
        named = 0.0
        for reason, value in ins.stalls.items():
            reasons[reason] += value
            named += value
        reasons["unattributed"] += max(ins.samples - named, 0.0)
    return reasons


def analyze(instructions, top=20, region=4096):
    """The report of one kernel as a dict (what main prints)."""
    total = sum(ins.samples for ins in instructions)
    base = instructions[0].address if instructions else 0
    result = {"total": total, "reasons": _reasons(instructions), "loop": None, "regions": [],
              "top": []}
    loop = tensor_loop(instructions)
    inside = set()
    if loop is not None:
        inside = set(range(loop[0], loop[1] + 1))
        body = instructions[loop[0]:loop[1] + 1]
        samples = sum(ins.samples for ins in body)
        reasons = _reasons(body)
        opcodes = collections.Counter()
        for ins in body:
            opcodes[ins.opcode] += ins.samples
        result["loop"] = {
            "first": body[0].address - base,
            "last": body[-1].address - base,
            "instructions": len(body),
            "samples": samples,
            "reasons": reasons,
            "opcodes": opcodes,
        }
    # The code outside the loop by regions of offsets.
    regions = collections.defaultdict(list)
    for i, ins in enumerate(instructions):
        if i not in inside:
            regions[(ins.address - base) // region].append(ins)
    for index in sorted(regions):
        members = regions[index]
        samples = sum(ins.samples for ins in members)
        if total and samples >= 0.01 * total:
            result["regions"].append((index * region, (index + 1) * region, samples,
                                      _reasons(members)))
    ranked = sorted(instructions, key=lambda ins: -ins.samples)[:top]
    for ins in ranked:
        reasons = sorted(ins.stalls.items(), key=lambda item: -item[1])[:2]
        # Branch targets as offsets too.
        text = _BRANCH.sub(
            lambda m: m.group(0).replace(m.group(1), f"{int(m.group(1), 16) - base:#06x}"), ins.text)
        result["top"].append((ins.address - base, ins.samples, reasons, text))
    return result


def _share(part, whole):
    return f"{100.0 * part / whole:5.1f} %" if whole else "    - "


def print_report(name, result, out):
    out.write(f"{name}\n  warp samples {result['total']:.0f}\n")
    out.write("  the kernel's samples by stall reason:\n")
    for reason, value in result["reasons"].most_common(8):
        if value > 0:
            out.write(f"    {reason:22s} {value:9.0f} {_share(value, result['total'])}\n")
    loop = result["loop"]
    if loop is None:
        out.write("  no tensor-core loop\n")
    else:
        out.write(
            f"  tensor-core loop {loop['first']:#06x}..{loop['last']:#06x} "
            f"({loop['instructions']} instructions): {loop['samples']:.0f} samples, "
            f"{_share(loop['samples'], result['total'])} of the kernel's\n"
        )
        out.write("  the loop's samples by stall reason:\n")
        for reason, value in loop["reasons"].most_common():
            if value > 0:
                out.write(f"    {reason:22s} {value:9.0f} {_share(value, loop['samples'])}\n")
        out.write("  the loop's samples by opcode:\n")
        for opcode, value in loop["opcodes"].most_common(12):
            if value > 0:
                out.write(f"    {opcode:22s} {value:9.0f} {_share(value, loop['samples'])}\n")
    if result["regions"]:
        out.write("  the code outside the loop, regions of at least 1 % of the samples:\n")
        for first, last, samples, reasons in result["regions"]:
            leading = ", ".join(f"{reason} {_share(value, samples).strip()}"
                                for reason, value in reasons.most_common(2) if value > 0)
            out.write(f"    {first:#07x}..{last:#07x} {samples:9.0f} "
                      f"{_share(samples, result['total'])}  {leading}\n")
    out.write("  the instructions with the most samples:\n")
    for offset, samples, reasons, text in result["top"]:
        named = ", ".join(f"{reason} {value:.0f}" for reason, value in reasons if value > 0)
        out.write(f"    {offset:#06x} {samples:7.0f}  {text[:60]:60s}  {named}\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source_csv")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--region", type=int, default=4096,
                        help="bytes of code a region outside the loop")
    args = parser.parse_args(argv)
    with open(args.source_csv, newline="", errors="replace") as f:
        kernels = read_kernels(f)
    if not kernels or not any(instructions for _, instructions in kernels):
        sys.stderr.write(f"ncu_stalls: no source rows in {args.source_csv}\n")
        return 1
    for name, instructions in kernels:
        if instructions:
            print_report(name, analyze(instructions, args.top, args.region), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
