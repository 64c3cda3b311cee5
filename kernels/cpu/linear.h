// kernels/cpu/linear.h
//
// y = x W^T for the weight formats of DeepSeek-V4.1 (spec §4.9):
//   kF32   fp32 [out, in]                          (gate, head, compressor r>1)
//   kBf16  bf16 bits [out, in]                     (compressor r=1, indexer wk, ...)
//   kFp8   e4m3 [out, in] + E8M0 tiles [ceil(out/B), ceil(in/B)], B = `block` (32)
//   kMxfp4 e2m1 packed [out, in/2] + E8M0 [out, in/32]   (routed experts)
// The reference quantizes the activation to FP8 (blocks of 32 along K, UE8M0,
// see quant.h) before every FP8 or FP4 GEMM; ActQuant::kAuto does the same
// (FP8/MXFP4 weights: yes; fp32/bf16: no). The weight is dequantized exactly
// (quant.h rules), tile by tile, and multiplied with OpenBLAS sgemm: the sum
// over K is fp32 in an unspecified order, so compare other implementations
// with a tolerance, not bit for bit. The reference rounds most outputs to
// bf16; that rounding is the caller's (RoundToBf16InPlace).
//
// Thread safety: pure function over caller-owned memory (sgemm may use its own
// worker threads).

#ifndef WEIR_KERNELS_CPU_LINEAR_H_
#define WEIR_KERNELS_CPU_LINEAR_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace weir::kernels::cpu {

enum class WeightFormat { kF32, kBf16, kFp8, kMxfp4 };

// A non-owning view of one linear layer's weight.
struct LinearWeight {
  WeightFormat format = WeightFormat::kF32;
  int64_t out_features = 0;
  int64_t in_features = 0;
  std::span<const float> f32;      // kF32
  std::span<const uint16_t> bf16;  // kBf16
  std::span<const uint8_t> data;   // kFp8 codes / kMxfp4 packed nibbles
  std::span<const uint8_t> scales; // kFp8 / kMxfp4 E8M0 scales
  int block = 32;                  // kFp8 tile edge
};

enum class ActQuant {
  kAuto,     // FP8 blocks of 32 for kFp8 / kMxfp4 weights, none otherwise
  kNone,     // use x as given
  kFp8,      // FP8 blocks of 32 whatever the weight (e.g. a cached dequantized FP8 weight)
};

struct LinearArgs {
  std::span<const float> x;  // [rows, in_features]
  std::span<float> y;        // [rows, out_features]; must not overlap x
  int64_t rows = 0;
  ActQuant act_quant = ActQuant::kAuto;
};

// Computes args.y = act(args.x) * W^T. Returns INVALID_ARGUMENT on
// non-positive dims, mis-sized spans, or in_features not a multiple of 32 when
// the activation is quantized (or the weight is MXFP4).
absl::Status Linear(const LinearWeight& weight, const LinearArgs& args);

// Writes the fp32 weight [out, in] of `weight` into `out` (exact
// dequantization). Same errors as Linear for the weight.
absl::Status DequantizeWeight(const LinearWeight& weight, std::span<float> out);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_LINEAR_H_
