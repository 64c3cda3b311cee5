#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `tar -xJf .gpu_pack/bundle.tar.xz`: the prefill's open questions after the
# fortieth session, most telling first under BUDGET_S (default 540;
# check_steps.sh):
#   1. tests: the bf16 route's kernel test (the deep ring beside the ballot
#      search among its forms), the mHC kernels' test (the collapse-norms'
#      blocks of 256 threads), the SwiGLU's (bf16 gate / up), the decoder's
#      route-form, norm-block, bf16 gate / up and gate-input cases (route
#      form 9: the defaults' route with the deep ring);
#   2. the EP8 prefill chunk with the defaults (the ballot search on since
#      the fortieth session), with the deep ring (--bf16_route_deep_ring),
#      with the collapse-norms' 256-thread blocks (--norm_block_threads=256),
#      with the route's bf16 gate / up (--bf16_route_gate_up_bf16) and with
#      the prompt gate reading the norm's bf16 form
#      (--prompt_gate_norm_bf16) and with the prompt's products of h reading
#      the norm's dequantized bf16 (--prompt_norm_dequant_bf16), alternated,
#      two rounds;
#   3. the route's bench and ncu of its default form (the ballot search) and
#      of the deep ring beside it: where the route's warps wait once the
#      expert walk is gone (the thirty-ninth session's ncu: 30 % of the
#      samples before the loop, 36 % of the loop's on the ring's barriers);
#      then ncu of the route inside the chunk (512 rows an expert, full X
#      tiles: the bench's shape has 65), and the bench's forms at that shape
#      (32,768 tokens);
#   4. a census of two layers of the chunk's kernels under ncu (time, DRAM
#      bytes and rate, throughputs, occupancy a kernel: ncu_census.py), to
#      find the kernels far from the copy rate, and the chunk's kernel
#      timeline without programmatic edges;
#   5. the nine decoder cases the fortieth session's three shards left unrun
#      under today's defaults, then with the time left the decoder's first
#      shard (GTEST_TOTAL_SHARDS=3).
# The summary prints the long parts first, so the call's output tail (its
# last 12,000 characters) ends with the tests and the chunk's times; every
# log and ncu page is packed into RESULTS/logs.tar.xz at the end (a call
# brings back 8 files at most), the .ncu-rep reports left out.
# Bundle (here, a few minutes with a warm cache):
#   BUNDLE_TARGETS="//worker/model:device_decoder_fast_test //tools/bench:decode_gpu
#     //kernels/cuda/moe:mxfp4_grouped_gemm_bench //kernels/cuda/moe:mxfp4_bf16_gemm_sm90_test
#     //kernels/cuda/moe:hc_mix_split_test //kernels/cuda/moe:mhc_test
#     //kernels/cuda/decode:swiglu_test"
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
# kernels whose demangled name matches (ncu spells a bool template argument
# `(bool)0`), --set full, into RESULTS/NAME.ncu-rep; then its source page
# reduced by ncu_stalls.py and the details page's lines that say what bounds
# the kernel, into RESULTS/NAME.txt.
# With NCU_FROM_START=off, only the launches the program brackets with
# cudaProfilerStart / Stop count (decode_gpu --profile_prefill: the chunk's).
profile() {
  local name="$1" regex="$2" skip="$3"
  shift 3
  budget_step "ncu_${name}" 150 "${ncu_bin}" --set full --kernel-name-base demangled \
    --profile-from-start "${NCU_FROM_START:-on}" \
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

budget_step route_kernel_test 120 "${bundle}/bin/kernels_cuda_moe_mxfp4_bf16_gemm_sm90_test" \
  || status=1
unrun='*SmallBf16PromptGateLongChunk*:*SmallBf16PromptLinearsLongChunk*'
unrun+=':*PromptBf16LinearsMixedEagerStepsGive*:*ReferenceMixedEagerSteps*'
unrun+=':*PromptBf16ExpertsTileFormBeside*:*StoredKvRollbackIsBatchInvariant*'
unrun+=':*StoredKvPromptShapeChunked*:*SmallBf16WithWgmmaChunkedSteps*'
unrun+=':*SmallBf16WithWgmmaEverywhereIsBatchInvariant*'
budget_step mhc_test 60 "${bundle}/bin/kernels_cuda_moe_mhc_test" || status=1
budget_step swiglu_test 60 "${bundle}/bin/kernels_cuda_decode_swiglu_test" || status=1
budget_step device_decoder_fast_test 200 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter='*RouteForms*:*NormClusters*:*RouteGateUpBf16*:*PromptGateNormBf16*:*PromptNormDequant*' \
  || status=1
# The chunk's forms, NAME:FLAG (the defaults' row names a default value), two
# rounds in turn.
chunk_forms=(defaults:--bf16_route_deep_ring=false deep_ring:--bf16_route_deep_ring=true
  norm256:--norm_block_threads=256 gate_up_bf16:--bf16_route_gate_up_bf16=true
  gate_norm_bf16:--prompt_gate_norm_bf16=true norm_dequant:--prompt_norm_dequant_bf16=true)
for round in "" _2; do
  for form in "${chunk_forms[@]}"; do
    budget_step "chunk_${form%%:*}${round}" 90 "${decode}" "${slice[@]}" "${form#*:}"
  done
done
budget_step mxfp4_bench_prefill 120 "${route_bench[@]}"
# The route's gate/up launch of w1 in the bench's row of the default form
# with the ballot search (the third launch of that row: past a warm-up),
# then the deep ring's with it. Each template runs two rows, the walk's
# first; a row launches its template 24 times (3 + 5 gate/up pairs, 3 + 5
# downs), so the ballot row's third launch is the template's 27th. ncu
# spells the template's arguments `(int)128, (bool)0` (the thirty-ninth
# session's run matched with this regex).
rs_regex='GroupedRsKernel<\(int\)128, \(bool\)0, \(bool\)1, \(bool\)0, \(int\)3>'
deep_regex='GroupedRsKernel<\(int\)128, \(bool\)1, \(bool\)1, \(bool\)0, \(int\)3>'
profile rs128_3wg_ballot "${rs_regex}" 26 "${route_bench[@]}"
profile rs128_3wg_deep_ballot "${deep_regex}" 26 "${route_bench[@]}"
# The route in the chunk itself (512 rows an expert, where the bench's rows
# are 65: full X tiles), layer 1's gate product (the template's 4th launch
# in the timed prefill).
NCU_FROM_START=off profile rs128_chunk "${rs_regex}" 3 "${decode}" "${slice[@]}" \
  --profile_prefill
# Two layers of the timed chunk's kernels (past two: --profile_prefill
# brackets the timed fill with cudaProfilerStart / Stop), light metrics
# (each launch replayed with its memory saved and restored: about a second).
census_metrics="gpu__time_duration.sum,dram__bytes.sum"
census_metrics+=",dram__throughput.avg.pct_of_peak_sustained_elapsed"
census_metrics+=",sm__throughput.avg.pct_of_peak_sustained_elapsed"
census_metrics+=",sm__warps_active.avg.pct_of_peak_sustained_active"
if budget_step ncu_census 180 "${ncu_bin}" --profile-from-start off --metrics "${census_metrics}" \
    --launch-skip 100 --launch-count 100 -f -o "${results}/census" \
    "${decode}" "${slice[@]}" --profile_prefill; then
  "${ncu_bin}" -i "${results}/census.ncu-rep" --page raw --csv --metrics "${census_metrics}" \
    > "${results}/census_raw.csv" 2>&1
  python3 "${here}/tools/gpu/ncu_census.py" "${results}/census_raw.csv" --top 30 \
    > "${results}/census.txt" 2>&1
fi
# The route's forms at the chunk's shape: 32,768 tokens' pairs over 384
# experts, 512 rows a local expert (the default bench's 4,096 give 65).
budget_step mxfp4_bench_chunk_shape 150 "${route_bench[@]:0:4}" 32768
# Without programmatic edges, so each kernel's busy time is its own.
budget_step chunk_timeline 120 "${decode}" "${slice[@]}" --prefill_timeline --programmatic=false
# The decoder's cases the fortieth session left unrun under today's defaults,
# then, with whatever time is left, its first shard.
budget_step decoder_test_unrun 300 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter="${unrun}" || status=1
budget_step decoder_test_shard0 240 env GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=0 \
  "${bundle}/bin/worker_model_device_decoder_fast_test" || status=1
for name in rs128_3wg_ballot rs128_3wg_deep_ballot rs128_chunk; do
  echo "== ncu ${name}"
  head -c 2000 "${results}/${name}.txt" 2>/dev/null
done
echo "== census of two layers of the chunk (ncu_census.py)"
cut -c1-120 "${results}/census.txt" 2>/dev/null | head -32
echo "== the chunk's kernel timeline (defaults, no programmatic edges; names cut)"
sed -n '/prefill timeline/,/^prefill:/p' "${results}/chunk_timeline.log" 2>/dev/null | head -18 |
  cut -c1-110
echo "== experts' bf16 route"
sed -n '/^Prefill:/,$p' "${results}/mxfp4_bench_prefill.log" 2>/dev/null |
  grep -E 'bf16 route|cuBLASLt' | tail -4
echo "== the route's forms at 512 rows an expert (32,768 tokens)"
sed -n '/^Prefill:/,$p' "${results}/mxfp4_bench_chunk_shape.log" 2>/dev/null |
  grep -E 'bf16 route|cuBLASLt|register A' | cut -c1-150 | head -20
echo "== summary"
cat "${results}/summary.txt"
echo "== tests"
grep -hE '^\[  (PASSED|FAILED)|FAILED  \]|Failure|rows differ|agreement|^HcMixTf32' \
  "${results}"/*test*.log 2>/dev/null | cut -c1-160 | head -n 24
echo "== prefill"
for log in "${results}"/chunk_*.log; do
  [[ -f "${log}" ]] || continue
  echo "${log##*/}: $(grep -h '^prefill:' "${log}")"
done
# One file for every log and page (the call brings back 8 files at most).
(cd "${results}" && tar -cJf logs.tar.xz --exclude='*.ncu-rep' --exclude=logs.tar.xz -- * &&
  find . -maxdepth 1 -type f ! -name logs.tar.xz ! -name summary.txt ! -name '*.ncu-rep' -delete)
exit "${status}"
