#!/usr/bin/env bash
# Fails when tokenizer/unicode_tables.inc is not what
# tokenizer/gen_unicode_tables.py writes with the pinned
# unicodedata2 (@pyenv//:python).
set -euo pipefail
source "${TEST_SRCDIR:-${RUNFILES_DIR:-$0.runfiles}}/${TEST_WORKSPACE:-weir}/tests/python_env.sh"
weir_require_python
"$python" "$runfiles/tokenizer/gen_unicode_tables.py" --check \
  "$runfiles/tokenizer/unicode_tables.inc"
