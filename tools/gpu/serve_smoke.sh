#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root (the checkout is there):
# serves a model end to end over gRPC with --backend=cuda and with
# --backend=cpu, through the coordinator's offline mode (a JSON Lines batch
# submitted to its own gRPC server), and counts identical greedy outputs. The
# cuda backend runs twice: --numerics=fast (the default: tensor cores on the
# stored forms) and --numerics=reference (bit-identical kernels).
# Exits non-zero when a run fails.
#   <bundle>/serve_smoke.sh [MODEL_DIR] [RESULTS_DIR] [WORKERS]
# CUDA_WORKER_FLAGS (comma-separated) go to the cuda run's workers, e.g.
# CUDA_WORKER_FLAGS=--device_decode_ep (the device decoder with several ranks);
# CUDA_COORDINATOR_FLAGS (space-separated) to the cuda runs' coordinator. KV
# pressure (the device decoder's paged pools too small for the batch, so
# requests queue and are preempted and recomputed): CUDA_COORDINATOR_FLAGS=
# --kv_block_tokens=16 CUDA_WORKER_FLAGS=--kv_cache_blocks=10. Speculative
# decoding on the device decoder (the cpu run stays plain, so identical
# outputs mean lossless): CUDA_COORDINATOR_FLAGS="--speculative=dspark
# --num_draft_tokens=4 [--verify_length=confidence]".
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
model="${1:-models/small}"
results="${2:-${here}/results}"
workers="${3:-1}"
mkdir -p "${results}"
export LD_LIBRARY_PATH="${here}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0

input="${results}/serve_in.jsonl"
: > "${input}"
for i in $(seq 0 15); do
  printf '{"custom_id": "r%d", "tokens": [%d, %d, %d, 11], "max_new_tokens": 32, "temperature": 0}\n' \
    "${i}" $((i + 3)) $(((i * 37) % 4000 + 1)) $(((i * 101) % 4000 + 2)) >> "${input}"
done

status=0
for run in cuda cuda_reference cpu; do
  backend="${run%%_*}"
  extra=()
  if [[ "${backend}" == cuda && -n "${CUDA_WORKER_FLAGS:-}" ]]; then
    extra=(--worker_flags="${CUDA_WORKER_FLAGS}")
  fi
  if [[ "${backend}" == cuda && -n "${CUDA_COORDINATOR_FLAGS:-}" ]]; then
    read -r -a coordinator_flags <<< "${CUDA_COORDINATOR_FLAGS}"
    extra+=("${coordinator_flags[@]}")
  fi
  if [[ "${run}" == cuda_reference ]]; then
    extra+=(--numerics=reference)
  fi
  start=$(date +%s%N)
  "${here}/serve/coordinator_main" --listen=127.0.0.1:0 --eplb=false --workers="${workers}" "${extra[@]}" \
    --backend="${backend}" --model_dir="${model}" --model_cache_dir="${results}/models" \
    --worker_binary="${here}/serve/worker_main" --startup_timeout_s=600 \
    --input="${input}" --output="${results}/serve_${run}.jsonl" \
    > "${results}/serve_${run}.log" 2>&1
  code=$?
  end=$(date +%s%N)
  printf 'serve %-14s exit %d, %d ms (start-up + 16 requests x 32 tokens)\n' "${run}" "${code}" \
    $(((end - start) / 1000000))
  ((code == 0)) || status=1
done
# Greedy outputs per request: identical lines out of 16 (fp32 reduction
# order differs between the backends, so a near-tie may flip a token).
same() { comm -12 <(sort "${results}/serve_$1.jsonl") <(sort "${results}/serve_$2.jsonl") | wc -l; }
for run in cuda cuda_reference; do
  errors=$(grep -c '"error"' "${results}/serve_${run}.jsonl" 2>/dev/null || true)
  nan=$(grep -ci 'nan' "${results}/serve_${run}.log" 2>/dev/null || true)
  echo "serve ${model} ${run}: $(same "${run}" cpu) of 16 outputs identical to cpu, ${errors:-0} errors, ${nan:-0} log lines naming NaN"
  grep -h -o 'device decode [a-z]*:.*' "${results}/serve_${run}.log" | head -n 1 || true
done
echo "serve ${model}: fast vs reference numerics: $(same cuda cuda_reference) of 16 outputs identical"
exit "${status}"
