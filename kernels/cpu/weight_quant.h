// kernels/cpu/weight_quant.h
//
// Stored weight formats of DeepSeek-V4.1 checkpoints (spec §4.9, §4.10):
//   * FP8 e4m3 weights [rows, cols] with one E8M0 scale per `block` x `block`
//     tile, scales [ceil(rows/block), ceil(cols/block)] (V4.1: block 32;
//     V3-style checkpoints: 128). Edge tiles are partial.
//   * MXFP4 routed-expert weights [rows, cols]: e2m1 packed [rows, cols/2]
//     (element 2k in the low nibble), one E8M0 scale per 32 along K, scales
//     [rows, cols/32].
// Dequantize turns them into fp32 [rows, cols]; Quantize writes them, for
// generating test checkpoints. Real checkpoints come quantized; our Quantize
// rule for FP8 tiles is the activation rule of quant.h applied to the tile's
// amax (s = 2^ceil(log2(max(amax,1e-4)/448))), and for MXFP4 the FP4/E8M0 rule.
//
// Thread safety: pure functions over caller-owned memory.

#ifndef WEIR_KERNELS_CPU_WEIGHT_QUANT_H_
#define WEIR_KERNELS_CPU_WEIGHT_QUANT_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::kernels::cpu {

// Returns ceil(rows / block) * ceil(cols / block): the FP8 weight scale count.
int64_t Fp8WeightScaleCount(int64_t rows, int64_t cols, int block);

// Writes out[r, c] = e4m3(codes[r, c]) * e8m0(scales[r / block, c / block]).
// Shapes: codes [rows, cols], scales [ceil(rows/block), ceil(cols/block)],
// out [rows, cols], all row-major. Returns INVALID_ARGUMENT on non-positive
// dims or mis-sized spans.
absl::Status DequantizeFp8Weight(std::span<const uint8_t> codes, std::span<const uint8_t> scales,
                                 int64_t rows, int64_t cols, int block, std::span<float> out);

// Quantizes fp32 `w` [rows, cols] into `codes` and `scales` (shapes as above).
// A tile holding NaN/Inf gets scale 0xFF and NaN codes.
absl::Status QuantizeFp8Weight(std::span<const float> w, int64_t rows, int64_t cols, int block,
                               std::span<uint8_t> codes, std::span<uint8_t> scales);

// Writes out [rows, cols] from MXFP4 `packed` [rows, cols/2] and `scales`
// [rows, cols/32]. REQUIRES: cols % 32 == 0, else INVALID_ARGUMENT.
absl::Status DequantizeMxfp4Weight(std::span<const uint8_t> packed,
                                   std::span<const uint8_t> scales, int64_t rows, int64_t cols,
                                   std::span<float> out);

// Quantizes fp32 `w` [rows, cols] to MXFP4 (shapes as above).
absl::Status QuantizeMxfp4Weight(std::span<const float> w, int64_t rows, int64_t cols,
                                 std::span<uint8_t> packed, std::span<uint8_t> scales);

// The FP8 form with 32 x 32 tile scales (DequantizeFp8Weight's, block 32) of
// an MXFP4 weight [rows, cols], value for value where it can be: in each tile
// (32 rows x one 32-column K block) the largest scale E of the tile's rows
// becomes the tile's scale, and each element the e4m3 code of
// e2m1 x 2^(e_row - E). `exact` [ceil(rows / 32), cols / 32] marks the tiles
// whose every element kept its value (there DequantizeFp8Weight gives
// DequantizeMxfp4Weight's floats bit for bit): every tile whose row scales lie
// within 8 binades of E (0.5 x 2^-8 is e4m3's smallest subnormal), and others
// whose small rows hold no code that underflows; never a tile with a NaN
// scale (0xFF). Codes of an inexact tile are 0. The prefill form of the
// routed experts (kernels/cuda/moe/README.md "Prefill": a wgmma block sum of
// rows scaled by powers of two is the unscaled sum scaled, so the tile form
// runs the dense FP8 kernel with the MXFP4 kernel's bits). Returns the number
// of inexact tiles; INVALID_ARGUMENT on a bad shape or span size.
absl::StatusOr<int64_t> Mxfp4ToFp8Tiles(std::span<const uint8_t> packed,
                                        std::span<const uint8_t> scales, int64_t rows, int64_t cols,
                                        std::span<uint8_t> codes, std::span<uint8_t> tile_scales,
                                        std::span<uint8_t> exact);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_WEIGHT_QUANT_H_
