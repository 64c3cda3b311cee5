#!/usr/bin/env python3
"""Renders the benchmarks' CSV files as PNG plots with matplotlib.

    python3 tools/bench/plot.py serve.csv [more.csv ...] [--out DIR]

Each CSV is recognised by its header:
  * latency (`serve --csv`, `http_overhead --csv`: level, concurrency, ttft_ms, e2e_ms,
    itl_mean_ms, ...): CDFs of TTFT, per-request mean inter-token latency and end-to-end
    latency, one curve per level (serve: "c=4", "rate=3"; http_overhead: "grpc c=64").
    Failed requests (ok = 0) are left out.
  * eplb (`weir eplb-watch`: time_s, committed_version, balance_ratio, measured_ratio):
    the predicted and measured rank balance (max / mean) over time, a marker at each new
    expert map.
Writes <csv name>.png next to the CSV, or into --out. matplotlib comes from Debian
(`apt-get install python3-matplotlib`) or any Python that has it; nothing else is needed.
"""

import argparse
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def label(row):
    level = row["level"]
    if level.startswith("c=") or level.startswith("rate="):
        return level
    return f"{level} c={row['concurrency']}"


def cdf(ax, values, name):
    values = sorted(values)
    n = len(values)
    ys = [(i + 1) / n for i in range(n)]
    ax.step(values, ys, where="post", label=f"{name} (n={n})")


def plot_latency(rows, title):
    groups = {}
    for row in rows:
        if row["ok"] != "1":
            continue
        groups.setdefault(label(row), []).append(row)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, column, name in zip(axes, ("ttft_ms", "itl_mean_ms", "e2e_ms"),
                                ("time to first token", "inter-token latency (request mean)",
                                 "end-to-end latency")):
        for key, members in groups.items():
            cdf(ax, [float(r[column]) for r in members], key)
        ax.set_xlabel(f"{name}, ms")
        ax.set_ylabel("fraction of requests")
        ax.set_xscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.set_ylim(0, 1.02)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_eplb(rows, title):
    # Before the first load report there is nothing to show.
    rows = [r for r in rows if int(r.get("reports_total", "1")) > 0]
    t = [float(r["time_s"]) for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(t, [float(r["balance_ratio"]) for r in rows], label="predicted (window)")
    measured = [(x, float(r["measured_ratio"])) for x, r in zip(t, rows)
                if float(r["measured_ratio"]) > 0]
    if measured:
        ax.plot([m[0] for m in measured], [m[1] for m in measured], label="measured")
    previous = None
    for x, r in zip(t, rows):
        if previous is not None and r["committed_version"] != previous:
            ax.axvline(x, color="gray", linestyle=":", linewidth=1)
            ax.text(x, ax.get_ylim()[1], f"map {r['committed_version']} ", fontsize=7,
                    va="top", ha="right", rotation=90, color="gray")
        previous = r["committed_version"]
    ax.set_xlabel("time, s")
    ax.set_ylabel("rank load max / mean")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title)
    fig.tight_layout()
    return fig


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv", nargs="+")
    parser.add_argument("--out", help="directory for the PNGs (default: next to each CSV)")
    args = parser.parse_args(argv)
    status = 0
    for path in args.csv:
        rows = read(path)
        if not rows:
            print(f"{path}: no rows", file=sys.stderr)
            status = 1
            continue
        title = os.path.basename(path)
        if {"ttft_ms", "e2e_ms", "itl_mean_ms", "level"} <= rows[0].keys():
            fig = plot_latency(rows, title)
        elif {"time_s", "balance_ratio", "committed_version"} <= rows[0].keys():
            fig = plot_eplb(rows, title)
        else:
            print(f"{path}: unknown columns {sorted(rows[0])}", file=sys.stderr)
            status = 1
            continue
        out_dir = args.out or os.path.dirname(os.path.abspath(path))
        os.makedirs(out_dir, exist_ok=True)
        png = os.path.join(out_dir, os.path.splitext(os.path.basename(path))[0] + ".png")
        fig.savefig(png, dpi=100)
        plt.close(fig)
        print(png)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
