#!/usr/bin/env bash
# sh_test of tools/gpu/ncu_census.py: its unittest (ncu_census_test.py) on a
# raw page written in the test, with the pinned environment's Python.
set -euo pipefail

source "${TEST_SRCDIR:?run through bazel test}/weir/tests/python_env.sh"
weir_require_python

"${python}" "${runfiles}/tools/gpu/ncu_census_test.py"
