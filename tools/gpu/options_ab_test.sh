#!/usr/bin/env bash
# CPU test of options_ab.sh and fusion_check.sh (no GPU): a fake decode_gpu and
# fake test binaries in a fake bundle; checks that each set of flags reaches
# the binary after the common ones, in round-robin order, that the timed rows
# are kept, that a failing run makes the script fail, and that the usage
# errors are refused.
set -euo pipefail
if [[ -n "${TEST_SRCDIR:-}" ]]; then
  here="${TEST_SRCDIR}/weir/tools/gpu"  # bazel test: the scripts in the runfiles
else
  here="$(cd "$(dirname "$0")" && pwd)"
fi
work="$(mktemp -d "${TEST_TMPDIR:-/tmp}/options_ab.XXXXXX")"
trap 'rm -rf "${work}"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
mkdir -p "${work}/.gpu_bundle/bin" "${work}/.gpu_bundle/tools" "${work}/tools/gpu"
cp "${here}/options_ab.sh" "${here}/fusion_check.sh" "${here}/check_steps.sh" "${work}/tools/gpu/"
cat > "${work}/.gpu_bundle/tools/decode_gpu" <<'FAKE'
#!/usr/bin/env bash
echo "flags: $*"
echo "    1  graph      1.275      1.250    0.025"
echo "   64       68     38.182     38.095"
echo "prefill: 1 sequence(s)"
[[ " $* " == *" --fail=true "* ]] && exit 3
exit 0
FAKE
chmod +x "${work}/.gpu_bundle/tools/decode_gpu"
cd "${work}"
ab=tools/gpu/options_ab.sh
dg=.gpu_bundle/tools/decode_gpu

out=$("${ab}" "${dg}" 2 -- --a=1 --b ::: ::: --c=2 --d=3)
[[ "$(grep -c '^== ' <<< "${out}")" == 4 ]] || fail "four runs expected: ${out}"
[[ "$(grep '^== ' <<< "${out}" | head -2 | tail -1)" == "== 1.1: --c=2 --d=3 (exit 0)" ]] ||
  fail "round 1, set 1 second: ${out}"
grep -q '^== 2.0: (defaults) (exit 0)' <<< "${out}" || fail "round 2 of the defaults: ${out}"
[[ "$(grep -c '^    1  graph' <<< "${out}")" == 4 ]] || fail "the decode rows: ${out}"
[[ "$(grep -c '^   64       68' <<< "${out}")" == 4 ]] || fail "the slice rows: ${out}"
[[ "$(grep -c '^prefill:' <<< "${out}")" == 4 ]] || fail "the prefill lines: ${out}"
grep -q 'flags:' <<< "${out}" && fail "untimed lines leaked: ${out}"
# Where the flags land: the fake echoes them, shown on a failing run only.
if out=$("${ab}" "${dg}" 1 -- --a=1 ::: --fail=true); then fail "a failing run must fail"; fi
grep -q 'flags: --a=1 --fail=true' <<< "${out}" || fail "common flags, then the set: ${out}"
for bad in "" "${dg}" "${dg} 0 -- ::: " "${dg} 1 --a ::: " "${dg} 1 -- --a" "${work}/none 1 -- :::"; do
  # shellcheck disable=SC2086
  if "${ab}" ${bad} > /dev/null 2>&1; then fail "refused: '${bad}'"; fi
done

# fusion_check.sh over fake test binaries: every step runs and passes.
for b in kernels_cuda_dense_bf16_gemm_sm90_test kernels_cuda_decode_compressor_decode_test \
  kernels_cuda_moe_moe_gate_test kernels_cuda_moe_mxfp4_fp8_tiles_test \
  worker_model_device_decoder_fast_test; do
  printf '#!/usr/bin/env bash\necho "[  PASSED  ] 1 test."\n' > ".gpu_bundle/bin/${b}"
  chmod +x ".gpu_bundle/bin/${b}"
done
out=$(tools/gpu/fusion_check.sh "${work}/results") || fail "fusion_check: ${out}"
[[ "$(grep -c ' exit   0 ' "${work}/results/summary.txt")" == 8 ]] ||
  fail "eight steps: $(cat "${work}/results/summary.txt")"
grep -q '== 2.4: --fused_split_reduce=true (exit 0)' <<< "${out}" || fail "small's sets: ${out}"
out=$(BUDGET_S=100 tools/gpu/fusion_check.sh "${work}/short") || fail "a short budget: ${out}"
grep -q 'small_ab .*skipped (budget)' "${work}/short/summary.txt" ||
  fail "a step past the budget is skipped: $(cat "${work}/short/summary.txt")"
echo PASS
