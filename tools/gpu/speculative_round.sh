#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after the bundle is
# unpacked (tools/gpu/bundle.sh with BUNDLE_PACK="serve tools/speculative_gpu
# bin/kernels_cuda_decode_markov_test bin/worker_model_device_decoder_draft_test
# bin/worker_step_executor_gpu_test"):
# issue 18's batch-1 measurements in one call of under 10 minutes, three files
# under RESULTS (default $OUT):
#   tests.log  the fused Markov head's kernel test, the drafting decoder's
#              tests (FusedMarkovGivesTheLoopsBits among them) and the executor
#              on a decoder (LookupAloneVerifiesOnADecoderThatDoesNotDraft)
#   spec.txt   speculative_check.sh's tables: batch 1 at 64 and 256 new tokens
#              with warm decoders, then with prompt lookup (--ngram_lookup=3)
#              and a line of lookup alone (--lookup_alone: the workers of
#              --speculative=ngram, verifying and rolling back on a decoder
#              that does not draft), then with lookup and the fused Markov
#              head (256 tokens), matches of 4 .. 1 tokens beside DSpark and
#              alone (--ngram_lookup=1 --ngram_lookup_max=4, 256 tokens), with
#              8-token lookups (256 tokens), then 64 tokens the old way
#              (--warm_decoder=false) for the A/B
#   spec.log   what speculative_check.sh said besides (a run that failed)
#   summary.txt  one line a step: its name, exit status and seconds
#   tools/gpu/speculative_round.sh [MODEL_DIR]      (default models/tiny)
# Each step is stopped after STEP_TIMEOUT_S (default 170) seconds. All the
# steps may pass a device call's 10 minutes: ROUND_STEPS (names, space-
# separated; default all) runs some of them, e.g. two calls of
#   ROUND_STEPS="markov_test draft_test executor_gpu_test warm lookup"
#   ROUND_STEPS="lookup_fused lookup8 range14 cold"
# (summary.txt is appended to, so the second call's RESULTS may be the same.)
set -uo pipefail
bundle="${BUNDLE:-.gpu_bundle}"
results="${RESULTS:-${OUT:?set RESULTS or OUT}}"
model="${1:-models/tiny}"
mkdir -p "${results}"
export LD_LIBRARY_PATH="${bundle}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
limit="${STEP_TIMEOUT_S:-170}"
status=0

# step NAME LOG COMMAND...: runs COMMAND into LOG, one summary line (nothing
# when ROUND_STEPS is set and does not name it).
step() {
  local name="$1" log="$2" start rc
  shift 2
  if [[ -n "${ROUND_STEPS:-}" && " ${ROUND_STEPS} " != *" ${name} "* ]]; then
    return 0
  fi
  start=$(date +%s)
  echo "=== ${name}" >> "${log}"
  timeout "${limit}" "$@" >> "${log}" 2>&1
  rc=$?
  echo "${name} rc ${rc} $(($(date +%s) - start)) s" | tee -a "${results}/summary.txt"
  ((rc == 0)) || status=1
}

nvidia-smi --query-gpu=name,memory.used --format=csv >> "${results}/summary.txt" 2>&1
step markov_test "${results}/tests.log" "${bundle}/bin/kernels_cuda_decode_markov_test"
step draft_test "${results}/tests.log" "${bundle}/bin/worker_model_device_decoder_draft_test"
step executor_gpu_test "${results}/tests.log" "${bundle}/bin/worker_step_executor_gpu_test"
spec() {
  local name="$1" runs="$2" flags="$3"
  step "${name}" "${results}/spec.log" env SPEC_RUNS="${runs}" SPEC_FLAGS="${flags}" \
    RESULTS="${results}" BUNDLE="${bundle}" tools/gpu/speculative_check.sh "${model}"
}
spec warm "1 64 32;1 256 32" ""
spec lookup "1 64 32;1 256 32" "--ngram_lookup=3 --lookup_alone"
spec lookup_fused "1 256 32" "--ngram_lookup=3 --fused_markov"
spec lookup8 "1 256 32" "--ngram_lookup=3 --ngram_lookup_tokens=8"
spec range14 "1 256 32" "--ngram_lookup=1 --ngram_lookup_max=4 --lookup_alone"
spec cold "1 64 32" "--warm_decoder=false"
exit "${status}"
