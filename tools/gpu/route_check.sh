#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after
# `tar -xJf .gpu_pack/bundle.tar.xz`: the open questions after the
# forty-second and forty-third sessions, most telling first under BUDGET_S
# (default 540; check_steps.sh; what does not fit is skipped and named in
# summary.txt, for a second call):
#   1. tests: the bf16 route's kernel test (the 256-row tile's 32-row tail,
#      tail_rows, and its X by CTA pairs, x_multicast, among its forms, and
#      the gate / up / SwiGLU launch with them), the decoder's route-form
#      case (form 11 the tail, 12 the CTA pairs) and
#      moe_permute_test (MoeGroupRows' wide numbering, every case both ways;
#      MoeCombine's vec16 rows), bf16_gemm_cutlass_test (the 128 x 128
#      tile, cutlass_tile_n), indexer_score_test (kSharedKeysMmaSum,
#      kSharedKeysMmaBf16), round_pair_probe_test (its term rounding),
#      topk_test (TopkParams::in_registers) and hc_mix_split_test's HcMixTf32
#      cases (tile_rows 2);
#   2. the EP8 prefill chunk with the defaults (the gate / up / SwiGLU
#      launch on since the forty-second session), with the tail
#      (--bf16_route_tail_rows), with X by CTA pairs (--bf16_route_multicast),
#      with the wide numbering (--wide_group_rows)
#      with the combine's 16-byte columns (--combine_vec16), with CUTLASS's
#      tile fit to each product's waves (--bf16_cutlass_fit_tile) and with the
#      indexer's head sum through shared memory (--indexer_mma_sum) and with
#      its operands staged once as bf16 (--indexer_mma_bf16) and with
#      HcMixTf32's two tiles a warp (--prompt_tf32_mhc_wide), two rounds;
#   3. EP8 decode at context 4,096, batches 1 and 64, the context filled by
#      prefill chunks, with the decode steps' kernel timeline (issue 20's
#      batch-64 target, 2.7x against 1.5x, has no recent profile), batch 64
#      with the experts on the bf16 route (--bf16_experts_every_row); the
#      chunk's second round; batch 1
#      with the top-k's rows in registers (--topk_in_registers), two rounds;
#   4. the route's bench at the chunk's shape (32,768 tokens: 513 rows an
#      expert, so the tail takes every expert's third tile away);
#   5. the chunk's timeline with the CTA pairs, the decoder test's first shard
#      (GTEST_TOTAL_SHARDS=3; 300 s at most), then ncu of the CTA pairs'
#      gate / up / SwiGLU instance
#      inside the chunk with the time left (the forty-second session ran the
#      second shard whole and 21 of the third's cases).
# Bundle (here, a few minutes with a warm cache):
#   BUNDLE_TARGETS="//worker/model:device_decoder_fast_test //tools/bench:decode_gpu
#     //kernels/cuda/moe:mxfp4_grouped_gemm_bench //kernels/cuda/moe:mxfp4_bf16_gemm_sm90_test
#     //kernels/cuda/moe:moe_permute_test //kernels/cuda/dense:bf16_gemm_cutlass_test
#     //kernels/cuda/attention:indexer_score_test //kernels/cuda/attention:topk_test
#     //kernels/cuda:round_pair_probe_test //kernels/cuda/moe:hc_mix_split_test
#     //kernels/cuda/dense:fp8_lt_gemm_test //kernels/cuda/dense:fp8_gemm_bench"
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
# cuBLASLt's block-scaled FP8 over the re-blocked stored forms (forty-fifth
# session, never run): the re-blocking's bytes, the product against the
# exact one, the scale layouts, batch invariance.
budget_step lt_gemm_test 90 "${bundle}/bin/kernels_cuda_dense_fp8_lt_gemm_test" || status=1
# moe_permute_test, bf16_gemm_cutlass_test, indexer_score_test, topk_test,
# round_pair_probe_test and hc_mix_split_test passed in the forty-third
# session and their kernels have not moved since: with TESTS_ALL=1 only.
if [[ -n "${TESTS_ALL:-}" ]]; then
  budget_step moe_permute_test 60 "${bundle}/bin/kernels_cuda_moe_moe_permute_test" || status=1
  budget_step cutlass_test 60 "${bundle}/bin/kernels_cuda_dense_bf16_gemm_cutlass_test" || status=1
  budget_step indexer_test 60 "${bundle}/bin/kernels_cuda_attention_indexer_score_test" || status=1
  budget_step topk_test 60 "${bundle}/bin/kernels_cuda_attention_topk_test" || status=1
  budget_step round_pair_probe_test 30 "${bundle}/bin/kernels_cuda_round_pair_probe_test" ||
    status=1
  budget_step hc_mix_test 60 "${bundle}/bin/kernels_cuda_moe_hc_mix_split_test" \
    --gtest_filter='HcMixTf32Test.*' || status=1
fi
# The chunk's forms, NAME:FLAG (the defaults' row names a default value), two
# rounds in turn.
# (The forty-third session's no-gain forms, --bf16_cutlass_fit_tile,
# --indexer_mma_sum and --prompt_tf32_mhc_wide, are dropped; --indexer_mma_bf16
# is the default now.)
# (A form's flags are split at commas.)
chunk_forms=(defaults:--bf16_route_tail_rows=false lt:--prompt_fp8_lt=true
  multicast:--bf16_route_multicast=true
  lt_blocks:--prompt_fp8_lt=true,--prompt_fp8_lt_blocks=true
  tail:--bf16_route_tail_rows=true wide:--wide_group_rows=true vec16:--combine_vec16=true)
chunk_round() {  # chunk_round SUFFIX
  local flags
  for form in "${chunk_forms[@]}"; do
    IFS=, read -r -a flags <<< "${form#*:}"
    budget_step "chunk_${form%%:*}$1" 90 "${decode}" "${slice[@]}" "${flags[@]}"
  done
}
chunk_round ""
# The decoder's same-bits cases of the route's forms (after the chunk's
# first round: a short call still learns whether the new forms pay).
budget_step device_decoder_fast_test 150 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter='*RouteForms*:*RouteSwiglu*' || status=1
budget_step decoder_lt_test 150 "${bundle}/bin/worker_model_device_decoder_fast_test" \
  --gtest_filter='*PromptFp8Lt*' || status=1
# The block-scaled FP8's rows in fp8_gemm_bench's prefill table (against
# plain cuBLASLt FP8 on the same shapes, same run).
budget_step fp8_gemm_bench_prefill 120 "${bundle}/tools/fp8_gemm_bench" prefill
# Decode with each step's kernels on CUPTI's timeline (the graph's nodes one
# by one); the context by prefill chunks (a position a step would take
# 4,096 steps).
budget_step decode_ep8 150 "${decode}" --ep_slice=8 --numerics=fast --batches=1,64 \
  --context=4096 --prefill_chunk=4096 --steps=3 --warmup=1 --slice_profile=false \
  --kernel_timeline
# Batch 64's routed experts on the bf16 route's register form
# (--bf16_experts_every_row: 8 - 64 X rows a CTA; other fast numerics, held
# to the bars by the decoder test): at 8 rows an expert the MXFP4 kernel is
# issue-bound (kernels/cuda/moe/README.md, "The issue ceiling"); never timed
# on the EP8 slice.
budget_step decode_b64_every_row 150 "${decode}" --ep_slice=8 --numerics=fast --batches=64 \
  --context=4096 --prefill_chunk=4096 --steps=3 --warmup=1 --slice_profile=false \
  --kernel_timeline --bf16_experts_every_row=true
chunk_round _2
# The top-k's rows in registers (--topk_in_registers) against the defaults
# at batch 1, where the step's 8 selects run on one SM each; two rounds.
for round in "" _2; do
  for form in defaults:--topk_in_registers=false topk_reg:--topk_in_registers=true; do
    budget_step "decode_b1_${form%%:*}${round}" 60 "${decode}" --ep_slice=8 --numerics=fast \
      --batches=1 --context=4096 --prefill_chunk=4096 --steps=8 --warmup=2 \
      --slice_profile=false "${form#*:}"
  done
done
# The route's forms at the chunk's shape: 32,768 tokens' pairs over 384
# experts, 513 rows a local expert.
budget_step mxfp4_bench_chunk_shape 150 "${route_bench[@]:0:4}" 32768
# Without programmatic edges, so each kernel's busy time is its own.
budget_step chunk_timeline_pairs 120 "${decode}" "${slice[@]}" --prefill_timeline \
  --programmatic=false --bf16_route_multicast=true
# The CTA pairs' instance inside the chunk: layer 1's gate / up / SwiGLU launch
# (the instance's 2nd launch in the timed prefill; ncu spells the template's
# arguments `(int)256, (bool)1, ...`).
# The decoder test's first shard before the profile: a pass / fail counts
# for more than a profile when device starts are scarce.
budget_step decoder_test_shard0 300 env GTEST_TOTAL_SHARDS=3 GTEST_SHARD_INDEX=0 \
  "${bundle}/bin/worker_model_device_decoder_fast_test" || status=1
pairs_regex='GroupedRsKernel<\(int\)256, \(bool\)1, \(bool\)1, \(bool\)0, \(int\)2, \(bool\)1, \(int\)0, \(bool\)1>'
NCU_FROM_START=off profile pairs_chunk "${pairs_regex}" 1 "${decode}" "${slice[@]}" \
  --profile_prefill --bf16_route_multicast=true
# The prompt attention's mirror form inside the chunk (66 ms of the 401 ms
# chunk in the forty-second session's timeline): does the shared-memory pipe
# bound it (kernels/cuda/attention/README.md, "Known limits")?
NCU_FROM_START=off profile attention_chunk 'SparseDecodeAttentionWgKernel<\(bool\)1' 1 \
  "${decode}" "${slice[@]}" --profile_prefill
for name in pairs_chunk attention_chunk; do
  echo "== ncu ${name}"
  head -c 2000 "${results}/${name}.txt" 2>/dev/null
done
echo "== the chunk's kernel timeline with the CTA pairs (no programmatic edges; names cut)"
sed -n '/prefill timeline/,/^prefill:/p' "${results}/chunk_timeline_pairs.log" 2>/dev/null |
  head -18 | cut -c1-110
echo "== EP8 decode's kernel timelines (names cut)"
grep -A14 'kernel timeline of batch' "${results}/decode_ep8.log" 2>/dev/null | cut -c1-110 |
  head -34
echo "== the route's forms at 513 rows an expert (32,768 tokens)"
sed -n '/^Prefill:/,$p' "${results}/mxfp4_bench_chunk_shape.log" 2>/dev/null |
  grep -E 'ballot search|cuBLASLt' | cut -c1-220 | head -8
echo "== cuBLASLt's block-scaled FP8 (fp8_gemm_bench prefill)"
sed -n '/Fp8LtGemm/,/^$/p' "${results}/fp8_gemm_bench_prefill.log" 2>/dev/null | cut -c1-220 |
  head -14
echo "== EP8 decode at 4,096"
grep -E '^ *(1|64) ' "${results}/decode_ep8.log" 2>/dev/null | cut -c1-150
echo "== batch 64 with --bf16_experts_every_row"
grep -E '^ *64 ' "${results}/decode_b64_every_row.log" 2>/dev/null | cut -c1-150
grep -A14 'kernel timeline of batch' "${results}/decode_b64_every_row.log" 2>/dev/null |
  cut -c1-110 | head -16
for log in "${results}"/decode_b1_*.log; do
  [[ -f "${log}" ]] || continue
  echo "${log##*/}: $(grep -E '^ *1 ' "${log}" | head -n 1 | cut -c1-120)"
done
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
