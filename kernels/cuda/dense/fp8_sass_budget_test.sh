#!/usr/bin/env bash
# sh_test: the FP8 decode tiles' K loops stay within their instruction
# budgets (fp8_sass_budget.txt), counted from the SASS of the sm_90a object
# Bazel built, with the pinned environment's cuobjdump (tools/gpu/sass_loops.py).
# Runs without a GPU. A change that lengthens a loop past its budget fails
# here; one that shortens it should lower the budget.
set -euo pipefail

source "${TEST_SRCDIR:?run through bazel test}/weir/tests/python_env.sh"
weir_require_python

object="${runfiles}/kernels/cuda/dense/fp8_block_gemm_sm90.cu.o"
[[ -s "${object}" ]] || { echo "fp8_sass_budget_test: ${object} missing" >&2; exit 1; }
"${python}" "${runfiles}/tools/gpu/sass_loops.py" "${object}" \
  --budget "${runfiles}/kernels/cuda/dense/fp8_sass_budget.txt"
