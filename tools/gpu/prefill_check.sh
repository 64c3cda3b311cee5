#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `tar -xJf .gpu_pack/bundle.tar.xz`: the checks and measurements of prefill
# on the device in one call (about 5-8 minutes on an H200):
#   1. the prefill kernels' tests: Fp8BlockGemm (every tile of each math the
#      same bits, the TMA-fed wgmma tiles), the grouped MXFP4 GEMMs, the
#      experts' FP8 tile form (Mxfp4ToFp8Tiles against its CPU specification);
#   2. device_decoder_fast_test's chunked and batch-invariance cases and the
#      tile-form experts;
#   3. fp8_gemm_bench's prefill table against cuBLASLt FP8 in the default
#      math (the automatic tile above 256 rows: the warp-specialized
#      kN128M128Ws) and in wgmma, and
#      mxfp4_grouped_gemm_bench 48 1 wgmma 4096 (the experts' prefill table);
#   4. decode_gpu's prefill of the EP8 slice of V4.1-Flash (4,096 positions in
#      one chunk) with the default maths, with the tile form resident
#      (--expert_tiles_resident), with --expert_wgmma --dense_wgmma
#      (--expert_prefill_tiles=false) and with the tile form (its default).
# One log per step under RESULTS (default .gpu_bundle/results_prefill), a
# summary and the prefill lines at the end; exits non-zero if a test failed.
#   tools/gpu/prefill_check.sh [RESULTS]
set -uo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="${here}/.gpu_bundle"
results="${1:-${bundle}/results_prefill}"
# shellcheck source=tools/gpu/check_steps.sh
source "${here}/tools/gpu/check_steps.sh"
for t in kernels_cuda_dense_fp8_block_gemm_sm90_test kernels_cuda_moe_mxfp4_grouped_gemm_sm90_test \
         kernels_cuda_moe_mxfp4_fp8_tiles_test; do
  [[ -x "${bundle}/bin/${t}" ]] || continue
  step "${t}" 180 "${bundle}/bin/${t}" || status=1
done
step device_decoder_fast_test_prefill 300 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter='*TileForm*:*SmallBf16ChunkedSteps*:*WgmmaChunked*' || status=1
step fp8_gemm_bench_prefill 120 "${bundle}/tools/fp8_gemm_bench" prefill
step fp8_gemm_bench_wgmma 120 "${bundle}/tools/fp8_gemm_bench" wgmma prefill
step mxfp4_bench_prefill 150 "${bundle}/tools/mxfp4_grouped_gemm_bench" 48 1 wgmma 4096
slice=(--ep_slice=8 --numerics=fast --batches=1 --context=4096 --prefill_chunk=4096 --steps=3
       --warmup=1 --slice_profile=false)
step decode_gpu_prefill 150 "${bundle}/tools/decode_gpu" "${slice[@]}"
# The experts' tile form converted once at build, not every step (needs about
# 55 GiB more arena: an H200).
step decode_gpu_prefill_resident 150 "${bundle}/tools/decode_gpu" "${slice[@]}" \
  --expert_tiles_resident
step decode_gpu_prefill_wgmma 150 "${bundle}/tools/decode_gpu" "${slice[@]}" --expert_wgmma \
  --dense_wgmma --expert_prefill_tiles=false
step decode_gpu_prefill_tiles 150 "${bundle}/tools/decode_gpu" "${slice[@]}" --expert_wgmma \
  --dense_wgmma --expert_prefill_tiles
echo "== summary"
cat "${results}/summary.txt"
echo "== tests"
grep -hE '^\[  (PASSED|FAILED)|FAILED  \]|rows differ|tile form:' "${results}"/*test*.log 2>/dev/null
echo "== prefill"
grep -hE '^Prefill m|^(wq_a|wq_b|wo_b|shared\.w13|shared\.w2|square8k) +[0-9]+ +[0-9]+ +\|' \
  "${results}/fp8_gemm_bench_prefill.log" "${results}/fp8_gemm_bench_wgmma.log" 2>/dev/null
sed -n '/^Prefill:/,/cuBLASLt FP8/p' "${results}/mxfp4_bench_prefill.log" 2>/dev/null
grep -h '^prefill:' "${results}"/decode_gpu_prefill*.log 2>/dev/null
exit "${status}"
