#!/usr/bin/env bash
# sh_test entry of openai_client_test: finds @pyenv//:python and the binaries
# in the runfiles and runs the unittest module, which starts the real
# coordinator.
set -euo pipefail

root="${TEST_SRCDIR:?run through bazel test}/weir"

# @pyenv//:python: the external repository sits at the runfiles top level, or
# under weir/external with legacy external runfiles.
python=""
for candidate in "${TEST_SRCDIR}/pyenv/python" "${root}/external/pyenv/python"; do
  if [[ -x "${candidate}" ]]; then
    python="${candidate}"
    break
  fi
done
if [[ -z "${python}" ]]; then
  echo "run_test.sh: @pyenv//:python not found in the runfiles" >&2
  exit 1
fi

for binary in coordinator/main worker/main eplb/main; do
  if [[ ! -x "${root}/${binary}" ]]; then
    echo "run_test.sh: ${binary} not found in the runfiles" >&2
    exit 1
  fi
done

export PYTHONDONTWRITEBYTECODE=1
export WEIR_RUNFILES_ROOT="${root}"
exec "${python}" "${root}/tests/openai_client/openai_client_test.py" -v
