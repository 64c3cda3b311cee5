#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `tar -xJf .gpu_pack/bundle.tar.xz`: the prefill's open questions after the
# thirty-ninth session, most telling first under BUDGET_S (default 540;
# check_steps.sh):
#   1. tests: the bf16 route's kernel test (its forms with the ballot group
#      search, 70 experts), the decoder's route-form cases (the ballot
#      search among them), its prompt gate / TF32 mHC / mma indexer cases
#      (on by default since the thirty-ninth session), HcMixTf32's test (its
#      bound set from that session's run);
#   2. the EP8 prefill chunk with the defaults, with --bf16_route_ballot_search,
#      and the defaults again; with HcMixTf32's promoted sums
#      (--prompt_tf32_mhc_promote; its kernel test and the trained tiny's
#      bars in 1.); with the route's deep ring beside the one scale test a
#      stage and three warpgroups (--bf16_route_deep_ring: its kernel and
#      decoder forms in 1.);
#   3. the route's bench (its ballot-search row) and ncu of the route's
#      default form with and without the ballot search (how much of its
#      samples the group walk took: a fifth to a third in the thirty-ninth
#      session);
#   4. EP8 decode at context 4,096 (batch 1 and 64 against the floor, with
#      the steps' kernel timelines) and the chunk's kernel timeline without
#      programmatic edges;
#   5. with the time left, the first third of device_decoder_fast_test's
#      cases (GTEST_TOTAL_SHARDS=3).
# The summary prints the long parts first, so the call's output tail (its
# last 12,000 characters) ends with the tests and the chunk's times.
# Bundle (here, a few minutes with a warm cache):
#   BUNDLE_TARGETS="//worker/model:device_decoder_fast_test //tools/bench:decode_gpu
#     //kernels/cuda/moe:mxfp4_grouped_gemm_bench //kernels/cuda/moe:mxfp4_bf16_gemm_sm90_test
#     //kernels/cuda/moe:hc_mix_split_test"
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

budget_step route_kernel_test 120 "${bundle}/bin/kernels_cuda_moe_mxfp4_bf16_gemm_sm90_test" \
  || status=1
budget_step device_decoder_fast_test 200 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter='*RouteForms*:*PromptTf32Mhc*:*PromptBf16Gate*:*MmaIndexer*:*TrainedTinyBf16WithPrompt*' \
  || status=1
budget_step hc_mix_split_test 60 "${bundle}/bin/kernels_cuda_moe_hc_mix_split_test" || status=1
budget_step chunk_defaults 90 "${decode}" "${slice[@]}"
budget_step chunk_ballot 90 "${decode}" "${slice[@]}" --bf16_route_ballot_search=true
budget_step chunk_defaults_2 90 "${decode}" "${slice[@]}"
budget_step chunk_ballot_2 90 "${decode}" "${slice[@]}" --bf16_route_ballot_search=true
budget_step chunk_mhc_promote 90 "${decode}" "${slice[@]}" --prompt_tf32_mhc_promote=true
budget_step chunk_deep_ring 90 "${decode}" "${slice[@]}" --bf16_route_deep_ring=true
budget_step mxfp4_bench_prefill 120 "${route_bench[@]}"
# The route's gate/up launch of w1 in its default form (the bench's third
# launch of it: past a warm-up), then the same template with the ballot
# search (the bench's row after the "three warpgroups" one, which launches
# the template 24 times, 3 + 5 gate/up pairs and 3 + 5 downs; the deep-ring
# row after it is another template). ncu
# spells the template's arguments `(int)128, (bool)0` (the thirty-ninth
# session's run matched with this regex).
rs_regex='GroupedRsKernel<\(int\)128, \(bool\)0, \(bool\)1, \(bool\)0, \(int\)3>'
profile rs128_3wg "${rs_regex}" 2 "${route_bench[@]}"
profile rs128_3wg_ballot "${rs_regex}" 26 "${route_bench[@]}"
# EP8 decode at the issue's context (4,096): batch 1 and 64 against the
# stored-form floor (the issue asks at most 3x and 1.5x); batch 64 takes
# about three minutes to set up.
budget_step ep8_decode_4096 240 "${decode}" --ep_slice=8 --numerics=fast --batches=1,64 \
  --context=4096 --steps=3 --warmup=1 --slice_profile=false --kernel_timeline
# Without programmatic edges, so each kernel's busy time is its own.
budget_step chunk_timeline 120 "${decode}" "${slice[@]}" --prefill_timeline --programmatic=false
# Whatever time is left: the first third of the decoder's cases under the
# defaults (they have not run together since the thirty-seventh session).
budget_step decoder_test_shard0 240 env GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=0 \
  "${bundle}/bin/worker_model_device_decoder_fast_test" || status=1
for name in rs128_3wg rs128_3wg_ballot; do
  echo "== ncu ${name}"
  head -c 3500 "${results}/${name}.txt" 2>/dev/null
done
echo "== EP8 decode's kernel timelines at context 4096 (programmatic edges: upper bounds)"
grep -A12 "kernel timeline of batch" "${results}/ep8_decode_4096.log" 2>/dev/null | head -30
echo "== the chunk's kernel timeline (defaults, no programmatic edges)"
sed -n '/prefill timeline/,/^prefill:/p' "${results}/chunk_timeline.log" 2>/dev/null | head -18
echo "== experts' bf16 route"
sed -n '/^Prefill:/,$p' "${results}/mxfp4_bench_prefill.log" 2>/dev/null |
  grep -E 'bf16 route|cuBLASLt' | tail -4
echo "== summary"
cat "${results}/summary.txt"
echo "== tests"
grep -hE '^\[  (PASSED|FAILED)|FAILED  \]|Failure|rows differ|agreement|^HcMixTf32' \
  "${results}"/*test*.log 2>/dev/null | cut -c1-200 | head -n 30
echo "== EP8 decode at context 4096 (batch, context, step_ms, ..., floor_ms, ratio)"
grep -E '^ +(1|64) +[0-9]+ +[0-9.]+ ' "${results}/ep8_decode_4096.log" 2>/dev/null | head -4
echo "== prefill"
for log in "${results}"/chunk_*.log; do
  [[ -f "${log}" ]] || continue
  echo "${log##*/}: $(grep -h '^prefill:' "${log}")"
done
exit "${status}"
