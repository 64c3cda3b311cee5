#!/usr/bin/env bash
# sh_test entry of api_client_test: generates Python gRPC stubs from proto/ into
# $TEST_TMPDIR with the pinned grpcio-tools, then runs the unittest module,
# which starts the real coordinator from the runfiles.
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

gen="${TEST_TMPDIR:?}/pygen"
rm -rf "${gen}"
mkdir -p "${gen}"
# Imports in the protos are rooted at the workspace ("proto/common.proto"), so
# the modules land in ${gen}/proto/ and import each other as `proto.x_pb2`.
# `python -m grpc_tools.protoc` adds its bundled well-known types (duration,
# timestamp) to the include path.
(cd "${root}" && "${python}" -m grpc_tools.protoc -I. \
  --python_out="${gen}" --grpc_python_out="${gen}" proto/*.proto)

export PYTHONDONTWRITEBYTECODE=1
export WEIR_PYGEN_DIR="${gen}"
export WEIR_RUNFILES_ROOT="${root}"
exec "${python}" "${root}/tests/python_client/api_client_test.py" -v
