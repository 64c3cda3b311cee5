// kernels/cuda/moe/hc_norm_split.h — how the mHC collapse-norm kernels
// (HcCollapseNorm, HcExpandCollapseNorm) spread a token over a cluster of
// CTAs. Header-only, for the launcher (host) and the kernels (device).
//
// One block a token leaves a decode step of a few tokens on a few SMs: at
// batch 1 the V4.1 slice's expand + collapse-norm is one CTA moving 4 x 5,120
// streams in and out (79 launches a step at about 9 us). With `ranks` > 1 a
// token is a cluster of `ranks` CTAs: rank r makes the streams and collapsed
// values of its columns (HcNormColumnsOf), stores the collapsed values into
// every rank's shared memory, and after the cluster barrier each rank holds
// the whole collapsed row, sums its squares exactly as the one-block kernel
// does (warp 0, fmath's lane order) and normalizes and quantizes its own
// columns. Every value is computed by the same operations in the same order
// whatever `ranks`: the bits do not depend on it, so the launcher may choose
// it from the token count (HcNormClusterRanks) without touching batch
// invariance.
//
// Thread safety: pure functions.
#ifndef WEIR_KERNELS_CUDA_MOE_HC_NORM_SPLIT_H_
#define WEIR_KERNELS_CUDA_MOE_HC_NORM_SPLIT_H_

#include <cstdint>

#ifdef __CUDACC__
#define WEIR_HC_NORM_HD __host__ __device__
#else
#define WEIR_HC_NORM_HD
#endif

namespace weir::kernels::cuda::moe {

// The portable cluster size limit of sm_90.
inline constexpr int kHcNormMaxRanks = 8;
// The automatic rule's aim: about as many CTAs as the H200 has SMs (132).
inline constexpr int64_t kHcNormTargetCtas = 128;
// Columns go to ranks in whole FP8 quantization groups (32 floats = 8 float4).
inline constexpr int64_t kHcNormColumnQuantum4 = 8;

// Float4 columns [lo, hi) of a row.
struct HcNormColumns {
  int64_t lo = 0;
  int64_t hi = 0;
};

// Rank `rank` of `ranks` (1 <= ranks <= kHcNormMaxRanks) over a row of n4
// float4s: ascending ranges of equal length, a multiple of
// kHcNormColumnQuantum4, covering [0, n4) without overlap; the last ones may
// be shorter or empty.
WEIR_HC_NORM_HD constexpr HcNormColumns HcNormColumnsOf(int64_t n4, int ranks, int rank) {
  const int64_t share = (n4 + ranks - 1) / ranks;
  const int64_t per =
      (share + kHcNormColumnQuantum4 - 1) / kHcNormColumnQuantum4 * kHcNormColumnQuantum4;
  const int64_t lo = rank * per < n4 ? rank * per : n4;
  const int64_t hi = lo + per < n4 ? lo + per : n4;
  return {lo, hi};
}

// The automatic cluster size for `tokens` tokens: the largest of 8, 4, 2
// whose CTAs stay within kHcNormTargetCtas, else 1 (one block a token).
inline constexpr int HcNormClusterRanks(int64_t tokens) {
  for (int ranks = kHcNormMaxRanks; ranks > 1; ranks /= 2) {
    if (tokens * ranks <= kHcNormTargetCtas) return ranks;
  }
  return 1;
}

}  // namespace weir::kernels::cuda::moe

#undef WEIR_HC_NORM_HD

#endif  // WEIR_KERNELS_CUDA_MOE_HC_NORM_SPLIT_H_
