#!/usr/bin/env bash
# Runs on the GPU machine (from the repository root: tests and benchmarks read
# models/*/config.json by relative path): every test binary of the bundle,
# then, unless RUN_BENCH=0, every benchmark binary with its defaults, and a
# short table. A benchmark's own tables are the tail of its log, printed below
# the summary.
#   <bundle>/run_all.sh [RESULTS_DIR]
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
results="${1:-${here}/results}"
mkdir -p "${results}"
export LD_LIBRARY_PATH="${here}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader \
  > "${results}/gpu.txt" 2>&1 || true
printf '%-40s %-6s %s\n' "binary" "result" "seconds" | tee "${results}/summary.txt"
status=0
run() {  # run KIND BINARY
  local name
  name="$(basename "$2")"
  local start end elapsed_ms result
  start=$(date +%s%N)
  if "$2" > "${results}/${name}.log" 2>&1; then result=PASS; else result=FAIL; status=1; fi
  end=$(date +%s%N)
  elapsed_ms=$(( (end - start) / 1000000 ))
  printf '%-40s %-6s %d.%03d\n' "$1 ${name}" "${result}" $((elapsed_ms / 1000)) \
    $((elapsed_ms % 1000)) | tee -a "${results}/summary.txt"
}
for binary in "${here}"/bin/*; do run test "${binary}"; done
if [[ "${RUN_BENCH:-1}" != 0 && -d "${here}/tools" ]]; then
  for binary in "${here}"/tools/*; do run bench "${binary}"; done
  for log in "${results}"/decode_gpu.log "${results}"/alltoall_nccl.log \
             "${results}"/fp8_gemm_bench.log "${results}"/mxfp4_grouped_gemm_bench.log \
             "${results}"/sparse_decode_attention_bench.log; do
    [[ -f "${log}" ]] || continue
    echo "--- $(basename "${log}" .log)"
    tail -n 30 "${log}"
  done
fi
exit "${status}"
