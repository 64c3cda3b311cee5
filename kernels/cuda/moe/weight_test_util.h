// kernels/cuda/moe/weight_test_util.h — random expert weights in the stored
// formats (fp32, FP8 tiles, MXFP4) with their exact dequantization, for the
// GPU-vs-CPU tests of this package (testonly).
//
// Thread safety: pure functions.

#ifndef WEIR_KERNELS_CUDA_MOE_WEIGHT_TEST_UTIL_H_
#define WEIR_KERNELS_CUDA_MOE_WEIGHT_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/linear.h"
#include "kernels/cpu/weight_quant.h"

namespace weir::kernels::cuda::moe_test {

// One stored weight (as a checkpoint holds it) and its exact dequantization
// (as the backend holds it, DenseWeight::w).
struct StoredWeight {
  cpu::WeightFormat format;
  int64_t out, in;
  std::vector<float> f32, dequant;
  std::vector<uint8_t> data, scales;

  cpu::LinearWeight View() const {
    return {.format = format, .out_features = out, .in_features = in, .f32 = f32,
            .data = data, .scales = scales, .block = 32};
  }
};

inline StoredWeight MakeWeight(cpu::WeightFormat format, int64_t out, int64_t in, float stddev,
                               std::mt19937& rng) {
  StoredWeight w{format, out, in};
  std::normal_distribution<float> normal(0.0f, stddev);
  if (format == cpu::WeightFormat::kMxfp4) {
    w.data.resize(out * in / 2);
    w.scales.resize(out * in / 32);
    for (uint8_t& b : w.data) b = static_cast<uint8_t>(rng());
    // e2m1 values reach 6; aim the scales at stddev.
    const int base = 127 + static_cast<int>(std::lround(std::log2(stddev / 2.0f)));
    for (uint8_t& s : w.scales) s = static_cast<uint8_t>(base - 1 + static_cast<int>(rng() % 3));
  } else {
    w.f32.resize(out * in);
    for (float& v : w.f32) v = normal(rng);
    if (format == cpu::WeightFormat::kFp8) {
      w.data.resize(out * in);
      w.scales.resize(cpu::Fp8WeightScaleCount(out, in, 32));
      EXPECT_TRUE(cpu::QuantizeFp8Weight(w.f32, out, in, 32, w.data, w.scales).ok());
      w.f32.clear();
    }
  }
  w.dequant.resize(out * in);
  EXPECT_TRUE(cpu::DequantizeWeight(w.View(), w.dequant).ok());
  return w;
}

}  // namespace weir::kernels::cuda::moe_test

#endif  // WEIR_KERNELS_CUDA_MOE_WEIGHT_TEST_UTIL_H_
