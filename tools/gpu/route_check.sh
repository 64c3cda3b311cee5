#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `tar -xJf .gpu_pack/bundle.tar.xz`: the prefill's open questions after the
# forty-first session, most telling first under BUDGET_S (default 540;
# check_steps.sh):
#   1. tests: the bf16 route's kernel test (the 256-row tile among its
#      forms) and the decoder's route-form case (form 10 the 256-row tile);
#   2. the EP8 prefill chunk with the defaults (the 256-row route tile, the
#      deep ring, the collapse-norms' 256-thread blocks and the gate's norm
#      input on since the forty-first session) and with the 128-row tile
#      (--bf16_route_x_rows=0) and (branch wip/route-swiglu) with the gate /
#      up / SwiGLU launch (--bf16_route_swiglu), two rounds;
#   3. the route's bench at the chunk's shape (32,768 tokens: 513 rows an
#      expert) and ncu of the 256-row tile inside the chunk (what bounds it
#      now: at 128 rows the ring waits and the widening shared the loop);
#   4. a census of the chunk's kernels under ncu (two cheap metrics, 60
#      launches: ncu_census.py), to find the kernels far from the copy rate,
#      and the chunk's kernel timeline without programmatic edges;
#   5. EP8 decode at context 4,096 (batches 1 and 64), then the decoder
#      test's first shard (GTEST_TOTAL_SHARDS=3) with the time left: the
#      whole test has not run under the forty-first session's defaults.
# Bundle (here, a few minutes with a warm cache):
#   BUNDLE_TARGETS="//worker/model:device_decoder_fast_test //tools/bench:decode_gpu
#     //kernels/cuda/moe:mxfp4_grouped_gemm_bench //kernels/cuda/moe:mxfp4_bf16_gemm_sm90_test"
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
budget_step device_decoder_fast_test 120 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter='*RouteForms*:*RouteSwiglu*' || status=1
# The chunk's forms, NAME:FLAG (the defaults' row names a default value), two
# rounds in turn.
chunk_forms=(defaults:--bf16_route_x_rows=256 x128:--bf16_route_x_rows=0
  swiglu:--bf16_route_swiglu=true)
for round in "" _2; do
  for form in "${chunk_forms[@]}"; do
    budget_step "chunk_${form%%:*}${round}" 90 "${decode}" "${slice[@]}" "${form#*:}"
  done
done
# The route's forms at the chunk's shape: 32,768 tokens' pairs over 384
# experts, 513 rows a local expert.
budget_step mxfp4_bench_chunk_shape 150 "${route_bench[@]:0:4}" 32768
# The 256-row tile inside the chunk: layer 1's gate product (the template's
# 4th launch in the timed prefill; ncu spells the template's arguments
# `(int)256, (bool)1, ...`).
rs256_regex='GroupedRsKernel<\(int\)256, \(bool\)1, \(bool\)1, \(bool\)0, \(int\)2>'
NCU_FROM_START=off profile rs256_chunk "${rs256_regex}" 3 "${decode}" "${slice[@]}" \
  --profile_prefill
# 60 of the timed chunk's kernels past its first 100 (--profile_prefill
# brackets the timed fill), two metrics (the fortieth session's five over 100
# launches ran past 169 s: each launch is replayed with its memory saved).
census_metrics="gpu__time_duration.sum,dram__bytes.sum"
if budget_step ncu_census 150 "${ncu_bin}" --profile-from-start off --metrics "${census_metrics}" \
    --launch-skip 100 --launch-count 60 -f -o "${results}/census" \
    "${decode}" "${slice[@]}" --profile_prefill; then
  "${ncu_bin}" -i "${results}/census.ncu-rep" --page raw --csv --metrics "${census_metrics}" \
    > "${results}/census_raw.csv" 2>&1
  python3 "${here}/tools/gpu/ncu_census.py" "${results}/census_raw.csv" --top 30 \
    > "${results}/census.txt" 2>&1
fi
# Without programmatic edges, so each kernel's busy time is its own.
budget_step chunk_timeline 120 "${decode}" "${slice[@]}" --prefill_timeline --programmatic=false
# The two same-bits options that moved the chunk by nothing measurable in the
# forty-first session (bf16 gate / up: the SwiGLU's inputs halved; the
# norm's dequantized bf16: five or six widenings a layer fewer): their
# timelines, to see whether the SwiGLU and the widenings shrank and what
# grew instead (decode_gpu prints whether each option ran).
budget_step chunk_timeline_gate_up_bf16 60 "${decode}" "${slice[@]}" --prefill_timeline \
  --programmatic=false --bf16_route_gate_up_bf16=true
budget_step chunk_timeline_norm_dequant 60 "${decode}" "${slice[@]}" --prefill_timeline \
  --programmatic=false --prompt_norm_dequant_bf16=true
budget_step decode_ep8 150 "${decode}" --ep_slice=8 --numerics=fast --batches=1,64 \
  --context=4096 --prefill_chunk=4096 --steps=3 --warmup=1 --slice_profile=false
budget_step decoder_test_shard0 400 env GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=0 \
  "${bundle}/bin/worker_model_device_decoder_fast_test" || status=1
for name in rs256_chunk; do
  echo "== ncu ${name}"
  head -c 2000 "${results}/${name}.txt" 2>/dev/null
done
echo "== census of 60 of the chunk's kernels (ncu_census.py)"
cut -c1-120 "${results}/census.txt" 2>/dev/null | head -32
echo "== the chunk's kernel timeline (defaults, no programmatic edges; names cut)"
sed -n '/prefill timeline/,/^prefill:/p' "${results}/chunk_timeline.log" 2>/dev/null | head -18 |
  cut -c1-110
echo "== the route's forms at 513 rows an expert (32,768 tokens)"
sed -n '/^Prefill:/,$p' "${results}/mxfp4_bench_chunk_shape.log" 2>/dev/null |
  grep -E 'ballot search|cuBLASLt' | cut -c1-200 | head -8
echo "== EP8 decode at 4,096"
grep -E '^ *(1|64) ' "${results}/decode_ep8.log" 2>/dev/null | cut -c1-150
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
