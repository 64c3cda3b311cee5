// kernels/cuda/attention/kv_mirror.cuh — device code of DequantizeKvMirror
// (kv_mirror.h): a warp a row, lane l dims 16 l .. 16 l + 15, through the
// stored-form producer's helpers (sparse_decode_attention_sm90.cuh). Included
// by sparse_decode_attention_sm90.cu alone (its kernels are defined once).
#ifndef WEIR_KERNELS_CUDA_ATTENTION_KV_MIRROR_CUH_
#define WEIR_KERNELS_CUDA_ATTENTION_KV_MIRROR_CUH_

#include <cstdint>

#include "kernels/cuda/attention/kv_mirror.h"
#include "kernels/cuda/attention/sparse_decode_attention_sm90.cuh"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/rounding.cuh"

namespace weir::kernels::cuda {
namespace kv_mirror {

namespace sd = sparse_decode;

inline constexpr int kWarps = 8;  // rows a CTA, a warp each

// Lane l writes dims 16 l .. 16 l + 15 of the row: the producer's pair of
// chunks, with its helpers (sparse_decode_attention_wg_sm90.cuh).
__device__ __forceinline__ void StoreRow(uint16_t* dst, int lane, const uint4& lo,
                                         const uint4& hi) {
  uint4* const out = reinterpret_cast<uint4*>(dst + 16 * lane);
  out[0] = lo;
  out[1] = hi;
}

__global__ void __launch_bounds__(kWarps * 32) KvMirrorKernel(const KvMirrorParams p) {
  GridDependencyPrologue();
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  const int q = static_cast<int>(blockIdx.y);
  const int32_t slot = p.slot[q];
  const int64_t ring = p.ring_rows, stage = p.stage_rows[q];
  const int64_t entries =
      p.ratio > 0 && p.compressed_rows > 0 ? (p.last_position[q] + 1) / p.ratio : 0;
  if (i < ring + stage) {  // a window row (uniform over the warp)
    const int64_t row =
        i < ring ? int64_t{slot} * ring + i : int64_t{p.stage_first[q]} + (i - ring);
    if (row < 0 || row >= p.window_rows) return;
    const uint4 codes = *reinterpret_cast<const uint4*>(p.window_codes + row * 512 + 16 * lane);
    const float scale = E8m0ToFloat(p.window_scales[row * 16 + (lane >> 1)]);
    StoreRow(
        p.window_bf16 + row * 512, lane,
        make_uint4(sd::Fp8PairToBf16(codes.x, scale), sd::Fp8PairToBf16(codes.x >> 16, scale),
                   sd::Fp8PairToBf16(codes.y, scale), sd::Fp8PairToBf16(codes.y >> 16, scale)),
        make_uint4(sd::Fp8PairToBf16(codes.z, scale), sd::Fp8PairToBf16(codes.z >> 16, scale),
                   sd::Fp8PairToBf16(codes.w, scale), sd::Fp8PairToBf16(codes.w >> 16, scale)));
    return;
  }
  const int64_t j = i - ring - stage;  // a compressed entry
  if (j >= entries) return;
  const int64_t e = p.entries_per_block;
  const int64_t block_at = j / e;
  if (block_at >= p.table_width) return;
  const int32_t block = p.block_table[int64_t{slot} * p.table_width + block_at];
  if (block < 0) return;
  const int64_t row = int64_t{block} * e + j % e;
  if (row >= p.compressed_rows) return;
  const uint2 codes = *reinterpret_cast<const uint2*>(p.compressed_codes + row * 256 + 8 * lane);
  const __nv_bfloat162 scale =
      __float2bfloat162_rn(E4m3ToFloat(p.compressed_scales[row * 32 + lane]));
  uint4 lo, hi;
  sd::Fp4x8ToBf16(codes.x, scale, lo);
  sd::Fp4x8ToBf16(codes.y, scale, hi);
  StoreRow(p.compressed_bf16 + row * 512, lane, lo, hi);
}

}  // namespace kv_mirror
}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_ATTENTION_KV_MIRROR_CUH_
