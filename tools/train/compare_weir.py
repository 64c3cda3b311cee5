"""Greedy decoding of one checkpoint by weir's CPU model and by v41.py, token by token.

    python tools/train/compare_weir.py --ckpt DIR --trace bazel-bin/tools/greedy_trace \
        --heldout tokens_heldout.u16 [--token_map engram_map.json] [--prompts 8 --steps 48]

Prompts are the first --prompt_len ids of evenly spaced held-out documents (BOS first).
For each prompt both run --steps greedy tokens at fp32 activations (weir: //tools:greedy_trace
--precision=fp32; v41.py: "reference" numerics); the report gives the first step where the
chosen ids differ and the margins of both sides there, so a near tie can be told from a
real disagreement. v41.py runs each step as a full forward (no cache): slow but exact.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import export as E  # noqa: E402


def prompts_from(heldout, n, length):
    ids = np.fromfile(heldout, dtype="<u2").astype(np.int64)
    starts = np.flatnonzero(ids == 0)  # BOS of each document
    picks = starts[np.linspace(0, len(starts) - 1, n).astype(np.int64)]
    return [ids[s:s + length].tolist() for s in picks]


def weir_trace(binary, ckpt, prompt, steps):
    out = subprocess.run([binary, f"--dir={ckpt}", "--ids=" + ",".join(map(str, prompt)),
                          f"--steps={steps}", "--precision=fp32"],
                         check=True, capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return [(int(r[1]), float(r[2]), int(r[3]), float(r[4])) for r in rows]


@torch.no_grad()
def torch_trace(model, prompt, steps):
    ids, rows = list(prompt), []
    for _ in range(steps):
        logits = model(torch.tensor([ids])).logits[0, -1]
        v, i = logits.topk(2)
        rows.append((int(i[0]), float(v[0]), int(i[1]), float(v[1])))
        ids.append(int(i[0]))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--trace", required=True, help="the greedy_trace binary")
    ap.add_argument("--heldout", required=True)
    ap.add_argument("--token_map", default="")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--prompt_len", type=int, default=12)
    ap.add_argument("--steps", type=int, default=48)
    args = ap.parse_args()
    torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    token_map = json.load(open(args.token_map))["map"] if args.token_map else None
    model, _ = E.import_checkpoint(args.ckpt, token_map=token_map)
    model.set_numerics("reference")
    model.eval()
    same = 0
    report = []
    for prompt in prompts_from(args.heldout, args.prompts, args.prompt_len):
        w = weir_trace(args.trace, args.ckpt, prompt, args.steps)
        t = torch_trace(model, prompt, args.steps)
        diverge = next((k for k in range(args.steps) if w[k][0] != t[k][0]), None)
        same += diverge is None
        entry = {"prompt": prompt, "agree_steps": args.steps if diverge is None else diverge}
        if diverge is not None:
            entry["weir"] = w[diverge]
            entry["v41"] = t[diverge]
        else:
            entry["max_logit_diff"] = max(abs(a[1] - b[1]) for a, b in zip(w, t))
        report.append(entry)
        print(json.dumps(entry), flush=True)
    print(f"{same} of {len(report)} prompts agree for all {args.steps} greedy steps")


if __name__ == "__main__":
    main()
