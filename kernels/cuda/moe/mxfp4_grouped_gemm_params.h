// kernels/cuda/moe/mxfp4_grouped_gemm_params.h
//
// Arguments, tile table and shared-memory / fragment layout of the grouped
// MXFP4 expert GEMMs (mxfp4_grouped_gemm_sm90.h): per local expert e,
// Y_e = X_e W_e^T with X in stored FP8 (e4m3 + UE8M0 per row and 32 of K) and
// W_e the expert's stored MXFP4 weight (packed e2m1 + E8M0 per row and 32 of
// K). Host-only C++ (no CUDA headers), so validation and geometry are
// testable without a GPU; the layout functions are also compiled into the
// kernel.
//
// Thread safety: pure functions and plain data.

#ifndef WEIR_KERNELS_CUDA_MOE_MXFP4_GROUPED_GEMM_PARAMS_H_
#define WEIR_KERNELS_CUDA_MOE_MXFP4_GROUPED_GEMM_PARAMS_H_

#include <cstdint>
#include <optional>
#include <string_view>

#include "absl/status/status.h"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"

namespace weir::kernels::cuda {

// K per pipeline stage: 128 bytes of packed weight row (8 chunks of 16 bytes,
// chunk c = K block c of the stage) and 2 x 128 bytes of activation row.
inline constexpr int kMxfp4GemmStageK = 256;
inline constexpr int kMxfp4GemmBlocksPerStage = kMxfp4GemmStageK / 32;

// CTA tiles, named by warps and X rows per pass. Every warp owns one 16-row
// mma tile of a weight (plain GEMM: 16 output columns per warp; gate/up:
// warps alternate w1 / w3 over the same 16 columns, so 8 columns per warp).
// Every tile computes every output with the same operations in the same order
// (mxfp4_grouped_gemm_sm90.h), so the choice moves time, never bits.
enum class Mxfp4GroupedTile {
  kAuto,   // ChooseMxfp4GroupedTile
  kW2M8,   // plain GEMM only (gate/up needs 4 warps for one 32-column FP8 block)
  kW2M32,  // plain GEMM only
  kW4M8,
  // Shared memory a CTA (Mxfp4GroupedLayout, scale scratch included) and the
  // CTAs an SM's 228 KB then holds (1 KB reserved a CTA; registers aside):
  // kW4M8 (6 stages) 66.4 KB, 3.
  kW4M8S4,   // kW4M8 with a ring of 4 stages (45.3 KB + 4 KB of widened X: 4 CTAs an SM)
  kW4M8S3,   // and of 3 (34.7 + 4 KB; 5 CTAs by shared memory, 4 by its ~120 registers)
  kW4M16S4,  // 16 X rows a pass, 4 stages: a decode expert of 9 - 16 rows in one pass
  // kW4M16S4 with a ring of 3 stages (42.9 KB: 5 CTAs an SM by shared memory,
  // and by registers with Mxfp4MinBlocks' bound; kAuto does not take it yet).
  kW4M16S3,
  kW4M32,
  kW8M64,
  // Prefill: 128 X rows a pass (3 stages, 186 KB: one CTA an SM); with kWgmma
  // one m64n128k32 a block and warpgroup.
  kW8M128,
};

// Every tile but kAuto, in the order above (tests, benchmarks, name lookup).
inline constexpr Mxfp4GroupedTile kMxfp4GroupedTiles[] = {
    Mxfp4GroupedTile::kW2M8,    Mxfp4GroupedTile::kW2M32,  Mxfp4GroupedTile::kW4M8,
    Mxfp4GroupedTile::kW4M8S4,  Mxfp4GroupedTile::kW4M8S3, Mxfp4GroupedTile::kW4M16S4,
    Mxfp4GroupedTile::kW4M16S3, Mxfp4GroupedTile::kW4M32,  Mxfp4GroupedTile::kW8M64,
    Mxfp4GroupedTile::kW8M128};

// How a tile sums each 32-element K block on the tensor cores. Every tile of
// one math gives the same bits for a row (so the batch never moves them); the
// two maths differ in the block sum's low bits.
//  * kMmaF16: mma.sync m16n8k16 on the e4m3 values widened to f16, two per
//    block (Hopper has no FP8 mma.sync datapath). The block sum keeps fp32
//    precision; equal to Fp8BlockGemm on the e4m3 form of the weights.
//  * kWgmma: wgmma m64nNk32 e4m3 (sm_90a's FP8 tensor-core path), one over
//    the tile's N X rows a block, weights as e4m3 registers, X by descriptor. FP8 wgmma
//    keeps fewer bits in its sum (about 14, DeepSeek-V3 report), so a block
//    sum may differ from kMmaF16's in its low bits; the fp32 promotion with
//    the two scales is the same. Runs on the 4- and 8-warp tiles only (a
//    warpgroup is 4 warps); kW2* tiles are refused.
//  * kWgmmaF16: wgmma m64nNk16 on the same f16 operands as kMmaF16, two a
//    block (K 0-15 from zero, then 16-31 added) over the tile's N X rows:
//    the weights' f16 registers are kMmaF16's A fragments, X is widened once
//    a stage for the CTA into a swizzled f16 tile in the mma B fragment's K
//    order (Mxfp4WgmmaF16XOffset). Hopper's f16 wgmma sums with the mma.sync
//    pair's bits (dense/tensor_core_sum_probe_test), so kWgmmaF16 gives
//    kMmaF16's bits on every tile (tested) and the two may share a step.
//    4- and 8-warp tiles only, as kWgmma, and not kW8M128 (its 64 KB f16 X
//    tile would not fit beside the ring); kAuto takes kW8M64 past 48 rows.
enum class Mxfp4GemmMath { kMmaF16, kWgmma, kWgmmaF16 };

// True for the maths that run wgmma (whole warpgroups, 1024-byte aligned
// shared tiles).
WEIR_FP8_GEMM_HD constexpr bool Mxfp4MathIsWgmma(Mxfp4GemmMath math) {
  return math != Mxfp4GemmMath::kMmaF16;
}

// Block sums of kWgmma a warpgroup keeps in flight (block j + depth's A
// registers made and its wgmma issued once block j is folded): 2 up to 64 X
// rows, 1 for 128 (64 floats of block sum beside 64 accumulators).
WEIR_FP8_GEMM_HD constexpr int Mxfp4WgmmaDepth(int x_rows) { return x_rows <= 64 ? 2 : 1; }

// CTAs an SM a tile's kernel asks ptxas to fit by registers
// (__launch_bounds__' second argument; 1: none, ptxas's own choice), on the
// mma math (the wgmma ones keep theirs). The SASS (sass_loops.py, K-loop
// instructions a warp and stage; 2026-12-05, not yet timed on a GPU):
//  * plain kW4M16S4 (down at 5 - 16 rows an expert): 136 registers, 3 CTAs an
//    SM; bounded to 4 (its shared memory's limit too): 128 registers and a
//    shorter loop (832 -> 799);
//  * kW4M16S3 (gate/up and down): 96 registers, 5 CTAs an SM, the loop about
//    11 % longer than kW4M16S4's (959 gated, 935 plain);
//  * plain kW4M8S3: 80 registers, 5 CTAs an SM (its shared memory's limit),
//    654 against kW4M8S4's 604 at 4 CTAs. The gated kW4M8S3 bounded to 5 grew
//    18 % (567 -> 670) and stays unbounded.
WEIR_FP8_GEMM_HD constexpr int Mxfp4MinBlocks(int warps, int block_m, int stages, bool gated,
                                              bool wgmma) {
  if (warps != 4 || wgmma) return 1;
  if (block_m == 16 && stages == 4 && !gated) return 4;
  if (block_m == 16 && stages == 3) return 5;
  if (block_m == 8 && stages == 3 && !gated) return 5;
  return 1;
}

struct Mxfp4GroupedTileShape {
  int warps = 0;    // 16-row weight tiles per CTA
  int block_m = 0;  // X rows per pass (multiple of 8); an expert with more loops
  int stages = 0;   // cp.async ring depth (>= 3), kMxfp4GemmStageK of K each
};

// Returns the shape of `tile`; kAuto returns a zero shape.
Mxfp4GroupedTileShape ShapeOfMxfp4GroupedTile(Mxfp4GroupedTile tile);

// The tile's lower-case name (w2m8, w2m32, w4m8, w4m8s4, w4m8s3, w4m16s4,
// w4m32, w8m64, w8m128; auto), and back (nullopt for an unknown name).
const char* Mxfp4GroupedTileName(Mxfp4GroupedTile tile);
std::optional<Mxfp4GroupedTile> Mxfp4GroupedTileByName(std::string_view name);

// Output columns of one CTA: 16 per warp (plain) or 8 per warp (gate/up).
inline int Mxfp4GroupedBlockN(const Mxfp4GroupedTileShape& shape, bool gated) {
  return gated ? 8 * shape.warps : 16 * shape.warps;
}

// The tile kAuto runs when a hit expert typically has `rows_per_expert` rows
// (a host estimate: the device counts are never read). Decode: kW4M8S4 up to
// 4 rows (gate/up with 1 - 4 rows: kW4M8S3), kW4M16S4 up to 11 (an expert of
// 9 - 16 rows in one pass instead of two; README has the measurements), kW4M32
// from 12 to 16 (both products: the Poisson tail past 16 in one pass); more
// rows: the M32 tiles, then kW8M64; kWgmma (e4m3) from 96 rows kW8M128
// (prefill); kMmaF16 from 256 rows kW4M32 again (its passes beat kW8M64's).
// kWgmma never gets a kW2* tile (kW2M32 becomes kW4M32).
Mxfp4GroupedTile ChooseMxfp4GroupedTile(int64_t rows_per_expert, bool gated,
                                        Mxfp4GemmMath math = Mxfp4GemmMath::kMmaF16);

// Per ring slot: W codes [16 warps][128] | X codes [2][block_m][128] |
// W scales [16 warps][8] | X scales [block_m][8]; slots follow each other.
// Byte offsets (from the start of dynamic shared memory) of slot `slot`'s parts.
// After the ring, one scratch per warp: the current stage's scales the warp
// reads, decoded to fp32 once (Mxfp4ScaleFloatW / Mxfp4ScaleFloatX); the
// lookup tables; with `widen_x` (Mxfp4WidensXOnce) the current stage's X as
// f16 fragments, 128-byte aligned (Mxfp4WidenedXOffset); with `wgmma_f16`
// (kWgmmaF16) instead its swizzled f16 tile, 1024-byte aligned
// (Mxfp4WgmmaF16XOffset).
struct Mxfp4GroupedSmemLayout {
  int w_codes = 0;  // slot 0 offsets; add slot * the matching *_stride
  int x_codes = 0;
  int w_scales = 0;
  int x_scales = 0;
  int w_codes_stride = 0;
  int x_codes_stride = 0;
  int w_scales_stride = 0;
  int x_scales_stride = 0;
  int scale_floats = 0;         // warp 0's scratch; add warp * scale_floats_stride
  int scale_floats_stride = 0;  // bytes per warp
  int tables = 0;               // 16 bytes: the e2m1 lookup tables (read into registers)
  // With the X operand widened once a stage (Mxfp4WidensXOnce): the stage's f16
  // B fragments, Mxfp4WidenedXOffset; otherwise empty (x_f16 == total).
  int x_f16 = 0;
  int total = 0;  // dynamic shared memory of the CTA
};

// True when a tile of `block_m` X rows on the mma.sync math widens the stage's
// X codes to f16 once for the CTA (each warp widening a share of the blocks
// into shared memory) instead of once in every warp: every warp multiplies
// all X rows of the tile, so with 4 warps each code was widened 4 times.
// The 8-row tiles only (4 KB more a CTA; their gated K loop 619 -> 539 SASS
// instructions a stage): the 16-row tile saved 3% of its gated loop for 8 KB,
// one CTA an SM fewer, and ran slower at batch 64 (README "Measurements").
// The wgmma math reads X as e4m3 and never widens.
WEIR_FP8_GEMM_HD constexpr bool Mxfp4WidensXOnce(int block_m, bool wgmma) {
  return !wgmma && block_m <= 8;
}

// Byte offset, inside the widened-X area, of the 16 bytes (the F16B
// registers lo[0], lo[1], hi[0], hi[1]) lane `lane` multiplies for K block
// `block` (0..7) and 8-row group `ni` of X: each (block, group) is 512
// contiguous bytes, a lane's 16 in lane order, so a warp's loads and stores
// of one group are conflict-free.
WEIR_FP8_GEMM_HD constexpr int Mxfp4WidenedXOffset(int block, int ni, int lane, int block_m) {
  return ((block * (block_m / 8) + ni) * 32 + lane) * 16;
}

// Float index, inside a warp's scale scratch, of K block `block` (0..7) of the
// stage for row `row` (0..15) of the warp's weight tile: rows g and g + 8 side
// by side, so a lane reads its two weight scales with one 8-byte load.
WEIR_FP8_GEMM_HD constexpr int Mxfp4ScaleFloatW(int block, int row) {
  return block * 16 + (row & 7) * 2 + (row >> 3);
}

// ... and of X row `row` (0..block_m - 1): after the weight part, rows in
// order, so the two X rows of a lane's accumulators (2t, 2t + 1) are adjacent.
WEIR_FP8_GEMM_HD constexpr int Mxfp4ScaleFloatX(int block, int row, int block_m) {
  return kMxfp4GemmBlocksPerStage * 16 + block * block_m + row;
}

// kWgmmaF16's widened X (`wgmma_f16` in Mxfp4GroupedLayout): the stage's
// block_m rows x 256 K as f16, 512 bytes a row, in 4 column atoms of
// [block_m][128 bytes] (2 K blocks each) with the 128-byte swizzle, so a K
// half (16 f16, 32 bytes) of every row is one wgmma B descriptor. Returns the
// offset of 16-byte chunk `chunk` (0..31) of row `row`. Inside a K half the
// values sit in the mma B fragment's K slots (slot 2t + i holds k = 4t + i,
// slot 8 + 2t + i holds k = 4t + 2 + i: WidenB's order), so chunk 2q holds
// the low code pairs of X chunk q's four 4-byte words and chunk 2q + 1 the
// high pairs.
WEIR_FP8_GEMM_HD constexpr int Mxfp4WgmmaF16XOffset(int row, int chunk, int block_m) {
  return (chunk >> 3) * block_m * 128 + dense::Fp8GemmSwizzledOffset(row, chunk & 7);
}

WEIR_FP8_GEMM_HD constexpr Mxfp4GroupedSmemLayout Mxfp4GroupedLayout(int warps, int block_m,
                                                                     int stages,
                                                                     bool widen_x = false,
                                                                     bool wgmma_f16 = false) {
  Mxfp4GroupedSmemLayout l;
  l.w_codes_stride = 16 * warps * 128;
  l.x_codes_stride = 2 * block_m * 128;
  l.w_scales_stride = 16 * warps * 8;
  l.x_scales_stride = block_m * 8;
  l.w_codes = 0;
  l.x_codes = l.w_codes + stages * l.w_codes_stride;
  l.w_scales = l.x_codes + stages * l.x_codes_stride;
  l.x_scales = l.w_scales + stages * l.w_scales_stride;
  l.scale_floats = l.x_scales + stages * l.x_scales_stride;
  l.scale_floats_stride = kMxfp4GemmBlocksPerStage * (16 + block_m) * 4;
  l.tables = l.scale_floats + warps * l.scale_floats_stride;
  l.x_f16 = (l.tables + 16 + 127) / 128 * 128;
  l.total = widen_x ? l.x_f16 + kMxfp4GemmBlocksPerStage * block_m * 64 : l.tables + 16;
  if (!widen_x) l.x_f16 = l.total;
  if (wgmma_f16) {  // Mxfp4WgmmaF16XOffset's tile, on a swizzle atom boundary
    l.x_f16 = (l.tables + 16 + 1023) / 1024 * 1024;
    l.total = l.x_f16 + block_m * 512;
  }
  return l;
}

// Offset, inside one slot's X codes, of 16-byte chunk `chunk` (0..15) of X
// row `row`: halves of 128 bytes of K, each swizzled as Fp8BlockGemm's tiles
// (so its ldmatrix mapping, Fp8GemmBLdmatrixSource, applies per half).
WEIR_FP8_GEMM_HD constexpr int Mxfp4GroupedXOffset(int row, int chunk, int block_m) {
  return (chunk >> 3) * block_m * 128 + dense::Fp8GemmSwizzledOffset(row, chunk & 7);
}

// Byte offset, inside one slot's W codes, of the 16 bits `lane` reads for
// register q (0..3) of the e4m3 A fragment of K block j (0..7) of the 16-row
// tile starting at smem row `row0`: the packed codes of the 4 elements that
// ldmatrix would give that register in Fp8BlockGemm (q = 0: row g, k 4t..4t+3;
// 1: row g + 8, same k; 2: row g, k 16 + 4t ..; 3: row g + 8; g = lane / 4,
// t = lane % 4). Rows are 128 bytes, chunk j = K block j, swizzled as
// Fp8GemmSwizzledOffset; two e2m1 per byte, element 2i in the low nibble.
WEIR_FP8_GEMM_HD constexpr int Mxfp4PackedAOffset(int row0, int lane, int j, int q) {
  return dense::Fp8GemmSwizzledOffset(row0 + (lane >> 2) + (q & 1) * 8, j) + 2 * (lane & 3) +
         (q >> 1) * 8;
}

// The e4m3 codes of the e2m1 magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6 (every
// e2m1 value is exact in e4m3), bytes 0..3 and 4..7: a prmt table
// (E2m1x4ToE4m3x4).
inline constexpr uint32_t kE2m1ToE4m3Lo = 0x3C383000u;
inline constexpr uint32_t kE2m1ToE4m3Hi = 0x4C484440u;
// The high bytes of the f16 encodings of the same magnitudes (0x0000, 0x3800,
// 0x3C00, 0x3E00, 0x4000, 0x4200, 0x4400, 0x4600: every low byte is zero), the
// table the kernel widens packed weights with (E2m1x4ToF16High).
inline constexpr uint32_t kE2m1ToF16HighLo = 0x3E3C3800u;
inline constexpr uint32_t kE2m1ToF16HighHi = 0x46444240u;

// Four e2m1 codes (nibble i of `v`, i = 0..3) -> byte i = table[magnitude]
// with the code's sign in bit 7, for an 8-byte table whose bytes have bit 7
// clear. `prmt(a, b, c)` is PTX prmt.b32 (default mode): byte i of the result
// is byte (c >> 4i) & 7 of {b, a}, or that byte's sign replicated when bit 3
// of the selector nibble is set. The magnitude goes through the table; the
// second prmt keeps the code's sign bit in its selector, so that byte becomes
// 0xFF (the sign of 0x80 replicated) for a negative code and stays 0x80
// otherwise: its bit 0 is the sign, moved to bit 7. The kernel passes the
// instruction, the CPU test an emulation.
// `sign_table` is 0x80808080 (a kernel passes it in a register so the
// compiler does not rematerialize the constant for every lookup).
template <typename Prmt>
WEIR_FP8_GEMM_HD inline uint32_t E2m1x4Lookup(uint32_t v, uint32_t table_lo, uint32_t table_hi,
                                              const Prmt& prmt, uint32_t sign_table = 0x80808080u) {
  const uint32_t magnitude = prmt(table_lo, table_hi, v & 0x7777u);
  const uint32_t sign = prmt(sign_table, sign_table, v & 0xFFFFu);
  return magnitude | ((sign << 7) & 0x80808080u);
}

// ... -> four e4m3 codes of the same values (byte i).
template <typename Prmt>
WEIR_FP8_GEMM_HD inline uint32_t E2m1x4ToE4m3x4(uint32_t v, const Prmt& prmt) {
  return E2m1x4Lookup(v, kE2m1ToE4m3Lo, kE2m1ToE4m3Hi, prmt);
}

// ... -> the high bytes of four f16 of the same values (byte i; the low bytes
// are zero): prmt(h, 0, 0x1404) is the f16x2 of elements 0 and 1,
// prmt(h, 0, 0x3424) that of 2 and 3, the same f16 an e4m3 -> f16 widening
// of E2m1x4ToE4m3x4's codes gives, in 4 instructions instead of 6.
template <typename Prmt>
WEIR_FP8_GEMM_HD inline uint32_t E2m1x4ToF16High(uint32_t v, const Prmt& prmt) {
  return E2m1x4Lookup(v, kE2m1ToF16HighLo, kE2m1ToF16HighHi, prmt);
}
inline constexpr uint32_t kF16x2Of01 = 0x1404u;  // prmt selectors (b operand zero)
inline constexpr uint32_t kF16x2Of23 = 0x3424u;

// The bf16 encodings of the same magnitudes (0x0000, 0x3F00, 0x3F80, 0x3FC0,
// 0x4000, 0x4040, 0x4080, 0x40C0) as two prmt tables, high bytes and low
// bytes, and the selectors that interleave four low and four high bytes
// into the bf16x2 of elements (0, 1) and (2, 3): prmt(low, high, selector).
inline constexpr uint32_t kE2m1ToBf16HighLo = 0x3F3F3F00u;
inline constexpr uint32_t kE2m1ToBf16HighHi = 0x40404040u;
inline constexpr uint32_t kE2m1ToBf16LowLo = 0xC0800000u;
inline constexpr uint32_t kE2m1ToBf16LowHi = 0xC0804000u;
inline constexpr uint32_t kBf16x2Of01 = 0x5140u;
inline constexpr uint32_t kBf16x2Of23 = 0x7362u;

// E2m1x4ToBf16x2's tables as values, so a kernel can hold them in registers
// it pins once (the compiler would otherwise rebuild each constant before
// every prmt that reads it).
struct E2m1Bf16Tables {
  uint32_t high_lo = kE2m1ToBf16HighLo;
  uint32_t high_hi = kE2m1ToBf16HighHi;
  uint32_t low_lo = kE2m1ToBf16LowLo;
  uint32_t low_hi = kE2m1ToBf16LowHi;
  uint32_t sign = 0x80808080u;
};

// Four e2m1 codes (nibbles 0..3 of `v`; the bits above are ignored) ->
// out[0], out[1]: the bf16x2 of elements (0, 1) and (2, 3), exactly the e2m1
// values (the sign of zero too): E2m1x4Lookup's magnitude and sign for the
// high bytes (its sign prmt reads v itself: prmt selects with the low 16
// bits of its selector alone), a magnitude lookup for the low bytes, which
// carry no sign, then the interleave. The kernel passes the instruction,
// the CPU test an emulation.
template <typename Prmt>
WEIR_FP8_GEMM_HD inline void E2m1x4ToBf16x2(uint32_t v, const Prmt& prmt, uint32_t (&out)[2],
                                            const E2m1Bf16Tables& t = {}) {
  const uint32_t magnitudes = v & 0x7777u;
  const uint32_t sign = prmt(t.sign, t.sign, v);
  const uint32_t high = prmt(t.high_lo, t.high_hi, magnitudes) | ((sign << 7) & 0x80808080u);
  const uint32_t low = prmt(t.low_lo, t.low_hi, magnitudes);
  out[0] = prmt(low, high, kBf16x2Of01);
  out[1] = prmt(low, high, kBf16x2Of23);
}

// True when every e2m1 value times 2^(scale - 127) is a normal bf16 value or
// past bf16's range, and 2^(scale - 127) is a normal bf16 value itself
// (2 <= scale <= 254): then a bf16 multiply (round to nearest even) of the
// exact bf16 value by the scale gives Mxfp4WeightBf16Bits' bits, as the
// product is exact or overflows in both. Mxfp4Bf16GroupedGemm widens such
// 32-blocks so (Mxfp4ToBf16EightBf16Mul) and the others, rare, through fp32.
WEIR_FP8_GEMM_HD constexpr bool Mxfp4ScaleMultipliesInBf16(uint32_t scale) {
  return scale >= 2 && scale <= 254;
}

// The weight row held in row `row` of a CTA's W tile: its output column
// relative to the CTA's first, and whether it is a row of w3 (gate/up: warp w
// holds w1 (w even) or w3 (w odd) of columns 16 (w / 2) .. + 16).
struct Mxfp4WRowSource {
  int column;
  bool up;
};

WEIR_FP8_GEMM_HD constexpr Mxfp4WRowSource Mxfp4GroupedWRow(int row, bool gated) {
  return gated ? Mxfp4WRowSource{16 * (row >> 5) + (row & 15), ((row >> 4) & 1) != 0}
               : Mxfp4WRowSource{row, false};
}

// The plain grouped GEMM: per expert e with rows [offsets[e], offsets[e+1]),
// y[r, :] = X[r, :] W_e^T.
struct Mxfp4GroupedGemmParams {
  const uint8_t* x = nullptr;         // device [rows, k] e4m3, grouped by expert; 16-byte aligned
  const uint8_t* x_scales = nullptr;  // device [rows, k / 32] UE8M0; 8-byte aligned
  // Device [num_experts + 1], nondecreasing from 0 (MoeGroupRows' group_offsets);
  // clamped into [0, rows] on the device.
  const int64_t* expert_offsets = nullptr;
  // Device arrays [num_experts] of device pointers: W_e codes [n, k / 2]
  // (16-byte aligned) and scales [n, k / 32] (8-byte aligned). A null or
  // misaligned pointer of an expert with rows makes its rows NaN.
  const uint8_t* const* w = nullptr;
  const uint8_t* const* w_scales = nullptr;
  float* y = nullptr;  // device [rows, n]; rows outside every expert untouched
  int64_t rows = 0;    // rows of x / y (an upper bound, e.g. tokens * topk); 0: nothing
  int64_t n = 0;
  int64_t k = 0;  // multiple of kMxfp4GemmStageK (256)
  int num_experts = 0;
  bool round_bf16 = false;  // y = bf16(acc) (as fp32), the reference's bf16 boundary
  // Host estimate of a hit expert's rows (0: rows / num_experts); picks the
  // kAuto tile only, never changes bits.
  int64_t rows_per_expert_hint = 0;
  Mxfp4GroupedTile tile = Mxfp4GroupedTile::kAuto;
  Mxfp4GemmMath math = Mxfp4GemmMath::kMmaF16;
};

// The gate/up product with the SwiGLU epilogue and the FP8 quantization of
// its result fused: per expert e and row r of it,
//   g = X w1_e^T, u = X w3_e^T      (fp32, each as the plain GEMM computes it)
//   h = route_weight[r] * silu(min(g, L)) * clamp(u, -L, L)  (expert_ffn.cuh SwigluOut:
//       bf16 rounding of g, u and h when round_bf16)
//   h_codes, h_scales = act_quant(h) per 32 columns (ActQuantFp8's arithmetic)
// i.e. the X operand of the down projection in stored form.
struct Mxfp4GroupedGateUpParams {
  const uint8_t* x = nullptr;                 // device [rows, dim] e4m3; 16-byte aligned
  const uint8_t* x_scales = nullptr;          // device [rows, dim / 32]; 8-byte aligned
  const int64_t* expert_offsets = nullptr;    // as Mxfp4GroupedGemmParams
  const uint8_t* const* w1 = nullptr;         // [num_experts] -> [inter, dim / 2]
  const uint8_t* const* w1_scales = nullptr;  // [num_experts] -> [inter, dim / 32]
  const uint8_t* const* w3 = nullptr;
  const uint8_t* const* w3_scales = nullptr;
  const float* route_weight = nullptr;  // device [rows]; null = 1
  uint8_t* h = nullptr;                 // device out [rows, inter] e4m3
  uint8_t* h_scales = nullptr;          // device out [rows, inter / 32] UE8M0
  int64_t rows = 0;
  int64_t inter = 0;  // multiple of 32
  int64_t dim = 0;    // the K of this product: multiple of 256
  int num_experts = 0;
  float swiglu_limit = 10.0f;  // <= 0: no clamp
  bool round_bf16 = true;
  int64_t rows_per_expert_hint = 0;  // as Mxfp4GroupedGemmParams
  Mxfp4GroupedTile tile = Mxfp4GroupedTile::kAuto;
  Mxfp4GemmMath math = Mxfp4GemmMath::kMmaF16;
};

// The prompt rows' route of the routed experts (prefill chunks): per local
// expert e, Y_e = X_e W_e^T with X in bf16 (the exact values of its FP8 form,
// dense::Fp8ActBf16) and W_e the expert's stored MXFP4 weight, widened inside
// the product's stages to bf16 (Mxfp4WeightBf16Bits: e2m1 x 2^(e - 127) is a
// bf16 value for every scale a quantizer picks), on Bf16Gemm's
// warp-specialized tile (wgmma m64n128k16 bf16, fp32 sums over all of K in
// ascending steps of 16). So a row's output has the bits dense::Bf16Gemm's
// kN128M128Ws tile gives for that X row and the widened weight, whatever the
// other rows or experts (batch-invariant), and nothing is converted or
// written before the product: the FP8 tile form's per-chunk conversion and
// its per-32 fold (about half the FP8 rate) are both gone, for the bf16 rate.
// Two forms: four or eight warps copy the packed codes and scales (cp.async)
// and widen them into the ring's swizzled bf16 W tile (one thread also
// brings X by TMA) for two consumer warpgroups that only issue wgmma
// (mxfp4_bf16_gemm_sm90.cuh); or (register_a) a producer warp brings X and
// the codes and the consumers widen their own wgmma A fragments
// (mxfp4_bf16_rs_sm90.cuh).
struct Mxfp4Bf16GroupedGemmParams {
  const uint16_t* x = nullptr;  // device [rows, k] bf16 bits, grouped by expert; 16-byte aligned
  const int64_t* expert_offsets = nullptr;  // as Mxfp4GroupedGemmParams (device, clamped)
  // Device arrays [num_experts] of device pointers: W_e codes [n, k / 2] and
  // scales [n, k / 32]. An expert with rows whose codes are null or not
  // 16-byte aligned, or scales null or not 4-byte aligned, gets NaN rows.
  const uint8_t* const* w = nullptr;
  const uint8_t* const* w_scales = nullptr;
  void* y =
      nullptr;  // device [rows, n], float or bf16 per `output`; rows outside every expert untouched
  int64_t rows = 0;  // rows of x / y (an upper bound); 0: nothing to do
  int64_t n = 0;
  int64_t k = 0;  // multiple of kMxfp4Bf16StageK x 2 (128)
  int num_experts = 0;
  dense::Fp8GemmOutput output = dense::Fp8GemmOutput::kF32;
  // Optional, as dense::Bf16GemmParams::row_role: only rows r with
  // row_role[r] == role are written (a step whose rows take two maths).
  const int32_t* row_role = nullptr;  // device [rows], 4-byte aligned
  int role = 0;
  // Warps widening W's codes in a CTA, beside the two consumer warpgroups: 4
  // or 8 (0: kMxfp4Bf16DefaultWidenerWarps). A matter of time only: the same
  // bits either way.
  int widener_warps = 0;
  // The second form (mxfp4_bf16_rs_sm90.cuh): no widener warps and no widened
  // W tile; each consumer thread widens its own wgmma A fragments from the
  // codes in registers and issues wgmma with A from registers. A matter of
  // time only: the same bits (widener_warps is then ignored).
  bool register_a = false;
  // X rows a CTA of the register form: 128 (0), 80 (wgmma N = 80: experts
  // of up to 80 rows fill one tile; slower than 128 on the EP8 prefill chunk,
  // thirty-sixth session), or 64, 32, 16, 8 (decode: a step's few rows an
  // expert, twice the ring's slots), or 256 (wgmma N 256 over two consumer
  // warpgroups, with deep_ring and stage_scale_test: each stage's widened
  // fragments feed twice the products, for prompts of hundreds of rows an
  // expert; a tile of at most 128 rows of its expert runs N 128). Only with
  // register_a; the same bits.
  int x_rows = 0;
  // The register form's producer: its copies complete on the ring slots'
  // barriers (every free slot in flight) instead of the producer waiting for
  // them three stages behind. Only with register_a; the same bits. Built
  // (thirty-sixth session) after the register form measured about 1,700
  // cycles a stage at the EP8 chunk's shapes against 512 of tensor work.
  bool deep_ring = false;
  // The register form's consumers test the four scale bytes a stage of
  // theirs uses once (Mxfp4ScaleMultipliesInBf16 of all four and a readable
  // weight) and widen the stage's four 8-code groups branch-free by the bf16
  // multiply, or all four through fp32 when one of them is rare (the fp32
  // path gives every scale's bits, so the same bits). Instead of a branch a
  // group, which the compiler keeps apart, one chain after another (thirty-
  // seventh session: the stage's 1,700 cycles are the consumers', the deep
  // ring measured no faster). Only with register_a; with deep_ring only over
  // three consumer warpgroups without fit_tile_rows (the one instance built:
  // thirty-ninth session, not yet run).
  bool stage_scale_test = false;
  // The register form's wgmma N a CTA: the fewest of 16, 32, 64, 80 and 128
  // that hold its rows of its expert (the X box stays 128 rows), so a tile
  // of 65 rows does the tensor work of 80, not 128. Only with register_a,
  // stage_scale_test and x_rows 0 / 128; the same bits.
  bool fit_tile_rows = false;
  // The register form's consumer warpgroups a CTA, each over 64 W rows: 0 or
  // 2 (128 W rows a CTA), or 3 (192: a third more warps an SM to cover the
  // stage's latencies, each X stage serving 1.5x the W rows). 3 only with
  // register_a, stage_scale_test and x_rows 0 / 128; the same bits.
  int consumer_warpgroups = 0;
  // Each CTA finds its group and row tile by a warp's ballot over 32
  // groups' tile counts at a time instead of walking the groups one by one
  // (the route's ncu, thirty-ninth session: a fifth to a third of its warps'
  // samples were in that walk). Either form; the same bits (only which CTA
  // computes which tile is found differently, and the same one is found).
  // Built after the last device call of the thirty-ninth session: not yet
  // run on a GPU, so off.
  bool ballot_group_search = false;
  // The gate / up / SwiGLU form (x_rows 256 or decode_mma; y unused, may be null):
  // w and w_scales are the gate's weights, w_up and w_up_scales the up
  // product's (the same shapes), n the intermediate size (a multiple of 32),
  // and the launch writes h's FP8 form, e4m3 codes [rows, n] (8-byte
  // aligned) and UE8M0 scales [rows, n / 32], of the rows in its groups: the
  // bits Swiglu's FP8 form (kernels/cuda/decode/swiglu.h, with
  // swiglu_route_weight, swiglu_limit and swiglu_round_bf16 as its
  // route_weight, limit and round_bf16) gives of the two products' fp32
  // outputs, without writing them. Built in the forty-first session after its
  // device calls: not yet run on a GPU.
  bool swiglu = false;
  // x_rows 256 only: an expert's last tile holds up to kMxfp4Bf16TailRows
  // rows past 256 (Mxfp4Bf16GroupTiles' tail), its consumers issuing a
  // second wgmma of N 32 over them beside each N 256 one, so an expert of
  // 257 - 288 or 513 - 544 rows takes a tile fewer: the tile of a few rows
  // it would otherwise take widens the expert's W as a full tile does (at the
  // EP8 chunk, 512 rows an expert on average, about half the experts had
  // one). The same 16 products a K step in the same order a row, so the same
  // bits. Built in the forty-second session after its device calls: not yet
  // run on a GPU.
  bool tail_rows = false;
  // x_rows 256 only: the grid in clusters of two CTAs along the W tiles, the
  // same X tile over two W tiles, each CTA's producer bringing half of every
  // stage's X box into both CTAs' shared memory by one TMA multicast: X, 8 of
  // the 9 bytes a stage reads, comes from L2 once for two CTAs (the route's
  // consumers wait on their ring with DRAM 11 % busy, ~5 TB/s of L2 reads at
  // the EP8 chunk's shapes). An odd count of W tiles gets one CTA more, its
  // rows past n. The same products in the same order, so the same bits.
  // Built in the forty-fourth session before any device call: not yet run on
  // a GPU.
  bool x_multicast = false;
  // The decode form (mxfp4_bf16_decode_sm90.cuh; x_rows 8 or 16, 0 meaning
  // 16, and none of the register form's options but swiglu, which it takes
  // as the 256-row tile does): a decode step's few rows an expert on
  // mma.sync m16n8k16 with no widened tile and no CTA barrier a stage. Each
  // warp owns 16 W rows (gated: of both weights) over all of K and streams
  // their codes and scale words through a ring of its own (cp.async),
  // widening them in registers straight into the mma A fragments (the
  // register form's widening); X's bf16 rows come by bulk copies in chunks
  // (Mxfp4Bf16DecodeChunkK) into two shared buffers the CTA shares, read by
  // ldmatrix. From its SASS about 0.16 warp instructions a weight against
  // the FP8 decode kernel's 0.21 (kernels/cuda/moe/README.md, item R). Each row's fp32 sums are the same
  // 16 products a K step in the same order as the other forms' (Hopper's
  // bf16 mma.sync and wgmma chains give the same bits: dense::Bf16Gemm's
  // mma and warp-specialized tiles do), so the same bits. Built in the
  // forty-seventh session with no device time: not yet run on a GPU.
  bool decode_mma = false;
  const uint8_t* const* w_up = nullptr;
  const uint8_t* const* w_up_scales = nullptr;
  const float* swiglu_route_weight = nullptr;  // device [rows] or null
  float swiglu_limit = 0.0f;
  bool swiglu_round_bf16 = false;
  uint8_t* h_codes = nullptr;
  uint8_t* h_scales = nullptr;
  // The decode form's SwiGLU launch only (decode_mma with swiglu; optional):
  // also the bf16 values h's codes stand for, [rows, n] (16-byte aligned),
  // Fp8ActBf16's bits of h_codes / h_scales, so the down product reads them
  // without a widening launch. Must not overlap x.
  uint16_t* h_bf16 = nullptr;
};

// The register form's consumer warpgroups of a call (0 resolved to 2).
inline int Mxfp4Bf16ConsumerWarpgroups(const Mxfp4Bf16GroupedGemmParams& params) {
  return params.consumer_warpgroups == 0 ? 2 : params.consumer_warpgroups;
}

// The register form's narrowest tile (x_rows) that holds `rows_per_expert`
// rows: 8, 16, 32, 64, or 128 past 64 (decode steps' experts; time only).
constexpr int Mxfp4Bf16NarrowestXRows(int64_t rows_per_expert) {
  for (const int r : {8, 16, 32, 64}) {
    if (rows_per_expert <= r) return r;
  }
  return 128;
}

// The rows past 256 the 256-row tile's last tile of an expert may hold
// with tail_rows (a second wgmma of N 32 beside the N 256 one).
inline constexpr int kMxfp4Bf16TailRows = 32;

// The row tiles of a group of `rows` X rows: ceil(rows / rows_per_tile), or
// with a tail (tail_rows) the last tile holding up to `tail` rows more, so a
// group of rows_per_tile * t + tail rows or fewer takes t tiles (one at
// least). A tile other than the last then has more than rows_per_tile +
// tail rows from its first on, and the last at most that many: the rows it
// holds past rows_per_tile are the tail's.
WEIR_FP8_GEMM_HD constexpr int64_t Mxfp4Bf16GroupTiles(int64_t rows, int rows_per_tile, int tail) {
  // Unsigned: the quotients of non-negative counts (a shift for a power of
  // two, as the kernels' walks had before the tail).
  const uint64_t per = static_cast<uint64_t>(rows_per_tile);
  const uint64_t r = rows > 0 ? static_cast<uint64_t>(rows) : 0;
  if (tail == 0) return static_cast<int64_t>((r + per - 1) / per);
  if (r == 0) return 0;
  const uint64_t t = static_cast<uint64_t>(tail);
  const uint64_t past = r > t + 1 ? r - t : 1;
  return static_cast<int64_t>((past + per - 1) / per);
}

// The X rows a CTA of a call of `params` holds (x_rows 0 resolved).
inline int Mxfp4Bf16XRows(const Mxfp4Bf16GroupedGemmParams& params) {
  if (params.x_rows == 0) return params.decode_mma ? 16 : 128;
  return params.x_rows;
}

// The decode form's geometry (decode_mma). A CTA is kMxfp4Bf16DecodeWarps
// warps, warp w the tile's output columns 16 w .. 16 w + 15 (128 a CTA) over
// x_rows X rows (8 or 16: one or two mma n tiles) of one expert; plain, a
// warp's W rows are those 16 rows of W, gated (swiglu) the same 16 rows of
// the gate's W and of the up product's.
inline constexpr int kMxfp4Bf16DecodeWarps = 8;
// A stage of a warp's ring: 128 of K, 64 code bytes a W row, and the row's
// 4-byte scale word (its four K blocks of 32).
inline constexpr int kMxfp4Bf16DecodeStageK = 128;
inline constexpr int kMxfp4Bf16DecodeDepth = 4;  // ring slots a warp: 3 stages in flight

// W rows of a warp's ring slot: 16, gated 32 (the gate's 16, then the up
// product's).
WEIR_FP8_GEMM_HD constexpr int Mxfp4Bf16DecodeWRows(bool gated) { return gated ? 32 : 16; }

// X comes in chunks of this much K (the last one may be shorter: k is a
// multiple of 128), into two buffers, a chunk landing while the other is
// read: 1,024, gated 512 (its rings are twice the plain form's, and two
// CTAs an SM still fit).
WEIR_FP8_GEMM_HD constexpr int Mxfp4Bf16DecodeChunkK(bool gated) { return gated ? 512 : 1024; }

// Bytes between two X rows of a buffer: a chunk's and 16 more, so the 8 rows
// an ldmatrix phase reads at one K start 16 bytes apart modulo 128 (8
// different bank quads: no conflict).
WEIR_FP8_GEMM_HD constexpr int Mxfp4Bf16DecodeXPitch(bool gated) {
  return 2 * Mxfp4Bf16DecodeChunkK(gated) + 16;
}

// Dynamic shared memory of a decode-form CTA over `x_rows` X rows: the two X
// buffers from byte 0, then each warp's ring (slots of W rows x 64 code
// bytes, then the rows' scale words). After the K loop the gated form
// stages its sums over the X buffers (Mxfp4Bf16DecodeStagedFloats).
struct Mxfp4Bf16DecodeLayout {
  int x_buffer = 0;  // bytes of one X buffer (x_rows x Mxfp4Bf16DecodeXPitch)
  int ring = 0;      // warp 0's ring; warp w's at ring + w * ring_bytes
  int ring_bytes = 0;
  int slot_bytes = 0;  // a ring slot: codes [W rows][64], then scales [W rows][4]
  int slot_scales = 0;
  int total = 0;
};

WEIR_FP8_GEMM_HD constexpr Mxfp4Bf16DecodeLayout Mxfp4Bf16DecodeLayoutOf(int x_rows,
                                                                         bool gated = false) {
  Mxfp4Bf16DecodeLayout l;
  const int w_rows = Mxfp4Bf16DecodeWRows(gated);
  l.x_buffer = x_rows * Mxfp4Bf16DecodeXPitch(gated);
  l.ring = 2 * l.x_buffer;
  l.slot_scales = w_rows * (kMxfp4Bf16DecodeStageK / 2);
  l.slot_bytes = l.slot_scales + w_rows * 4;
  l.ring_bytes = kMxfp4Bf16DecodeDepth * l.slot_bytes;
  l.total = l.ring + kMxfp4Bf16DecodeWarps * l.ring_bytes;
  return l;
}

// The gated form's staged sums: a row of floats an X row (the CTA's 128
// gate columns, then its 128 up columns, then 4 of padding).
inline constexpr int kMxfp4Bf16DecodeStagedStride = 2 * 16 * kMxfp4Bf16DecodeWarps + 4;
WEIR_FP8_GEMM_HD constexpr int Mxfp4Bf16DecodeStagedFloats(int x_rows) {
  return x_rows * kMxfp4Bf16DecodeStagedStride;
}

// Byte offset, inside an X buffer, of the 16 bytes `lane` names for an
// ldmatrix.x4 of the mma n tile `ni` (X rows 8 ni ..) at K `k` (a multiple
// of 32, inside the chunk): matrix lane / 8 is K k + 8 (lane / 8) .. + 7, its
// row lane % 8. Register i then holds, in lane (g, t), X row 8 ni + g at K
// k + 8 i + 2 t, + 1: the B fragment of K step k / 16 (i = 0, 1: b0, b1) and
// of the step after it (i = 2, 3).
WEIR_FP8_GEMM_HD constexpr int Mxfp4Bf16DecodeXOffset(int lane, int ni, int k, bool gated = false) {
  return (8 * ni + (lane & 7)) * Mxfp4Bf16DecodeXPitch(gated) + 2 * (k + 8 * (lane >> 3));
}

// The decode form's copy units of a warp's stage: lane `lane` copies units
// lane + 32 j (j < W rows / 8), unit u the 16 code bytes u % 4 of the slot's
// W row u / 4 (K 32 (u % 4) .. of the stage), to slot offset 64 (u / 4) +
// 16 (u % 4); gated, rows 16 - 31 are the up product's.
WEIR_FP8_GEMM_HD constexpr int Mxfp4Bf16DecodeUnitRow(int unit) { return unit >> 2; }
WEIR_FP8_GEMM_HD constexpr int Mxfp4Bf16DecodeUnitOffset(int unit) {
  return 64 * (unit >> 2) + 16 * (unit & 3);
}

// True when every byte of the two scale words is a scale
// Mxfp4ScaleMultipliesInBf16 takes (2 - 254): no byte of w & 0xFEFEFEFE is
// zero (0 or 1) and no byte of ~w is (0xFF), by the zero-byte test
// (x - 0x01010101) & ~x & 0x80808080, which is nonzero exactly when some byte
// of x is zero. The decode form's one test a stage (8 scale bytes a lane).
WEIR_FP8_GEMM_HD constexpr bool Mxfp4ScaleWordsMultiplyInBf16(uint32_t w0, uint32_t w1) {
  const uint32_t lo0 = w0 & 0xFEFEFEFEu, hi0 = ~w0, lo1 = w1 & 0xFEFEFEFEu, hi1 = ~w1;
  const uint32_t zero = ((lo0 - 0x01010101u) & ~lo0) | ((hi0 - 0x01010101u) & ~hi0) |
                        ((lo1 - 0x01010101u) & ~lo1) | ((hi1 - 0x01010101u) & ~hi1);
  return (zero & 0x80808080u) == 0;
}

// 2^(scale - 127) as a bf16x2 (both halves), for byte `b` of `word` (a
// scale Mxfp4ScaleMultipliesInBf16 takes): prmt puts the byte in bytes 1
// and 3 and zeros in 0 and 2, and a shift by one moves it into each half's
// exponent field ((scale << 7) * 0x00010001).
template <typename Prmt>
WEIR_FP8_GEMM_HD inline uint32_t Mxfp4ScaleBf16x2(uint32_t word, int b, const Prmt& prmt) {
  const uint32_t byte = static_cast<uint32_t>(b);
  return prmt(word, 0u, 0x0404u | (byte << 4) | (byte << 12)) >> 1;
}

// The widener warps Mxfp4Bf16GroupedGemm takes for widener_warps 0: eight
// (H100, thirty-sixth session: the route's bench 2.20 -> 2.15 ms, the EP8
// chunk 0.635 -> 0.608 s with the widening form).
inline constexpr int kMxfp4Bf16DefaultWidenerWarps = 8;

// The widener warps a call of `params` runs with (0 resolved).
inline int Mxfp4Bf16WidenerWarps(const Mxfp4Bf16GroupedGemmParams& params) {
  return params.widener_warps == 0 ? kMxfp4Bf16DefaultWidenerWarps : params.widener_warps;
}

// K of one ring stage of Mxfp4Bf16GroupedGemm (128 bytes of a bf16 row).
inline constexpr int kMxfp4Bf16StageK = 64;

// The register form's A fragments (register_a). A consumer thread of quad
// lane c (lane % 4) holds, for each of a stage's four K steps s (16 of K
// each), the wgmma A registers of its two W rows (q = 0: row lane / 4 of
// its warp's 16, q = 1: that row + 8): register 4 s + q pairs K 16 s + 2c,
// + 1 of row q, register 4 s + 2 + q K 16 s + 8 + 2c, + 1. A row's stage is 8
// code words (word w: K 8w .. 8w + 7, nibble i element 8w + i).
//
// Byte j of the result is byte c of words[j]: four words of one K block of
// 32 (4b .. 4b + 3) give the codes of the thread's K pairs of steps 2b and
// 2b + 1 in the order lo(2b), hi(2b), lo(2b + 1), hi(2b + 1).
template <typename Prmt>
WEIR_FP8_GEMM_HD inline uint32_t Mxfp4Bf16GatherQuadByte(const uint32_t* words, uint32_t c,
                                                         const Prmt& prmt) {
  const uint32_t pair = c | (4 + c) << 4 | c << 8 | (4 + c) << 12;
  return prmt(prmt(words[0], words[1], pair), prmt(words[2], words[3], pair), 0x5410u);
}

// Where the widened pair j (0 - 3, nibbles 2j and 2j + 1 of the gathered
// word of K block b of row q) goes among the stage's 16 fragment registers.
WEIR_FP8_GEMM_HD constexpr int Mxfp4Bf16FragmentRegister(int b, int j, int q) {
  return 4 * (2 * b + (j >> 1)) + 2 * (j & 1) + q;
}

// The bf16 bits the widening gives weight element `code` (low nibble: e2m1,
// bit 3 the sign) under E8M0 scale `scale`: bf16(e2m1 x 2^(scale - 127)),
// the product taken in fp32 (exact: fp32 holds every such value down to
// 2^-128) and rounded to nearest even; scale 0xFF (E8M0's NaN) gives a NaN
// (0x7FC0 here; the kernel's NaN payload may differ), and a scale whose
// products leave bf16's range rounds as fp32 -> bf16 does (infinity above
// it). Host reference of the kernel's widening (Mxfp4ToBf16Eight).
uint16_t Mxfp4WeightBf16Bits(uint8_t code, uint8_t scale);

// Returns OK or INVALID_ARGUMENT naming the problem: x, expert_offsets, w,
// w_scales or y null; rows < 0, n, k or num_experts not positive; k not a
// multiple of 128; n, k above 2^30 or rows above 2^30; x not 16-byte or y not
// element aligned; row_role not 4-byte aligned; more experts or row tiles
// than the grid holds (ceil(rows / Mxfp4Bf16XRows) + num_experts <= 65535);
// widener_warps other than 0, 4 or 8; x_rows other than 0 or 128, or other
// than 80, 64, 32, 16, 8 with register_a, or 256 without register_a,
// deep_ring and stage_scale_test over two warpgroups; deep_ring without
// register_a; swiglu without x_rows 256, w_up, w_up_scales, h_codes or
// h_scales, with n not a multiple of 32 or h_codes not 8-byte aligned;
// tail_rows or x_multicast without x_rows 256; decode_mma with x_rows other
// than 0, 8 or 16 or with any of the register form's options (swiglu aside);
// h_bf16 without decode_mma and swiglu, or not 16-byte aligned.
absl::Status CheckMxfp4Bf16GroupedGemmParams(const Mxfp4Bf16GroupedGemmParams& params);

// Returns OK or INVALID_ARGUMENT naming the problem: a null pointer, rows < 0,
// n / k / inter / dim or num_experts not positive, k (dim) not a multiple of
// 256, inter not a multiple of 32, x not 16-byte or x_scales not 8-byte
// aligned, a tile the product cannot run (kW2* for gate/up), or a grid
// dimension past the launch limits.
absl::Status CheckMxfp4GroupedGemmParams(const Mxfp4GroupedGemmParams& params);
absl::Status CheckMxfp4GroupedGateUpParams(const Mxfp4GroupedGateUpParams& params);

}  // namespace weir::kernels::cuda

#endif  // WEIR_KERNELS_CUDA_MOE_MXFP4_GROUPED_GEMM_PARAMS_H_
