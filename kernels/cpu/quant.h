// kernels/cpu/quant.h
//
// Block quantization along the last dimension, exactly as DeepSeek-V4.1's
// kernels do it (spec §4.9): FP8 e4m3 with one UE8M0 scale per block, FP4
// e2m1 with one E8M0 scale per block (MXFP4) and FP4 e2m1 with one E4M3 scale
// per block (compressed KV). Each format has a Quantize (to stored bytes), a
// Dequantize (bytes to fp32) and a FakeQuant (quantize->dequantize in place,
// the reference's `inplace=True` "QAT simulation").
//
// Rules (x = one block, amax = max |x_i|; constants are fp32):
//   FP8/UE8M0: s = 2^ceil(log2(max(amax, 1e-4) * fl(1/448)))   q = e4m3(clamp(x/s, +-448))
//   FP4/E8M0:  s = 2^ceil(log2(max(amax, 6*2^-126) * fl(1/6))) q = e2m1(clamp(x/s, +-6))
//   FP4/E4M3:  s = e4m3(max(amax, 6*2^-9) / 6)                 q = e2m1(clamp(x/s, +-6))
// ceil(log2) is read off the fp32 bits of the product (Ue8m0CeilCode); x/s is
// an fp32 division; element and scale casts round to nearest even and
// saturate. Value = decode(q) * s (exact in fp32 and in bf16).
// Non-finite blocks: a block holding any NaN or +-Inf gets the NaN scale code
// (0xFF for E8M0, 0x7F for E4M3) and dequantizes to all-NaN.
//
// Layout: `x` is any number of rows laid end to end; blocks are consecutive
// runs of `block` elements, so a row length that is a multiple of `block`
// keeps every block inside one row. FP4 codes are packed two per byte, element
// 2k in the low nibble and 2k+1 in the high nibble (torch float4_e2m1fn_x2).
//
// Thread safety: pure functions over caller-owned memory.

#ifndef WEIR_KERNELS_CPU_QUANT_H_
#define WEIR_KERNELS_CPU_QUANT_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace weir::kernels::cpu {

// Block sizes of V4.1 (spec §4.9).
inline constexpr int kFp8Block = 32;        // activations, SWA KV, Engram rows
inline constexpr int kMxfp4Block = 32;      // routed experts, index K and Q
inline constexpr int kKvFp4Block = 16;      // main compressed KV (E4M3 scale)

// How an FP4 block stores its scale.
enum class Fp4Scale {
  kE8m0,  // power of two, 2^ceil(log2(amax/6)): MXFP4
  kE4m3,  // e4m3(amax/6), no global scale: compressed KV
};

// Quantizes `x` [n] to e4m3 `codes` [n] and UE8M0 `scales` [n/block].
// Returns INVALID_ARGUMENT if block <= 0, n % block != 0 or a span is sized
// wrong.
absl::Status QuantizeFp8(std::span<const float> x, int block, std::span<uint8_t> codes,
                         std::span<uint8_t> scales);

// Writes out[i] = e4m3(codes[i]) * e8m0(scales[i / block]).
// Returns INVALID_ARGUMENT on inconsistent sizes.
absl::Status DequantizeFp8(std::span<const uint8_t> codes, std::span<const uint8_t> scales,
                           int block, std::span<float> out);

// Replaces `x` by Dequantize(Quantize(x)). Same errors as QuantizeFp8.
absl::Status FakeQuantFp8(std::span<float> x, int block);

// Quantizes `x` [n] to packed e2m1 `packed` [n/2] and `scales` [n/block]
// (E8M0 or E4M3 codes per `scale`). REQUIRES: n and block even.
// Returns INVALID_ARGUMENT on bad sizes.
absl::Status QuantizeFp4(std::span<const float> x, int block, Fp4Scale scale,
                         std::span<uint8_t> packed, std::span<uint8_t> scales);

// Writes out[i] = e2m1(nibble i of packed) * scale(scales[i / block]).
absl::Status DequantizeFp4(std::span<const uint8_t> packed, std::span<const uint8_t> scales,
                           int block, Fp4Scale scale, std::span<float> out);

// Replaces `x` by Dequantize(Quantize(x)). Same errors as QuantizeFp4.
absl::Status FakeQuantFp4(std::span<float> x, int block, Fp4Scale scale);

// Rounds every element of `x` to bf16 in place (nearest, ties to even): the
// reference keeps most activations in bf16 between ops.
void RoundToBf16InPlace(std::span<float> x);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_QUANT_H_
