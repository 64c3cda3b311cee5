#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `mkdir -p on && tar -xJf .gpu_pack/on.tar.xz -C on`: a bundle built from a
# branch that turns options on by default (e.g. `wip/bf16-both`:
# prompt_bf16_linears and prompt_bf16_experts), checked as users would get it:
#   1. device_decoder_fast_test, every case, under the new defaults;
#   2. small's decode steps (batch 1 and 64, graph rows, kernels a step);
#   3. the EP8 slice's 4,096-position prefill chunk with the defaults, and
#      with both options off in the same run (the baseline on this card).
# BUDGET_S (default 540) bounds the whole script (check_steps.sh).
# Bundle (here, on the branch; about 5 minutes with a warm cache):
#   BUNDLE_TARGETS="//worker/model:device_decoder_fast_test //tools/bench:decode_gpu"
#     tools/gpu/bundle.sh && mv .gpu_pack/bundle.tar.xz .gpu_pack/on.tar.xz
#   tools/gpu/defaults_on_check.sh [RESULTS]
set -uo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="${here}/on/.gpu_bundle"
results="${1:-${bundle}/results_defaults_on}"
# shellcheck source=tools/gpu/check_steps.sh
source "${here}/tools/gpu/check_steps.sh"
decode="${bundle}/tools/decode_gpu"
slice=(--ep_slice=8 --numerics=fast --batches=1 --context=4096 --prefill_chunk=4096 --steps=2
       --warmup=1 --slice_profile=false)
budget_step chunk_defaults 90 "${decode}" "${slice[@]}"
budget_step chunk_both_off 90 "${decode}" "${slice[@]}" --prompt_bf16_linears=false \
  --prompt_bf16_experts=false
budget_step device_decoder_fast_test 300 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  || status=1
budget_step small_decode 60 "${decode}" --cuda_ops=false --numerics=fast --batches=1,64 --steps=6
echo "== summary"
cat "${results}/summary.txt"
for f in chunk_defaults chunk_both_off small_decode; do
  echo "== ${f}"
  tail -n 30 "${results}/${f}.log" 2>/dev/null
done
echo "== device_decoder_fast_test (failures)"
grep -E "FAILED|PASSED|^\[  FAILED" "${results}/device_decoder_fast_test.log" 2>/dev/null | tail -n 40
exit "${status}"
