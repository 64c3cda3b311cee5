#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `tar -xJf .gpu_pack/bundle.tar.xz`: the checks and measurements of the sparse
# attention's kernels in one call (about 3-5 minutes on an H100):
#   1. sparse_decode_attention_sm90_test (every case on kMma16 and kWgmma64,
#      against SparseAttention on the dequantized rows);
#   2. sparse_decode_attention_bench (both kernels, kWgmma64 at the default
#      ranges, 4 and 5 tiles a range and one CTA a query (--range_tiles=0,4,5,16), batch 1 / 8 / 32 /
#      64 / 1,024 at context 65,536 and 1,024), and with OLD_BENCH (a previous
#      binary, e.g. main's, carried xz-packed and unpacked) its kWgmma64 rows
#      too, so a branch's kernel and main's are timed in the same call;
#   3. device_decoder_fast_test's stored-KV cases (both kernels' decoder
#      batch invariance and agreement);
#   4. decode_gpu on the EP8 slice of V4.1-Flash in three attention modes
#      (one binary): kMma16, kWgmma64 at the default ranges (r0) and at one
#      CTA a query (r16): the 4,096-row prefill chunk with the section
#      profile, the decode steps at batch 1 and 8 (context 4,096) and at 64
#      (context 64).
# DECODER_FILTER (default '*StoredKv*') narrows step 3. BUDGET_S (default 540) stops before a step that would not fit; a step is
# skipped, not cut, so every log is whole. One log per step under RESULTS
# (default .gpu_bundle/results_attention), a summary and the timing lines at
# the end; exits non-zero if a test failed.
#   tools/gpu/attention_check.sh [RESULTS] [OLD_BENCH]
set -uo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="${here}/.gpu_bundle"
results="${1:-${bundle}/results_attention}"
old_bench="${2:-}"
budget="${BUDGET_S:-540}"
start_s=$(date +%s)
# shellcheck source=tools/gpu/check_steps.sh
source "${here}/tools/gpu/check_steps.sh"
fits() {  # fits SECONDS: whether a step of that limit still fits the budget
  (( $(date +%s) - start_s + $1 <= budget ))
}
step attention_test 120 "${bundle}/bin/kernels_cuda_attention_sparse_decode_attention_sm90_test" ||
  status=1
for ctx in 65536 1024; do
  fits 60 && step "attention_bench_${ctx}" 60 "${bundle}/tools/sparse_decode_attention_bench" \
    --context="${ctx}" --range_tiles=0,4,5,16
  if [[ -n "${old_bench}" ]] && fits 60; then
    step "attention_bench_old_${ctx}" 60 "${old_bench}" --context="${ctx}" --kernel=2
  fi
done
fits 240 && { step decoder_stored_kv_test 240 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter="${DECODER_FILTER:-*StoredKv*}" || status=1; }
slice=(--ep_slice=8 --numerics=fast)
mode_flags() {  # mma16 | r0 | r16: the decoder's attention flags of a mode
  case "$1" in
    mma16) echo "--attention_wgmma=false" ;;
    r*) echo "--attention_wgmma=true --attention_range_tiles=${1#r}" ;;
  esac
}
for m in r16 r0 mma16; do
  # shellcheck disable=SC2046
  fits 60 && step "prefill_${m}" 60 "${bundle}/tools/decode_gpu" "${slice[@]}" --batches=1 \
    --context=4096 --prefill_chunk=4096 --steps=1 --warmup=1 --slice_profile=true \
    $(mode_flags "${m}")
done
for m in r0 mma16 r16; do
  # shellcheck disable=SC2046
  fits 90 && step "decode_4096_${m}" 90 "${bundle}/tools/decode_gpu" "${slice[@]}" \
    --batches=1,8 --context=4096 --prefill_chunk=4096 --steps=6 --warmup=1 \
    --slice_profile=false $(mode_flags "${m}")
  # shellcheck disable=SC2046
  fits 60 && step "decode_64_${m}" 60 "${bundle}/tools/decode_gpu" "${slice[@]}" \
    --batches=64 --context=64 --steps=6 --slice_profile=false $(mode_flags "${m}")
done
echo "== summary"
cat "${results}/summary.txt"
echo "== tests"
grep -hE '^\[  (PASSED|FAILED)|FAILED  \]|outside the bound' "${results}"/*test*.log 2>/dev/null |
  grep -vE ' 0 of [0-9]+ outside' | head -40
echo "== kernel (graph us: kernel batch | fast us graph us | ...)"
grep -hE '^ *(mma16|wgmma64(/r[0-9]+)?) ' "${results}"/attention_bench_*.log 2>/dev/null
echo "== decoder"
for f in "${results}"/prefill_*.log "${results}"/decode_*.log; do
  [[ -f "${f}" ]] || continue
  echo "-- $(basename "${f}" .log)"
  grep -hE '^prefill:|eager prefill|^ *[0-9]+ +[0-9]+ +[0-9.]+ ' "${f}" | head -6
done
exit "${status}"
