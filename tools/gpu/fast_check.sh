#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `tar -xJf .gpu_pack/bundle.tar.xz`: the checks and measurements of the
# `fast` decode numerics in one call (about 8-10 minutes on an H200):
#   1. kernel tests of the fast path (dot_rows, fp8 and bf16 GEMMs, MXFP4
#      grouped GEMM, act quant, the gate with given logits, the stored KV
#      quantizers, SparseDecodeAttention);
#   2. device_decoder_fast_test (fidelity against reference, batch invariance)
#      and device_decoder_test (reference still bit-identical to the CPU;
#      skipped with FAST_CHECK_REFERENCE=0);
#   3. decode_gpu on small (fast and reference) and the EP8 slice of
#      V4.1-Flash (fast; EP_SLICE_NUMERICS to change), their rows also in
#      RESULTS/decode.csv for tools/bench/plot.py;
#   4. serve_smoke.sh on small (fast, reference, cpu).
# One log per step under RESULTS (default .gpu_bundle/results_fast), a summary
# at the end; exits non-zero if a test failed.
#   tools/gpu/fast_check.sh [RESULTS]
set -uo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="${here}/.gpu_bundle"
results="${1:-${bundle}/results_fast}"
# shellcheck source=tools/gpu/check_steps.sh
source "${here}/tools/gpu/check_steps.sh"
for t in kernels_cuda_decode_dot_rows_test kernels_cuda_dense_fp8_block_gemm_sm90_test \
         kernels_cuda_dense_bf16_gemm_sm90_test kernels_cuda_decode_rows_test \
         kernels_cuda_dense_fake_quant_test kernels_cuda_attention_sparse_decode_attention_sm90_test \
         kernels_cuda_moe_mxfp4_grouped_gemm_sm90_test kernels_cuda_dense_act_quant_fp8_test \
         kernels_cuda_moe_moe_gate_test; do
  step "${t}" 120 "${bundle}/bin/${t}" || status=1
done
# The wgmma cases (about 5 minutes: three decoders of small each) run only with
# FAST_CHECK_WGMMA=1, below.
step device_decoder_fast_test 480 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter='-*Wgmma*' || status=1
if [[ "${FAST_CHECK_REFERENCE:-1}" != 0 ]]; then
  step device_decoder_test 300 "${bundle}/bin/worker_model_device_decoder_test" \
    --gtest_filter='-*TwoRanks*' || status=1
fi
step decode_gpu_small 180 "${bundle}/tools/decode_gpu" --cuda_ops=false \
  ${SMALL_NUMERICS:+--numerics=${SMALL_NUMERICS}} --csv="${results}/decode_small.csv"
step decode_gpu_ep8 300 "${bundle}/tools/decode_gpu" --ep_slice=8 \
  --numerics="${EP_SLICE_NUMERICS:-fast}" --batches=1,64 --context=64 --steps=6 \
  --csv="${results}/decode_ep8.csv"
# FAST_CHECK_WGMMA=1: the wgmma block sums against the mma ones
# (kernels/cuda/moe README "wgmma block sums", kernels/cuda/dense README): the
# decoder's wgmma fidelity and invariance cases, the expert bench in both
# maths, the slice with --expert_wgmma and with both --expert_wgmma
# --dense_wgmma (about 10 more minutes: a call of its own with
# FAST_CHECK_REFERENCE=0).
if [[ "${FAST_CHECK_WGMMA:-0}" != 0 ]]; then
  step device_decoder_fast_test_wgmma 420 "${bundle}/bin/worker_model_device_decoder_fast_test" \
    --gtest_filter='*Wgmma*' || status=1
  for math in mma wgmma; do
    step "mxfp4_bench_${math}" 150 "${bundle}/tools/mxfp4_grouped_gemm_bench" 48 1 "${math}"
  done
  step decode_gpu_ep8_wgmma 300 "${bundle}/tools/decode_gpu" --ep_slice=8 --numerics=fast \
    --batches=1,64 --context=64 --steps=6 --expert_wgmma
  step decode_gpu_ep8_wgmma_all 300 "${bundle}/tools/decode_gpu" --ep_slice=8 --numerics=fast \
    --batches=1,64 --context=64 --steps=6 --expert_wgmma --dense_wgmma
fi
# Both as one CSV (one header) for tools/bench/plot.py: tools/bench/README.md "Plots".
if [[ -s "${results}/decode_small.csv" ]]; then
  { cat "${results}/decode_small.csv"; tail -n +2 "${results}/decode_ep8.csv" 2>/dev/null; } \
    > "${results}/decode.csv"
fi
step serve_smoke 400 "${bundle}/serve_smoke.sh" models/small "${results}/serve" || status=1
echo "--- fidelity"
grep -h -E "agreement|fast dense" "${results}/device_decoder_fast_test.log" || true
echo "--- decode_gpu (small, then the EP8 slice)"
grep -h -E "^numerics|graph|^ +[0-9]+ +[0-9]+ |eager b" "${results}/decode_gpu_small.log" \
  "${results}/decode_gpu_ep8.log" | grep -v nccl1 || true
if [[ "${FAST_CHECK_WGMMA:-0}" != 0 ]]; then
  echo "--- experts: mma, then wgmma (bench rows; the slice with --expert_wgmma)"
  grep -h -E "^[0-9]+ +[0-9.]+ " "${results}/mxfp4_bench_mma.log" \
    "${results}/mxfp4_bench_wgmma.log" || true
  grep -h -E "^ +[0-9]+ +[0-9]+ " "${results}/decode_gpu_ep8_wgmma.log" \
    "${results}/decode_gpu_ep8_wgmma_all.log" | grep -v nccl1 || true
fi
echo "--- serve_smoke"
tail -n 6 "${results}/serve_smoke.log" || true
exit "${status}"
