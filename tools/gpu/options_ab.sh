#!/usr/bin/env bash
# options_ab.sh BINARY [ROUNDS] -- COMMON_FLAGS... ::: SET ::: SET ...
#
# On the GPU machine, from the repository root, after unpacking a bundle: one
# decode_gpu binary run with COMMON_FLAGS plus each SET of flags in turn
# (an empty SET is the defaults), the sets taken round robin ROUNDS times
# (default 2) so that the machine's drift falls on all of them; prints each
# run's timed rows under "== ROUND.SET: FLAGS" and exits non-zero if a run
# failed. How one option at a time is timed against the defaults (the
# twenty-second session's fusions: tools/gpu/README.md). OPTIONS_AB_TIMEOUT_S
# (default 120) bounds one run.
#
# Example (small, each fusion alone against the defaults):
#   tools/gpu/options_ab.sh .gpu_bundle/tools/decode_gpu 2 -- --cuda_ops=false \
#     --numerics=fast --batches=1,64 --steps=6 ::: ::: --bf16_branches=true \
#     ::: --gate_logits_in_block_macs=65536
set -u
if [[ $# -lt 2 ]]; then
  echo "usage: $0 BINARY [ROUNDS] -- COMMON_FLAGS... ::: SET ::: SET ..." >&2
  exit 2
fi
binary="$1"
shift
rounds=2
if [[ "$1" != "--" ]]; then
  rounds="$1"
  shift
fi
if [[ "${1:-}" != "--" ]] || ! [[ "${rounds}" =~ ^[1-9][0-9]*$ ]]; then
  echo "$0: ROUNDS must be a positive integer and the flags follow a '--'" >&2
  exit 2
fi
shift
if [[ ! -x "${binary}" ]]; then
  echo "$0: ${binary} is not an executable" >&2
  exit 2
fi
# Split the rest at ':::' into the common flags and the sets.
common=()
sets=()
current=""
seen_set=0
for arg in "$@"; do
  if [[ "${arg}" == ":::" ]]; then
    if ((seen_set)); then sets+=("${current}"); fi
    seen_set=1
    current=""
  elif ((seen_set)); then
    current="${current:+${current} }${arg}"
  else
    common+=("${arg}")
  fi
done
if ((seen_set)); then sets+=("${current}"); fi
if ((${#sets[@]} == 0)); then
  echo "$0: no ':::' set given (an empty one is the defaults)" >&2
  exit 2
fi
if [[ -d .gpu_bundle/lib ]]; then
  export LD_LIBRARY_PATH=".gpu_bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
fi
export NCCL_NVLS_ENABLE=0
limit="${OPTIONS_AB_TIMEOUT_S:-120}"
status=0
for ((round = 1; round <= rounds; ++round)); do
  for i in "${!sets[@]}"; do
    read -r -a extra <<< "${sets[$i]}"
    out=$(timeout "${limit}" "${binary}" "${common[@]}" "${extra[@]}" 2>&1)
    code=$?
    echo "== ${round}.${i}: ${sets[$i]:-(defaults)} (exit ${code})"
    # decode_gpu's table rows (batch first: "1  graph ..." or "1  68  10.5 ...")
    # and its prefill line.
    grep -E '^ +[0-9]+ +(graph|eager|[0-9])|^prefill:' <<< "${out}"
    if [[ "${code}" -ne 0 ]]; then
      tail -n 5 <<< "${out}"
      status=1
    fi
  done
done
exit "${status}"
