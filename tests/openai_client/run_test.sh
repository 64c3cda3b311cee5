#!/usr/bin/env bash
# sh_test entry of openai_client_test: finds @pyenv//:python and the binaries
# in the runfiles (tests/python_env.sh) and runs the unittest module, which
# starts the real coordinator (tests/weir_cluster.py).
set -euo pipefail

source "${TEST_SRCDIR:?run through bazel test}/weir/tests/python_env.sh"
weir_require_python
weir_require_binaries coordinator/main worker/main eplb/main

exec "${python}" "${runfiles}/tests/openai_client/${1:-openai_client_test.py}" -v
