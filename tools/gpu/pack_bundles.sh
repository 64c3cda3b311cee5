#!/usr/bin/env bash
# Builds, here, the two bundles a device session carries, from the bundle
# targets the GPU scripts' headers name:
#   .gpu_pack/bundle.tar.xz  route_check.sh's (kernel tests and benches, the
#                            decoder test, decode_gpu);
#   .gpu_pack/whole.tar.xz   whole_fast_check.sh's (serving: coordinator,
#                            worker, serve_smoke; the decoder test, decode_gpu).
# A new checkout has neither (.gpu_pack is git-ignored); with Bazel's cache
# warm this takes a few minutes. Then, on the device:
#   run(carry=[".gpu_pack/bundle.tar.xz"], command="tar -xJf .gpu_pack/bundle.tar.xz
#       && BUDGET_S=540 tools/gpu/route_check.sh $OUT/r")
#   run(carry=[".gpu_pack/whole.tar.xz"], command="mkdir -p whole && tar -xJf
#       .gpu_pack/whole.tar.xz -C whole && SHARD=0/3 BUDGET_S=500
#       tools/gpu/whole_fast_check.sh $OUT/w")
#
#   tools/gpu/pack_bundles.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
# The labels between a script's "# Bundle" line and its bundle.sh line.
targets_of() {
  sed -n '/^# Bundle/,/tools\/gpu\/bundle.sh/p' "$1" | grep -o '//[^ "]*' | tr '\n' ' '
}
route_targets="$(targets_of tools/gpu/route_check.sh)"
whole_targets="$(targets_of tools/gpu/whole_fast_check.sh)"
if [[ -z "${route_targets}" || -z "${whole_targets}" ]]; then
  echo "pack_bundles.sh: no bundle targets in a script's header" >&2
  exit 1
fi
mkdir -p .gpu_pack
rm -rf .gpu_bundle
BUNDLE_SERVING=1 BUNDLE_TARGETS="${whole_targets}" tools/gpu/bundle.sh
mv .gpu_pack/bundle.tar.xz .gpu_pack/whole.tar.xz
rm -rf .gpu_bundle
BUNDLE_TARGETS="${route_targets}" tools/gpu/bundle.sh
ls -l .gpu_pack/bundle.tar.xz .gpu_pack/whole.tar.xz
