// kernels/cuda/dense/fp8_block_gemm_params.h
//
// Arguments, tile table and shared-memory layout of Fp8BlockGemm
// (fp8_block_gemm_sm90.h): Y [m, n] = X [m, k] * W [n, k]^T with both
// operands in V4.1's stored FP8 form. Host-only C++ (no CUDA headers) so the
// validation and the tile geometry are testable on a machine without a GPU;
// the layout functions are also compiled into the kernel (fp8_block_gemm_sm90.cuh).
//
// Thread safety: pure functions and plain data.

#ifndef WEIR_KERNELS_CUDA_DENSE_FP8_BLOCK_GEMM_PARAMS_H_
#define WEIR_KERNELS_CUDA_DENSE_FP8_BLOCK_GEMM_PARAMS_H_

#include <cstdint>

#include "absl/status/status.h"

#if defined(__CUDACC__)
#define WEIR_FP8_GEMM_HD __host__ __device__
#else
#define WEIR_FP8_GEMM_HD
#endif

namespace weir::kernels::cuda::dense {

// Elements of K that share one scale (the reference's act_quant block and the
// weight's 32 x 32 tile edge).
inline constexpr int kFp8GemmScaleBlock = 32;

enum class Fp8GemmOutput {
  kF32,   // y is float [m, n]
  kBf16,  // y is bf16 bits [m, n]: the fp32 result rounded to nearest even
  // y is float [m, n]: the fp32 result rounded to bf16 (nearest even) and
  // held as fp32, i.e. exactly what a RoundBf16 pass over kF32's y leaves (the
  // decoder's bf16 boundary after a linear, fused into the epilogue).
  kF32RoundedBf16,
};

// Bytes of one element of y.
inline int Fp8GemmOutputBytes(Fp8GemmOutput output) {
  return output == Fp8GemmOutput::kBf16 ? 2 : 4;
}

// CTA tiles. The name gives the CTA's rows of W (n) and of X (m). Every tile
// computes every output element with the same operations in the same order
// (see fp8_block_gemm_sm90.h), so the choice moves time, never bits.
enum class Fp8GemmTile {
  kAuto,   // ChooseFp8GemmTile(m, n)
  kN16M8,  // decode: 1 warp, 16 W rows x all 8 X rows
  kN16M16,
  kN16M32,
  kN16M64,
  kN16M32W2,  // 2 warps, each the 16 W rows x 16 of the 32 X rows (more warps an SM)
  kN16M64W4,  // 4 warps, each the 16 W rows x 16 of the 64 X rows
  kN32M64W4,  // 4 warps, each the 32 W rows x 16 of the 64 X rows
  kN64M64W4,  // 4 warps as 2 (n) x 2 (m), each 32 W rows x 32 X rows
  kN32M8,     // 2 warps, each 16 W rows x all 8 X rows
  kN32M16,
  kN32M32,
  kN32M64,
  kN64M64,    // 4 warps, each 16 W rows x 64 X rows
  kN128M64,   // 8 warps, each 16 W rows x 64 X rows
  kN128M128,  // prefill: 8 warps as 2 (n) x 4 (m), each 64 W rows x 32 X rows
  // 4 warps, each 16 W rows x all 8 / 16 / 32 X rows: the decode tiles of
  // Fp8GemmMath::kWgmma (one warpgroup over 64 W rows).
  kN64M8,
  kN64M16,
  kN64M32,
  // Prefill of Fp8GemmMath::kWgmma: 8 warps (two warpgroups over 64 W rows
  // each), every warp 16 W rows x all 128 X rows: one m64n128k32 wgmma a
  // block and warpgroup.
  kN128M128Wg,
  // kN64M8 with a 4- or 3-slot ring (37 / 28 KB of shared memory: 6 / 8 CTAs
  // an SM instead of 4): a split decode CTA walks only 4 - 10 stages. Same
  // bits as every tile; kN64M8S3 is the mma maths' choice up to 8 rows.
  kN64M8S4,
  kN64M8S3,
  // Prefill, warp-specialized (fp8_block_gemm_ws_sm90.cuh): a producer
  // warpgroup (TMA loader; X widened to f16 once and the scale products
  // tabled for the CTA) and two consumer warpgroups of 64 W rows x all 128
  // X rows that only issue wgmma and fold: f16 wgmma for kMmaF16 and
  // kWgmmaF16 (kMmaF16's bits), e4m3 wgmma on the codes for kWgmma
  // (kN128M128Wg's bits). Needs k % 128 == 0 and 4-byte aligned scales
  // (Fp8GemmWsApplies); kAuto takes it above 256 rows when they hold. Not in
  // kFp8GemmTiles (its own tests and bench rows).
  kN128M128Ws,
};

// Every tile but kAuto (tests, benchmarks).
inline constexpr Fp8GemmTile kFp8GemmTiles[] = {
    Fp8GemmTile::kN16M8,      Fp8GemmTile::kN16M16,   Fp8GemmTile::kN16M32,
    Fp8GemmTile::kN16M64,     Fp8GemmTile::kN16M32W2, Fp8GemmTile::kN16M64W4,
    Fp8GemmTile::kN32M64W4,   Fp8GemmTile::kN64M64W4, Fp8GemmTile::kN32M8,
    Fp8GemmTile::kN32M16,     Fp8GemmTile::kN32M32,   Fp8GemmTile::kN32M64,
    Fp8GemmTile::kN64M64,     Fp8GemmTile::kN128M64,  Fp8GemmTile::kN128M128,
    Fp8GemmTile::kN64M8,      Fp8GemmTile::kN64M16,   Fp8GemmTile::kN64M32,
    Fp8GemmTile::kN128M128Wg, Fp8GemmTile::kN64M8S4,  Fp8GemmTile::kN64M8S3};

// The geometry of one tile. Warps are laid out warp = warp_n + warps_n * warp_m.
struct Fp8GemmTileShape {
  int block_n = 0;  // W rows per CTA: 16, or a multiple of 32 (whole weight scale rows)
  int block_m = 0;  // X rows per CTA (multiple of 8)
  int warps_n = 0;
  int warps_m = 0;
  int stages = 0;  // cp.async pipeline depth, >= 3; each stage holds 128 of K
};

// Returns the shape of `tile`; kAuto returns a zero shape.
Fp8GemmTileShape ShapeOfFp8GemmTile(Fp8GemmTile tile);

// How Fp8BlockGemm sums each 32-element K block on the tensor cores. Every
// tile of one math gives a row the same bits (so the batch never moves them);
// the two maths differ in the block sum's low bits.
//  * kMmaF16: two mma.sync m16n8k16 on the e4m3 values widened to f16 (Hopper
//    has no FP8 mma.sync datapath); the block sum keeps fp32 precision.
//  * kWgmma: one wgmma m64nNk32 e4m3 over the tile's N X rows (sm_90a's FP8
//    tensor-core path), both operands read from the swizzled shared tiles by descriptor,
//    no widening. FP8 wgmma keeps fewer bits in a sum (about 14, DeepSeek-V3
//    report). Runs on the tiles where every warp owns 16 W rows and all the
//    X rows and the warps form whole warpgroups (Fp8GemmTileRunsWgmma:
//    kN64M8 / M16 / M32, kN64M64, kN128M64, kN128M128Wg); other tiles are
//    refused.
//  * kWgmmaF16: kMmaF16's operands and K slots on wgmma m64nNk16 f16 (the
//    warp's W rows widened to f16 registers as the mma A fragment, X widened
//    once a stage for the CTA into a swizzled f16 tile, Fp8GemmF16XOffset):
//    Hopper's f16 wgmma sums as the mma.sync pair does
//    (tensor_core_sum_probe_test), so every tile gives kMmaF16's bits and the
//    two maths may share a step; the tiles of kWgmma, including the
//    wgmma-only kN128M128Wg (a prefill tile for the default bits).
enum class Fp8GemmMath { kMmaF16, kWgmma, kWgmmaF16 };

// The wgmma maths (whole warpgroups, 1024-byte aligned shared tiles).
WEIR_FP8_GEMM_HD constexpr bool Fp8GemmMathIsWgmma(Fp8GemmMath math) {
  return math != Fp8GemmMath::kMmaF16;
}

// kWgmmaF16's X tile: `block_m` rows x 128 K as f16 (256 bytes a row) in two
// column atoms of [block_m][128 bytes] with the 128-byte swizzle, starting at
// the first 1024-byte boundary after the tile's other shared memory
// (`shared_bytes`, Fp8GemmSharedBytes). 16-byte chunk c (0..15) of row r sits
// at Fp8GemmF16XChunk(r, c, block_m) from there; inside a K half (2 chunks)
// the values are in the mma B fragment's K slots (WidenB's order): chunk 2q
// holds the low code pairs of the stage's 16-code chunk q, chunk 2q + 1 the
// high pairs.
WEIR_FP8_GEMM_HD constexpr int64_t Fp8GemmF16XOffset(int64_t shared_bytes) {
  return (shared_bytes + 1023) / 1024 * 1024;
}
WEIR_FP8_GEMM_HD constexpr int64_t Fp8GemmF16XBytes(int block_m) { return int64_t{block_m} * 256; }

// Block sums of kWgmma a warpgroup keeps in flight (Fp8BlockGemm issues
// block j + depth as soon as block j is folded): 4 up to 64 X rows, 2 for
// 128 (two sets of 64 floats beside the 64 accumulators).
WEIR_FP8_GEMM_HD constexpr int Fp8GemmWgmmaDepth(int x_rows) { return x_rows <= 64 ? 4 : 2; }

// Tiles that run only kWgmma (kN128M128Wg: 128 X rows a warp is past what
// the mma path's registers hold); kMmaF16 and Bf16Gemm refuse them and
// compile no instance for them.
WEIR_FP8_GEMM_HD constexpr bool Fp8GemmTileIsWgmmaOnly(int block_m, int warps_m) {
  return warps_m == 1 && block_m > 64;
}

// True when `shape` can run kWgmma (see above).
inline bool Fp8GemmTileRunsWgmma(const Fp8GemmTileShape& shape) {
  return shape.warps_m == 1 && shape.warps_n % 4 == 0 && shape.block_n == 16 * shape.warps_n;
}

// Returns the tile kAuto runs for m rows of X and n rows of W. Up to 64 rows
// a single CTA row covers all of X, so every weight byte is read once.
// kWgmma: kN64M8 / M16 / M32 up to 32 rows, kN64M64 to 256, then kN128M128Wg.
Fp8GemmTile ChooseFp8GemmTile(int64_t m, int64_t n, Fp8GemmMath math = Fp8GemmMath::kMmaF16);

// Bytes of K per pipeline stage (4 scale blocks).
inline constexpr int kFp8GemmStageK = 128;

struct Fp8BlockGemmParams;

// True when `p` can run kN128M128Ws (any math): k a multiple of 128, the
// scale pointers (and scale group strides) 4-byte aligned.
bool Fp8GemmWsApplies(const Fp8BlockGemmParams& p);

// The tile a call runs: p.tile, or for kAuto ChooseFp8GemmTile(m, n, math)
// with the 128 x 128 prefill tile replaced by kN128M128Ws where it applies.
Fp8GemmTile ResolveFp8GemmTile(const Fp8BlockGemmParams& p);

// Dynamic shared memory of one CTA of `shape`: per stage the W and X code
// tiles ([rows][128] bytes each) and their scale bytes; then per warp its X
// rows' scales of one stage decoded to fp32 ([4 blocks][block_m / warps_m]).
int64_t Fp8GemmSharedBytes(const Fp8GemmTileShape& shape);

// Where the scratch starts: the ring's end rounded up to 16 bytes (so every
// warp's pairs of floats are 8-byte aligned).
WEIR_FP8_GEMM_HD constexpr int64_t Fp8GemmScaleScratchOffset(int64_t ring_bytes) {
  return (ring_bytes + 15) / 16 * 16;
}

struct Fp8BlockGemmParams {
  const uint8_t* x = nullptr;         // device [m, k] e4m3 codes, 16-byte aligned
  const uint8_t* x_scales = nullptr;  // device [m, k / 32] UE8M0 (one per row and K block)
  const uint8_t* w = nullptr;         // device [n, k] e4m3 codes, 16-byte aligned
  const uint8_t* w_scales = nullptr;  // device [ceil(n / 32), k / 32] UE8M0 (32 x 32 tiles)
  void* y = nullptr;                  // device [m, n], float or bf16 per `output`
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;  // multiple of 32
  Fp8GemmOutput output = Fp8GemmOutput::kF32;
  Fp8GemmTile tile = Fp8GemmTile::kAuto;
  // Several products of the same shape in one launch (blockIdx.z): group g
  // reads x, x_scales, w, w_scales and writes y each advanced by g times its
  // stride (elements / bytes; 0 means packed: m k, m k / 32, n k,
  // ceil(n / 32) k / 32, m n). The grouped low-rank output projection of
  // V4.1's attention. Every group's elements get the arithmetic below.
  int groups = 1;
  // Every group reads group 0's x and x_scales (several weights over one
  // input, e.g. a shared expert's w1 and w3); the x strides must be 0.
  bool x_shared = false;
  // Rows by group (routed experts over their rows, the W of group g at
  // g x w_group_stride): device [groups + 1] ascending offsets into the m rows
  // of x, x_scales and y; group g multiplies rows [offsets[g], offsets[g + 1])
  // (clamped into [0, m]; a decreasing pair is empty) and writes the same rows
  // of y, which no other group writes. m is then the rows of all groups (an
  // upper bound is fine: rows past offsets[groups] are never written) and the
  // grid has ceil(m / block_m) row tiles a group, those past the group's rows
  // exiting at once. Every row gets the bits the same product of that row
  // alone gives. Needs the x and y strides 0, x_shared false, k_splits 1.
  const int64_t* group_offsets = nullptr;
  int64_t x_group_stride = 0;
  int64_t x_scales_group_stride = 0;
  int64_t w_group_stride = 0;
  int64_t w_scales_group_stride = 0;
  int64_t y_group_stride = 0;
  // Split-K for decode (few CTAs from small n): the K stages (128 of K each,
  // num_kt = ceil(k / 128)) are cut into k_splits contiguous ranges, split s
  // covering stages [s num_kt / k_splits, (s + 1) num_kt / k_splits); each
  // range is folded as below into its own fp32 partial (in split_scratch,
  // Fp8GemmSplitScratchFloats floats), then y = ((part_0 + part_1) + part_2)
  // + ... in split order (a second kernel). The cut depends on k_splits and
  // k only, so with k_splits fixed per weight (ChooseFp8GemmSplits) a row's
  // bits still depend on nothing but its X row and W. 1 = no split.
  int k_splits = 1;
  float* split_scratch = nullptr;
  // With k_splits > 1 and m <= kFp8GemmFusedReduceMaxM: zero-filled device
  // counters, at least one per output tile and group (Fp8GemmSplitCounters),
  // so the last split to finish a tile sums the partials in the same order
  // without the second kernel; every call leaves them zero again (calls that
  // share them must not overlap: one stream). Null, too few, or more rows:
  // the second kernel sums.
  uint32_t* split_counters = nullptr;
  int64_t split_counter_count = 0;
  // The block sums' math (see Fp8GemmMath); kAuto tiles follow it.
  Fp8GemmMath math = Fp8GemmMath::kMmaF16;
  // Optional, for kN128M128Ws (prefill): x's codes already widened to f16 in
  // the panel order (WidenFp8ToF16Panel of x, [x groups][m][k] packed, 16-byte
  // aligned; x groups = groups when x has group strides, else 1). The tile
  // then loads X by TMA straight into its f16 slots instead of widening the
  // codes in every CTA; the values, so the bits, are the same. Ignored by
  // the other tiles and by kWgmma (its e4m3 wgmma reads the codes), and so
  // are x_f16_scaled and ws_halves.
  const uint16_t* x_f16 = nullptr;
  // With x_f16: the panel was made with its scales (Fp8F16PanelParams::scales),
  // so each (row, K block) whose UE8M0 byte Fp8PanelScaleInRange holds its
  // codes times 2^(e + kFp8PanelScaleShift) (e the block's exponent). The tile
  // then folds such a block with sw 2^-kFp8PanelScaleShift instead of sw sx,
  // and a stage whose rows are all in range with one factor a warp instead of
  // the table of products: the same bits (README "The scaled panel").
  bool x_f16_scaled = false;
  // For kN128M128Ws: each consumer warpgroup issues a K block's sums as two
  // halves of 64 X rows and folds one while the other runs on the tensor
  // cores (fp8_block_gemm_ws_sm90.cuh, kHalves). The same bits
  // (WarpSpecializedTileGivesTheMmaBits, H100); ignored by the other tiles.
  // Slower on five of fp8_gemm_bench's six prefill shapes (README "Tried:
  // the block's sums in two halves"), so nothing sets it by default.
  bool ws_halves = false;
  // Decode: the CTAs of the first row tile ask L2 for their W code rows
  // before they wait for the kernel before them (GridDependencyPrologue
  // with L2Rows), so in a graph with programmatic edges the weights stream
  // during that kernel. A hint: no value changes. Ignored with group_offsets
  // (which W a CTA reads would depend on device data).
  bool prefetch_weights = false;
  // ApplyRope (kernels/cuda/rope.h, by-position table, forward) on Y after
  // the output's rounding, by the second kernel of a split
  // (Fp8GemmRopeApplies says whether this call has one; else it is ignored
  // and the caller rotates Y itself): row r is one token at
  // rope.positions[r], holding n / rope.head_dim heads whose last rope.dim
  // values rotate in pairs, then round to bf16 when rope.round_bf16. The same
  // bits as ApplyRope after the product, one launch fewer (the decoder's q).
  struct Rope {
    const int64_t* positions = nullptr;  // device [m]
    const float* cos_sin = nullptr;      // device [cos_sin_rows, dim / 2, 2]; null: no RoPE
    int64_t cos_sin_rows = 0;
    int head_dim = 0;
    int dim = 0;
    bool round_bf16 = false;
  } rope;
};

// True when `p` asks for a RoPE and runs a second kernel that applies it: k
// split, fp32 output, one group, a tile other than the warp-specialized one
// (which sums its splits in the CTA). With a RoPE the last split never sums
// the partials itself (split_counters are not used).
bool Fp8GemmRopeApplies(const Fp8BlockGemmParams& p);

// Rows up to which split_counters are used (decode at small batch, where the
// second kernel's launch costs more than the last CTA's sum).
inline constexpr int64_t kFp8GemmFusedReduceMaxM = 8;

// Counters a split call with `p`'s shape and its tile (kAuto: the chosen
// one) needs: ceil(n / tile n) x ceil(m / tile m) x groups (0 without a
// split).
int64_t Fp8GemmSplitCounters(const Fp8BlockGemmParams& p);

// Floats of split_scratch a call with `p`'s shape needs: groups x k_splits x
// m x n (0 without a split).
int64_t Fp8GemmSplitScratchFloats(const Fp8BlockGemmParams& p);

// The split a decode-shaped product (n rows of W, k of K, `groups` groups)
// runs with: enough splits that about kFp8GemmSplitTargetCtas CTAs of 32 W
// rows share the work, with at least 4 stages (512 of K) per split and at
// most kFp8GemmMaxSplits; 1 when the n / 32 x groups CTAs already reach the
// target. A function of the weight's shape alone (never of m or the device),
// so it keeps every row batch-invariant. 1,024 (512 until 2026-12-04): at
// batch 1 the decode linears ran 1 - 3 warps a scheduler (ncu), latency-bound;
// the EP8 slice's step went 12.85 -> 12.59 ms at batch 1, 21.21 -> 20.81 at 8
// (README "Measurements").
inline constexpr int64_t kFp8GemmSplitTargetCtas = 1024;
inline constexpr int kFp8GemmMaxSplits = 16;
inline constexpr int kFp8GemmMinSplitStages = 4;
// `target_ctas` and `min_stages` (the two constants above by default) are the
// rule's knobs, for a decoder that sweeps them (DeviceDecoderOptions); each
// setting gives its own bits, so one decoder keeps one.
int ChooseFp8GemmSplits(int64_t n, int64_t k, int groups = 1,
                        int64_t target_ctas = kFp8GemmSplitTargetCtas,
                        int min_stages = kFp8GemmMinSplitStages);

// Returns OK or INVALID_ARGUMENT naming the problem: a null pointer, m, n or
// k not positive, k not a multiple of 32, x or w not 16-byte aligned, y not
// aligned to its element, m too large for the launch grid of the tile, or
// groups outside [1, 65535] with a stride below its group's size, a code
// stride not a multiple of 16 or a scale stride not a multiple of 4, or
// k_splits outside [1, ceil(k / 128)] (groups x k_splits <= 65535) or above 1
// without split_scratch.
absl::Status CheckFp8BlockGemmParams(const Fp8BlockGemmParams& params);

// ---- Shared-memory tile layout (host and device) ---------------------------
//
// A stage holds rows of 128 bytes of K, in 8 chunks of 16 bytes. Chunk c of
// row r sits at chunk position c ^ (r & 7): the 8 rows an ldmatrix reads for
// one 16-byte column then fall in 8 different bank groups (no conflicts), and
// a cp.async writes whole 16-byte chunks.
WEIR_FP8_GEMM_HD constexpr int Fp8GemmSwizzledOffset(int row, int chunk) {
  return row * kFp8GemmStageK + ((chunk ^ (row & 7)) << 4);
}

// kN128M128Ws's table of scale products for one stage: float index of
// sw(W scale row g of the tile) x sx(X row `row`) for K block j. The floats
// of the X rows a lane quad folds (8 i + 2 quad + e, i = 0 .. 15, e = 0, 1)
// are 32 in a row at Fp8GemmWsQuadBase(j, g, quad) + 2 i + e, so a consumer
// reads them with eight 16-byte loads; quads sit kFp8GemmWsQuadFloats (36)
// floats apart, so the four quads of a warp's load start 4 banks apart.
inline constexpr int kFp8GemmWsQuadFloats = 36;
WEIR_FP8_GEMM_HD constexpr int Fp8GemmWsQuadBase(int j, int g, int quad) {
  return ((j * 4 + g) * 4 + quad) * kFp8GemmWsQuadFloats;
}
WEIR_FP8_GEMM_HD constexpr int Fp8GemmWsTableIndex(int j, int g, int row) {
  return Fp8GemmWsQuadBase(j, g, (row & 7) >> 1) + (row >> 3) * 2 + (row & 1);
}
inline constexpr int kFp8GemmWsTableFloats = 4 * 4 * 4 * kFp8GemmWsQuadFloats;

// The e4m3 instance's table (its wgmma's M the X rows, so a consumer thread
// folds 2 X rows x 4 W scale rows a block): sw(g) x sx of block j, X row
// `row` (0 .. 127) and the tile's W scale row g (0 .. 3), a row's four side
// by side, so a thread loads each of its rows' four with one 16-byte load.
WEIR_FP8_GEMM_HD constexpr int Fp8GemmWsE4m3TableIndex(int j, int row, int g) {
  return (j * 128 + row) * 4 + g;
}

// Offset of 16-byte chunk `chunk` (0..15) of row `row` in kWgmmaF16's X tile
// (Fp8GemmF16XOffset): column atom chunk / 8, swizzled as the code tiles.
WEIR_FP8_GEMM_HD constexpr int Fp8GemmF16XChunk(int row, int chunk, int block_m) {
  return (chunk >> 3) * block_m * 128 + Fp8GemmSwizzledOffset(row, chunk & 7);
}

// The f16 panel of FP8 codes (Fp8BlockGemmParams::x_f16, WidenFp8ToF16Panel):
// each row's codes widened to f16 and permuted inside every 16 of K into the
// order Fp8GemmF16XChunk's slots hold them, so that a TMA box of 64 f16 x 128
// rows with the 128-byte swizzle lands as the kernel's f16 X tile: code
// 16 q + 4 w + p (word w, byte p) sits at column 16 q + 8 (p / 2) + 2 w + p % 2
// (chunk 2 q takes the words' low code pairs, chunk 2 q + 1 the high ones).
WEIR_FP8_GEMM_HD constexpr int64_t Fp8GemmF16PanelColumn(int64_t k) {
  const int64_t q = k / 16;
  const int i = static_cast<int>(k % 16), w = i / 4, p = i % 4;
  return 16 * q + 8 * (p / 2) + 2 * w + p % 2;
}

struct Fp8F16PanelParams {
  const uint8_t* codes = nullptr;  // device e4m3 [groups][rows][k], 16-byte aligned
  uint16_t* out = nullptr;         // device f16 [groups][rows][k] packed, 16-byte aligned
  int64_t rows = 0;
  int64_t k = 0;  // multiple of 16
  int groups = 1;
  int64_t code_group_stride = 0;  // elements; 0 = rows x k (a multiple of 16)
  // Optional: the codes' UE8M0 scales, device [groups][rows][k / 32] (k then
  // a multiple of 32). A block whose byte is in range (Fp8PanelScaleInRange)
  // is written scaled, code x 2^(e + kFp8PanelScaleShift), exact in f16 (a
  // subnormal f16 for the smallest); the others as the plain codes. The
  // product that reads the panel must say so (Fp8BlockGemmParams::x_f16_scaled).
  const uint8_t* scales = nullptr;
  int64_t scale_group_stride = 0;  // bytes; 0 = rows x k / 32
};

// The scaled panel. A UE8M0 byte c is the scale 2^(c - 127); its block goes
// into the panel as code x 2^(c - 127 + kFp8PanelScaleShift) when that
// exponent a is in [-15, 7]: every e4m3 value v (|v| in 2^-9 .. 448, 4
// significant bits) times 2^a is then an f16 exactly (down to 2^-24, up to
// 448 x 2^7 = 57,344). With the shift 6 the range is c in [106, 128], scales
// 2^-21 .. 2: every block the activation quantizer makes whose amax is at
// most 896 (its amax floor of 1e-4 gives 2^-21).
inline constexpr int kFp8PanelScaleShift = 6;
inline constexpr uint32_t kFp8PanelScaleMinByte = 127 - 15 - kFp8PanelScaleShift;  // 106
inline constexpr uint32_t kFp8PanelScaleMaxByte = 127 + 7 - kFp8PanelScaleShift;   // 128
WEIR_FP8_GEMM_HD constexpr bool Fp8PanelScaleInRange(uint32_t byte) {
  return byte >= kFp8PanelScaleMinByte && byte <= kFp8PanelScaleMaxByte;
}
// The four bytes of a scale word all in range.
WEIR_FP8_GEMM_HD constexpr bool Fp8PanelScalesInRange(uint32_t word) {
  return Fp8PanelScaleInRange(word & 0xFFu) && Fp8PanelScaleInRange((word >> 8) & 0xFFu) &&
         Fp8PanelScaleInRange((word >> 16) & 0xFFu) && Fp8PanelScaleInRange(word >> 24);
}
// A weight scale byte whose products with every in-range activation scale
// stay finite (2^(ew + ex) with ex <= 1 needs ew <= 126): the fold's factor
// sw 2^-6 gives sw sx's bits for such pairs.
WEIR_FP8_GEMM_HD constexpr bool Fp8PanelWeightScaleFolds(uint32_t byte) { return byte <= 253u; }

// OK or INVALID_ARGUMENT naming the problem (null, shape, alignment, stride).
absl::Status CheckFp8F16PanelParams(const Fp8F16PanelParams& params);

// The offset of the same fragment row's source for K block j of a stage,
// from its offset for block 0 (Fp8GemmALdmatrixSource / Fp8GemmBLdmatrixSource
// give chunk 2 j + c with c in {0, 1}): 2 j and c are disjoint bits, so the
// swizzled chunk (2 j + c) ^ key is (c ^ key) ^ 2 j, and the row's base is a
// multiple of 128. fp8_block_gemm_params_test checks it on every row.
WEIR_FP8_GEMM_HD constexpr int Fp8GemmBlockSource(int offset0, int j) { return offset0 ^ (j << 5); }

struct Fp8GemmRowChunk {
  int row;    // row inside the 16-row (A) or 16-row pair-of-8 (B) fragment tile
  int chunk;  // 16-byte chunk of the stage row
};

// The smem row and chunk whose address `lane` gives to ldmatrix.x4 for the A
// (weight) fragment of an m16n8k32 mma over K block `j` (0..3) of a stage:
// matrices 0..3 = (rows 0-7, k 0-15), (rows 8-15, k 0-15), (rows 0-7,
// k 16-31), (rows 8-15, k 16-31), which is the order of registers a0..a3.
WEIR_FP8_GEMM_HD constexpr Fp8GemmRowChunk Fp8GemmALdmatrixSource(int lane, int j) {
  return {(lane & 7) + ((lane >> 3) & 1) * 8, 2 * j + (lane >> 4)};
}

// The same for the B (activation) fragments of two neighbouring 8-row tiles
// t0, t0 + 1 with one ldmatrix.x4: matrices 0..3 = (tile t0, k 0-15),
// (t0, k 16-31), (t0 + 1, k 0-15), (t0 + 1, k 16-31) = b0, b1 of tile t0 then
// b0, b1 of tile t0 + 1. The row is relative to tile t0. With ldmatrix.x2
// (one tile) lanes 0..15 give matrices 0 and 1 of the same formula.
WEIR_FP8_GEMM_HD constexpr Fp8GemmRowChunk Fp8GemmBLdmatrixSource(int lane, int j) {
  return {(lane & 7) + (lane >> 4) * 8, 2 * j + ((lane >> 3) & 1)};
}

struct Fp8GemmAccCoord {
  int n;  // row of W inside the 16-row mma tile
  int m;  // row of X inside the 8-row mma tile
};

// The output element held by accumulator register `r` (0..3) of `lane` in an
// m16n8k32 mma whose A is W and whose B is X (so D is Y^T): d0, d1 at
// (group, 2 * tig + {0, 1}), d2, d3 at (group + 8, ...), group = lane / 4,
// tig = lane % 4.
WEIR_FP8_GEMM_HD constexpr Fp8GemmAccCoord Fp8GemmAccumulatorCoord(int lane, int r) {
  return {(lane >> 2) + (r >> 1) * 8, 2 * (lane & 3) + (r & 1)};
}

}  // namespace weir::kernels::cuda::dense

#endif  // WEIR_KERNELS_CUDA_DENSE_FP8_BLOCK_GEMM_PARAMS_H_
