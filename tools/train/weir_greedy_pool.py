#!/usr/bin/env python3
"""Makes a DSpark greedy pool with weir itself: corpus windows whose last
--gen_tokens ids are the served model's own greedy continuation.

train.py's --dspark_greedy_minutes makes such a pool inside a training call,
one full forward a generated token (no KV cache), so a call of a few minutes
gets about 1,500 windows, and training only on them overfits (tools/train
README "Fourth run"). weir's offline mode (`coordinator:main --input`)
decodes the same continuations with its KV cache, on any machine, and its
greedy tokens are by definition what a served greedy sequence drafts against
(the trainer's stored-form numerics agree with weir's CPU model to ~1e-6; a
near-tie may go either way). The pool is written once and read by
train.py --dspark_pool, so a training call spends no time on it.

Output: POOL (little-endian uint16 ids, N windows of seq_len + 1) and
POOL.json (windows, width, the first generated position, seed, the id file,
the maker). Windows are drawn as train.py's Tokens.batch draws them (uniform
starts over the id file, documents BOS ... EOS). --weir must be the built
binary in bazel-bin (its runfiles hold the embedded model and the worker);
it serves its default model, the embedded trained tiny.

  tools/bazel build //coordinator:main
  python tools/train/weir_greedy_pool.py --tokens=/tmp/weir_train/tokens_train.u16 \\
      --windows=4096 --out=/tmp/weir_train/dspark_pool.u16 \\
      --weir=bazel-bin/coordinator/main

On the GPU machine, from a bundle's serving binaries (tools/gpu/bundle.sh), the
device decoder gives the fast numerics' greedy tokens, what a served GPU sequence
drafts against (not yet run: speculative_gpu decodes the trained tiny at 40k
tokens/s at batch 64 there, two CPU workers made these pools at 260-330):

  python3 tools/train/weir_greedy_pool.py --tokens=$TD/tokens_train.u16 --windows=4096 \\
      --seed=15 --out=$TD/dspark_pool_e.u16 --weir=.gpu_bundle/serve/coordinator_main \\
      --weir_flags="--backend=cuda --workers=1 --eplb=false --model_dir=models/tiny \\
      --worker_binary=.gpu_bundle/serve/worker_main --startup_timeout_s=600"

POOL.json records --weir_flags.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", required=True, help="uint16 id file (tokenize_corpus.py)")
    ap.add_argument("--windows", type=int, default=4096)
    ap.add_argument("--seq_len", type=int, default=256, help="train.py's --seq_len")
    ap.add_argument("--gen_tokens", type=int, default=128,
                    help="greedy ids at the end of each window (train.py's "
                         "--dspark_greedy_tokens)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--weir", required=True, help="the coordinator binary (coordinator:main)")
    ap.add_argument("--weir_flags", default="",
                    help="extra flags for the coordinator, space-separated (e.g. --workers=2)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    ids = np.fromfile(args.tokens, dtype="<u2")
    width = args.seq_len + 1
    cut = width - args.gen_tokens
    if cut < 1 or len(ids) < width + 1:
        sys.exit(f"--gen_tokens {args.gen_tokens} leaves no prefix, or the id file is too short")
    rng = np.random.default_rng(args.seed)
    starts = rng.integers(0, len(ids) - width, size=args.windows)
    with tempfile.TemporaryDirectory() as tmp:
        requests = os.path.join(tmp, "requests.jsonl")
        results = os.path.join(tmp, "results.jsonl")
        with open(requests, "w") as f:
            for i, s in enumerate(starts):
                f.write(json.dumps({"custom_id": str(i),
                                    "tokens": ids[s:s + cut].astype(int).tolist(),
                                    "max_new_tokens": args.gen_tokens,
                                    "temperature": 0,
                                    "ignore_eos": True}) + "\n")
        cmd = [args.weir, f"--input={requests}", f"--output={results}"]
        cmd += [f for f in args.weir_flags.split() if f]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        pool = np.zeros((args.windows, width), dtype="<u2")
        seen = 0
        with open(results) as f:
            for line in f:
                r = json.loads(line)
                if "error" in r:
                    sys.exit(f"window {r['custom_id']}: {r['error']}")
                i = int(r["custom_id"])
                got = r["token_ids"]
                if len(got) != args.gen_tokens:
                    sys.exit(f"window {i}: {len(got)} ids, {args.gen_tokens} asked")
                pool[i, :cut] = ids[starts[i]:starts[i] + cut]
                pool[i, cut:] = got
                seen += 1
        if seen != args.windows:
            sys.exit(f"{seen} results for {args.windows} windows")
    pool.tofile(args.out)
    with open(args.out + ".json", "w") as f:
        json.dump({"windows": args.windows, "width": width, "first_generated": cut,
                   "seed": args.seed, "tokens": os.path.basename(args.tokens),
                   "maker": "weir offline mode, greedy, ignore_eos",
                   "weir_flags": args.weir_flags}, f, indent=1)
    print(f"{args.windows} windows of {width} ids (generated from {cut}) -> {args.out}")


if __name__ == "__main__":
    main()
