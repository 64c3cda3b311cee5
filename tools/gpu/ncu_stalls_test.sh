#!/usr/bin/env bash
# sh_test of tools/gpu/ncu_stalls.py: its unittest (ncu_stalls_test.py) on a
# source page written in the test, with the pinned environment's Python.
set -euo pipefail

source "${TEST_SRCDIR:?run through bazel test}/weir/tests/python_env.sh"
weir_require_python

"${python}" "${runfiles}/tools/gpu/ncu_stalls_test.py"
