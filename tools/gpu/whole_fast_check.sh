#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `mkdir -p whole && tar -xJf .gpu_pack/whole.tar.xz -C whole`: the fast
# decoder as users get it with the current defaults, whole:
#   1. serve_smoke.sh on models/small (the cuda backend's fast and reference
#      numerics against the cpu backend over gRPC);
#   2. small's decode steps (batch 1 and 64, graph rows, kernels a step);
#   3. device_decoder_fast_test with what is left of the budget: its 58
#      cases take about 1,000 s on an H100, more than one call, so
#      SHARD=i/n runs shard i of n (GTEST_SHARD_INDEX / GTEST_TOTAL_SHARDS)
#      and FILTER a gtest filter (default every case).
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
budget_step serve_smoke 240 "${bundle}/serve_smoke.sh" "${here}/models/small" \
  "${results}/serve" || status=1
budget_step small_decode 60 "${bundle}/tools/decode_gpu" --cuda_ops=false --numerics=fast \
  --batches=1,64 --steps=6
if [[ -n "${SHARD:-}" ]]; then
  export GTEST_SHARD_INDEX="${SHARD%/*}" GTEST_TOTAL_SHARDS="${SHARD#*/}"
fi
budget_step device_decoder_fast_test 600 \
  "${bundle}/bin/worker_model_device_decoder_fast_test" --gtest_filter="${FILTER:-*}" || status=1
echo "== summary"
cat "${results}/summary.txt"
echo "== device_decoder_fast_test (failures)"
grep -E "^\[  FAILED|^\[  PASSED|Failure|of [0-9]+ rows" \
  "${results}/device_decoder_fast_test.log" 2>/dev/null | tail -n 40
for f in small_decode; do
  echo "== ${f}"
  grep -iE "batch|ms|kernels" "${results}/${f}.log" 2>/dev/null | tail -n 12
done
echo "== serve_smoke"
tail -n 15 "${results}/serve_smoke.log" 2>/dev/null
exit "${status}"
