// CPU test (no GPU needed) of fp8_block_gemm_params.h: argument checks, the
// tile table, and the shared-memory / fragment mapping the kernel relies on,
// emulated from the PTX ISA's definitions of ldmatrix and of the
// mma.m16n8k32 (8-bit types) fragments.

#include "kernels/cuda/dense/fp8_block_gemm_params.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cuda/dense/test_util.h"

namespace weir::kernels::cuda::dense {
namespace {

const uint8_t* FakeDevice(uintptr_t address) { return reinterpret_cast<const uint8_t*>(address); }

Fp8BlockGemmParams Valid() {
  return {.x = FakeDevice(256),
          .x_scales = FakeDevice(512),
          .w = FakeDevice(1024),
          .w_scales = FakeDevice(2048),
          .y = reinterpret_cast<void*>(4096),
          .m = 3,
          .n = 70,
          .k = 96};
}

TEST(Fp8BlockGemmParamsTest, AcceptsAValidCall) {
  EXPECT_TRUE(CheckFp8BlockGemmParams(Valid()).ok());
  Fp8BlockGemmParams p = Valid();
  p.output = Fp8GemmOutput::kBf16;
  p.y = reinterpret_cast<void*>(4098);  // bf16 needs 2-byte alignment only
  EXPECT_TRUE(CheckFp8BlockGemmParams(p).ok());
}

TEST(Fp8BlockGemmParamsTest, RefusesBadArguments) {
  using P = Fp8BlockGemmParams;
  const auto code = [](const P& p) { return CheckFp8BlockGemmParams(p).code(); };
  EXPECT_TRUE(EachIsInvalidArgument(Valid(), code, {
      [](P& p) { p.x = nullptr; },
      [](P& p) { p.x_scales = nullptr; },
      [](P& p) { p.w = nullptr; },
      [](P& p) { p.w_scales = nullptr; },
      [](P& p) { p.y = nullptr; },
      [](P& p) { p.m = 0; },
      [](P& p) { p.n = -1; },
      [](P& p) { p.k = 0; },
      [](P& p) { p.k = 48; },                         // not a multiple of 32
      [](P& p) { p.x = FakeDevice(264); },            // 8-byte aligned only
      [](P& p) { p.w = FakeDevice(1032); },
      [](P& p) { p.y = reinterpret_cast<void*>(4098); },  // fp32 out needs 4
  }));
  // Rows by group offsets: the rows come from the offsets, so no x / y
  // strides, no shared x and no split.
  static const int64_t kOffsets[3] = {0, 1, 2};
  P grouped = Valid();
  grouped.groups = 2;
  grouped.group_offsets = kOffsets;
  EXPECT_TRUE(CheckFp8BlockGemmParams(grouped).ok());
  EXPECT_TRUE(EachIsInvalidArgument(grouped, code,
                                    {
                                        [](P& p) { p.x_group_stride = p.m * p.k; },
                                        [](P& p) { p.x_scales_group_stride = p.m * p.k / 32; },
                                        [](P& p) { p.y_group_stride = p.m * p.n; },
                                        [](P& p) { p.x_shared = true; },
                                        [](P& p) { p.k_splits = 2; },
                                    }));
  P p = Valid();
  p.tile = Fp8GemmTile::kN32M8, p.m = int64_t{65536} * 8;  // grid y > 65535
  EXPECT_EQ(code(p), absl::StatusCode::kInvalidArgument);
  p.m = int64_t{65535} * 8;
  EXPECT_TRUE(CheckFp8BlockGemmParams(p).ok());
}

// A RoPE in the split reduce: positions, a table, an even dim within a head
// that divides n; it applies only where a second kernel runs.
TEST(Fp8BlockGemmParamsTest, ChecksTheRopeAndWhereItApplies) {
  using P = Fp8BlockGemmParams;
  const auto code = [](const P& p) { return CheckFp8BlockGemmParams(p).code(); };
  static const int64_t kPositions[3] = {0, 1, 2};
  P roped = Valid();
  roped.n = 256;
  roped.k = 1024;
  roped.rope = {.positions = kPositions,
                .cos_sin = reinterpret_cast<const float*>(8192),
                .cos_sin_rows = 4,
                .head_dim = 128,
                .dim = 64};
  EXPECT_TRUE(CheckFp8BlockGemmParams(roped).ok());
  EXPECT_TRUE(EachIsInvalidArgument(
      roped, code,
      {
          [](P& p) { p.rope.positions = nullptr; }, [](P& p) { p.rope.cos_sin_rows = 0; },
          [](P& p) { p.rope.dim = 63; }, [](P& p) { p.rope.dim = 0; },
          [](P& p) { p.rope.dim = 130; }, [](P& p) { p.rope.head_dim = 96; },  // 256 % 96
      }));
  EXPECT_FALSE(Fp8GemmRopeApplies(roped));  // no split, no second kernel
  roped.k_splits = 2;
  EXPECT_TRUE(Fp8GemmRopeApplies(roped));
  P bf16 = roped;
  bf16.output = Fp8GemmOutput::kBf16;
  EXPECT_FALSE(Fp8GemmRopeApplies(bf16));
  P wide = roped;
  wide.m = 4096;  // kAuto's warp-specialized tile sums its splits in the CTA
  EXPECT_EQ(ResolveFp8GemmTile(wide), Fp8GemmTile::kN128M128Ws);
  EXPECT_FALSE(Fp8GemmRopeApplies(wide));
  P none = roped;
  none.rope = {};
  EXPECT_FALSE(Fp8GemmRopeApplies(none));
}

// The split follows the weight's shape only: V4.1's small-n decode linears
// split, the wide ones do not, every split keeps >= 4 stages of K, and the
// checks refuse splits the kernel cannot run.
TEST(Fp8BlockGemmParamsTest, SplitsFollowTheWeightShape) {
  EXPECT_EQ(ChooseFp8GemmSplits(1280, 5120), 10);   // wq_a: 40 CTAs -> 26 wanted, 10 stages max
  EXPECT_EQ(ChooseFp8GemmSplits(512, 5120), 10);    // wkv
  EXPECT_EQ(ChooseFp8GemmSplits(5120, 8192), 7);    // wo_b: 160 CTAs -> 7 for 1,024
  EXPECT_EQ(ChooseFp8GemmSplits(5120, 2304), 4);    // shared.w2: 18 stages
  EXPECT_EQ(ChooseFp8GemmSplits(4096, 1280), 2);    // index.wq_b: 10 stages
  EXPECT_EQ(ChooseFp8GemmSplits(32768, 1280), 1);   // wq_b: 1024 CTAs
  EXPECT_EQ(ChooseFp8GemmSplits(1024, 1024, 8), 2);  // grouped wo_a: 256 CTAs
  EXPECT_EQ(ChooseFp8GemmSplits(64, 256), 1);       // 2 stages: no room to split
  // The knobs (a decoder's sweep): a larger target, fewer stages a split.
  EXPECT_EQ(ChooseFp8GemmSplits(5120, 8192, 1, 2048), 13);    // wo_b: 160 CTAs -> 13
  EXPECT_EQ(ChooseFp8GemmSplits(32768, 1280, 1, 2048), 2);    // wq_b: 1024 CTAs -> 2
  EXPECT_EQ(ChooseFp8GemmSplits(4096, 1280, 1, 1024, 2), 5);  // index.wq_b: 10 stages / 2
  EXPECT_EQ(ChooseFp8GemmSplits(5120, 8192, 1, 1024, 4), ChooseFp8GemmSplits(5120, 8192));
  EXPECT_EQ(ChooseFp8GemmSplits(5120, 8192, 1, 0), 1);  // no target: no split
  for (int64_t n : {int64_t{16}, int64_t{100}, int64_t{1280}, int64_t{20000}}) {
    for (int64_t k : {int64_t{32}, int64_t{512}, int64_t{5120}, int64_t{16384}}) {
      const int s = ChooseFp8GemmSplits(n, k);
      EXPECT_GE(s, 1);
      EXPECT_LE(s, kFp8GemmMaxSplits);
      if (s > 1) {
        EXPECT_GE((k + 127) / 128 / s, 4) << n << " " << k;
      }
    }
  }
  alignas(16) uint8_t buf[64] = {};
  alignas(16) float y[4] = {};
  float scratch[64] = {};
  Fp8BlockGemmParams p{.x = buf, .x_scales = buf, .w = buf, .w_scales = buf, .y = y,
                       .m = 1, .n = 4, .k = 256, .k_splits = 2, .split_scratch = scratch};
  EXPECT_TRUE(CheckFp8BlockGemmParams(p).ok());
  EXPECT_EQ(Fp8GemmSplitScratchFloats(p), 8);
  p.k_splits = 3;  // 2 stages of K
  EXPECT_FALSE(CheckFp8BlockGemmParams(p).ok());
  p.k_splits = 0;
  EXPECT_FALSE(CheckFp8BlockGemmParams(p).ok());
  p.k_splits = 2;
  p.split_scratch = nullptr;
  EXPECT_FALSE(CheckFp8BlockGemmParams(p).ok());
  p.k_splits = 1;
  EXPECT_TRUE(CheckFp8BlockGemmParams(p).ok());
  EXPECT_EQ(Fp8GemmSplitScratchFloats(p), 0);
}

TEST(Fp8BlockGemmParamsTest, TileTableIsConsistent) {
  for (Fp8GemmTile tile : kFp8GemmTiles) {
    const Fp8GemmTileShape s = ShapeOfFp8GemmTile(tile);
    const int threads = s.warps_n * s.warps_m * 32;
    EXPECT_TRUE(s.block_n % 32 == 0 || s.block_n == 16);
    EXPECT_EQ(s.block_n / s.warps_n % 16, 0);
    EXPECT_EQ(s.block_m / s.warps_m % 8, 0);
    EXPECT_EQ(s.block_n * 8 % threads, 0);  // 16-byte chunks split evenly
    // X chunks split evenly, or (8 X rows over 4 warps) half the threads copy one.
    EXPECT_TRUE(s.block_m * 8 % threads == 0 || s.block_m * 8 < threads) << s.block_m;
    EXPECT_GE(s.stages, 3);
    EXPECT_LE(Fp8GemmSharedBytes(s), 227 * 1024);  // sm_90 opt-in limit per block
  }
  EXPECT_EQ(ShapeOfFp8GemmTile(Fp8GemmTile::kAuto).block_m, 0);
  // Decode: one CTA row covers all rows up to 64, so W is read once.
  for (int64_t m : {1, 7, 8, 9, 16, 17, 32, 33, 64}) {
    EXPECT_GE(ShapeOfFp8GemmTile(ChooseFp8GemmTile(m, 5120)).block_m, m) << m;
  }
  EXPECT_EQ(ChooseFp8GemmTile(4096, 5120), Fp8GemmTile::kN128M128);
  // wgmma: only tiles of whole warpgroups of 16-row warps over every X row,
  // one CTA row up to 64 rows; the ring's W and X tiles on 1024-byte
  // boundaries (wgmma's swizzle is on shared addresses).
  int wgmma_tiles = 0;
  for (Fp8GemmTile tile : kFp8GemmTiles) {
    const Fp8GemmTileShape s = ShapeOfFp8GemmTile(tile);
    if (!Fp8GemmTileRunsWgmma(s)) continue;
    ++wgmma_tiles;
    EXPECT_EQ(s.block_n * kFp8GemmStageK % 1024, 0);
    EXPECT_EQ(s.block_m * kFp8GemmStageK % 1024, 0);
  }
  EXPECT_EQ(wgmma_tiles, 8);  // kN64M8's shallow rings too
  EXPECT_EQ(ChooseFp8GemmTile(4096, 5120, Fp8GemmMath::kWgmma), Fp8GemmTile::kN128M128Wg);
  for (int64_t m : {1, 8, 9, 16, 17, 32, 33, 64, 256, 257, 4096}) {
    const Fp8GemmTile t = ChooseFp8GemmTile(m, 5120, Fp8GemmMath::kWgmma);
    EXPECT_TRUE(Fp8GemmTileRunsWgmma(ShapeOfFp8GemmTile(t))) << m;
    if (m <= 64) {
      EXPECT_GE(ShapeOfFp8GemmTile(t).block_m, m) << m;
    }
  }
  Fp8BlockGemmParams w{.x = FakeDevice(256),
                       .x_scales = FakeDevice(256),
                       .w = FakeDevice(256),
                       .w_scales = FakeDevice(256),
                       .y = const_cast<uint8_t*>(FakeDevice(256)),
                       .m = 8,
                       .n = 64,
                       .k = 128};
  w.math = Fp8GemmMath::kWgmma;
  EXPECT_TRUE(CheckFp8BlockGemmParams(w).ok());
  w.tile = Fp8GemmTile::kN32M8;
  EXPECT_FALSE(CheckFp8BlockGemmParams(w).ok());
  w.tile = Fp8GemmTile::kN64M8;
  EXPECT_TRUE(CheckFp8BlockGemmParams(w).ok());
  w.tile = Fp8GemmTile::kN128M128Wg;  // wgmma only: the mma path refuses it
  EXPECT_TRUE(CheckFp8BlockGemmParams(w).ok());
  w.math = Fp8GemmMath::kMmaF16;
  EXPECT_FALSE(CheckFp8BlockGemmParams(w).ok());
  w.math = Fp8GemmMath::kWgmma;
  EXPECT_EQ(
      Fp8GemmSharedBytes({.block_n = 32, .block_m = 8, .warps_n = 2, .warps_m = 1, .stages = 12}),
      12 * (40 * 128 + (1 + 8) * 4) + 2 * 8 * 4 * 4);  // + each warp's 8 rows x 4 scales
  // The scratch starts at the ring's end rounded up to 16 bytes.
  EXPECT_EQ(
      Fp8GemmSharedBytes({.block_n = 16, .block_m = 32, .warps_n = 1, .warps_m = 1, .stages = 5}),
      5 * (48 * 128 + 33 * 4) + 12 + 32 * 4 * 4);  // 31,380 bytes of ring, 12 of padding
  EXPECT_EQ(Fp8GemmScaleScratchOffset(16), 16);
  EXPECT_EQ(Fp8GemmScaleScratchOffset(17), 32);
}

// kN128M128Ws: kAuto's tile above 256 rows where it applies (every math,
// k % 128 == 0, 4-byte aligned scales and scale strides), the mma or wgmma
// 128 x 128 tile where it does not; asked for explicitly where it
// does not apply, INVALID_ARGUMENT; the group-offset grid's rows counted.
TEST(Fp8BlockGemmParamsTest, WarpSpecializedTileWhereItApplies) {
  const Fp8BlockGemmParams big{.x = FakeDevice(256),
                               .x_scales = FakeDevice(512),
                               .w = FakeDevice(1024),
                               .w_scales = FakeDevice(2048),
                               .y = const_cast<uint8_t*>(FakeDevice(4096)),
                               .m = 4096,
                               .n = 1280,
                               .k = 5120};
  EXPECT_EQ(ResolveFp8GemmTile(big), Fp8GemmTile::kN128M128Ws);
  EXPECT_TRUE(CheckFp8BlockGemmParams(big).ok());
  Fp8BlockGemmParams p = big;
  p.math = Fp8GemmMath::kWgmmaF16;
  EXPECT_EQ(ResolveFp8GemmTile(p), Fp8GemmTile::kN128M128Ws);
  p.math = Fp8GemmMath::kWgmma;
  EXPECT_EQ(ResolveFp8GemmTile(p), Fp8GemmTile::kN128M128Ws);
  p.k = 5120 + 32;
  EXPECT_EQ(ResolveFp8GemmTile(p), Fp8GemmTile::kN128M128Wg);
  p = big;
  p.k = 5120 + 32;
  EXPECT_EQ(ResolveFp8GemmTile(p), Fp8GemmTile::kN128M128);
  p = big;
  p.w_scales = FakeDevice(2050);
  EXPECT_EQ(ResolveFp8GemmTile(p), Fp8GemmTile::kN128M128);
  p = big;
  p.groups = 2;
  p.x_scales_group_stride = 4096 * 160 + 2;
  EXPECT_EQ(ResolveFp8GemmTile(p), Fp8GemmTile::kN128M128);
  p = big;
  p.m = 256;
  EXPECT_EQ(ResolveFp8GemmTile(p), Fp8GemmTile::kN64M64);
  p = big;
  p.tile = Fp8GemmTile::kN64M64;  // an explicit tile stays
  EXPECT_EQ(ResolveFp8GemmTile(p), Fp8GemmTile::kN64M64);
  // Explicitly asked for where it does not apply.
  p = big;
  p.tile = Fp8GemmTile::kN128M128Ws;
  EXPECT_TRUE(CheckFp8BlockGemmParams(p).ok());
  p.math = Fp8GemmMath::kWgmma;
  EXPECT_TRUE(CheckFp8BlockGemmParams(p).ok());
  p.k = 96;
  EXPECT_EQ(CheckFp8BlockGemmParams(p).code(), absl::StatusCode::kInvalidArgument);
  p.k = 5120;
  p.x_scales = FakeDevice(513);
  EXPECT_EQ(CheckFp8BlockGemmParams(p).code(), absl::StatusCode::kInvalidArgument);
  // Group offsets: ceil(m / 128) + groups grid rows, at most 65,535.
  static const int64_t kOffsets[2] = {0, 0};
  p = big;
  p.tile = Fp8GemmTile::kN128M128Ws;
  p.group_offsets = kOffsets;
  p.groups = 1000;
  p.m = 128 * (65535 - 1000);
  EXPECT_TRUE(CheckFp8BlockGemmParams(p).ok());
  p.m += 1;
  EXPECT_EQ(CheckFp8BlockGemmParams(p).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Fp8BlockGemmParamsTest, SwizzleIsABijectionAndConflictFree) {
  std::vector<int> seen(64 * 128, 0);
  for (int row = 0; row < 64; ++row) {
    for (int chunk = 0; chunk < 8; ++chunk) {
      const int off = Fp8GemmSwizzledOffset(row, chunk);
      ASSERT_EQ(off % 16, 0);
      ASSERT_EQ(off / 128, row);  // stays in its row
      ++seen[off];
    }
  }
  for (int i = 0; i < 64 * 128; i += 16) EXPECT_EQ(seen[i], 1);
  // One ldmatrix 8x8 matrix: 8 consecutive rows (starting at a multiple of
  // 8), the same logical chunk -> 8 distinct 16-byte bank groups.
  for (int base = 0; base < 64; base += 8) {
    for (int chunk = 0; chunk < 8; ++chunk) {
      int groups = 0;
      for (int r = 0; r < 8; ++r)
        groups |= 1 << (Fp8GemmSwizzledOffset(base + r, chunk) % 128 / 16);
      EXPECT_EQ(groups, 0xFF);
    }
  }
}

// The fragments are emulated from the PTX ISA definitions (EmulatedLdMatrix,
// EmulatedMmaM16n8k32 in test_util.h); elements are plain integers here: the
// test is about positions.
// kWgmmaF16's f16 X tile: every (row, chunk) its own 16 bytes inside
// block_m x 256 bytes, on a 1024-byte boundary after the rest of the tile's
// shared memory, and the whole within an SM's 227 KB on every wgmma tile.
// The kernel takes a fragment row's ldmatrix source of K block j from its
// block-0 source (Fp8GemmBlockSource); it must be the swizzled offset of the
// block's own chunk for every lane, block and 8-aligned row base.
TEST(Fp8BlockGemmParamsTest, BlockSourcesFollowFromBlockZero) {
  for (int base = 0; base < 256; base += 8) {
    for (int lane = 0; lane < 32; ++lane) {
      const Fp8GemmRowChunk a0 = Fp8GemmALdmatrixSource(lane, 0);
      const Fp8GemmRowChunk b0 = Fp8GemmBLdmatrixSource(lane, 0);
      const int a_off = Fp8GemmSwizzledOffset(2 * base + a0.row, a0.chunk);  // 16-row tiles
      const int b_off = Fp8GemmSwizzledOffset(base + b0.row, b0.chunk);
      for (int j = 0; j < kFp8GemmStageK / kFp8GemmScaleBlock; ++j) {
        const Fp8GemmRowChunk a = Fp8GemmALdmatrixSource(lane, j);
        const Fp8GemmRowChunk b = Fp8GemmBLdmatrixSource(lane, j);
        EXPECT_EQ(Fp8GemmBlockSource(a_off, j), Fp8GemmSwizzledOffset(2 * base + a.row, a.chunk))
            << "A lane " << lane << " block " << j << " base " << 2 * base;
        EXPECT_EQ(Fp8GemmBlockSource(b_off, j), Fp8GemmSwizzledOffset(base + b.row, b.chunk))
            << "B lane " << lane << " block " << j << " base " << base;
      }
    }
  }
}

TEST(Fp8BlockGemmParamsTest, WgmmaF16XTileIsABijectionAndFits) {
  for (Fp8GemmTile tile : kFp8GemmTiles) {
    const Fp8GemmTileShape shape = ShapeOfFp8GemmTile(tile);
    if (!Fp8GemmTileRunsWgmma(shape)) continue;
    const int bm = shape.block_m;
    std::vector<int> seen(static_cast<size_t>(bm) * 16, 0);
    for (int r = 0; r < bm; ++r) {
      for (int c = 0; c < 16; ++c) {
        const int at = Fp8GemmF16XChunk(r, c, bm);
        ASSERT_EQ(at % 16, 0);
        ASSERT_GE(at, 0);
        ASSERT_LT(at, Fp8GemmF16XBytes(bm));
        ++seen[at / 16];
      }
    }
    for (int n : seen) EXPECT_EQ(n, 1) << "tile " << static_cast<int>(tile);
    const int64_t x16 = Fp8GemmF16XOffset(Fp8GemmSharedBytes(shape));
    EXPECT_EQ(x16 % 1024, 0);
    EXPECT_GE(x16, Fp8GemmSharedBytes(shape));
    EXPECT_LE(x16 + Fp8GemmF16XBytes(bm) + 1024, 227 * 1024) << "tile " << static_cast<int>(tile);
  }
}

TEST(Fp8BlockGemmParamsTest, FragmentMappingComputesTheTileProduct) {
  // W tile 16 rows, X tile 24 rows (tiles 0, 1 through ldmatrix.x4, tile 2
  // through .x2), one stage of 128 bytes of K, written by the kernel's
  // cp.async mapping (chunk c -> row c / 8, chunk c % 8).
  constexpr int kWRows = 16, kXRows = 24;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> w(kWRows * 128), x(kXRows * 128);
  for (auto& v : w) v = static_cast<uint8_t>(byte(rng));
  for (auto& v : x) v = static_cast<uint8_t>(byte(rng));
  std::vector<uint8_t> w_smem(w.size()), x_smem(x.size());
  for (int c = 0; c < kWRows * 8; ++c) {
    for (int b = 0; b < 16; ++b) w_smem[Fp8GemmSwizzledOffset(c / 8, c % 8) + b] = w[c * 16 + b];
  }
  for (int c = 0; c < kXRows * 8; ++c) {
    for (int b = 0; b < 16; ++b) x_smem[Fp8GemmSwizzledOffset(c / 8, c % 8) + b] = x[c * 16 + b];
  }
  for (int j = 0; j < 4; ++j) {  // the 4 K blocks of the stage
    std::array<int, 32> a_address{}, b_address{}, b2_address{};
    for (int lane = 0; lane < 32; ++lane) {
      const Fp8GemmRowChunk sa = Fp8GemmALdmatrixSource(lane, j);
      a_address[lane] = Fp8GemmSwizzledOffset(sa.row, sa.chunk);
      const Fp8GemmRowChunk sb = Fp8GemmBLdmatrixSource(lane, j);
      b_address[lane] = Fp8GemmSwizzledOffset(sb.row, sb.chunk);
      const Fp8GemmRowChunk sb2 = Fp8GemmBLdmatrixSource(lane & 15, j);
      b2_address[lane] = Fp8GemmSwizzledOffset(16 + sb2.row, sb2.chunk);
    }
    std::array<std::array<uint32_t, 4>, 32> a_frag{};
    std::array<std::array<uint32_t, 2>, 32> b_frag[3]{};
    for (int lane = 0; lane < 32; ++lane) {
      a_frag[lane] = EmulatedLdMatrix(w_smem, a_address, lane, 4);
      const auto b = EmulatedLdMatrix(x_smem, b_address, lane, 4);  // b0, b1 of tile 0, then tile 1
      const auto b2 = EmulatedLdMatrix(x_smem, b2_address, lane, 2);
      b_frag[0][lane] = {b[0], b[1]};
      b_frag[1][lane] = {b[2], b[3]};
      b_frag[2][lane] = {b2[0], b2[1]};
    }
    for (int tile = 0; tile < 3; ++tile) {
      const auto d = EmulatedMmaM16n8k32<int64_t>(a_frag, b_frag[tile],
                                                  [](uint8_t code) { return int64_t{code}; });
      for (int lane = 0; lane < 32; ++lane) {
        for (int r = 0; r < 4; ++r) {
          const Fp8GemmAccCoord c = Fp8GemmAccumulatorCoord(lane, r);
          int64_t want = 0;
          for (int kk = 0; kk < 32; ++kk) {
            want += int64_t{w[c.n * 128 + 32 * j + kk]} * x[(tile * 8 + c.m) * 128 + 32 * j + kk];
          }
          ASSERT_EQ(d[lane][r], want)
              << "block " << j << " tile " << tile << " lane " << lane << " reg " << r;
        }
      }
    }
  }
}

// Whether 16-byte loads at these distinct byte offsets (one quarter-warp's
// shared-memory phase) fall in distinct banks.
bool LoadsHitDistinctBanks(const std::vector<int>& byte_offsets) {
  std::vector<int> banks;
  for (int at : byte_offsets) {
    for (int b = 0; b < 4; ++b) banks.push_back((at / 4 + b) % 32);
  }
  std::sort(banks.begin(), banks.end());
  return std::unique(banks.begin(), banks.end()) == banks.end();
}

// kN128M128Ws's scale table (`base`: a lane quad's first element, `index`:
// an (block, W scale row, X row)'s element, `elements` in all, `bytes` each):
// every product has its own element, a quad's 32 products are contiguous in
// the order the fold reads them (row 8 i + 2 quad + e at 2 i + e), and each
// 16-byte load of the four quads of a warp hits four distinct groups of four
// banks.
template <typename Base, typename Index>
void CheckWsTable(Base base_of, Index index_of, int elements, int bytes) {
  std::vector<int> seen(elements, 0);
  for (int j = 0; j < 4; ++j) {
    for (int g = 0; g < 4; ++g) {
      for (int row = 0; row < 128; ++row) {
        const int at = index_of(j, g, row);
        ASSERT_GE(at, 0);
        ASSERT_LT(at, elements);
        ++seen[at];
      }
      for (int lane = 0; lane < 32; ++lane) {
        const int base = base_of(j, g, lane & 3);
        EXPECT_EQ(base * bytes % 16, 0);
        for (int i = 0; i < 16; ++i) {
          for (int e = 0; e < 2; ++e) {
            const Fp8GemmAccCoord c = Fp8GemmAccumulatorCoord(lane, e);
            EXPECT_EQ(base + 2 * i + e, index_of(j, g, 8 * i + c.m));
          }
        }
      }
      for (int v = 0; v < 32 * bytes / 16; ++v) {  // the quad's 16-byte loads
        std::vector<int> loads;
        for (int quad = 0; quad < 4; ++quad) loads.push_back(base_of(j, g, quad) * bytes + 16 * v);
        EXPECT_TRUE(LoadsHitDistinctBanks(loads)) << j << " " << g << " " << v;
      }
    }
  }
  int used = 0;
  for (int c : seen) {
    EXPECT_LE(c, 1);
    used += c;
  }
  EXPECT_EQ(used, 4 * 4 * 128);
}

TEST(Fp8BlockGemmParamsTest, WsTableGivesEachLaneItsRowsWithoutBankConflicts) {
  CheckWsTable(Fp8GemmWsQuadBase, Fp8GemmWsTableIndex, kFp8GemmWsTableFloats, 4);
}

// The e4m3 instance's table: every (block, X row, W scale row) its own
// float inside a table slot; a consumer thread (warp cw of the two consumer
// warpgroups, lane l) folds accumulator rows 64 (cw / 4) + 16 (cw % 4) + l / 4
// and 8 more (wgmma's m64 layout) and reads each row's four products with
// one aligned 16-byte load; a quarter-warp's load (8 lanes: two rows) hits
// distinct banks.
TEST(Fp8BlockGemmParamsTest, WsE4m3TableGivesEachThreadItsRowsWithoutBankConflicts) {
  std::vector<int> seen(kFp8GemmWsTableFloats, 0);
  for (int j = 0; j < 4; ++j) {
    for (int row = 0; row < 128; ++row) {
      for (int g = 0; g < 4; ++g) {
        const int at = Fp8GemmWsE4m3TableIndex(j, row, g);
        ASSERT_GE(at, 0);
        ASSERT_LT(at, kFp8GemmWsTableFloats);
        ++seen[at];
        EXPECT_EQ(at, Fp8GemmWsE4m3TableIndex(j, row, 0) + g);  // a row's four side by side
      }
    }
    for (int cw = 0; cw < 8; ++cw) {
      for (int h = 0; h < 2; ++h) {
        for (int q = 0; q < 4; ++q) {  // quarter-warps
          std::vector<int> addresses;
          for (int lane = 8 * q; lane < 8 * q + 8; ++lane) {
            const int row = 64 * (cw / 4) + 16 * (cw % 4) + lane / 4 + 8 * h;
            const int bytes = Fp8GemmWsE4m3TableIndex(j, row, 0) * 4;
            EXPECT_EQ(bytes % 16, 0);
            addresses.push_back(bytes);
          }
          std::sort(addresses.begin(), addresses.end());
          addresses.erase(std::unique(addresses.begin(), addresses.end()), addresses.end());
          EXPECT_EQ(addresses.size(), 2u);  // lanes of a row share (broadcast)
          EXPECT_TRUE(LoadsHitDistinctBanks(addresses)) << j << " " << cw;
        }
      }
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 4 * 128 * 4);
  EXPECT_EQ(std::count_if(seen.begin(), seen.end(), [](int c) { return c > 1; }), 0);
}

// The f16 panel (Fp8BlockGemmParams::x_f16) loaded by two TMA boxes of 128
// rows x 128 bytes with the 128-byte swizzle (granule g of row r at granule
// g ^ (r % 8)) fills the kN128M128Ws f16 slot exactly as the wideners'
// WidenCodesToF16Slots does from the swizzled code tile: every f16 slot holds
// the same code of the same row. Tokens stand for codes (k + 1, 0 = unset).
TEST(Fp8BlockGemmParamsTest, F16PanelBoxesFillTheWidenersSlots) {
  constexpr int kRows = 128, kK = 256;  // two stages
  std::vector<int> seen(16, 0);
  for (int k = 0; k < 16; ++k) ++seen[Fp8GemmF16PanelColumn(k)];
  for (int c : seen) EXPECT_EQ(c, 1);
  for (int k = 0; k < kK; ++k) EXPECT_EQ(Fp8GemmF16PanelColumn(k) / 16, k / 16);
  // The panel: row r, column Fp8GemmF16PanelColumn(k) holds token k + 1.
  std::vector<int> panel(kRows * kK, 0);
  for (int r = 0; r < kRows; ++r) {
    for (int k = 0; k < kK; ++k) panel[r * kK + Fp8GemmF16PanelColumn(k)] = k + 1;
  }
  for (int kt = 0; kt < kK / kFp8GemmStageK; ++kt) {
    const int slot_f16 = kRows * 128;  // f16 elements of a slot (32 KB)
    std::vector<int> widened(slot_f16, 0), boxed(slot_f16, 0);
    for (int r = 0; r < kRows; ++r) {
      // The wideners: chunk q (16 codes) of the stage's row -> chunks 2q
      // (low code pairs of its four words) and 2q + 1 (high pairs).
      for (int q = 0; q < 8; ++q) {
        for (int h = 0; h < 2; ++h) {
          const int at = Fp8GemmF16XChunk(r, 2 * q + h, kRows) / 2;
          for (int w = 0; w < 4; ++w) {
            for (int e = 0; e < 2; ++e) {
              widened[at + 2 * w + e] = kt * kFp8GemmStageK + 16 * q + 4 * w + 2 * h + e + 1;
            }
          }
        }
      }
      // The loader's two boxes: bytes [256 kt + 128 a, + 128) of panel row r.
      for (int a = 0; a < 2; ++a) {
        for (int g = 0; g < 8; ++g) {
          const int dst = (a * kRows * 128 + r * 128 + ((g ^ (r & 7)) << 4)) / 2;
          const int src = r * kK + (256 * kt + 128 * a + 16 * g) / 2;
          for (int e = 0; e < 8; ++e) boxed[dst + e] = panel[src + e];
        }
      }
    }
    for (int i = 0; i < slot_f16; ++i) {
      ASSERT_NE(widened[i], 0) << i;
      ASSERT_EQ(widened[i], boxed[i]) << "stage " << kt << " f16 " << i;
    }
  }
}

TEST(Fp8BlockGemmParamsTest, F16PanelChecksItsArguments) {
  alignas(16) static uint8_t codes[64];
  alignas(16) static uint16_t out[64];
  const Fp8F16PanelParams ok{.codes = codes, .out = out, .rows = 2, .k = 32};
  EXPECT_TRUE(CheckFp8F16PanelParams(ok).ok());
  auto code = [](const Fp8F16PanelParams& p) { return CheckFp8F16PanelParams(p).code(); };
  EXPECT_TRUE(EachIsInvalidArgument(ok, code,
                                    {
                                        [](Fp8F16PanelParams& p) { p.codes = nullptr; },
                                        [](Fp8F16PanelParams& p) { p.out = nullptr; },
                                        [](Fp8F16PanelParams& p) { p.k = 24; },
                                        [](Fp8F16PanelParams& p) { p.k = 0; },
                                        [](Fp8F16PanelParams& p) { p.rows = -1; },
                                        [](Fp8F16PanelParams& p) { p.groups = 0; },
                                        [](Fp8F16PanelParams& p) { p.codes = codes + 8; },
                                        [](Fp8F16PanelParams& p) { p.out = out + 4; },
                                        // below rows x k, then not 16-aligned
                                        [](Fp8F16PanelParams& p) { p.code_group_stride = 48; },
                                        [](Fp8F16PanelParams& p) { p.code_group_stride = 72; },
                                    }));
  Fp8F16PanelParams padded = ok;  // padded groups
  padded.code_group_stride = 80;
  EXPECT_TRUE(CheckFp8F16PanelParams(padded).ok());
  // With scales: k a multiple of 32, a scale stride of at least rows x k / 32.
  Fp8F16PanelParams scaled = ok;
  scaled.scales = codes;
  EXPECT_TRUE(CheckFp8F16PanelParams(scaled).ok());
  EXPECT_TRUE(EachIsInvalidArgument(scaled, code,
                                    {
                                        [](Fp8F16PanelParams& p) { p.k = 48; },
                                        [](Fp8F16PanelParams& p) { p.scale_group_stride = 1; },
                                        [](Fp8F16PanelParams& p) {
                                          p.scales = nullptr;
                                          p.scale_group_stride = 2;
                                        },
                                    }));
  // The GEMM refuses a misaligned panel where the tile reads it.
  Fp8BlockGemmParams g{.x = codes,
                       .x_scales = codes,
                       .w = codes,
                       .w_scales = codes,
                       .y = out,
                       .m = 512,
                       .n = 256,
                       .k = 128,
                       .tile = Fp8GemmTile::kN128M128Ws};
  EXPECT_TRUE(CheckFp8BlockGemmParams(g).ok());
  g.x_f16 = out + 4;
  EXPECT_EQ(CheckFp8BlockGemmParams(g).code(), absl::StatusCode::kInvalidArgument);
}

// Whether float v is an f16 value exactly (normal or subnormal, |v| <= 65504).
bool IsF16Value(float v) {
  if (v == 0.0f) return true;
  const float a = std::fabs(v);
  if (a > 65504.0f) return false;
  int e = 0;
  std::frexp(a, &e);  // a = f 2^e, f in [0.5, 1)
  // Normal f16 (a >= 2^-14): 11 significant bits; below, multiples of 2^-24.
  const int lsb = a >= std::ldexp(1.0f, -14) ? e - 11 : -24;
  const float q = std::ldexp(a, -lsb);
  return q == std::floor(q);
}

// The scaled panel's range (Fp8PanelScaleInRange): every finite e4m3 value
// times 2^(c - 127 + kFp8PanelScaleShift) is an f16 exactly for every byte c
// in range, and the range is the widest such: one byte below or above it
// loses a code (the smallest subnormal, or 448 overflows).
TEST(Fp8BlockGemmParamsTest, ScaledPanelRangeIsExactInF16) {
  auto every_code_exact = [](int byte) {
    for (int code = 0; code < 256; ++code) {
      const float v = E4m3ToFloat(static_cast<uint8_t>(code));
      if (std::isnan(v)) continue;
      if (!IsF16Value(std::ldexp(v, byte - 127 + kFp8PanelScaleShift))) return false;
    }
    return true;
  };
  for (int byte = 0; byte < 256; ++byte) {
    EXPECT_EQ(Fp8PanelScaleInRange(byte), byte >= 106 && byte <= 128) << byte;
    if (Fp8PanelScaleInRange(byte)) {
      EXPECT_TRUE(every_code_exact(byte)) << byte;
    }
  }
  EXPECT_FALSE(every_code_exact(kFp8PanelScaleMinByte - 1));
  EXPECT_FALSE(every_code_exact(kFp8PanelScaleMaxByte + 1));
  EXPECT_TRUE(Fp8PanelScalesInRange(0x806A7F80u));
  EXPECT_FALSE(Fp8PanelScalesInRange(0x806A7F81u));
  EXPECT_FALSE(Fp8PanelScalesInRange(0x696A7F80u));
  // The fold's factor: sw sx finite for every in-range sx where the weight
  // byte folds (2^(ew + ex) <= 2^127).
  EXPECT_TRUE(Fp8PanelWeightScaleFolds(253));
  EXPECT_FALSE(Fp8PanelWeightScaleFolds(254));
  EXPECT_EQ(253 - 127 + (kFp8PanelScaleMaxByte - 127), 127u);
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
