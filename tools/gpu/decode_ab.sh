#!/usr/bin/env bash
# decode_ab.sh OLD NEW [ROUNDS] -- DECODE_GPU_FLAGS...
#
# On the GPU machine, from the repository root, after unpacking a bundle: runs
# two decode_gpu binaries (the one before a change and the one after) on the
# same flags, alternating OLD, NEW, OLD, NEW, ... ROUNDS times each (default 2),
# so that the machine's drift (clocks, temperature, neighbours) falls on both;
# prints every timed row of each run under its label and exits non-zero if a
# run failed. A row is decode_gpu's table line (batch, context, step_ms, ...);
# the prefill line is printed too. DECODE_AB_TIMEOUT_S (default 120) bounds one
# run.
#
# Example (EP8 slice of V4.1, context 4,096):
#   tools/gpu/decode_ab.sh .gpu_bundle/old/decode_gpu .gpu_bundle/tools/decode_gpu 2 -- \
#     --ep_slice=8 --numerics=fast --batches=1,8 --context=4096 --prefill_chunk=4096 \
#     --steps=6 --warmup=1 --slice_profile=false
set -u
if [[ $# -lt 3 ]]; then
  echo "usage: $0 OLD NEW [ROUNDS] -- DECODE_GPU_FLAGS..." >&2
  exit 2
fi
old="$1" new="$2"
shift 2
rounds=2
if [[ "$1" != "--" ]]; then
  rounds="$1"
  shift
fi
if [[ "${1:-}" != "--" ]]; then
  echo "$0: the decode_gpu flags follow a '--'" >&2
  exit 2
fi
shift
if ! [[ "${rounds}" =~ ^[1-9][0-9]*$ ]]; then
  echo "$0: ROUNDS must be a positive integer, got '${rounds}'" >&2
  exit 2
fi
for binary in "${old}" "${new}"; do
  if [[ ! -x "${binary}" ]]; then
    echo "$0: ${binary} is not an executable" >&2
    exit 2
  fi
done
if [[ -d .gpu_bundle/lib ]]; then
  export LD_LIBRARY_PATH=".gpu_bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
fi
export NCCL_NVLS_ENABLE=0
limit="${DECODE_AB_TIMEOUT_S:-120}"
status=0
run() {  # run LABEL BINARY FLAGS...
  local label="$1" binary="$2" out code
  shift 2
  out=$(timeout "${limit}" "${binary}" "$@" 2>&1)
  code=$?
  echo "== ${label} (exit ${code})"
  # The table rows start with the batch size and a number; the prefill line
  # with "prefill:".
  grep -E '^ +[0-9]+ +[0-9]|^prefill:' <<< "${out}"
  if [[ "${code}" -ne 0 ]]; then
    tail -n 5 <<< "${out}"
    status=1
  fi
}
for ((i = 1; i <= rounds; ++i)); do
  run "old ${i}" "${old}" "$@"
  run "new ${i}" "${new}" "$@"
done
exit "${status}"
