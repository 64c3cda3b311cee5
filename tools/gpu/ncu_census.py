#!/usr/bin/env python3
"""A census of a run's kernels from Nsight Compute's raw page.

Reads what `ncu -i REPORT --page raw --csv --metrics METRICS` prints for a
report of many launches taken with a light metric list (route_check.sh's
census: two layers of the EP8 prefill chunk's kernels, or any window of
launches), groups the launches by kernel (the full demangled name; long
template names are cut and told apart by a short hash), and prints one line a
kernel, longest total time first:

  launches, total and mean duration (us), DRAM bytes a launch (MB) and the
  rate they came at (GB/s), DRAM and SM throughput (% of peak, averaged over
  the launches weighted by duration), achieved occupancy (% of the warps an
  SM can hold).

So a kernel far below the copy rate that is not compute-bound shows up at
once (low DRAM and low SM percentages over a long time). Columns the report
lacks print as '-'. Runs without a GPU (the page is copied back).

  ncu_census.py RAW_CSV [--top N]
"""

import argparse
import collections
import csv
import hashlib
import sys

DURATION = "gpu__time_duration.sum"
DRAM_BYTES = "dram__bytes.sum"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
METRICS = (DURATION, DRAM_BYTES, DRAM_PCT, SM_PCT, OCCUPANCY)

_TIME_UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3,
               "ms": 1e3, "second": 1e6, "s": 1e6}
_BYTE_UNITS = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6,
               "GB": 1e9}


def _number(cell):
    cell = (cell or "").replace(",", "").strip()
    try:
        return float(cell)
    except ValueError:
        return None


def short_name(name, width=64):
    """The kernel's name without `void ` and its parameter list, cut to
    `width` characters with a hash of the whole name when cut."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    depth = 0
    for i, ch in enumerate(name):  # drop the trailing "(params)" at template depth 0
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            name = name[:i]
            break
    if len(name) <= width:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:6]
    return name[:width - 7] + "~" + digest


def read_launches(lines):
    """[(kernel name, {metric: value in us / bytes / %})] from the raw page."""
    rows = list(csv.reader(lines))
    header = None
    name_column = None
    units = None
    launches = []
    for row in rows:
        if not row:
            continue
        if header is None:  # lines before the table (ncu's ==PROF== notes) are skipped
            for column in ("Kernel Name", "Function Name"):
                if column in row:
                    header = {c: i for i, c in enumerate(row)}
                    name_column = header[column]
                    break
            continue
        if name_column >= len(row):
            continue
        if units is None and row[name_column] == "":  # the units row
            units = row
            continue
        name = row[name_column]
        values = {}
        for metric in METRICS:
            i = header.get(metric)
            if i is None or i >= len(row):
                continue
            value = _number(row[i])
            if value is None:
                continue
            unit = units[i].strip() if units is not None and i < len(units) else ""
            if metric == DURATION:
                value *= _TIME_UNITS.get(unit, 1e-3)  # ncu's default: nanoseconds
            elif metric == DRAM_BYTES:
                value *= _BYTE_UNITS.get(unit, 1.0)
            values[metric] = value
        launches.append((name, values))
    return launches


def census(launches):
    """[(short name, launches, total us, {metric: weighted mean or total})],
    longest total first."""
    groups = collections.OrderedDict()
    for name, values in launches:
        groups.setdefault(name, []).append(values)
    out = []
    for name, items in groups.items():
        total = sum(v.get(DURATION, 0.0) for v in items)
        summary = {}
        for metric in (DRAM_PCT, SM_PCT, OCCUPANCY):
            timed = [(v[metric], v.get(DURATION, 0.0)) for v in items if metric in v]
            weight = sum(t for _, t in timed)
            if timed:
                summary[metric] = (sum(m * t for m, t in timed) / weight if weight > 0 else
                                   sum(m for m, _ in timed) / len(timed))
        bytes_ = [v[DRAM_BYTES] for v in items if DRAM_BYTES in v]
        if bytes_:
            summary[DRAM_BYTES] = sum(bytes_)
        out.append((short_name(name), len(items), total, summary))
    out.sort(key=lambda g: -g[2])
    return out


def format_census(groups, top=30):
    def cell(value, fmt):
        return "-" if value is None else format(value, fmt)

    lines = [f"{'us':>9} {'n':>4} {'mean':>8} {'MB/l':>8} {'GB/s':>7} {'dram%':>6} {'sm%':>5} "
             f"{'occ%':>5}  kernel"]
    all_us = sum(g[2] for g in groups)
    for name, count, total, s in groups[:top]:
        mb = s[DRAM_BYTES] / count / 1e6 if DRAM_BYTES in s else None
        rate = s[DRAM_BYTES] / (total * 1e-6) / 1e9 if DRAM_BYTES in s and total > 0 else None
        lines.append(f"{total:9.1f} {count:4d} {total / count:8.1f} {cell(mb, '8.2f')} "
                     f"{cell(rate, '7.0f')} {cell(s.get(DRAM_PCT), '6.1f')} "
                     f"{cell(s.get(SM_PCT), '5.1f')} {cell(s.get(OCCUPANCY), '5.1f')}  {name}")
    lines.append(f"{all_us:9.1f} {sum(g[1] for g in groups):4d} launches in all "
                 f"({len(groups)} kernels)")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("raw_csv")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    with open(args.raw_csv, newline="") as f:
        launches = read_launches(f)
    if not launches:
        print(f"ncu_census.py: no launches in {args.raw_csv}", file=sys.stderr)
        return 1
    print(format_census(census(launches), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
