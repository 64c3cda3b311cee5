#!/usr/bin/env bash
# Runs on the GPU machine: every test binary of the bundle, then a short table.
#   <bundle>/run_all.sh [RESULTS_DIR]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
results="${1:-${here}/results}"
mkdir -p "${results}"
export LD_LIBRARY_PATH="${here}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
  > "${results}/gpu.txt" 2>&1 || true
printf '%-40s %-6s %s\n' "binary" "result" "seconds" | tee "${results}/summary.txt"
status=0
for binary in "${here}"/bin/*; do
  name="$(basename "${binary}")"
  start=$(date +%s%N)
  if "${binary}" > "${results}/${name}.log" 2>&1; then result=PASS; else result=FAIL; status=1; fi
  end=$(date +%s%N)
  elapsed_ms=$(( (end - start) / 1000000 ))
  printf '%-40s %-6s %d.%03d\n' "${name}" "${result}" $((elapsed_ms / 1000)) $((elapsed_ms % 1000)) \
    | tee -a "${results}/summary.txt"
done
exit "${status}"
