#!/usr/bin/env bash
# sh_test entry of api_client_test (and of the module named by $1, e.g.
# tenant_fairness_test.py): finds @pyenv//:python and the binaries in the
# runfiles (tests/python_env.sh), generates Python gRPC stubs from proto/
# into $TEST_TMPDIR with the pinned grpcio-tools, then runs the unittest
# module, which starts the real coordinator (tests/weir_cluster.py).
set -euo pipefail

source "${TEST_SRCDIR:?run through bazel test}/weir/tests/python_env.sh"
weir_require_python
weir_require_binaries coordinator/main worker/main eplb/main

gen="${TEST_TMPDIR:?}/pygen"
rm -rf "${gen}"
mkdir -p "${gen}"
# Imports in the protos are rooted at the workspace ("proto/common.proto"), so
# the modules land in ${gen}/proto/ and import each other as `proto.x_pb2`.
# `python -m grpc_tools.protoc` adds its bundled well-known types (duration,
# timestamp) to the include path.
(cd "${runfiles}" && "${python}" -m grpc_tools.protoc -I. \
  --python_out="${gen}" --grpc_python_out="${gen}" proto/*.proto)

export WEIR_PYGEN_DIR="${gen}"
exec "${python}" "${runfiles}/tests/python_client/${1:-api_client_test.py}" -v
