// kernels/cuda/dense/bf16_gemm_params.h
//
// Arguments and their check for Bf16Gemm (bf16_gemm_sm90.h): Y [m, n] =
// X [m, k] * W [n, k]^T with X and W in bf16, optionally for several
// independent groups in one launch (the grouped low-rank output projection
// of V4.1's attention). Host-only C++ (no CUDA headers) so the validation is
// testable on a machine without a GPU. The CTA tiles and the shared-memory
// layout are Fp8BlockGemm's (fp8_block_gemm_params.h): a stage row is 128
// bytes, which is 64 bf16 elements of K here.
//
// Thread safety: pure functions and plain data.

#ifndef WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_PARAMS_H_
#define WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_PARAMS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/dense/fp8_block_gemm_params.h"

namespace weir::kernels::cuda::dense {

// K elements per pipeline stage (128 bytes of bf16).
inline constexpr int kBf16GemmStageK = 64;

struct Bf16GemmParams {
  const uint16_t* x = nullptr;  // device [groups][m, k] bf16 bits, 16-byte aligned
  const uint16_t* w = nullptr;  // device [groups][n, k] bf16 bits, 16-byte aligned (or w_codes)
  void* y = nullptr;  // device [groups][m, n] (see y_row_stride), float or bf16 per `output`
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;  // multiple of 8 (whole 16-byte chunks)
  // Several products of the same shape in one launch: group g reads
  // x + g * x_group_stride and w + g * w_group_stride and writes
  // y + g * y_group_stride (strides in elements; 0 means packed: m k, n k, m n).
  int groups = 1;
  int64_t x_group_stride = 0;
  int64_t w_group_stride = 0;
  int64_t y_group_stride = 0;
  // Elements between y's rows (0: n). With groups interleaved in a row (a
  // y_group_stride of n and a row stride of groups x n) the product writes
  // [m, groups, n] straight, the layout that follows V4.1's grouped wo_a,
  // where [groups][m, n] would need a transpose after it. Only where y lands
  // changes, never a value. No two groups' elements may meet (checked).
  int64_t y_row_stride = 0;
  Fp8GemmOutput output = Fp8GemmOutput::kF32;
  Fp8GemmTile tile = Fp8GemmTile::kAuto;
  // Split-K for decode (few CTAs from small n and a long k), as
  // Fp8BlockGemm's: the K stages (kBf16GemmStageK each, num_kt = ceil(k /
  // 64)) are cut into k_splits contiguous ranges, split s covering stages
  // [s num_kt / k_splits, (s + 1) num_kt / k_splits); each range is summed
  // as below into its own fp32 partial (in split_scratch,
  // Bf16GemmSplitScratchFloats floats), then y = ((part_0 + part_1) +
  // part_2) + ... in split order (a second kernel), rounded per `output`.
  // The cut depends on k_splits and k only, so with k_splits fixed per
  // weight (ChooseBf16GemmSplits) a row's bits still depend on nothing but
  // its X row and W. 1 = no split.
  int k_splits = 1;
  float* split_scratch = nullptr;
  // Optional, with a split's second kernel (Bf16GemmMakesFp8): y's FP8 form
  // beside y, the bits ActQuantFp8 gives of y as written: e4m3 codes laid
  // out as y ([m, row stride], the groups where y has them) and a UE8M0
  // scale per 32 of a row ([m, row stride / 32]). The next FP8 product reads
  // it without an ActQuantFp8 launch (V4.1's wo_b after the grouped wo_a).
  uint8_t* y_codes = nullptr;
  uint8_t* y_scales = nullptr;
  // The weight in FP8 instead of w (w null; V4.1's wo_a, which the checkpoint
  // stores so and the model runs as a bf16 product): e4m3 codes [groups][n, k]
  // (16-byte aligned, w_group_stride in bytes, a multiple of 16) and a UE8M0
  // scale per 32 x 32 tile, [groups][ceil(n / 32), k / 32]
  // (w_scales_group_stride bytes apart; 0: packed); k % 32 == 0. Each stage's
  // codes are widened in shared memory to Fp8WeightBf16's bits, so y has the
  // bits of the product with w = those bf16 values (exactly the bf16 weight
  // wherever code x scale is a bf16 value, as for every weight quantized to
  // FP8 and dequantized). Half of w's bytes; the mma tiles only (kAuto's
  // 128 x 128 tile stays kN128M128).
  const uint8_t* w_codes = nullptr;
  const uint8_t* w_scales = nullptr;
  int64_t w_scales_group_stride = 0;
  // Optional: only the rows r of y with row_role[r] == role are written
  // (every group's); the others keep what y held. Split partials are
  // scratch and are written whole; the second kernel (SplitReduceKernel)
  // writes the rows of `role` only. Lets a step whose rows take two maths
  // run this product for its rows of one role after another product wrote
  // all rows. Not with y_codes. A written row has the bits it has without
  // row_role.
  const int32_t* row_role = nullptr;  // device [m], 4-byte aligned
  int role = 0;
  // Where the warp-specialized tile runs (kN128M128Ws): 256 X rows a CTA
  // instead of 128 (wgmma m64n256k16, a 4-slot ring of 48 KB stages), so each
  // stage's W tile serves twice the rows and the tensor cores read fewer
  // shared bytes a product. Each element is the same sum of the same 16
  // products in K order, so the bits do not change; a choice of speed.
  bool ws_m256 = false;
  // Where the warp-specialized tile runs: a grid of at most one CTA an SM,
  // each taking the tiles (m tile fastest, then n tile, then group) in turn,
  // its ring's stages counted across them, so the loader fetches the next
  // tile's first stages while the consumers store the last tile and no CTA
  // pays a launch and an empty ring a tile. The same bits; a choice of speed.
  bool ws_persistent = false;
  // Bf16GemmCutlass's CTA tile over W rows: 0 or 256 (the 128 x 256 tile),
  // 128 (128 x 128: twice the tiles, for products whose 128 x 256 tiles
  // leave most of a wave's SMs idle), or -1 (Bf16GemmCutlassTileN's choice
  // for the call's shape). Each element is the same K chain of wgmma steps
  // of 16 products in order either way, so the same bits; a choice of speed.
  int cutlass_tile_n = 0;
};

// The tile a call runs: p.tile, or for kAuto ChooseFp8GemmTile(m, n) with
// the 128 x 128 prefill tile replaced by the warp-specialized kN128M128Ws
// (bf16_gemm_ws_sm90.cuh: TMA and wgmma, the same bits), which takes every
// shape CheckBf16GemmParams accepts; with w_codes the mma tiles only (the
// 6-slot kN64M8 instead of kN64M8S3 up to 8 rows made the EP8 slice's batch-1
// step 1 ms slower, H100 2026-12-06).
Fp8GemmTile ResolveBf16GemmTile(const Bf16GemmParams& p);

// True when `p` can write y_codes / y_scales: split K summed by the second
// kernel (k_splits > 1, not the warp-specialized tile), fp32 output (rounded
// or not), n, the row stride and the y group stride (resolved) multiples of
// 32. CheckBf16GemmParams refuses y_codes where this is false.
bool Bf16GemmMakesFp8(const Bf16GemmParams& p);

// True when no two groups of `p`'s y share an element (y_group_stride and
// y_row_stride resolved): the groups stacked one after another, or side by
// side within each row. CheckBf16GemmParams refuses other layouts.
bool Bf16GemmGroupsApart(const Bf16GemmParams& p);

// Floats of split_scratch a call with `p`'s shape needs: groups x k_splits x
// m x n (0 without a split).
int64_t Bf16GemmSplitScratchFloats(const Bf16GemmParams& p);

// The split a decode-shaped product (n rows of W, k of K, `groups` groups)
// runs with: ChooseFp8GemmSplits' rule on Bf16Gemm's stages (about
// kFp8GemmSplitTargetCtas CTAs of 32 W rows, at least 4 stages of 64 a split,
// at most kFp8GemmMaxSplits); 1 when the n / 32 x groups CTAs already reach
// the target. A function of the weight's shape alone (never of m), so it
// keeps every row batch-invariant. V4.1's grouped wo_a (8 groups of 1,024 x
// 4,096) gets 4.
int ChooseBf16GemmSplits(int64_t n, int64_t k, int groups = 1);

// Whether the warp-specialized tile over 256 X rows (ws_m256) is the faster
// form for a product of m rows and an n x k weight: at least
// kBf16WsM256MinRows rows and kBf16WsM256MinWeight weight elements. From
// fp8_gemm_bench prefill at m = 4,096 (H100, thirty-seventh session, both
// persistent): faster for wq_b (32,768 x 1,280: 914 -> 798 us), wo_b (5,120
// x 8,192: 753 -> 657) and 8,192 x 8,192 (1,195 -> 1,021); slower for
// shared.w13 (4,608 x 5,120: 467 -> 499), shared.w2 (5,120 x 2,304: 273 ->
// 353) and wq_a (1,280 x 5,120: 172 -> 218). The same bits either way, so
// the choice may follow m.
inline constexpr int64_t kBf16WsM256MinRows = 2048;
inline constexpr int64_t kBf16WsM256MinWeight = int64_t{32} << 20;
constexpr bool Bf16GemmWsM256Pays(int64_t m, int64_t n, int64_t k) {
  return m >= kBf16WsM256MinRows && n * k >= kBf16WsM256MinWeight;
}

// True when Bf16GemmCutlass (bf16_gemm_cutlass.h) runs `p`: bf16 w (not
// w_codes), no split (k_splits 1), no row_role, no y_codes (any of the three
// outputs), and rows TMA can address: k, x's and w's
// group strides multiples of 8 elements, y's row stride (resolved) and
// group stride multiples of 16 bytes, y 16-byte aligned. A matter of the
// arguments only (CheckBf16GemmParams still applies).
bool Bf16GemmCutlassTakes(const Bf16GemmParams& p);

// The tile over W rows (128 or 256) Bf16GemmCutlass takes for cutlass_tile_n
// -1 on a device of `sms` SMs: the one whose waves of 128-row tiles (m / 128
// x n / tile x groups tiles, a wave `sms` of them) take less time, a wave of
// 128 x 128 tiles counted kBf16CutlassTile128Cost of one of 128 x 256 (half
// the work at about 0.83 of the rate: a smaller tile reads more bytes a
// product; a guess until a GPU times both). E.g. at m = 4,096 on 132 SMs
// V4.1's wkv (n 512: 64 tiles, one wave, or 128 in one wave) and wq_a (n
// 1,280: 160 tiles in two waves, or 320 in three) take 128, wo_b, wq_b and
// the shared w1 + w3 (5 waves or 9) keep 256. A function of the shape and
// the device only.
inline constexpr double kBf16CutlassTile128Cost = 0.6;
int Bf16GemmCutlassTileN(int64_t m, int64_t n, int groups, int sms);

// Returns OK or INVALID_ARGUMENT naming the problem: w and w_codes both or
// neither, w_codes without w_scales, with k % 32 != 0, unaligned, with a
// group stride not a multiple of 16 or on the warp-specialized tile; row_role
// with y_codes or not 4-byte aligned; a null pointer, m, n, k
// or groups not positive (groups at most 65535), k not a multiple of 8, a
// group stride that is negative, not a multiple of 8 (x, w) or smaller than
// its packed size, x or w not 16-byte aligned, y not aligned to its element,
// or m too large for the launch grid of the tile, or k_splits outside
// [1, ceil(k / 64)] (groups x k_splits <= 65535) or above 1 without
// split_scratch, or cutlass_tile_n other than -1, 0, 128 or 256.
absl::Status CheckBf16GemmParams(const Bf16GemmParams& params);

// Dynamic shared memory of one Bf16Gemm CTA of `shape`: per stage the W and
// X tiles ([rows][128] bytes each); with `w_codes` one W tile and per stage
// the X tile and the W codes ([block_n][64] bytes), to which the launch adds
// the CTA's scale bytes (they depend on k and the split).
int64_t Bf16GemmSharedBytes(const Fp8GemmTileShape& shape, bool w_codes = false);

// The scale bytes of an FP8 weight of n x k (32 x 32 tiles): ceil(n / 32) x
// ceil(k / 32).
int64_t Bf16GemmWeightScaleBytes(int64_t n, int64_t k);

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_BF16_GEMM_PARAMS_H_
