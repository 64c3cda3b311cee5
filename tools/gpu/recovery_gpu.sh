#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, after the bundle is
# unpacked: issue 17's kill-and-resume on --backend=cuda. The coordinator's
# offline mode serves one JSON Lines batch (8 greedy, 8 seeded sampled
# requests of 384 tokens) on a worker group of WORKERS (default 1: one GPU)
# twice: undisturbed, then with a worker killed (SIGKILL) KILL_AFTER_S
# seconds after the group came up. Every request must end without an error;
# the outputs of the two runs are compared line by line, and the recovery
# time is taken from the coordinator's "recovered in" line. With NUMERICS
# reference (bit-identical to the CPU, prefill and decode alike) the outputs
# must be identical; with fast, a resumed request re-prefills on CudaOps what
# the decoder had produced (other rounding), so identity is counted, not
# required. Exits non-zero when a run fails, a request is lost or errs, no
# recovery happened, or (reference) an output differs.
#   tools/gpu/recovery_gpu.sh [MODEL_DIR] [RESULTS_DIR] [NUMERICS] [WORKERS]
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="${BUNDLE:-${root}/.gpu_bundle}"
model="${1:-models/small}"
results="${2:-${bundle}/results_recovery}"
numerics="${3:-reference}"
workers="${4:-1}"
kill_after="${KILL_AFTER_S:-1.5}"
mkdir -p "${results}"
export LD_LIBRARY_PATH="${bundle}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0

input="${results}/in.jsonl"
: > "${input}"
for i in $(seq 0 15); do
  if ((i < 8)); then sampling='"temperature": 0'; else sampling="\"temperature\": 0.8, \"seed\": $((i * 7919))"; fi
  printf '{"custom_id": "r%d", "tokens": [%d, %d, %d, 11], "max_new_tokens": 384, %s}\n' \
    "${i}" $((i + 3)) $(((i * 37) % 4000 + 1)) $(((i * 101) % 4000 + 2)) "${sampling}" >> "${input}"
done

serve() {  # serve NAME KILL(0|1)
  local name="$1" kill="$2" log="${results}/$1.log" start end code
  start=$(date +%s%N)
  "${bundle}/serve/coordinator_main" --listen=127.0.0.1:0 --eplb=false --workers="${workers}" \
    --backend=cuda --numerics="${numerics}" --model_dir="${model}" \
    --model_cache_dir="${results}/models" --worker_binary="${bundle}/serve/worker_main" \
    --startup_timeout_s=600 --input="${input}" --output="${results}/${name}.jsonl" \
    > "${log}" 2>&1 &
  local pid=$!
  if ((kill)); then
    # Wait for the group to come up, then kill one worker mid-generation.
    for _ in $(seq 1 1200); do
      grep -q "KV per rank" "${log}" && break
      kill -0 "${pid}" 2> /dev/null || break
      sleep 0.1
    done
    sleep "${kill_after}"
    local victim
    victim=$(pgrep -f "${bundle}/serve/worker_main" | shuf -n 1)
    if [[ -n "${victim}" ]]; then
      echo "killing worker pid ${victim} at $(date +%s.%N)" >> "${results}/kill.txt"
      kill -9 "${victim}"
    else
      echo "no worker to kill" >> "${results}/kill.txt"
    fi
  fi
  wait "${pid}"
  code=$?
  end=$(date +%s%N)
  printf 'recovery %-12s exit %d, %d ms\n' "${name}" "${code}" $(((end - start) / 1000000))
  return "${code}"
}

status=0
serve undisturbed 0 || status=1
serve killed 1 || status=1
lines() { wc -l < "${results}/$1.jsonl" 2> /dev/null || echo 0; }
errors=$(grep -c '"error"' "${results}/killed.jsonl" 2> /dev/null || true)
same=$(comm -12 <(sort "${results}/undisturbed.jsonl") <(sort "${results}/killed.jsonl") | wc -l)
recovered=$(grep -o 'recovered in [^;]*' "${results}/killed.log" | head -n 1)
echo "recovery ${model} ${numerics}: $(lines killed) of 16 requests ended ($(lines undisturbed) undisturbed), ${errors:-0} errors, ${same} of 16 outputs identical to the undisturbed run; ${recovered:-no recovery logged}"
[[ "$(lines killed)" == 16 && "${errors:-0}" == 0 && -n "${recovered}" ]] || status=1
if [[ "${numerics}" == reference && "${same}" != 16 ]]; then status=1; fi
exit "${status}"
