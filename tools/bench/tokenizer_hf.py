"""Hugging Face side of //tools/bench:tokenizer: encodes the input files with
the `tokenizers` Python binding (add_special_tokens=False), single-threaded,
in two ways: one `encode` call per input ("per-call") and one `encode_batch`
over all inputs ("batch"); best of `runs` for each. Prints one line:

    hf bytes=B per_call_s=S per_call_tokens=T batch_s=S batch_tokens=T threads=N
       cpu_per_wall=R version=V python=P

(on one line). `threads` is the number of threads of this process after the
runs and `cpu_per_wall` the process CPU time over wall time of the batch runs:
1 and about 1.0 when the library stayed on one thread.

    python tokenizer_hf.py <tokenizer.json> <runs> <file listing the inputs, NUL-separated>

Inputs are decoded as UTF-8 with U+FFFD per maximal subpart, as in the
parity tests; `bytes` counts the raw file bytes.
"""

import os
import sys
import time

# Before the library loads: rayon reads its pool size once, and with
# TOKENIZERS_PARALLELISM=false encode_batch runs in the calling thread.
os.environ['RAYON_NUM_THREADS'] = '1'
os.environ['TOKENIZERS_PARALLELISM'] = 'false'

import tokenizers  # noqa: E402  (after the environment above)


def best_of(runs, fn):
    """Returns (best wall seconds, result of the last call, cpu / wall of all calls)."""
    best, result, cpu, wall = float('inf'), None, 0.0, 0.0
    for _ in range(runs):
        c0, t0 = time.process_time(), time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - t0
        cpu += time.process_time() - c0
        wall += elapsed
        best = min(best, elapsed)
    return best, result, cpu / wall if wall > 0 else 0.0


def main():
    if len(sys.argv) != 4:
        print('usage: tokenizer_hf.py <tokenizer.json> <runs> <input list>', file=sys.stderr)
        return 2
    tok = tokenizers.Tokenizer.from_file(sys.argv[1])
    runs = int(sys.argv[2])
    with open(sys.argv[3], 'rb') as f:
        paths = [p for p in f.read().split(b'\0') if p]
    texts, size = [], 0
    for path in paths:
        with open(path, 'rb') as f:
            data = f.read()
        size += len(data)
        texts.append(data.decode('utf-8', 'replace'))

    def per_call():
        return sum(len(tok.encode(t, add_special_tokens=False)) for t in texts)

    def batch():
        return sum(len(e) for e in tok.encode_batch(texts, add_special_tokens=False))

    per_call_s, per_call_tokens, _ = best_of(runs, per_call)
    batch_s, batch_tokens, cpu_per_wall = best_of(runs, batch)
    threads = len(os.listdir('/proc/self/task'))
    print('hf bytes=%d per_call_s=%.6f per_call_tokens=%d batch_s=%.6f batch_tokens=%d '
          'threads=%d cpu_per_wall=%.3f version=%s python=%s' %
          (size, per_call_s, per_call_tokens, batch_s, batch_tokens, threads, cpu_per_wall,
           tokenizers.__version__, sys.version.split()[0]))
    return 0


if __name__ == '__main__':
    sys.exit(main())
