#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `mkdir -p whole && tar -xJf .gpu_pack/whole.tar.xz -C whole`: the fast
# decoder as users get it with the current defaults, whole:
#   1. device_decoder_fast_test, every case;
#   2. small's decode steps (batch 1 and 64, graph rows, kernels a step), and
#      with the FP8 products' split sums in their last CTA;
#   3. serve_smoke.sh on models/small (the cuda backend's fast and reference
#      numerics against the cpu backend over gRPC).
# BUDGET_S (default 540) bounds the whole script (check_steps.sh).
# Bundle (here):
#   BUNDLE_SERVING=1 BUNDLE_TARGETS="//worker/model:device_decoder_fast_test
#     //tools/bench:decode_gpu" tools/gpu/bundle.sh &&
#     mv .gpu_pack/bundle.tar.xz .gpu_pack/whole.tar.xz
#   tools/gpu/whole_fast_check.sh [RESULTS]
set -uo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="${here}/whole/.gpu_bundle"
results="${1:-${bundle}/results_whole}"
# shellcheck source=tools/gpu/check_steps.sh
source "${here}/tools/gpu/check_steps.sh"
budget_step device_decoder_fast_test 330 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  || status=1
budget_step small_decode 60 "${bundle}/tools/decode_gpu" --cuda_ops=false --numerics=fast \
  --batches=1,64 --steps=6
# The FP8 products' last-CTA split sums at up to 8 rows (off since it measured
# slower on the EP8 slice with concurrent branches off; branches have their
# own counters since).
budget_step small_decode_fused_split 60 "${bundle}/tools/decode_gpu" --cuda_ops=false \
  --numerics=fast --batches=1,64 --steps=6 --fused_split_reduce=true
budget_step serve_smoke 240 "${bundle}/serve_smoke.sh" "${here}/models/small" \
  "${results}/serve" || status=1
echo "== summary"
cat "${results}/summary.txt"
echo "== device_decoder_fast_test (failures)"
grep -E "^\[  FAILED|^\[  PASSED|Failure|of [0-9]+ rows" \
  "${results}/device_decoder_fast_test.log" 2>/dev/null | tail -n 40
for f in small_decode small_decode_fused_split; do
  echo "== ${f}"
  grep -iE "batch|ms|kernels" "${results}/${f}.log" 2>/dev/null | tail -n 12
done
echo "== serve_smoke"
tail -n 15 "${results}/serve_smoke.log" 2>/dev/null
exit "${status}"
