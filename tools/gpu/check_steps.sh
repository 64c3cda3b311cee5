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
# budget_step NAME TIMEOUT_S COMMAND...: step, its limit cut to what is left of
# BUDGET_S (default 540) since this file was sourced; with under 15 s left the
# step is skipped (a summary line, exit 0). For a script whose steps run most
# telling first, so that a short call still answers the first questions.
steps_began=$(date +%s)
# With ONLY_STEPS set (an extended regular expression), a step whose name
# does not match it is skipped too: a second call runs what the first left.
budget_step() {
  local name="$1" limit="$2" left
  shift 2
  if [[ -n "${ONLY_STEPS:-}" ]] && ! grep -qE "${ONLY_STEPS}" <<< "${name}"; then
    printf '%-36s skipped (ONLY_STEPS)\n' "${name}" | tee -a "${results}/summary.txt"
    return 0
  fi
  left=$((${BUDGET_S:-540} - ($(date +%s) - steps_began)))
  if ((left < 15)); then
    printf '%-36s skipped (no time left)\n' "${name}" | tee -a "${results}/summary.txt"
    return 0
  fi
  ((limit > left)) && limit="${left}"
  step "${name}" "${limit}" "$@"
}
