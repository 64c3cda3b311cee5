#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root: the route's candidates
# waiting on branches, each from its own bundle, in one call under BUDGET_S
# (default 540; check_steps.sh). For each NAME:BUNDLE:FLAG:FILTER argument
# (BUNDLE a packed route bundle, .gpu_pack/NAME.tar.xz as tools/gpu/bundle.sh
# made it on the branch; FLAG the branch's decode_gpu option; FILTER its
# device_decoder_fast_test cases), most telling first:
#   1. the route's kernel test and the decoder's cases, from that bundle;
#   2. the EP8 prefill chunk with the bundle's defaults and with FLAG,
#      alternated, two rounds;
#   3. the route's bench at the chunk's shape (its ballot-search and fused
#      lines).
# The forty-first session's branches:
#   tools/gpu/branch_check.sh $OUT/b \
#     persistent:.gpu_pack/persistent.tar.xz:--bf16_route_persistent=true:'*RouteForms*' \
#     swiglu:.gpu_pack/swiglu.tar.xz:--bf16_route_swiglu=true:'*RouteForms*:*RouteSwiglu*'
# Every log goes into RESULTS/logs.tar.xz at the end (a call brings back 8
# files at most); the summary and the chunks' lines print last.
set -uo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
results="${1:?usage: branch_check.sh RESULTS NAME:BUNDLE:FLAG:FILTER...}"
shift
bundle="${here}/.gpu_bundle"  # check_steps.sh's library path; each branch sets its own below
# shellcheck source=tools/gpu/check_steps.sh
source "${here}/tools/gpu/check_steps.sh"
slice=(--ep_slice=8 --numerics=fast --batches=1 --context=4096 --prefill_chunk=4096 --steps=2
       --warmup=1 --slice_profile=false)
base_path="${LD_LIBRARY_PATH}"
for spec in "$@"; do
  IFS=: read -r name pack flag filter <<< "${spec}"
  dir="${here}/.branch_${name}"
  rm -rf "${dir}" && mkdir -p "${dir}" && tar -xJf "${here}/${pack}" -C "${dir}" || {
    echo "${name}: cannot unpack ${pack}" | tee -a "${results}/summary.txt"
    status=1
    continue
  }
  b="${dir}/.gpu_bundle"
  export LD_LIBRARY_PATH="${b}/lib:${base_path}"
  budget_step "${name}_route_kernel_test" 90 "${b}/bin/kernels_cuda_moe_mxfp4_bf16_gemm_sm90_test" ||
    status=1
  budget_step "${name}_decoder_test" 150 "${b}/bin/worker_model_device_decoder_fast_test" \
    --gtest_filter="${filter}" || status=1
  for round in "" _2; do
    budget_step "${name}_chunk_defaults${round}" 60 "${b}/tools/decode_gpu" "${slice[@]}"
    budget_step "${name}_chunk_flag${round}" 60 "${b}/tools/decode_gpu" "${slice[@]}" "${flag}"
  done
  budget_step "${name}_bench" 120 "${b}/tools/mxfp4_grouped_gemm_bench" 384 8 wgmma 32768
done
echo "== the route's lines at 513 rows an expert (32,768 tokens)"
for log in "${results}"/*_bench.log; do
  [[ -f "${log}" ]] || continue
  echo "${log##*/}:"
  grep -E 'ballot search|SwiGLU|cuBLASLt' "${log}" | cut -c1-200 | tail -5
done
echo "== summary"
cat "${results}/summary.txt"
echo "== tests"
grep -hE '^\[  (PASSED|FAILED)|FAILED  \]|Failure' "${results}"/*test*.log 2>/dev/null |
  cut -c1-160 | head -n 24
echo "== prefill"
for log in "${results}"/*chunk_*.log; do
  [[ -f "${log}" ]] || continue
  echo "${log##*/}: $(grep -h '^prefill:' "${log}" | cut -c60-200)"
done
(cd "${results}" && tar -cJf logs.tar.xz --exclude=logs.tar.xz -- *.log &&
  find . -maxdepth 1 -type f -name '*.log' -delete)
exit "${status}"
