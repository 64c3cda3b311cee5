#!/usr/bin/env bash
# Builds the GPU test binaries here and bundles them, with the shared libraries
# the GPU machine lacks, into one folder that the runner executes there.
#
#   tools/gpu/bundle.sh [OUT_DIR]        # default: .gpu_bundle (git-ignored)
#   -> also .gpu_pack/bundle.tar.xz (git-ignored), the packed bundle to carry
#
# Left out of the bundle: glibc, libstdc++/libgcc, CUDA and NCCL libraries (the
# GPU machine has its own, and cuBLASLt/NCCL are linked by soname for that).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-.gpu_bundle}"

# Every test tagged `gpu`, plus their runtime data.
mapfile -t targets < <(tools/bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)
if ((${#targets[@]} == 0)); then
  echo "bundle: no gpu-tagged tests found" >&2
  exit 1
fi
# The serving binaries, for serve_smoke.sh (the small model over gRPC).
serving=(//coordinator:main //worker:main //eplb:main //tools:weir)
# Benchmarks tagged `gpu` (cc_binary), into OUT/tools; run_all.sh does not run them.
mapfile -t tool_targets < <(tools/bazel query 'attr(tags, "\bgpu\b", kind("cc_binary rule", //...))' 2>/dev/null)
tools/bazel build --strip=always "${targets[@]}" "${serving[@]}" "${tool_targets[@]}" >&2

rm -rf "${out}"
mkdir -p "${out}/bin" "${out}/lib"
bin_dir="$(tools/bazel info bazel-bin 2>/dev/null)"
for target in "${targets[@]}"; do
  path="${target#//}"
  path="${path/://}"
  cp "${bin_dir}/${path}" "${out}/bin/$(echo "${path}" | tr '/' '_')"
done

mkdir -p "${out}/serve"
for target in "${serving[@]}"; do
  path="${target#//}"
  path="${path/://}"
  cp "${bin_dir}/${path}" "${out}/serve/$(echo "${path}" | tr '/' '_')"
done

mkdir -p "${out}/tools"
for target in "${tool_targets[@]}"; do
  path="${target#//}"
  path="${path/://}"
  cp "${bin_dir}/${path}" "${out}/tools/$(basename "${path}")"
done

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
cp tools/gpu/run_all.sh tools/gpu/serve_smoke.sh "${out}/"
du -sh "${out}" >&2
# The device runner carries at most 64 MiB; OpenBLAS alone is 36 MB, so the
# bundle travels packed (about 17 MB) and is unpacked there first:
#   run(carry=[".gpu_pack"], command="tar -xJf .gpu_pack/bundle.tar.xz && ...")
mkdir -p .gpu_pack
tar -cJf .gpu_pack/bundle.tar.xz "${out}"
du -sh .gpu_pack/bundle.tar.xz >&2
echo "${out}"
