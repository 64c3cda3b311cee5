#!/usr/bin/env bash
# Checks the answers of tests/layering's queries: nothing in worker/ or eplb/
# depends on coordinator/, nothing in eplb/ on worker/, nothing in the shared
# folders on a process folder, and where a process folder uses another's code
# it is through one of the targets below, each public for that purpose.
set -euo pipefail

worker_eplb_reach_coordinator=$1
eplb_reaches_processes=$2
shared_reach_processes=$3
coordinator_uses=$4
worker_uses=$5

# coordinator/ -> worker/, eplb/: the binaries it launches (data) and the
# libraries that say they serve the coordinator.
allowed_coordinator_uses='//eplb:main
//worker/model:checkpoint_writer
//worker/model:config
//worker/sampling:sampling_params
//worker:main
//worker:ngram_lookup'
# worker/ -> eplb/: the EPLB client workers stream their expert load with.
allowed_worker_uses='//eplb:load_reporter'

failed=0

# expect_empty FILE WHAT: FILE (one label a line) must be empty.
expect_empty() {
  if [[ -s "$1" ]]; then
    echo "FAIL: $2:"
    sed 's/^/  /' "$1"
    failed=1
  fi
}

# expect_within FILE ALLOWED WHAT: every label of FILE is one of ALLOWED.
expect_within() {
  local extra
  extra=$(comm -23 <(sort -u "$1") <(sort -u <<<"$2"))
  if [[ -n "$extra" ]]; then
    echo "FAIL: $3:"
    sed 's/^/  /' <<<"$extra"
    failed=1
  fi
}

expect_empty "$worker_eplb_reach_coordinator" "worker/ or eplb/ depends on coordinator/"
expect_empty "$eplb_reaches_processes" "eplb/ depends on worker/ or coordinator/"
expect_empty "$shared_reach_processes" "a shared folder depends on a process folder"
expect_within "$coordinator_uses" "$allowed_coordinator_uses" \
  "coordinator/ uses worker/ or eplb/ targets outside the allowed list (use a library target public for that purpose, or move the code out of the process folders)"
expect_within "$worker_uses" "$allowed_worker_uses" \
  "worker/ uses eplb/ targets outside the allowed list (use the EPLB client)"

# The allowed lists are what is used: a stale entry would hide a regression.
expect_within <(printf '%s\n' "$allowed_coordinator_uses") "$(cat "$coordinator_uses")" \
  "entries of allowed_coordinator_uses no longer used (remove them)"

if [[ $failed -ne 0 ]]; then exit 1; fi
echo "PASS: coordinator -> worker -> eplb, shared folders below all three"
