#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `tar -xJf .gpu_pack/bundle.tar.xz`: the first runs of prompt_bf16_linears
# (a prompt's FP8 linears as bf16 products over the operands' exact values),
# of prompt_bf16_experts (its routed experts on the bf16 route) and of the
# FP8 products over the generated rows' ranges in mixed steps, most
# telling first, so a short call still answers the question that decides the
# default (BUDGET_S, default 540, bounds the whole script: check_steps.sh's
# budget_step):
#   1. the routed experts' bf16 route's kernel test (Mxfp4Bf16GroupedGemm);
#   2. decode_gpu's EP8 prefill chunk (4,096 positions in one chunk) with
#      neither option, with prompt_bf16_linears and prompt_bf16_experts, and
#      with prompt_bf16_linears alone;
#   3. device_decoder_fast_test's cases of both options: the bits across
#      chunkings and mixed steps, the trained tiny's bars with every position a
#      prompt's, the printed distance to the FP8 maths;
#   4. mxfp4_grouped_gemm_bench's prefill table (the experts' bf16 route beside
#      the FP8 tile form and cuBLASLt FP8), the kernels' tests (Bf16Gemm's
#      row_role, Fp8ActBf16) and fp8_gemm_bench's bf16 route table;
#   5. the chunk with 64 other sequences' generated rows beside it
#      (--prefill_mixed_rows), off and on; the first pair again (drift); the
#      chunk's kernel timeline with the option.
# Bundle (here, about 4 minutes from a fresh checkout):
#   BUNDLE_TARGETS="//kernels/cuda/dense:bf16_gemm_sm90_test
#     //kernels/cuda/dense:act_quant_fp8_test //worker/model:device_decoder_fast_test
#     //tools/bench:decode_gpu //kernels/cuda/dense:fp8_gemm_bench
#     //kernels/cuda/moe:mxfp4_bf16_gemm_sm90_test //kernels/cuda/moe:mxfp4_grouped_gemm_bench"
#     tools/gpu/bundle.sh
#   tools/gpu/prompt_bf16_check.sh [RESULTS]
set -uo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="${here}/.gpu_bundle"
results="${1:-${bundle}/results_prompt_bf16}"
# shellcheck source=tools/gpu/check_steps.sh
source "${here}/tools/gpu/check_steps.sh"
decode="${bundle}/tools/decode_gpu"
slice=(--ep_slice=8 --numerics=fast --batches=1 --context=4096 --prefill_chunk=4096 --steps=2
       --warmup=1 --slice_profile=false)
budget_step mxfp4_bf16_gemm_test 60 "${bundle}/bin/kernels_cuda_moe_mxfp4_bf16_gemm_sm90_test" \
  || status=1
budget_step chunk_off 90 "${decode}" "${slice[@]}" --prompt_bf16_linears=false
budget_step chunk_experts 90 "${decode}" "${slice[@]}" --prompt_bf16_linears=true \
  --prompt_bf16_experts=true
budget_step chunk_on 90 "${decode}" "${slice[@]}" --prompt_bf16_linears=true \
  --prompt_bf16_experts=false
budget_step device_decoder_fast_test 200 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter='*PromptLinears*:*PromptBf16*:*PromptExperts*:*SmallBf16LongChunk*:*SmallBf16ChunkedSteps*' \
  || status=1
budget_step mxfp4_bench_prefill 120 "${bundle}/tools/mxfp4_grouped_gemm_bench" 384 8 wgmma 4096
budget_step bf16_gemm_test 90 "${bundle}/bin/kernels_cuda_dense_bf16_gemm_sm90_test" || status=1
budget_step act_quant_fp8_test 60 "${bundle}/bin/kernels_cuda_dense_act_quant_fp8_test" || status=1
budget_step fp8_gemm_bench_prefill 120 "${bundle}/tools/fp8_gemm_bench" prefill
budget_step chunk_mixed_off 90 "${decode}" "${slice[@]}" --prefill_mixed_rows=64 \
  --prompt_bf16_linears=false
budget_step chunk_mixed_on 90 "${decode}" "${slice[@]}" --prefill_mixed_rows=64 \
  --prompt_bf16_linears=true --prompt_bf16_experts=false
budget_step chunk_off_2 90 "${decode}" "${slice[@]}" --prompt_bf16_linears=false
budget_step chunk_on_2 90 "${decode}" "${slice[@]}" --prompt_bf16_linears=true \
  --prompt_bf16_experts=false
budget_step chunk_on_timeline 120 "${decode}" "${slice[@]}" --prompt_bf16_linears=true \
  --prompt_bf16_experts=false --prefill_timeline
echo "== summary"
cat "${results}/summary.txt"
echo "== tests"
grep -hE '^\[  (PASSED|FAILED)|FAILED  \]|against the FP8 products|agreement' \
  "${results}"/*test*.log 2>/dev/null
echo "== prefill"
for log in "${results}"/chunk_*.log; do
  [[ -f "${log}" ]] || continue
  echo "${log##*/}: $(grep -h '^prefill:' "${log}")"
  grep -hE 'prompt_bf16_(linears|experts):|generated rows in every chunk' "${log}"
done
echo "== bf16 route"
sed -n '/bf16 route/,$p' "${results}/fp8_gemm_bench_prefill.log" 2>/dev/null | head -30
echo "== experts' bf16 route"
sed -n '/^Prefill:/,$p' "${results}/mxfp4_bench_prefill.log" 2>/dev/null | head -20
echo "== timeline"
sed -n '/prefill timeline/,$p' "${results}/chunk_on_timeline.log" 2>/dev/null | head -40
exit "${status}"
