#!/usr/bin/env bash
# sh_test body: the K loops of a kernel object stay within their instruction
# budgets, counted from the SASS of the sm_90a object Bazel built with the
# pinned environment's cuobjdump (tools/gpu/sass_loops.py). Runs without a GPU.
# A change that lengthens a loop past its budget fails here; one that shortens
# it should lower the budget.
#
#   sass_budget_test.sh OBJECT BUDGET   (runfiles paths under the workspace)
set -euo pipefail

source "${TEST_SRCDIR:?run through bazel test}/weir/tests/python_env.sh"
weir_require_python

object="${runfiles}/${1:?object}"
budget="${runfiles}/${2:?budget file}"
[[ -s "${object}" ]] || { echo "sass_budget_test: ${object} missing" >&2; exit 1; }
"${python}" "${runfiles}/tools/gpu/sass_loops.py" "${object}" --budget "${budget}"
