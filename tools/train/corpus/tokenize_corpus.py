#!/usr/bin/env python3
"""Tokenizes the training corpus into id files for the GPU trainer, and
measures the unigram baseline on the held-out split.

Reads corpus_train.txt.xz and corpus_heldout.txt.xz (documents, each followed
by a line holding a form feed, as build_corpus.py writes them) and writes
tokens_train.u16 / tokens_heldout.u16: little-endian uint16 ids, every
document as BOS (id 0), its tokens, EOS (id 1). The tokenizer is applied with
the Hugging Face `tokenizers` package (the project's pinned Python
environment has it) without its post-processor; the BOS/EOS ids are added
here.

With --baseline, also writes the held-out cross-entropy of a unigram model
fitted on the train ids with add-one smoothing over the whole vocabulary.
Predicted positions are every id after a document's BOS (the document's
tokens and its EOS); BOS itself is given, never predicted.

  python tools/train/corpus/tokenize_corpus.py \\
      --data_dir=tools/train/data --out_dir=/tmp/weir_train \\
      --baseline=tools/train/data/baseline.json
"""

import argparse
import array
import json
import lzma
import math
import os
import sys

BOS_ID = 0
EOS_ID = 1
DOC_SEPARATOR = "\f\n"


def read_documents(path):
    if path.endswith(".xz"):
        with lzma.open(path, "rb") as f:
            text = f.read().decode("utf-8")
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    docs = text.split(DOC_SEPARATOR)
    if docs and docs[-1] == "":
        docs.pop()
    return docs


def tokenize(tokenizer, docs, batch=256):
    ids = array.array("H")
    for start in range(0, len(docs), batch):
        for enc in tokenizer.encode_batch(docs[start:start + batch], add_special_tokens=False):
            ids.append(BOS_ID)
            ids.extend(enc.ids)
            ids.append(EOS_ID)
    return ids


def write_u16(path, ids):
    out = array.array("H", ids)
    if sys.byteorder != "little":
        out.byteswap()
    with open(path, "wb") as f:
        out.tofile(f)


def unigram_baseline(train_ids, heldout_ids, vocab_size, heldout_bytes):
    counts = [0] * vocab_size
    for t in train_ids:
        counts[t] += 1
    # BOS is never a target: leave it out of the fitted distribution.
    counts[BOS_ID] = 0
    total = sum(counts) + vocab_size - 1
    logp = [math.log((c + 1) / total) for c in counts]
    logp[BOS_ID] = float("-inf")
    nll, n = 0.0, 0
    for t in heldout_ids:
        if t == BOS_ID:
            continue
        nll -= logp[t]
        n += 1
    ce = nll / n
    return {
        "model": "unigram, add-one smoothing over the vocabulary, fitted on the train ids",
        "targets": "every held-out id after a document's BOS (document tokens and EOS)",
        "vocab_size": vocab_size,
        "train_tokens": len(train_ids),
        "heldout_tokens": len(heldout_ids),
        "heldout_targets": n,
        "heldout_bytes": heldout_bytes,
        "cross_entropy_nats_per_token": round(ce, 6),
        "perplexity": round(math.exp(ce), 4),
        "bits_per_byte": round(nll / math.log(2) / heldout_bytes, 6),
        "uniform_perplexity": vocab_size,
        "uniform_cross_entropy_nats_per_token": round(math.log(vocab_size), 6),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data_dir", required=True,
                    help="directory with corpus_*.txt[.xz] and tokenizer.json")
    ap.add_argument("--tokenizer", default="", help="tokenizer.json (default: in --data_dir)")
    ap.add_argument("--out_dir", required=True, help="where the .u16 files go")
    ap.add_argument("--baseline", default="", help="write the unigram baseline JSON here")
    args = ap.parse_args()

    from tokenizers import Tokenizer  # the pinned Python environment's package

    tok_path = args.tokenizer or os.path.join(args.data_dir, "tokenizer.json")
    tokenizer = Tokenizer.from_file(tok_path)
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    assert vocab_size <= 65536, "ids must fit uint16"
    os.makedirs(args.out_dir, exist_ok=True)

    result = {}
    for split in ("train", "heldout"):
        path = os.path.join(args.data_dir, "corpus_%s.txt.xz" % split)
        if not os.path.exists(path):
            path = path[:-3]
        docs = read_documents(path)
        ids = tokenize(tokenizer, docs)
        write_u16(os.path.join(args.out_dir, "tokens_%s.u16" % split), ids)
        nbytes = sum(len(d.encode("utf-8")) for d in docs)
        result[split] = (ids, nbytes)
        print("%s: %d documents, %d bytes, %d tokens (%.3f bytes/token)" % (
            split, len(docs), nbytes, len(ids), nbytes / len(ids)), file=sys.stderr)

    if args.baseline:
        base = unigram_baseline(result["train"][0], result["heldout"][0], vocab_size,
                                result["heldout"][1])
        base["train_bytes"] = result["train"][1]
        with open(args.baseline, "w", encoding="utf-8") as f:
            json.dump(base, f, indent=2, sort_keys=True)
            f.write("\n")
        print(json.dumps(base, indent=2, sort_keys=True), file=sys.stderr)


if __name__ == "__main__":
    main()
