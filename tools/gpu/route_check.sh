#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `tar -xJf .gpu_pack/bundle.tar.xz`: the experts' bf16 route's untried
# forms (thirty-sixth session), most telling first under BUDGET_S (default
# 540; check_steps.sh):
#   1. the kernel tests: Mxfp4Bf16GroupedGemm in every form (widener warps,
#      the register form over 128 / 80 X rows, with and without the deep
#      ring) against Bf16Gemm's bits, Bf16Gemm's warp-specialized forms, the
#      combine of bf16 expert outputs;
#   2. the EP8 prefill chunk with the defaults (the register form since the
#      thirty-sixth session) and the deep ring (--bf16_route_deep_ring);
#      device_decoder_fast_test's route forms, the decode route's fidelity and
#      batch invariance (--bf16_experts_every_row) and the options the
#      thirty-sixth session turned on; EP8 and small decode with and without
#      the decode route; the chunk with the widening form, the deep ring
#      over 80 X rows and the 256-row bf16 tile (its stack gone);
#   3. fp8_gemm_bench prefill and mxfp4_grouped_gemm_bench's prefill table
#      (every route form);
#   4. the chunk's kernel timeline with the defaults, then the chunks again
#      (drift).
# Bundle (here, a minute or two with a warm cache):
#   BUNDLE_TARGETS="//worker/model:device_decoder_fast_test //tools/bench:decode_gpu
#     //kernels/cuda/moe:mxfp4_bf16_gemm_sm90_test //kernels/cuda/moe:mxfp4_grouped_gemm_bench
#     //kernels/cuda/dense:bf16_gemm_sm90_test //kernels/cuda/dense:fp8_gemm_bench
#     //kernels/cuda/moe:moe_permute_test"
#     tools/gpu/bundle.sh
#   tools/gpu/route_check.sh [RESULTS]
set -uo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="${here}/.gpu_bundle"
results="${1:-${bundle}/results_route}"
# shellcheck source=tools/gpu/check_steps.sh
source "${here}/tools/gpu/check_steps.sh"
decode="${bundle}/tools/decode_gpu"
slice=(--ep_slice=8 --numerics=fast --batches=1 --context=4096 --prefill_chunk=4096 --steps=2
       --warmup=1 --slice_profile=false)
budget_step mxfp4_bf16_gemm_test 60 "${bundle}/bin/kernels_cuda_moe_mxfp4_bf16_gemm_sm90_test" \
  || status=1
budget_step bf16_gemm_test 60 "${bundle}/bin/kernels_cuda_dense_bf16_gemm_sm90_test" \
  --gtest_filter='*WarpSpecialized*:*RowRole*:*RowStride*' || status=1
budget_step moe_permute_test 60 "${bundle}/bin/kernels_cuda_moe_moe_permute_test" \
  --gtest_filter='*Combine*:*Refuses*' || status=1
ep8_decode=(--ep_slice=8 --numerics=fast --batches=1,64 --context=64 --steps=6 --warmup=1
            --slice_profile=false)
small_decode=(--cuda_ops=false --numerics=fast --batches=1,64 --steps=6)
chunks() {  # chunks SUFFIX: the option sets, the likeliest defaults first
  budget_step "chunk_defaults${1}" 90 "${decode}" "${slice[@]}"
  budget_step "chunk_deep_ring${1}" 90 "${decode}" "${slice[@]}" --bf16_route_deep_ring=true
  if [[ -z "${1}" ]]; then
    budget_step device_decoder_fast_test 240 \
      "${bundle}/bin/worker_model_device_decoder_fast_test" \
      --gtest_filter='*RouteForms*:*ExpertsEveryRow*:*FusedExpertSwiglu*:*WsForms*:*ExpertOutBf16*:*TileFormBeside*' \
      || status=1
    # Decode's experts on the bf16 register route (bf16_experts_every_row).
    budget_step ep8_decode 90 "${decode}" "${ep8_decode[@]}"
    budget_step ep8_decode_every_row 90 "${decode}" "${ep8_decode[@]}" \
      --bf16_experts_every_row=true --bf16_route_deep_ring=true
    budget_step small_decode 60 "${decode}" "${small_decode[@]}"
    budget_step small_decode_every_row 60 "${decode}" "${small_decode[@]}" \
      --bf16_experts_every_row=true --bf16_route_deep_ring=true
  fi
  budget_step "chunk_widening_form${1}" 90 "${decode}" "${slice[@]}" \
    --bf16_route_register_a=false
  budget_step "chunk_deep_ring80${1}" 90 "${decode}" "${slice[@]}" --bf16_route_deep_ring=true \
    --bf16_route_x_rows=80
  # The 256-row bf16 tile without its stack (Bf16GemmWsKernel<true, false>).
  budget_step "chunk_m256${1}" 90 "${decode}" "${slice[@]}" --bf16_ws_m256=true
}
chunks ""
budget_step fp8_bench_prefill 120 "${bundle}/tools/fp8_gemm_bench" prefill
budget_step mxfp4_bench_prefill 120 "${bundle}/tools/mxfp4_grouped_gemm_bench" 384 8 wgmma 4096
# Where the chunk's time goes now (the defaults' kernel timeline, CUPTI).
budget_step chunk_timeline 120 "${decode}" "${slice[@]}" --prefill_timeline
chunks "_2"
echo "== summary"
cat "${results}/summary.txt"
echo "== tests"
grep -hE '^\[  (PASSED|FAILED)|FAILED  \]|Failure|of [0-9]+ rows|differing' \
  "${results}"/*test*.log 2>/dev/null | head -n 60
echo "== prefill"
for log in "${results}"/chunk_*.log; do
  [[ -f "${log}" ]] || continue
  echo "${log##*/}: $(grep -h '^prefill:' "${log}")"
done
echo "== decode (graph rows)"
for log in "${results}"/ep8_decode*.log "${results}"/small_decode*.log; do
  [[ -f "${log}" ]] || continue
  echo "${log##*/}:"
  grep -E "^ +[0-9]+ +graph" "${log}"
done
echo "== the prompt's bf16 route (dense)"
sed -n "/^The prompt's bf16 route/,/^\$/p" "${results}/fp8_bench_prefill.log" 2>/dev/null | head -12
echo "== the chunk's kernel timeline (defaults)"
sed -n '/prefill timeline/,/^prefill:/p' "${results}/chunk_timeline.log" 2>/dev/null | head -20
echo "== experts' bf16 route"
sed -n '/^Prefill:/,$p' "${results}/mxfp4_bench_prefill.log" 2>/dev/null | head -24
exit "${status}"
