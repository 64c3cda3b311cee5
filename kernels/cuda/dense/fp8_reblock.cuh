// kernels/cuda/dense/fp8_reblock.cuh — device code of ReblockFp8Rows /
// ReblockFp8Tiles (fp8_reblock.h). No host dependencies. The code rewrite is
// fp8_reblock_ref.h's Fp8ReblockCodeBits (held to the specification on
// every code and shift by fp8_reblock_test).
#ifndef WEIR_KERNELS_CUDA_DENSE_FP8_REBLOCK_CUH_
#define WEIR_KERNELS_CUDA_DENSE_FP8_REBLOCK_CUH_

#include <cstdint>

#include "kernels/cuda/dense/fp8_reblock_ref.h"

namespace weir::kernels::cuda::dense::fp8_reblock {

// Threads of a CTA: 32 rows x 8 chunks of 16 codes (one 128-wide span).
inline constexpr int kThreads = 256;
inline constexpr int kChunksPerSpan = 8;
inline constexpr int kRowsPerPass = kThreads / kChunksPerSpan;  // 32

// The fp32 value of a UE8M0 byte: 2^(s - 127) (s = 0 is the fp32 subnormal
// 2^-127), a quiet NaN for 0xFF; numeric_formats.h's E8m0ToFloat bits.
__device__ __forceinline__ float Ue8m0Value(uint32_t s) {
  if (s == 0xFFu) return __uint_as_float(0x7FC00000u);
  return __uint_as_float(s == 0 ? 0x00400000u : s << 23);
}

// The four codes of `word` each rewritten under a scale `shift` binades
// larger.
__device__ __forceinline__ uint32_t ReblockWord(uint32_t word, uint32_t shift) {
  uint32_t out = 0;
#pragma unroll
  for (int b = 0; b < 4; ++b)
    out |= Fp8ReblockCodeBits((word >> (8 * b)) & 0xFFu, shift) << (8 * b);
  return out;
}

// Loads 16 codes, rewrites them under `shift` and stores them (16-byte
// aligned both; `out` may be `in`).
__device__ __forceinline__ void ReblockSixteen(const uint8_t* in, uint8_t* out, uint32_t shift) {
  uint4 c = *reinterpret_cast<const uint4*>(in);
  if (shift != 0) {
    c.x = ReblockWord(c.x, shift);
    c.y = ReblockWord(c.y, shift);
    c.z = ReblockWord(c.z, shift);
    c.w = ReblockWord(c.w, shift);
  }
  *reinterpret_cast<uint4*>(out) = c;
}

}  // namespace weir::kernels::cuda::dense::fp8_reblock

#endif  // WEIR_KERNELS_CUDA_DENSE_FP8_REBLOCK_CUH_
