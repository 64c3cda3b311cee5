#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `tar -xJf .gpu_pack/bundle.tar.xz`: the open questions after the
# forty-seventh session's build, most telling first under BUDGET_S (default
# 540; check_steps.sh; what does not fit is skipped and named in
# summary.txt; a second call runs those with ONLY_STEPS='regex'):
#   0. the experts' route in its decode form (Mxfp4Bf16GroupedGemmParams::
#      decode_mma, built in the forty-seventh session): the route's kernel
#      test (every form against Bf16Gemm's bits, the decode forms among
#      them), moe_permute_test (the gather's bf16 values of X), the bench's decode rows (the FP8 decode kernel's tiles, the
#      route's register form and the decode form, each against copy), the
#      decoder's same-bits case, and EP8 decode at context 4,096, batches 1
#      and 64, with every row's experts on the route in the decode form
#      against the defaults;
#   1. the decode indexer on the tensor cores (IndexerScoreForm::
#      kDecodeMmaBf16, built in the forty-sixth session): indexer_score_test
#      (every case, every form, against the CPU's bits), indexer_score_bench
#      (the decode batches), the decoder's same-bits case, and EP8 decode at
#      context 4,096, batches 1 and 64, with and without
#      --indexer_decode_mma, two rounds; small's slice with each kernel's
#      own time;
#   2. cuBLASLt's block-scaled FP8 (fp8_lt_gemm_test with its workspace;
#      the decoder's prompt_fp8_lt cases at their measured levels) and the
#      EP8 chunk with the defaults and with --prompt_fp8_lt (both weight
#      forms; a ceiling, never timed); fp8_gemm_bench prefill's block-scaled
#      rows;
#   3. the decoder test's three shards under the defaults (the suite has not
#      run whole since the forty-second session);
#   4. EP8 decode with the kernel timeline (the decode indexer on), the
#      chunk's timeline, ncu of the prompt attention's mirror form with its
#      whole report.
# Bundle (here, a few minutes with a warm cache):
#   BUNDLE_TARGETS="//worker/model:device_decoder_fast_test //tools/bench:decode_gpu
#     //kernels/cuda/attention:indexer_score_test //kernels/cuda/attention:indexer_score_bench
#     //kernels/cuda/moe:mxfp4_bf16_gemm_sm90_test //kernels/cuda/attention:topk_test
#     //kernels/cuda/dense:fp8_lt_gemm_test //kernels/cuda/dense:fp8_gemm_bench
#     //kernels/cuda/moe:mxfp4_grouped_gemm_bench //kernels/cuda/moe:moe_permute_test"
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

# The route's decode form: its kernel test (every form), the bench's decode
# rows (PREFILL_TOKENS 0: the decode table only), the decoder's same-bits
# case, then EP8 decode with every row's experts on the route's decode form
# (the defaults follow in decode_round).
budget_step route_kernel_test 150 "${bundle}/bin/kernels_cuda_moe_mxfp4_bf16_gemm_sm90_test" \
  || status=1
# (The gather's bf16 values of X, MoeGroupRowsParams::bf16_grouped.)
budget_step permute_test 60 "${bundle}/bin/kernels_cuda_moe_moe_permute_test" || status=1
budget_step route_decode_bench 150 "${bundle}/tools/mxfp4_grouped_gemm_bench" 384 8 mma 0
budget_step decoder_route_decode_test 150 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter='*RouteDecodeForm*:*ExpertsEveryRow*' || status=1
budget_step decode_route_mma 90 "${decode}" --ep_slice=8 --numerics=fast --batches=1,64 \
  --context=4096 --prefill_chunk=4096 --steps=8 --warmup=2 --slice_profile=false \
  --bf16_experts_every_row --bf16_route_decode_mma
# The decode indexer on the tensor cores: every case and form against the
# CPU's bits; its bench; the decoder's case (chunk and decode steps with
# every indexer option give the per-query form's bits).
budget_step indexer_test 90 "${bundle}/bin/kernels_cuda_attention_indexer_score_test" || status=1
budget_step indexer_bench 60 "${bundle}/tools/indexer_score_bench"
budget_step decoder_indexer_test 150 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter='*IndexerGivesThePerQueryBits*' || status=1
# EP8 decode at 4,096, batches 1 and 64, the defaults and the decode
# indexer, two rounds in turn (about 45 s each: batch 64's context comes
# from 64 prompts of 4,096 positions).
decode_round() {  # decode_round SUFFIX
  budget_step "decode_defaults$1" 90 "${decode}" --ep_slice=8 --numerics=fast --batches=1,64 \
    --context=4096 --prefill_chunk=4096 --steps=8 --warmup=2 --slice_profile=false
  budget_step "decode_idx$1" 90 "${decode}" --ep_slice=8 --numerics=fast --batches=1,64 \
    --context=4096 --prefill_chunk=4096 --steps=8 --warmup=2 --slice_profile=false \
    --indexer_decode_mma
}
decode_round ""
decode_round _2
# small's slice with each kernel's own time (no programmatic edges), batches
# 1 and 64, the decode indexer on: what small's step (1.18 / 1.89 ms against
# the issue's 1.0 / 1.5) is made of now (the thirtieth session's last).
budget_step small_timeline 60 "${decode}" --ep_slice=1 --slice_config=models/small/config.json \
  --numerics=fast --slice_profile=false --batches=1,64 --context=64 --steps=20 --warmup=2 \
  --kernel_timeline --programmatic=false --indexer_decode_mma
# cuBLASLt's block-scaled FP8 over the re-blocked stored forms: the
# re-blocking's bytes, the product against the exact one, the scale layouts,
# batch invariance; then the decoder's cases (the long chunk against short
# chunks, mixed steps, the trained tiny at its measured level).
budget_step lt_gemm_test 90 "${bundle}/bin/kernels_cuda_dense_fp8_lt_gemm_test" || status=1
budget_step decoder_lt_test 150 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter='*PromptFp8Lt*' || status=1
# topk_test passed in the forty-third session and its kernel has not moved
# since: with TESTS_ALL=1 only.
if [[ -n "${TESTS_ALL:-}" ]]; then
  budget_step topk_test 60 "${bundle}/bin/kernels_cuda_attention_topk_test" || status=1
fi
# The chunk with the defaults and on cuBLASLt's block-scaled FP8 (a
# ceiling: its fidelity misses the bars), NAME:FLAGS (split at commas).
chunk_forms=(defaults:--prompt_fp8_lt=false lt:--prompt_fp8_lt=true
  lt_blocks:--prompt_fp8_lt=true,--prompt_fp8_lt_blocks=true)
chunk_round() {  # chunk_round SUFFIX
  local flags
  for form in "${chunk_forms[@]}"; do
    IFS=, read -r -a flags <<< "${form#*:}"
    budget_step "chunk_${form%%:*}$1" 90 "${decode}" "${slice[@]}" "${flags[@]}"
  done
}
chunk_round ""
# The block-scaled FP8's rows in fp8_gemm_bench's prefill table (against
# plain cuBLASLt FP8 on the same shapes, same run).
budget_step fp8_gemm_bench_prefill 120 "${bundle}/tools/fp8_gemm_bench" prefill
# The decoder test whole, in three shards.
for shard in 0 1 2; do
  budget_step "decoder_test_shard${shard}" 300 env GTEST_TOTAL_SHARDS=3 \
    GTEST_SHARD_INDEX="${shard}" "${bundle}/bin/worker_model_device_decoder_fast_test" || status=1
done
# Decode with each step's kernels on CUPTI's timeline (the graph's nodes one
# by one), the decode indexer on; the context by prefill chunks.
budget_step decode_ep8 150 "${decode}" --ep_slice=8 --numerics=fast --batches=1,64 \
  --context=4096 --prefill_chunk=4096 --steps=3 --warmup=1 --slice_profile=false \
  --kernel_timeline --indexer_decode_mma
# Without programmatic edges, so each kernel's busy time is its own.
budget_step chunk_timeline 120 "${decode}" "${slice[@]}" --prefill_timeline --programmatic=false
# The prompt attention's mirror form inside the chunk: the whole report's
# pages (the forty-fifth session's came back cut).
NCU_FROM_START=off profile attention_chunk 'SparseDecodeAttentionWgKernel<\(bool\)1' 1 \
  "${decode}" "${slice[@]}" --profile_prefill
if [[ -f "${results}/attention_chunk.ncu-rep" ]]; then
  "${ncu_bin}" -i "${results}/attention_chunk.ncu-rep" --page details \
    > "${results}/attention_chunk_details.txt" 2>&1
fi
echo "== ncu attention_chunk"
head -c 2000 "${results}/attention_chunk.txt" 2>/dev/null
grep -iE 'bank|conflict|uncoalesced|shared' "${results}/attention_chunk_details.txt" 2>/dev/null |
  cut -c1-200 | head -16
echo "== the chunk's kernel timeline (no programmatic edges; names cut)"
sed -n '/prefill timeline/,/^prefill:/p' "${results}/chunk_timeline.log" 2>/dev/null |
  head -18 | cut -c1-110
echo "== EP8 decode's kernel timelines (names cut)"
grep -A14 'kernel timeline of batch' "${results}/decode_ep8.log" 2>/dev/null | cut -c1-110 |
  head -34
echo "== small's slice, each kernel's own time (names cut)"
grep -A12 'kernel timeline of batch' "${results}/small_timeline.log" 2>/dev/null | cut -c1-110 |
  head -28
echo "== cuBLASLt's block-scaled FP8 (fp8_gemm_bench prefill)"
sed -n '/Fp8LtGemm/,/^$/p' "${results}/fp8_gemm_bench_prefill.log" 2>/dev/null | cut -c1-220 |
  head -14
echo "== the experts at decode (mxfp4_grouped_gemm_bench: the FP8 tiles, the route's forms)"
grep -E '^[0-9]+ |bf16 route|^tokens|batch' "${results}/route_decode_bench.log" 2>/dev/null |
  cut -c1-200 | head -n 40
echo "== the decode indexer (indexer_score_bench)"
head -n 8 "${results}/indexer_bench.log" 2>/dev/null | cut -c1-220
echo "== EP8 decode at 4,096"
for log in "${results}"/decode_*.log; do
  [[ -f "${log}" ]] || continue
  grep -E '^ *(1|64) ' "${log}" | sed "s|^|${log##*/}: |" | cut -c1-150
done
echo "== summary"
cat "${results}/summary.txt"
echo "== tests"
grep -hE '^\[  (PASSED|FAILED)|FAILED  \]|Failure|rows differ|agreement|worst' \
  "${results}"/*test*.log 2>/dev/null | cut -c1-160 | head -n 30
echo "== prefill"
for log in "${results}"/chunk_*.log; do
  [[ -f "${log}" ]] || continue
  echo "${log##*/}: $(grep -h '^prefill:' "${log}")"
done
# One file for every log and page (the call brings back 8 files at most).
(cd "${results}" && tar -cJf logs.tar.xz --exclude='*.ncu-rep' --exclude=logs.tar.xz -- * &&
  find . -maxdepth 1 -type f ! -name logs.tar.xz ! -name summary.txt ! -name '*.ncu-rep' -delete)
exit "${status}"
