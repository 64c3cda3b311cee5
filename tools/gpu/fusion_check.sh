#!/usr/bin/env bash
# fusion_check.sh [RESULTS] — on the GPU machine, from the repository root,
# after unpacking a bundle that holds bin/kernels_cuda_dense_bf16_gemm_sm90_test,
# bin/kernels_cuda_decode_compressor_decode_test, bin/kernels_cuda_moe_moe_gate_test,
# bin/kernels_cuda_moe_mxfp4_fp8_tiles_test, bin/worker_model_device_decoder_fast_test
# and tools/decode_gpu: the twenty-second session's decoder options in one call of
# about 8 minutes (tools/gpu/README.md, "The next device session", twenty-second):
# their kernel tests and the decoder's same-bits test, then each option alone
# against the defaults on small (options_ab.sh), the bf16-wo_a ones on the EP8
# slice, and the prefill ones on the EP8 slice's 4,096-position chunk. The
# step summary and the timed rows at the end. BUDGET_S (default 540) skips the
# steps that would not fit.
set -u
bundle=.gpu_bundle
results="${1:-${bundle}/results_fusion}"
here="$(cd "$(dirname "$0")" && pwd)"
source "${here}/check_steps.sh"
budget="${BUDGET_S:-540}"
began=$(date +%s)
fits() {  # fits SECONDS: whether a step of that length still fits the budget
  (( $(date +%s) - began + $1 <= budget ))
}
gpu_step() {  # gpu_step NAME TIMEOUT_S COMMAND...: step, unless it would not fit
  if ! fits "$2"; then
    printf '%-36s skipped (budget)\n' "$1" | tee -a "${results}/summary.txt"
    return 0
  fi
  step "$@" || status=1
}
bin="${bundle}/bin"
dg="${bundle}/tools/decode_gpu"
gpu_step bf16_gemm 60 "${bin}/kernels_cuda_dense_bf16_gemm_sm90_test"
gpu_step compressor 60 "${bin}/kernels_cuda_decode_compressor_decode_test"
gpu_step moe_gate 60 "${bin}/kernels_cuda_moe_moe_gate_test"
gpu_step mxfp4_tiles 60 "${bin}/kernels_cuda_moe_mxfp4_fp8_tiles_test"
gpu_step same_bits 120 "${bin}/worker_model_device_decoder_fast_test" \
  --gtest_filter='*FusedRowLaunches*'
gpu_step small_ab 200 "${here}/options_ab.sh" "${dg}" 2 -- --cuda_ops=false --numerics=fast \
  --batches=1,64 --steps=6 ::: ::: --gate_logits_in_block_macs=65536 ::: \
  --bf16_branches=true ::: --fused_swiglu_fp8=true ::: --fused_split_reduce=true
gpu_step ep8_ab 160 "${here}/options_ab.sh" "${dg}" 1 -- --ep_slice=8 --numerics=fast \
  --slice_bf16_wo_a=true --batches=1,64 --context=64 --steps=6 --warmup=1 \
  --slice_profile=false ::: ::: \
  --direct_wo_a=true ::: --direct_wo_a=true --reduce_fp8_out=true
gpu_step prefill_ab 200 "${here}/options_ab.sh" "${dg}" 1 -- --ep_slice=8 --numerics=fast \
  --batches=1 --context=4096 --prefill_chunk=4096 --steps=2 --warmup=1 \
  --slice_profile=false ::: ::: --parallel_compressor_rows=256 ::: --tile_conversion_rows=8
echo "== summary"
cat "${results}/summary.txt"
for f in same_bits bf16_gemm compressor moe_gate mxfp4_tiles; do
  [[ -f "${results}/${f}.log" ]] && grep -E "^\[  (PASSED|FAILED) |Failure" "${results}/${f}.log" | head -6
done
for f in small_ab ep8_ab prefill_ab; do
  [[ -f "${results}/${f}.log" ]] && { echo "== ${f}"; cat "${results}/${f}.log"; }
done
exit "${status}"
