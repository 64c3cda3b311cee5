# Sourced by the GPU check scripts (fast_check.sh, prefill_check.sh) after
# they set `bundle` (the unpacked .gpu_bundle) and `results` (their log
# folder): the bundle's library path, `status`, and `step`, which runs one
# command under a time limit into RESULTS/NAME.log and appends its exit code
# and duration to RESULTS/summary.txt.
mkdir -p "${results}"
export LD_LIBRARY_PATH="${bundle}/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export NCCL_NVLS_ENABLE=0
status=0
step() {  # step NAME TIMEOUT_S COMMAND...
  local name="$1" limit="$2"
  shift 2
  local start end code
  start=$(date +%s)
  timeout "${limit}" "$@" > "${results}/${name}.log" 2>&1
  code=$?
  end=$(date +%s)
  printf '%-36s exit %3d  %4d s\n' "${name}" "${code}" $((end - start)) | tee -a "${results}/summary.txt"
  return "${code}"
}
: > "${results}/summary.txt"
