// kernels/cuda/decode/launch_util.h — host helpers shared by the launchers of
// this package (included by the .cu files only): element counts that refuse
// int64 overflow, and grid sizes for grid-stride loops.
//
// Thread safety: pure functions.

#ifndef WEIR_KERNELS_CUDA_DECODE_LAUNCH_UTIL_H_
#define WEIR_KERNELS_CUDA_DECODE_LAUNCH_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <initializer_list>

namespace weir::kernels::cuda::decode::internal {

inline constexpr int kThreads = 256;
// Grid-stride kernels never need more blocks than this to fill an H200.
inline constexpr int64_t kMaxBlocks = 65535;

// Sets *product to the product of `factors` (all >= 0) and returns true,
// or returns false if it does not fit int64_t.
inline bool CheckedProduct(std::initializer_list<int64_t> factors, int64_t* product) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(p, f, &p)) return false;
  }
  *product = p;
  return true;
}

// Blocks of kThreads for a grid-stride loop over n > 0 elements.
inline unsigned BlocksFor(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// Threads for a block that walks `width` > 0 contiguous floats: whole warps,
// at most kThreads.
inline int ThreadsForWidth(int64_t width) {
  return static_cast<int>(std::min<int64_t>((width + 31) / 32 * 32, kThreads));
}

}  // namespace weir::kernels::cuda::decode::internal

#endif  // WEIR_KERNELS_CUDA_DECODE_LAUNCH_UTIL_H_
