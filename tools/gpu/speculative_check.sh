#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after the bundle is
# unpacked (tools/gpu/bundle.sh with BUNDLE_PACK="tools/speculative_gpu"):
# DSpark on the device decoder against plain decoding, the way issue 18's
# batch-1 figure is measured: speculative_gpu on the first 128 tokens of 32
# held-out documents (tools/train/data/corpus_heldout.txt.xz), batch 1 at 64
# and at 256 new tokens a sequence, then batches 8 and 64 at 64 tokens; fast
# numerics. Exits non-zero when a run fails or its outputs differ from `off`.
#   tools/gpu/speculative_check.sh [MODEL_DIR ...]       (default models/tiny)
# A MODEL_DIR with a config but no checkpoint (models/small) gets random
# weights from the bundle's serve/tools_gen_model first (BUNDLE_PACK "serve").
# SPEC_FLAGS (space-separated) go to every run, e.g. SPEC_FLAGS=--fused_markov
# or SPEC_FLAGS=--warm_decoder=false (a fresh decoder a run, as before 2026-12-05)
# (run once without it and once with it for an A/B); RESULTS (default .gpu_bundle/results) gets spec.txt.
# SPEC_RUNS: the runs, "BATCHES TOKENS PROMPTS" separated by ";" (default
# "1 64 32;1 256 32;8,64 64 64"), e.g. SPEC_RUNS="1 256 32" for batch 1 alone.
set -uo pipefail
bundle="${BUNDLE:-.gpu_bundle}"
results="${RESULTS:-${bundle}/results}"
mkdir -p "${results}"
export LD_LIBRARY_PATH="${bundle}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
prompts="${TMPDIR:-/tmp}/speculative_check_heldout.txt"
xz -dc tools/train/data/corpus_heldout.txt.xz > "${prompts}" || exit 1
read -r -a flags <<< "${SPEC_FLAGS:-}"
status=0
for model in "${@:-models/tiny}"; do
  # A directory of a config alone (models/small): its random checkpoint first,
  # made by tools_gen_model into a scratch copy (needs the bundle's serve/).
  if ! compgen -G "${model}/*.safetensors" > /dev/null; then
    made="${TMPDIR:-/tmp}/speculative_check_models/$(basename "${model}")"
    if ! compgen -G "${made}/*.safetensors" > /dev/null; then
      if ! mkdir -p "${made}" ||
        ! "${bundle}/serve/tools_gen_model" --config="${model}/config.json" --out="${made}"; then
        echo "speculative_check: ${model}: no checkpoint and gen_model failed"
        status=1
        continue
      fi
      cp -rn "${model}"/. "${made}"/
    fi
    model="${made}"
  fi
  IFS=';' read -r -a runs <<< "${SPEC_RUNS:-1 64 32;1 256 32;8,64 64 64}"
  for run in "${runs[@]}"; do
    read -r batches tokens count <<< "${run}"
    echo "=== ${model}: batches ${batches}, ${tokens} new tokens, ${count} prompts ${flags[*]}" |
      tee -a "${results}/spec.txt"
    out="$("${bundle}/tools/speculative_gpu" --dir="${model}" --batches="${batches}" \
      --new_tokens="${tokens}" --numerics=fast --prompts_file="${prompts}" --prompt_tokens=128 \
      --max_prompts="${count}" "${flags[@]}" 2>&1)"
    rc=$?
    # The table and the per-run costs, not the cost curve's JSON.
    grep -v '^ *[{}"]\|^ *\]' <<< "${out}" | tee -a "${results}/spec.txt"
    if ((rc != 0)) || grep -q '|  *NO  *|' <<< "${out}"; then
      echo "speculative_check: ${model} batches ${batches}: failed (exit ${rc}) or outputs differ"
      status=1
    fi
  done
done
exit "${status}"
