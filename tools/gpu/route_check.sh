#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `tar -xJf .gpu_pack/bundle.tar.xz`: the thirty-seventh session's forms of
# the prefill products, most telling first under BUDGET_S (default 540;
# check_steps.sh):
#   1. the kernel tests: Mxfp4Bf16GroupedGemm in every form (widener warps,
#      the register form over 128 / 80 / 64 - 8 X rows, the deep ring, one
#      scale test a stage, the wgmma N fit to the tile's rows) against
#      Bf16Gemm's bits; Bf16GemmCutlass against Bf16Gemm's unsplit bits;
#      the combine over whole rows and the SwiGLU's 16-byte loads against
#      the CPU's bits; Bf16Split's parts and its one-GEMM product's bound;
#   2. the benches: moe_gate_bench (the gate's logits: fp32 against the
#      hi/lo split's one bf16 GEMM, time and top-6 agreement),
#      mxfp4_grouped_gemm_bench's prefill table (every route
#      form) and fp8_gemm_bench prefill (the bf16 tile's forms, CUTLASS's
#      GEMM beside cuBLASLt's, the elements differing from ours);
#   3. the EP8 prefill chunk with the defaults, with the route's one scale
#      test a stage, its fitted N and three consumer warpgroups, with the
#      prompt's bf16
#      products unsplit (--prompt_bf16_unsplit), unsplit on CUTLASS
#      (--bf16_cutlass), with the 256-row bf16 tile for the large weights
#      (--bf16_ws_m256_large);
#   4. ncu (--set full, reduced here by ncu_stalls.py: the K loop's stall
#      reasons and opcodes, the tensor pipe's, issue's and eligible warps'
#      figures) of the register route's kernel over 128 X rows as it is and
#      with one scale test a stage; device_decoder_fast_test's route-form,
#      bf16-tile-form and CUTLASS cases; ncu of the route with the fitted N
#      and of the persistent bf16 dense tile;
#   5. Bf16Gemm's warp-specialized tests, the chunk's kernel timeline
#      without programmatic edges, the chunk again (drift).
# Bundle (here, a few minutes with a warm cache):
#   BUNDLE_TARGETS="//worker/model:device_decoder_fast_test //tools/bench:decode_gpu
#     //kernels/cuda/moe:mxfp4_bf16_gemm_sm90_test //kernels/cuda/moe:mxfp4_grouped_gemm_bench
#     //kernels/cuda/dense:bf16_gemm_sm90_test //kernels/cuda/dense:fp8_gemm_bench
#     //kernels/cuda/dense:bf16_gemm_cutlass_test //kernels/cuda/moe:moe_permute_test
#     //kernels/cuda/decode:swiglu_test //kernels/cuda/moe:bf16_split_test
#     //kernels/cuda/moe:moe_gate_bench"
#     tools/gpu/bundle.sh
#   tools/gpu/route_check.sh [RESULTS]
set -uo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="${here}/.gpu_bundle"
results="${1:-${bundle}/results_route}"
# shellcheck source=tools/gpu/check_steps.sh
source "${here}/tools/gpu/check_steps.sh"
decode="${bundle}/tools/decode_gpu"
route_bench=("${bundle}/tools/mxfp4_grouped_gemm_bench" 384 8 wgmma 4096)
slice=(--ep_slice=8 --numerics=fast --batches=1 --context=4096 --prefill_chunk=4096 --steps=2
       --warmup=1 --slice_profile=false)
ncu_bin="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"

# profile NAME KERNEL_REGEX SKIP COMMAND...: one launch (after SKIP) of the
# kernels whose demangled name matches, --set full, into RESULTS/NAME.ncu-rep;
# then its source page reduced by ncu_stalls.py and the details page's lines
# that say what bounds the kernel, into RESULTS/NAME.txt.
profile() {
  local name="$1" regex="$2" skip="$3"
  shift 3
  budget_step "ncu_${name}" 150 "${ncu_bin}" --set full --kernel-name-base demangled \
    -k "regex:${regex}" --launch-skip "${skip}" --launch-count 1 -f \
    -o "${results}/${name}" "$@" || return 0
  {
    "${ncu_bin}" -i "${results}/${name}.ncu-rep" --page details --csv 2>/dev/null |
      grep -E '"(Duration|Grid Size|Registers Per Thread|Achieved Occupancy|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|Issued Warp Per Scheduler|No Eligible|Eligible Warps Per Scheduler|Active Warps Per Scheduler|Warp Cycles Per Issued Instruction|Executed Ipc Active|SM Busy|Shared Memory Configuration Size)"' |
      awk -F'","' '{printf "  %-45s %s %s\n", $(NF-2), $NF, $(NF-1)}' | tr -d '"' | sort -u
    "${ncu_bin}" -i "${results}/${name}.ncu-rep" --page raw --csv \
      --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg 2>/dev/null | head -n 3
    "${ncu_bin}" -i "${results}/${name}.ncu-rep" --page source --csv --print-source sass \
      > "${results}/${name}_source.csv" 2>/dev/null &&
      python3 "${here}/tools/gpu/ncu_stalls.py" "${results}/${name}_source.csv" --top 24
  } > "${results}/${name}.txt" 2>&1
}

budget_step mxfp4_bf16_gemm_test 60 "${bundle}/bin/kernels_cuda_moe_mxfp4_bf16_gemm_sm90_test" \
  || status=1
budget_step bf16_gemm_cutlass_test 90 "${bundle}/bin/kernels_cuda_dense_bf16_gemm_cutlass_test" \
  || status=1
budget_step moe_permute_test 60 "${bundle}/bin/kernels_cuda_moe_moe_permute_test" \
  --gtest_filter='*Combine*' || status=1
budget_step swiglu_test 60 "${bundle}/bin/kernels_cuda_decode_swiglu_test" || status=1
budget_step bf16_split_test 60 "${bundle}/bin/kernels_cuda_moe_bf16_split_test" || status=1
# The gate's logits: MoeGateLogits against the bf16 hi/lo split's one GEMM.
budget_step moe_gate_bench 60 "${bundle}/tools/moe_gate_bench"
budget_step mxfp4_bench_prefill 120 "${route_bench[@]}"
budget_step fp8_bench_prefill 120 "${bundle}/tools/fp8_gemm_bench" prefill
budget_step chunk_defaults 90 "${decode}" "${slice[@]}"
# The prompt's bf16 products unsplit (a prompt row's other fixed maths): does
# the fold of the splits cost the chunk time? Then the same on CUTLASS's GEMM
# where it takes them (bf16_cutlass: the unsplit tile's bits).
budget_step chunk_unsplit 90 "${decode}" "${slice[@]}" --prompt_bf16_unsplit=true
budget_step chunk_cutlass 90 "${decode}" "${slice[@]}" --prompt_bf16_unsplit=true --bf16_cutlass=true
# The route's one scale test a stage, and with it the wgmma N fit to the
# tile's rows.
budget_step chunk_stage_test 90 "${decode}" "${slice[@]}" --bf16_route_stage_scale_test=true
budget_step chunk_fit_n 90 "${decode}" "${slice[@]}" --bf16_route_stage_scale_test=true \
  --bf16_route_fit_tile_rows=true
budget_step chunk_3wg 90 "${decode}" "${slice[@]}" --bf16_route_stage_scale_test=true \
  --bf16_route_warpgroups=3
# The 256-row bf16 tile where its weight is large (wq_b, wo_b).
budget_step chunk_m256_large 90 "${decode}" "${slice[@]}" --bf16_ws_m256_large=true
# EP8 decode at the issue's context (4,096): batch 1 and 64 against the
# stored-form floor (the issue asks at most 3x and 1.5x).
budget_step ep8_decode_4096 120 "${decode}" --ep_slice=8 --numerics=fast --batches=1,64 \
  --context=4096 --steps=4 --warmup=1 --slice_profile=false
# The register form's gate/up launch of w1 (the bench's third launch of each:
# past a warm-up) as it is, with one scale test a stage, and with the wgmma N
# fit to the tile's rows.
profile rs128 'GroupedRsKernel<128, \(bool\)0, \(bool\)0, \(bool\)0, 2>' 2 "${route_bench[@]}"
profile rs128_stage_test 'GroupedRsKernel<128, \(bool\)0, \(bool\)1, \(bool\)0, 3>' 2 "${route_bench[@]}"
budget_step device_decoder_fast_test 180 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter='*RouteForms*:*WsForms*:*Cutlass*:*PromptUnsplit*' || status=1
profile rs128_fit_n 'GroupedRsKernel<128, \(bool\)0, \(bool\)1, \(bool\)1, 2>' 2 "${route_bench[@]}"
profile bf16_ws 'Bf16GemmWsKernel' 4 "${bundle}/tools/fp8_gemm_bench" prefill
budget_step bf16_gemm_test 60 "${bundle}/bin/kernels_cuda_dense_bf16_gemm_sm90_test" \
  --gtest_filter='*WarpSpecialized*:*RowRole*:*RowStride*' || status=1
# Without programmatic edges, so each kernel's busy time is its own (with
# them a kernel's time includes its wait for the one before).
budget_step chunk_timeline 120 "${decode}" "${slice[@]}" --prefill_timeline --programmatic=false
budget_step chunk_defaults_2 90 "${decode}" "${slice[@]}"
echo "== summary"
cat "${results}/summary.txt"
echo "== tests"
grep -hE '^\[  (PASSED|FAILED)|FAILED  \]|Failure|of [0-9]+ rows|differing' \
  "${results}"/*test*.log 2>/dev/null | head -n 40
echo "== the gate's logits"
grep -A6 "^gate logits" "${results}/moe_gate_bench.log" 2>/dev/null
echo "== experts' bf16 route"
sed -n '/^Prefill:/,$p' "${results}/mxfp4_bench_prefill.log" 2>/dev/null | grep -E 'bf16 route|cuBLASLt'
for name in rs128 rs128_stage_test rs128_fit_n bf16_ws; do
  echo "== ncu ${name}"
  head -c 5000 "${results}/${name}.txt" 2>/dev/null
done
echo "== prefill"
for log in "${results}"/chunk_*.log; do
  [[ -f "${log}" ]] || continue
  echo "${log##*/}: $(grep -h '^prefill:' "${log}")"
done
echo "== EP8 decode at context 4096 (batch, context, step_ms, ..., floor_ms, ratio)"
grep -E '^ +(1|64) +[0-9]+ +[0-9.]+ ' "${results}/ep8_decode_4096.log" 2>/dev/null | head -4
echo "== the chunk's kernel timeline (defaults, no programmatic edges)"
sed -n '/prefill timeline/,/^prefill:/p' "${results}/chunk_timeline.log" 2>/dev/null | head -16
echo "== the prompt's bf16 route (dense)"
sed -n "/^The prompt's bf16 route/,/^\$/p" "${results}/fp8_bench_prefill.log" 2>/dev/null | head -10
sed -n "/^CUTLASS bf16/,/^\$/p" "${results}/fp8_bench_prefill.log" 2>/dev/null | head -8
exit "${status}"
