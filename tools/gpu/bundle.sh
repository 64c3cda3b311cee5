#!/usr/bin/env bash
# Builds the GPU test binaries here and bundles them, with the shared libraries
# the GPU machine lacks, into one folder that the runner executes there.
#
#   tools/gpu/bundle.sh [OUT_DIR]        # default: .gpu_bundle (git-ignored)
#   -> also .gpu_pack/bundle.tar.xz (git-ignored), the packed bundle to carry
#   BUNDLE_PACK="bin/NAME tools/NAME serve ..." packs only those (and lib/)
#   BUNDLE_TARGETS="//pkg:name_test //pkg:tool ..." builds and bundles only
#     those labels (a label ending in _test into bin/, any other into tools/;
#     no serving binaries unless BUNDLE_SERVING=1 adds the coordinator's and
#     the worker's, for serve_smoke.sh): a fresh checkout builds a few minutes
#     instead of every GPU target
#
# Left out of the bundle: glibc, libstdc++/libgcc, CUDA and NCCL libraries (the
# GPU machine has its own, and cuBLASLt/NCCL are linked by soname for that).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-.gpu_bundle}"

if [[ -n "${BUNDLE_TARGETS:-}" ]]; then
  read -r -a chosen <<< "${BUNDLE_TARGETS}"
  targets=()
  tool_targets=()
  for label in "${chosen[@]}"; do
    if [[ "${label}" == *_test ]]; then targets+=("${label}"); else tool_targets+=("${label}"); fi
  done
  serving=()
  if [[ "${BUNDLE_SERVING:-0}" == 1 ]]; then serving=(//coordinator:main //worker:main); fi
else
  # Every test tagged `gpu`, plus their runtime data.
  mapfile -t targets < <(tools/bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)
  if ((${#targets[@]} == 0)); then
    echo "bundle: no gpu-tagged tests found" >&2
    exit 1
  fi
  # The serving binaries, for serve_smoke.sh (the small model over gRPC) and the
  # eplb step of multi_gpu.sh (gen_model writes its skewed checkpoint).
  serving=(//coordinator:main //worker:main //eplb:main //tools:weir //tools:gen_model)
  # Benchmarks tagged `gpu` (cc_binary), into OUT/tools; run_all.sh does not run them.
  mapfile -t tool_targets < <(tools/bazel query 'attr(tags, "\bgpu\b", kind("cc_binary rule", //...))' 2>/dev/null)
fi
tools/bazel build --strip=always "${targets[@]}" "${serving[@]}" "${tool_targets[@]}" >&2

rm -rf "${out}"
mkdir -p "${out}/bin" "${out}/lib"
bin_dir="$(tools/bazel info bazel-bin 2>/dev/null)"
# copy_targets DIR NAMING TARGET...: NAMING "path" names a binary after its
# package path (a/b:c -> a_b_c), "base" after the target alone.
copy_targets() {
  local dir="$1" naming="$2" target path
  shift 2
  mkdir -p "${out}/${dir}"
  for target in "$@"; do
    path="${target#//}"
    path="${path/://}"
    if [[ "${naming}" == path ]]; then
      cp "${bin_dir}/${path}" "${out}/${dir}/$(echo "${path}" | tr '/' '_')"
    else
      cp "${bin_dir}/${path}" "${out}/${dir}/$(basename "${path}")"
    fi
  done
}
copy_targets bin path "${targets[@]}"
copy_targets serve path "${serving[@]}"

copy_targets tools base "${tool_targets[@]}"

# Shared libraries the binaries need, minus what the GPU machine provides.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libcuda\.|libcudart|libcublas|libnccl|libnvidia)'
for binary in "${out}"/bin/* "${out}"/serve/* "${out}"/tools/*; do
  [[ -f "${binary}" ]] || continue
  ldd "${binary}" | awk '/=> \//{print $1" "$3}' | while read -r name lib; do
    if [[ ! "${name}" =~ ${skip} && ! -e "${out}/lib/${name}" ]]; then
      cp -L "${lib}" "${out}/lib/${name}"
    fi
  done
done
cp tools/gpu/run_all.sh tools/gpu/serve_smoke.sh tools/gpu/recovery_gpu.sh "${out}/"
du -sh "${out}" >&2
# The device runner carries at most 64 MiB; OpenBLAS alone is 36 MB, so the
# bundle travels packed (about 17 MB) and is unpacked there first:
#   run(carry=[".gpu_pack"], command="tar -xJf .gpu_pack/bundle.tar.xz && ...")
# The carry limit counts the tracked files too (about 32 MB, the trained tiny
# included), and the whole bundle packs to about 35 MB: BUNDLE_PACK (paths
# under OUT_DIR, space-separated, e.g. "bin/worker_model_device_decoder_test
# tools/speculative_gpu serve serve_smoke.sh") packs those and lib/ only. A
# part may be a glob under OUT_DIR, so the whole suite goes in three calls
# (packed sizes of 2026-12-06; each fits beside the tracked files):
#   BUNDLE_PACK="bin/kernels_* run_all.sh"               20 MB, kernel tests
#   BUNDLE_PACK="bin/[!k]* run_all.sh"                   27 MB, other tests
#   BUNDLE_PACK="tools serve run_all.sh serve_smoke.sh"  25 MB, benchmarks
# and run_all.sh runs what a part holds (RUN_BENCH=0 skips the benchmarks).
# A part that matches nothing stops the script.
mkdir -p .gpu_pack
if [[ -n "${BUNDLE_PACK:-}" ]]; then
  read -r -a parts <<< "${BUNDLE_PACK}"
  paths=("${out}/lib")
  for part in "${parts[@]}"; do
    matched=0
    for path in "${out}"/${part}; do
      [[ -e "${path}" ]] || continue
      paths+=("${path}")
      matched=1
    done
    if [[ "${matched}" == 0 ]]; then
      echo "bundle.sh: BUNDLE_PACK part '${part}' matches nothing under ${out}" >&2
      exit 1
    fi
  done
  tar -cJf .gpu_pack/bundle.tar.xz "${paths[@]}"
else
  tar -cJf .gpu_pack/bundle.tar.xz "${out}"
fi
du -sh .gpu_pack/bundle.tar.xz >&2
echo "${out}"
