// kernels/cuda/decode/test_util.h — exact comparisons (and DeviceBuffer) for
// the GPU-vs-CPU tests of this package (testonly).
//
// Thread safety: DeviceBuffer is not thread-safe; the functions are pure.

#ifndef WEIR_KERNELS_CUDA_DECODE_TEST_UTIL_H_
#define WEIR_KERNELS_CUDA_DECODE_TEST_UTIL_H_

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/device_buffer.h"

namespace weir::kernels::cuda::decode::testing {

using ::weir::kernels::cuda::testing::DeviceBuffer;

inline uint32_t Bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

inline float FromBits(uint32_t b) {
  float v;
  std::memcpy(&v, &b, sizeof(v));
  return v;
}

// Succeeds if `got` and `want` have the same size and identical bits
// everywhere; otherwise names the mismatch count, the first few offending
// elements and the max abs error over finite pairs. NaN payloads count
// unless nan_matches_nan: then any NaN matches any NaN, for arithmetic
// results, whose NaN payloads legitimately differ between the CPU (x86 keeps
// an operand's payload) and the GPU (canonical NaN). Copies compare payloads.
inline ::testing::AssertionResult SameBits(const std::vector<float>& got,
                                           const std::vector<float>& want,
                                           bool nan_matches_nan = false) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  }
  int64_t mismatches = 0;
  double max_abs = 0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (Bits(got[i]) == Bits(want[i])) continue;
    if (nan_matches_nan && std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (std::isfinite(got[i]) && std::isfinite(want[i])) {
      max_abs = std::fmax(max_abs, std::fabs(double(got[i]) - double(want[i])));
    }
    if (mismatches++ < 5) {
      first << "\n  [" << i << "] got " << got[i] << " (0x" << std::hex << Bits(got[i])
            << ") want " << want[i] << " (0x" << Bits(want[i]) << std::dec << ")";
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << mismatches << " of " << got.size()
                                       << " elements differ in bits (max abs error over finite "
                                       << max_abs << "); first:" << first.str();
}

// The same for integers.
template <typename T>
::testing::AssertionResult SameValues(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes " << got.size() << " vs " << want.size();
  }
  int64_t mismatches = 0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (mismatches++ < 5) first << "\n  [" << i << "] got " << got[i] << " want " << want[i];
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << mismatches << " of " << got.size()
                                       << " elements differ; first:" << first.str();
}

}  // namespace weir::kernels::cuda::decode::testing

#endif  // WEIR_KERNELS_CUDA_DECODE_TEST_UTIL_H_
