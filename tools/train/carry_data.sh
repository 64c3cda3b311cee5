#!/usr/bin/env bash
# Makes the training data a GPU call carries (here, with the pinned Python
# environment): the token ids of both splits (tools/train/corpus/
# tokenize_corpus.py on the committed corpus), the train ids also xz-packed
# (6 MB instead of 19 MB against the device runner's 64 MiB carry limit), the
# Engram map of the tokenizer (tests/tokenizer/hf_engram.py) and the trained
# model's config. The folder should be ignored by git (.git/info/exclude).
#   tools/train/carry_data.sh [OUT_DIR]            (default .train_data)
# On the GPU machine: xz -dk OUT_DIR/tokens_train.u16.xz before train.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-.train_data}"
mkdir -p "${out}"
python="$(tools/python/ensure_env.sh)/bin/python"
"${python}" tools/train/corpus/tokenize_corpus.py --data_dir=tools/train/data --out_dir="${out}"
"${python}" tests/tokenizer/hf_engram.py tools/train/data/tokenizer.json "${out}/engram_map.json"
cp models/tiny/config.json "${out}/config.json"
xz -T2 -6 -f "${out}/tokens_train.u16"
ls -l "${out}"
