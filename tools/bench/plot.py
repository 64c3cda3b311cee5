#!/usr/bin/env python3
"""Renders the benchmarks' CSV files as PNG plots with matplotlib.

    "$(tools/python/ensure_env.sh)/bin/python" tools/bench/plot.py serve.csv [more.csv ...] [--out DIR]

Each CSV is recognised by its header:
  * latency (`serve --csv`, `http_overhead --csv`: level, concurrency, ttft_ms, e2e_ms,
    itl_mean_ms, ...): CDFs of TTFT, per-request mean inter-token latency and end-to-end
    latency, one curve per level (serve: "c=4", "rate=3"; http_overhead: "grpc c=64").
    Failed requests (ok = 0) are left out.
  * eplb (`weir eplb-watch`: time_s, committed_version, balance_ratio, measured_ratio):
    the predicted and measured rank balance (max / mean) over time, a marker at each new
    expert map.
  * decode (`decode_gpu --csv`: model, path, numerics, mode, batch, step_ms, floor_ms,
    fp32_floor_ms, ...; tools/bench/decode_csv.h): decode step time against the memory
    floor by batch size, log-log: one solid line per model / path / numerics (graph or
    CudaOps steps), each model's stored-form floor dashed and its old fp32 floor dotted.
Writes <csv name>.png next to the CSV, or into --out, and prints each path; exits 1 if a
CSV is empty or not one of these. matplotlib comes from the project's pinned Python
environment (tools/python/requirements.txt), or any Python that has it.
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


def plot_decode(rows, title):
    # Graph replays (DeviceDecoder, the EP slice) and CudaOps steps; eager and NCCL
    # replays are diagnostics of the same configuration.
    rows = [r for r in rows if r["mode"] in ("graph", "ops")]
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lines, floors = {}, {}
    for r in rows:
        key = (r["model"], r["path"], r["numerics"])
        lines.setdefault(key, []).append((int(r["batch"]), float(r["step_ms"])))
        fp32 = float(r["fp32_floor_ms"]) if r["fp32_floor_ms"] else None
        floors.setdefault(r["model"], {})[int(r["batch"])] = (float(r["floor_ms"]), fp32)
    model_color = {m: colors[i % len(colors)] for i, m in enumerate(sorted(floors))}
    markers = "os^vD<>"
    for i, ((model, path, numerics), points) in enumerate(sorted(lines.items())):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=markers[i % len(markers)],
                color=model_color[model], label=f"{model} {path} {numerics}: step")
    for model, by_batch in sorted(floors.items()):
        batches = sorted(by_batch)
        ax.plot(batches, [by_batch[b][0] for b in batches], linestyle="--",
                color=model_color[model], label=f"{model}: floor (stored form)")
        fp32 = [(b, by_batch[b][1]) for b in batches if by_batch[b][1] is not None]
        if fp32:
            ax.plot([p[0] for p in fp32], [p[1] for p in fp32], linestyle=":",
                    color=model_color[model], label=f"{model}: old fp32 floor")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (sequences per decode step)")
    ax.set_ylabel("ms per decode step")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
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
        elif {"model", "path", "mode", "batch", "step_ms", "floor_ms"} <= rows[0].keys():
            fig = plot_decode(rows, title)
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
