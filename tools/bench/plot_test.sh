#!/usr/bin/env bash
# sh_test of tools/bench/plot.py: renders the committed sample CSVs (serving
# latency, HTTP vs gRPC latency, EPLB balance, decode step vs floor) with the
# pinned environment's matplotlib (@pyenv//:python) and checks that every PNG
# was written, is a PNG and is not empty; a CSV of unknown columns must be
# refused (exit 1, naming it).
set -euo pipefail

source "${TEST_SRCDIR:?run through bazel test}/weir/tests/python_env.sh"
weir_require_python

fail() {
  echo "plot_test: $*" >&2
  exit 1
}

plots="${runfiles}/tools/bench/plots"
out="${TEST_TMPDIR}/plots"
names=(serve_latency http_overhead eplb_balance decode_sample)
csvs=()
for name in "${names[@]}"; do csvs+=("${plots}/${name}.csv"); done

"${python}" "${runfiles}/tools/bench/plot.py" --out "${out}" "${csvs[@]}" \
  >"${TEST_TMPDIR}/printed" || fail "plot.py failed on the samples"
for name in "${names[@]}"; do
  png="${out}/${name}.png"
  [[ -s "${png}" ]] || fail "${png} missing or empty"
  grep -qxF "${png}" "${TEST_TMPDIR}/printed" || fail "plot.py did not print ${png}"
  signature="$(head -c 8 "${png}" | od -An -tx1 | tr -d ' \n')"
  [[ "${signature}" == "89504e470d0a1a0a" ]] || fail "${png} is not a PNG (${signature})"
  echo "${name}.png: $(stat -c %s "${png}") bytes"
done

printf 'a,b\n1,2\n' >"${TEST_TMPDIR}/unknown.csv"
if "${python}" "${runfiles}/tools/bench/plot.py" --out "${out}" "${TEST_TMPDIR}/unknown.csv" \
  2>"${TEST_TMPDIR}/refused"; then
  fail "a CSV of unknown columns was plotted"
fi
grep -q "unknown.csv: unknown columns" "${TEST_TMPDIR}/refused" || fail "no reason given"
echo "plot_test: OK"
