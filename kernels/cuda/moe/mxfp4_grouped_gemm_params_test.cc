// CPU test (no GPU needed) of mxfp4_grouped_gemm_params.h: argument checks,
// the tile table, the e2m1 -> e4m3 widening (prmt emulated from the PTX ISA)
// and the fragment mapping of one warp's stage, emulated from the PTX ISA's
// ldmatrix and mma.m16n8k32 definitions as dense/fp8_block_gemm_params_test.cc
// does for Fp8BlockGemm.

#include "kernels/cuda/moe/mxfp4_grouped_gemm_params.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cuda/dense/test_util.h"

namespace weir::kernels::cuda {
namespace {

using dense::EachIsInvalidArgument;
using dense::EmulatedLdMatrix;
using dense::EmulatedMmaM16n8k32;
using dense::Fp8GemmAccCoord;
using dense::Fp8GemmAccumulatorCoord;
using dense::Fp8GemmBLdmatrixSource;
using dense::Fp8GemmRowChunk;
using dense::Fp8GemmSwizzledOffset;

template <typename T>
const T* Fake(uintptr_t address) {
  return reinterpret_cast<const T*>(address);
}

const uint8_t* const* FakeArray(uintptr_t address) {
  return reinterpret_cast<const uint8_t* const*>(address);
}

Mxfp4GroupedGemmParams ValidGemm() {
  return {.x = Fake<uint8_t>(256),
          .x_scales = Fake<uint8_t>(512),
          .expert_offsets = Fake<int64_t>(1024),
          .w = FakeArray(2048),
          .w_scales = FakeArray(4096),
          .y = reinterpret_cast<float*>(8192),
          .rows = 12,
          .n = 300,
          .k = 512,
          .num_experts = 4};
}

Mxfp4GroupedGateUpParams ValidGateUp() {
  return {.x = Fake<uint8_t>(256),
          .x_scales = Fake<uint8_t>(512),
          .expert_offsets = Fake<int64_t>(1024),
          .w1 = FakeArray(2048),
          .w1_scales = FakeArray(2048 + 64),
          .w3 = FakeArray(2048 + 128),
          .w3_scales = FakeArray(2048 + 192),
          .h = reinterpret_cast<uint8_t*>(8192),
          .h_scales = reinterpret_cast<uint8_t*>(16384),
          .rows = 12,
          .inter = 96,
          .dim = 256,
          .num_experts = 4};
}

TEST(Mxfp4GroupedGemmParamsTest, AcceptsValidCalls) {
  EXPECT_TRUE(CheckMxfp4GroupedGemmParams(ValidGemm()).ok());
  EXPECT_TRUE(CheckMxfp4GroupedGateUpParams(ValidGateUp()).ok());
  Mxfp4GroupedGemmParams p = ValidGemm();
  p.rows = 0;  // nothing to do is fine
  EXPECT_TRUE(CheckMxfp4GroupedGemmParams(p).ok());
  p = ValidGemm(), p.x_scales = Fake<uint8_t>(520);  // 8-byte alignment is enough
  EXPECT_TRUE(CheckMxfp4GroupedGemmParams(p).ok());
}

TEST(Mxfp4GroupedGemmParamsTest, RefusesBadArguments) {
  using P = Mxfp4GroupedGemmParams;
  EXPECT_TRUE(EachIsInvalidArgument(
      ValidGemm(), [](const P& p) { return CheckMxfp4GroupedGemmParams(p).code(); },
      {
          [](P& p) { p.x = nullptr; },
          [](P& p) { p.x_scales = nullptr; },
          [](P& p) { p.expert_offsets = nullptr; },
          [](P& p) { p.w = nullptr; },
          [](P& p) { p.w_scales = nullptr; },
          [](P& p) { p.y = nullptr; },
          [](P& p) { p.rows = -1; },
          [](P& p) { p.n = 0; },
          [](P& p) { p.k = 0; },
          [](P& p) { p.k = 384; },  // a multiple of 32 and 128, not of 256
          [](P& p) { p.num_experts = 0; },
          [](P& p) { p.num_experts = 65536; },
          [](P& p) { p.x = Fake<uint8_t>(264); },  // 8-byte aligned only
          [](P& p) { p.x_scales = Fake<uint8_t>(516); },
          [](P& p) { p.y = reinterpret_cast<float*>(8194); },
          [](P& p) {  // wgmma runs whole warpgroups
            p.tile = Mxfp4GroupedTile::kW2M32;
            p.math = Mxfp4GemmMath::kWgmma;
          },
      }));

  using Q = Mxfp4GroupedGateUpParams;
  EXPECT_TRUE(EachIsInvalidArgument(
      ValidGateUp(), [](const Q& q) { return CheckMxfp4GroupedGateUpParams(q).code(); },
      {
          [](Q& q) { q.w3 = nullptr; }, [](Q& q) { q.h_scales = nullptr; },
          [](Q& q) { q.inter = 80; },  // FP8 blocks of the output need multiples of 32
          [](Q& q) { q.dim = 288; },
          [](Q& q) { q.tile = Mxfp4GroupedTile::kW2M8; },  // 2 warps: half an FP8 block
      }));
  Q q = ValidGateUp();
  q.tile = Mxfp4GroupedTile::kW4M8;
  EXPECT_TRUE(CheckMxfp4GroupedGateUpParams(q).ok());
}

Mxfp4Bf16GroupedGemmParams ValidBf16() {
  return {.x = Fake<uint16_t>(256),
          .expert_offsets = Fake<int64_t>(1024),
          .w = FakeArray(2048),
          .w_scales = FakeArray(4096),
          .y = reinterpret_cast<void*>(8192),
          .rows = 300,
          .n = 2304,
          .k = 4096,
          .num_experts = 48};
}

TEST(Mxfp4Bf16GroupedGemmParamsTest, ChecksItsArguments) {
  EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(ValidBf16()).ok());
  Mxfp4Bf16GroupedGemmParams p = ValidBf16();
  p.rows = 0;  // nothing to do is fine
  EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok());
  p = ValidBf16(), p.k = 2304, p.n = 4096;  // V4.1's down projection
  EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok());
  p = ValidBf16(), p.output = dense::Fp8GemmOutput::kBf16, p.y = reinterpret_cast<void*>(8194);
  EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok());  // bf16 y: 2-byte aligned is enough
  p = ValidBf16(), p.row_role = Fake<int32_t>(64);
  EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok());
  for (int warps : {0, 4, 8}) {
    p = ValidBf16(), p.widener_warps = warps;
    EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok()) << warps;
    EXPECT_EQ(Mxfp4Bf16WidenerWarps(p), warps == 0 ? kMxfp4Bf16DefaultWidenerWarps : warps);
  }
  static_assert(Mxfp4Bf16NarrowestXRows(0) == 8 && Mxfp4Bf16NarrowestXRows(8) == 8 &&
                Mxfp4Bf16NarrowestXRows(9) == 16 && Mxfp4Bf16NarrowestXRows(64) == 64 &&
                Mxfp4Bf16NarrowestXRows(65) == 128);
  for (int x_rows : {0, 128, 80, 64, 32, 16, 8}) {
    p = ValidBf16(), p.register_a = true, p.x_rows = x_rows;
    EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok()) << x_rows;
    p.stage_scale_test = true;
    EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok()) << x_rows;
    p.fit_tile_rows = true;
    EXPECT_EQ(CheckMxfp4Bf16GroupedGemmParams(p).ok(), x_rows == 0 || x_rows == 128) << x_rows;
    p.fit_tile_rows = false;
    p.consumer_warpgroups = 3;
    EXPECT_EQ(CheckMxfp4Bf16GroupedGemmParams(p).ok(), x_rows == 0 || x_rows == 128) << x_rows;
    EXPECT_EQ(Mxfp4Bf16ConsumerWarpgroups(p), 3);
    p.deep_ring = true;  // with the one scale test a stage: over three warpgroups only
    EXPECT_EQ(CheckMxfp4Bf16GroupedGemmParams(p).ok(), x_rows == 0 || x_rows == 128) << x_rows;
    p.fit_tile_rows = true;
    EXPECT_FALSE(CheckMxfp4Bf16GroupedGemmParams(p).ok()) << x_rows;
    p.fit_tile_rows = false;
    p.deep_ring = false;
    p.consumer_warpgroups = 0;
    EXPECT_EQ(Mxfp4Bf16ConsumerWarpgroups(p), 2);
    p.stage_scale_test = false;
    p.deep_ring = true;
    EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok()) << x_rows;
    EXPECT_EQ(Mxfp4Bf16XRows(p), x_rows == 0 ? 128 : x_rows);
  }
  // 256 X rows a CTA: the deep ring and the one scale test a stage over two
  // warpgroups (the one instance built).
  p = ValidBf16(), p.register_a = true, p.x_rows = 256, p.deep_ring = true;
  p.stage_scale_test = true;
  EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok());
  EXPECT_EQ(Mxfp4Bf16XRows(p), 256);
  p.consumer_warpgroups = 2;
  EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok());
  // The gate / up / SwiGLU form: y unused.
  p.swiglu = true;
  p.y = nullptr;
  p.w_up = FakeArray(4096);
  p.w_up_scales = FakeArray(8192);
  p.h_codes = reinterpret_cast<uint8_t*>(16384);
  p.h_scales = reinterpret_cast<uint8_t*>(20480);
  EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok());
  p.tail_rows = true;  // the 256-row tile's tail, with the SwiGLU form or not
  EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok());
  p.swiglu = false;
  p.y = reinterpret_cast<void*>(8192);
  EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok());
  p.x_multicast = true;  // X by pairs of CTAs, with the tail, then without
  EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok());
  p.tail_rows = false;
  EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok());
  p.tail_rows = true;
  p.x_multicast = false;
  // The decode form: x_rows 0 (16), 8 or 16, none of the register form's
  // options.
  for (int x_rows : {0, 8, 16}) {
    p = ValidBf16(), p.decode_mma = true, p.x_rows = x_rows;
    EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok()) << x_rows;
    EXPECT_EQ(Mxfp4Bf16XRows(p), x_rows == 0 ? 16 : x_rows);
    p.ballot_group_search = true;
    p.output = dense::Fp8GemmOutput::kF32RoundedBf16;
    p.row_role = Fake<int32_t>(64);
    EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok()) << x_rows;
  }
  for (int x_rows : {32, 64, 80, 128, 256}) {
    p = ValidBf16(), p.decode_mma = true, p.x_rows = x_rows;
    EXPECT_FALSE(CheckMxfp4Bf16GroupedGemmParams(p).ok()) << x_rows;
  }
  using Set = void (*)(Mxfp4Bf16GroupedGemmParams&);
  for (const Set set :
       std::initializer_list<Set>{[](Mxfp4Bf16GroupedGemmParams& q) { q.register_a = true; },
                                  [](Mxfp4Bf16GroupedGemmParams& q) { q.deep_ring = true; },
                                  [](Mxfp4Bf16GroupedGemmParams& q) { q.stage_scale_test = true; },
                                  [](Mxfp4Bf16GroupedGemmParams& q) { q.fit_tile_rows = true; },
                                  [](Mxfp4Bf16GroupedGemmParams& q) { q.consumer_warpgroups = 2; },
                                  [](Mxfp4Bf16GroupedGemmParams& q) { q.tail_rows = true; },
                                  [](Mxfp4Bf16GroupedGemmParams& q) { q.x_multicast = true; }}) {
    p = ValidBf16(), p.decode_mma = true, p.x_rows = 8;
    set(p);
    EXPECT_EQ(CheckMxfp4Bf16GroupedGemmParams(p).code(), absl::StatusCode::kInvalidArgument);
  }
  // The decode form's gate / up / SwiGLU launch: swiglu's operands, n a
  // multiple of 32.
  for (int x_rows : {0, 8, 16}) {
    p = ValidBf16(), p.decode_mma = true, p.x_rows = x_rows, p.swiglu = true, p.y = nullptr;
    p.w_up = FakeArray(4096);
    p.w_up_scales = FakeArray(8192);
    p.h_codes = reinterpret_cast<uint8_t*>(16384);
    p.h_scales = reinterpret_cast<uint8_t*>(20480);
    EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok()) << x_rows;
    p.h_bf16 = reinterpret_cast<uint16_t*>(32768);  // h's bf16 values too: 16-byte aligned
    EXPECT_TRUE(CheckMxfp4Bf16GroupedGemmParams(p).ok()) << x_rows;
    p.h_bf16 = reinterpret_cast<uint16_t*>(32776);
    EXPECT_FALSE(CheckMxfp4Bf16GroupedGemmParams(p).ok()) << x_rows;
    p.h_bf16 = nullptr;
    p.h_codes = nullptr;
    EXPECT_FALSE(CheckMxfp4Bf16GroupedGemmParams(p).ok()) << x_rows;
  }
  // h_bf16 only on the decode form's SwiGLU launch.
  p = ValidBf16(), p.decode_mma = true, p.h_bf16 = reinterpret_cast<uint16_t*>(32768);
  EXPECT_FALSE(CheckMxfp4Bf16GroupedGemmParams(p).ok());

  using P = Mxfp4Bf16GroupedGemmParams;
  const auto x256 = [](P& q) {
    q.register_a = true;
    q.x_rows = 256;
    q.deep_ring = true;
    q.stage_scale_test = true;
  };
  EXPECT_TRUE(EachIsInvalidArgument(
      ValidBf16(), [](const P& q) { return CheckMxfp4Bf16GroupedGemmParams(q).code(); },
      {
          [](P& q) { q.x = nullptr; },
          [](P& q) { q.expert_offsets = nullptr; },
          [](P& q) { q.w = nullptr; },
          [](P& q) { q.w_scales = nullptr; },
          [](P& q) { q.y = nullptr; },
          [](P& q) { q.rows = -1; },
          [](P& q) { q.n = 0; },
          [](P& q) { q.k = 0; },
          [](P& q) { q.k = 4096 + 64; },  // a multiple of 64, not of 128
          [](P& q) { q.num_experts = 0; },
          [](P& q) { q.rows = int64_t{1} << 31; },
          [](P& q) { q.x = Fake<uint16_t>(264); },            // 8-byte aligned only
          [](P& q) { q.y = reinterpret_cast<void*>(8194); },  // fp32 y
          [](P& q) { q.row_role = Fake<int32_t>(66); },
          [](P& q) { q.widener_warps = 2; },
          [](P& q) { q.widener_warps = 16; },
          [](P& q) { q.widener_warps = -4; },
          [](P& q) { q.x_rows = 80; },              // 80 rows without register_a
          [](P& q) { q.deep_ring = true; },         // without register_a
          [](P& q) { q.stage_scale_test = true; },  // without register_a
          [](P& q) {                                // with the deep ring over two warpgroups
            q.register_a = true;
            q.deep_ring = true;
            q.stage_scale_test = true;
          },
          [](P& q) {  // without the one scale test a stage
            q.register_a = true;
            q.fit_tile_rows = true;
          },
          [](P& q) {  // three warpgroups without the one scale test a stage
            q.register_a = true;
            q.consumer_warpgroups = 3;
          },
          [](P& q) {
            q.register_a = true;
            q.stage_scale_test = true;
            q.consumer_warpgroups = 4;
          },
          [](P& q) {
            q.register_a = true;
            q.x_rows = 48;
          },
          [](P& q) {  // at 80 rows a tile the grid fills sooner
            q.register_a = true;
            q.x_rows = 80;
            q.rows = 80 * 65000;
            q.num_experts = 536;
          },
          [](P& q) {  // the grid's row tiles: ceil(rows / 128) + experts
            q.rows = 128 * 65000;
            q.num_experts = 536;
          },
          [](P& q) { q.x_rows = 256; },  // 256 rows without register_a
          [&](P& q) {                    // without the deep ring
            x256(q);
            q.deep_ring = false;
          },
          [&](P& q) {  // without the one scale test a stage
            x256(q);
            q.stage_scale_test = false;
          },
          [&](P& q) {  // over three warpgroups
            x256(q);
            q.consumer_warpgroups = 3;
          },
          [&](P& q) {  // with the fitted N
            x256(q);
            q.fit_tile_rows = true;
          },
          [](P& q) { q.tail_rows = true; },  // the tail without the 256-row tile
          [](P& q) {                         // X by pairs of CTAs without the 256-row tile
            q.register_a = true;
            q.deep_ring = true;
            q.x_rows = 128;
            q.x_multicast = true;
          },
          [](P& q) {
            q.register_a = true;
            q.stage_scale_test = true;
            q.fit_tile_rows = true;
            q.tail_rows = true;
          },
          [&](P& q) {  // the SwiGLU form without the 256-row tile
            q.swiglu = true;
            q.w_up = q.w;
            q.w_up_scales = q.w_scales;
            q.h_codes = reinterpret_cast<uint8_t*>(16384);
            q.h_scales = reinterpret_cast<uint8_t*>(20480);
          },
          [&](P& q) {  // without h's scales
            x256(q);
            q.swiglu = true;
            q.w_up = q.w;
            q.w_up_scales = q.w_scales;
            q.h_codes = reinterpret_cast<uint8_t*>(16384);
          },
          [&](P& q) {  // h's codes 4-byte aligned only
            x256(q);
            q.swiglu = true;
            q.w_up = q.w;
            q.w_up_scales = q.w_scales;
            q.h_codes = reinterpret_cast<uint8_t*>(16388);
            q.h_scales = reinterpret_cast<uint8_t*>(20480);
          },
          [&](P& q) {  // n not a multiple of 32
            x256(q);
            q.swiglu = true;
            q.n = 48;
            q.w_up = q.w;
            q.w_up_scales = q.w_scales;
            q.h_codes = reinterpret_cast<uint8_t*>(16384);
            q.h_scales = reinterpret_cast<uint8_t*>(20480);
          },
      }));
}

// The row tiles of a group (Mxfp4Bf16GroupTiles): ceil(rows / 256) without
// a tail; with the 32-row tail a group takes a tile fewer where its rows
// past the last full tile are 32 or fewer, and never more tiles; a tile
// other than the last has more than 256 + 32 rows from its first on, the
// last at most that many (what the kernel's tail test relies on).
TEST(Mxfp4Bf16GroupedGemmParamsTest, TailTilesHoldEveryRowAndTheTailOnly) {
  constexpr int kTail = kMxfp4Bf16TailRows;
  EXPECT_EQ(Mxfp4Bf16GroupTiles(0, 256, kTail), 0);
  EXPECT_EQ(Mxfp4Bf16GroupTiles(-3, 256, 0), 0);
  EXPECT_EQ(Mxfp4Bf16GroupTiles(1, 256, kTail), 1);
  EXPECT_EQ(Mxfp4Bf16GroupTiles(288, 256, kTail), 1);
  EXPECT_EQ(Mxfp4Bf16GroupTiles(289, 256, kTail), 2);
  EXPECT_EQ(Mxfp4Bf16GroupTiles(513, 256, 0), 3);
  EXPECT_EQ(Mxfp4Bf16GroupTiles(513, 256, kTail), 2);
  EXPECT_EQ(Mxfp4Bf16GroupTiles(544, 256, kTail), 2);
  EXPECT_EQ(Mxfp4Bf16GroupTiles(545, 256, kTail), 3);
  for (int64_t rows = 1; rows <= 2000; ++rows) {
    SCOPED_TRACE(::testing::Message() << "rows " << rows);
    const int64_t plain = Mxfp4Bf16GroupTiles(rows, 256, 0);
    const int64_t tiles = Mxfp4Bf16GroupTiles(rows, 256, kTail);
    EXPECT_EQ(plain, (rows + 255) / 256);
    EXPECT_LE(tiles, plain);
    EXPECT_GE(tiles, plain - 1);
    EXPECT_EQ(tiles < plain, rows % 256 != 0 && rows % 256 <= kTail && rows > 256);
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t left = rows - 256 * t;  // the rows from tile t's first on
      if (t + 1 < tiles) {
        EXPECT_GT(left, 256 + kTail);
      } else {
        EXPECT_GE(left, 1);
        EXPECT_LE(left, 256 + kTail);
      }
    }
  }
}

TEST(Mxfp4GroupedGemmParamsTest, TileNamesRoundTrip) {
  std::vector<Mxfp4GroupedTile> tiles = {Mxfp4GroupedTile::kAuto};
  tiles.insert(tiles.end(), std::begin(kMxfp4GroupedTiles), std::end(kMxfp4GroupedTiles));
  for (Mxfp4GroupedTile tile : tiles) {
    const std::optional<Mxfp4GroupedTile> back = Mxfp4GroupedTileByName(Mxfp4GroupedTileName(tile));
    ASSERT_TRUE(back.has_value()) << Mxfp4GroupedTileName(tile);
    EXPECT_EQ(*back, tile);
  }
  EXPECT_FALSE(Mxfp4GroupedTileByName("w4m9").has_value());
  EXPECT_FALSE(Mxfp4GroupedTileByName("").has_value());
}

TEST(Mxfp4GroupedGemmParamsTest, TileTableIsConsistent) {
  for (Mxfp4GroupedTile tile : kMxfp4GroupedTiles) {
    const Mxfp4GroupedTileShape s = ShapeOfMxfp4GroupedTile(tile);
    const int threads = 32 * s.warps;
    EXPECT_EQ(s.block_m % 8, 0);
    EXPECT_GE(s.stages, 3);
    EXPECT_EQ(16 * s.warps * 8 % threads, 0);  // W chunks split evenly
    const Mxfp4GroupedSmemLayout l = Mxfp4GroupedLayout(s.warps, s.block_m, s.stages);
    EXPECT_LE(l.total, 227 * 1024);  // sm_90 opt-in limit per block
    // Parts are 16-byte aligned (cp.async 16 and 8, ldmatrix rows).
    for (int off : {l.x_codes, l.w_scales, l.x_scales, l.w_codes_stride, l.x_codes_stride,
                    l.w_scales_stride, l.x_scales_stride}) {
      EXPECT_EQ(off % 16, 0);
    }
    // The gate/up epilogue's exchange (u per lane, row amax and flags) fits the ring.
    if (s.warps % 4 == 0) {
      const int exchange = s.warps / 2 * (s.block_m / 8) * 4 * 32 * 4 + s.warps / 2 * s.block_m * 8;
      EXPECT_LE(exchange, l.total);
    }
    // A tile bounded to fit N CTAs an SM by registers fits them by shared
    // memory too (228 KB an SM, 1 KB reserved a CTA).
    for (bool gated : {false, true}) {
      const int blocks = Mxfp4MinBlocks(s.warps, s.block_m, s.stages, gated, /*wgmma=*/false);
      const Mxfp4GroupedSmemLayout lx =
          Mxfp4GroupedLayout(s.warps, s.block_m, s.stages, Mxfp4WidensXOnce(s.block_m, false));
      EXPECT_LE(blocks * (lx.total + 1024), 228 * 1024) << Mxfp4GroupedTileName(tile);
    }
    EXPECT_EQ(Mxfp4GroupedBlockN(s, false), 16 * s.warps);
    EXPECT_EQ(Mxfp4GroupedBlockN(s, true) % 32, s.warps % 4 == 0 ? 0 : 16);
  }
  EXPECT_EQ(ShapeOfMxfp4GroupedTile(Mxfp4GroupedTile::kAuto).warps, 0);
  for (bool gated : {false, true}) {
    // Decode: the measured fastest tiles.
    EXPECT_EQ(ChooseMxfp4GroupedTile(0, gated), Mxfp4GroupedTile::kW4M8S4);
    for (int64_t m : {1, 4}) {
      EXPECT_EQ(ChooseMxfp4GroupedTile(m, gated),
                gated ? Mxfp4GroupedTile::kW4M8S3 : Mxfp4GroupedTile::kW4M8S4)
          << m;
    }
    for (int64_t m : {5, 8, 11}) {
      EXPECT_EQ(ChooseMxfp4GroupedTile(m, gated), Mxfp4GroupedTile::kW4M16S4) << m;
    }
    for (int64_t m : {12, 16}) {
      EXPECT_EQ(ChooseMxfp4GroupedTile(m, gated), Mxfp4GroupedTile::kW4M32) << m;
    }
    EXPECT_EQ(ShapeOfMxfp4GroupedTile(ChooseMxfp4GroupedTile(17, gated)).block_m, 32);
    EXPECT_EQ(ShapeOfMxfp4GroupedTile(ChooseMxfp4GroupedTile(48, gated)).block_m, 32);
    EXPECT_EQ(ChooseMxfp4GroupedTile(49, gated), Mxfp4GroupedTile::kW8M64);
    EXPECT_EQ(ChooseMxfp4GroupedTile(255, gated), Mxfp4GroupedTile::kW8M64);
    EXPECT_EQ(ChooseMxfp4GroupedTile(256, gated), Mxfp4GroupedTile::kW4M32);
    EXPECT_EQ(ChooseMxfp4GroupedTile(5000, gated), Mxfp4GroupedTile::kW4M32);
    EXPECT_EQ(ChooseMxfp4GroupedTile(5000, gated, Mxfp4GemmMath::kWgmmaF16),
              Mxfp4GroupedTile::kW8M64);
    EXPECT_EQ(ChooseMxfp4GroupedTile(95, gated, Mxfp4GemmMath::kWgmma), Mxfp4GroupedTile::kW8M64);
    EXPECT_EQ(ChooseMxfp4GroupedTile(96, gated, Mxfp4GemmMath::kWgmma), Mxfp4GroupedTile::kW8M128);
    for (int64_t m : {1, 17, 5000}) {
      EXPECT_EQ(ShapeOfMxfp4GroupedTile(ChooseMxfp4GroupedTile(m, true)).warps % 4, 0);
    }
    // wgmma: every choice a whole warpgroup (the plain kW2M32 becomes kW4M32).
    for (int64_t m = 0; m <= 80; ++m) {
      const Mxfp4GroupedTile t = ChooseMxfp4GroupedTile(m, gated, Mxfp4GemmMath::kWgmma);
      EXPECT_EQ(ShapeOfMxfp4GroupedTile(t).warps % 4, 0) << m;
      if (ShapeOfMxfp4GroupedTile(ChooseMxfp4GroupedTile(m, gated)).warps % 4 == 0) {
        EXPECT_EQ(t, ChooseMxfp4GroupedTile(m, gated)) << m;
      }
    }
  }
  // The gate/up W rows: each warp one weight, 16 columns per warp pair, every
  // (column, weight) once.
  std::vector<int> seen(2 * 64, 0);
  for (int row = 0; row < 128; ++row) {
    const Mxfp4WRowSource src = Mxfp4GroupedWRow(row, true);
    EXPECT_EQ(src.up, ((row / 16) % 2) == 1);
    ++seen[src.column * 2 + src.up];
    EXPECT_EQ(src.column / 16, row / 32);
  }
  for (int v : seen) EXPECT_EQ(v, 1);
}

// PTX ISA prmt.b32 (default mode): bytes {b, a} = b7..b4 a3..a0; result byte i
// is byte (c >> 4i) & 7, or its msb replicated when bit 3 of that nibble is set.
uint32_t EmulatedPrmt(uint32_t a, uint32_t b, uint32_t c) {
  uint8_t bytes[8];
  for (int i = 0; i < 4; ++i) {
    bytes[i] = static_cast<uint8_t>(a >> (8 * i));
    bytes[4 + i] = static_cast<uint8_t>(b >> (8 * i));
  }
  uint32_t out = 0;
  for (int i = 0; i < 4; ++i) {
    const uint32_t sel = (c >> (4 * i)) & 0xF;
    uint8_t byte = bytes[sel & 7];
    if (sel & 8) byte = (byte & 0x80) ? 0xFF : 0x00;
    out |= static_cast<uint32_t>(byte) << (8 * i);
  }
  return out;
}

uint32_t HostE2m1x4ToE4m3x4(uint32_t v) {
  return E2m1x4ToE4m3x4(v,
                        [](uint32_t a, uint32_t b, uint32_t c) { return EmulatedPrmt(a, b, c); });
}

TEST(Mxfp4GroupedGemmParamsTest, E2m1WidensExactlyToE4m3) {
  for (uint32_t v = 0; v < 65536; ++v) {
    const uint32_t e = HostE2m1x4ToE4m3x4(v);
    for (int i = 0; i < 4; ++i) {
      const uint8_t nibble = (v >> (4 * i)) & 0xF;
      const uint8_t code = static_cast<uint8_t>(e >> (8 * i));
      const float want = E2m1ToFloat(nibble), got = E4m3ToFloat(code);
      ASSERT_EQ(std::memcmp(&want, &got, 4), 0)  // the sign of zero too
          << "v " << v << " nibble " << i << " code " << int(code);
    }
  }
  // The upper half of the selector word is ignored by the kernel's use too.
  EXPECT_EQ(HostE2m1x4ToE4m3x4(0x12348765u), HostE2m1x4ToE4m3x4(0x8765u));
}

// IEEE binary16 bits -> float (every case; the widening below makes only
// e2m1 values).
float HalfBitsToFloat(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

// The kernel's A widening: the f16 high-byte table, then two prmt with a zero
// operand give the f16x2 of elements (0, 1) and (2, 3), exactly the e2m1
// values (the sign of zero too).
TEST(Mxfp4GroupedGemmParamsTest, E2m1WidensExactlyToF16) {
  const auto prmt = [](uint32_t a, uint32_t b, uint32_t c) { return EmulatedPrmt(a, b, c); };
  for (uint32_t v = 0; v < 65536; ++v) {
    const uint32_t high = E2m1x4ToF16High(v, prmt);
    const uint32_t pairs[2] = {EmulatedPrmt(high, 0, kF16x2Of01),
                               EmulatedPrmt(high, 0, kF16x2Of23)};
    for (int i = 0; i < 4; ++i) {
      const uint16_t h = static_cast<uint16_t>(pairs[i / 2] >> (16 * (i % 2)));
      const float want = E2m1ToFloat((v >> (4 * i)) & 0xF), got = HalfBitsToFloat(h);
      ASSERT_EQ(std::memcmp(&want, &got, 4), 0) << "v " << v << " element " << i;
    }
  }
  EXPECT_EQ(E2m1x4ToF16High(0x12348765u, prmt), E2m1x4ToF16High(0x8765u, prmt));
}

// The widening's bits: bf16(e2m1 x 2^(e - 127)), every code under every
// scale. Exact wherever bf16 holds the value (every scale up to 252, its
// subnormals included: the smallest product, 0.5 x 2^-127, is a multiple of
// bf16's 2^-133), infinity past its range, NaN for scale 0xFF. And the
// kernel's recipe (Mxfp4ToBf16Eight: the code's f16 from the prmt tables,
// widened to fp32, times ScaleOf's fp32 in fp32, rounded to bf16) gives the
// same bits.
TEST(Mxfp4Bf16GroupedGemmParamsTest, WidenedWeightsAreTheExactValues) {
  const auto prmt = [](uint32_t a, uint32_t b, uint32_t c) { return EmulatedPrmt(a, b, c); };
  for (int scale = 0; scale < 256; ++scale) {
    // ScaleOf (dense/fp8_mma_sm90.cuh): 2^(e - 127) with bits e << 23, e = 0
    // as 2^-127 (an fp32 subnormal), 0xFF as NaN.
    uint32_t scale_bits = static_cast<uint32_t>(scale) << 23;
    if (scale == 0) scale_bits = 0x00400000u;
    if (scale == 255) scale_bits = 0x7FC00000u;
    float scale_of;
    std::memcpy(&scale_of, &scale_bits, 4);
    for (uint32_t code = 0; code < 16; ++code) {
      const uint16_t bits =
          Mxfp4WeightBf16Bits(static_cast<uint8_t>(code), static_cast<uint8_t>(scale));
      const double exact = std::ldexp(static_cast<double>(E2m1ToFloat(code)), scale - 127);
      const float value = Bf16BitsToFloat(bits);
      if (scale == 255) {
        ASSERT_TRUE(std::isnan(value)) << "code " << code;
      } else if (scale <= 252 || std::fabs(exact) <= 3.3895e38) {
        ASSERT_EQ(static_cast<double>(value), exact) << "code " << code << " scale " << scale;
        ASSERT_EQ(std::signbit(value), code >= 8) << "code " << code << " scale " << scale;
      } else {
        ASSERT_TRUE(std::isinf(value)) << "code " << code << " scale " << scale;
      }
      // The kernel's recipe.
      const uint32_t high = E2m1x4ToF16High(code, prmt);
      const uint16_t half = static_cast<uint16_t>(EmulatedPrmt(high, 0, kF16x2Of01));
      const uint16_t recipe = FloatToBf16Bits(HalfBitsToFloat(half) * scale_of);
      if (scale == 255) {
        ASSERT_TRUE(std::isnan(Bf16BitsToFloat(recipe)));
      } else {
        ASSERT_EQ(recipe, bits) << "code " << code << " scale " << scale;
      }
    }
  }
}

// The bf16 tables: every pattern of four codes gives the exact bf16 of each
// e2m1 value (the sign of zero too) in the pair order Bf16Gemm's W tile
// holds, whatever the bits above v's low 16; and for every scale where
// Mxfp4ScaleMultipliesInBf16 holds, a bf16 multiply of that value by the
// scale (exact product, rounded to nearest even: mul.rn.bf16x2) gives
// Mxfp4WeightBf16Bits' bits, which the fp32 recipe gives for the others.
TEST(Mxfp4Bf16GroupedGemmParamsTest, Bf16TablesAndBf16MultiplyGiveTheWidenedBits) {
  const auto prmt = [](uint32_t a, uint32_t b, uint32_t c) { return EmulatedPrmt(a, b, c); };
  for (uint32_t v = 0; v < 65536; ++v) {
    uint32_t pairs[2];
    E2m1x4ToBf16x2(v | 0xABCD0000u, prmt, pairs);
    for (int i = 0; i < 4; ++i) {
      const uint16_t bits = static_cast<uint16_t>(pairs[i / 2] >> (16 * (i % 2)));
      const float want = E2m1ToFloat((v >> (4 * i)) & 0xF), got = Bf16BitsToFloat(bits);
      ASSERT_EQ(std::memcmp(&want, &got, 4), 0) << "v " << v << " element " << i;
    }
  }
  int multiplied = 0;
  for (uint32_t scale = 0; scale < 256; ++scale) {
    if (!Mxfp4ScaleMultipliesInBf16(scale)) continue;
    ++multiplied;
    const uint16_t scale_bits = static_cast<uint16_t>(scale << 7);  // 2^(scale - 127)
    ASSERT_EQ(Bf16BitsToFloat(scale_bits), std::ldexp(1.0f, static_cast<int>(scale) - 127));
    for (uint32_t code = 0; code < 16; ++code) {
      uint32_t pairs[2];
      E2m1x4ToBf16x2(code, prmt, pairs);
      const float product =
          Bf16BitsToFloat(static_cast<uint16_t>(pairs[0])) * Bf16BitsToFloat(scale_bits);
      ASSERT_EQ(FloatToBf16Bits(product),
                Mxfp4WeightBf16Bits(static_cast<uint8_t>(code), static_cast<uint8_t>(scale)))
          << "code " << code << " scale " << scale;
    }
  }
  EXPECT_EQ(multiplied, 253);  // all but 0, 1 and 0xFF
}

// A warp's fp32 scale scratch: every (block, weight row) and (block, X row)
// has its own float, inside the warp's stride; rows g and g + 8 of a block are
// one aligned pair, and so are the X rows 2t, 2t + 1 a lane's accumulators hold.
TEST(Mxfp4GroupedGemmParamsTest, ScaleScratchIsOneFloatEach) {
  for (Mxfp4GroupedTile tile : kMxfp4GroupedTiles) {
    const Mxfp4GroupedTileShape s = ShapeOfMxfp4GroupedTile(tile);
    const Mxfp4GroupedSmemLayout l = Mxfp4GroupedLayout(s.warps, s.block_m, s.stages);
    const int floats = l.scale_floats_stride / 4;
    std::vector<int> seen(floats, 0);
    for (int j = 0; j < kMxfp4GemmBlocksPerStage; ++j) {
      for (int r = 0; r < 16; ++r) ++seen.at(Mxfp4ScaleFloatW(j, r));
      for (int r = 0; r < s.block_m; ++r) ++seen.at(Mxfp4ScaleFloatX(j, r, s.block_m));
      for (int g = 0; g < 8; ++g) {
        EXPECT_EQ(Mxfp4ScaleFloatW(j, g) % 2, 0);
        EXPECT_EQ(Mxfp4ScaleFloatW(j, g + 8), Mxfp4ScaleFloatW(j, g) + 1);
      }
      for (int lane = 0; lane < 32; ++lane) {
        for (int ni = 0; ni < s.block_m / 8; ++ni) {
          const int r0 = ni * 8 + Fp8GemmAccumulatorCoord(lane, 0).m;
          EXPECT_EQ(Mxfp4ScaleFloatX(j, r0, s.block_m) % 2, 0);
          EXPECT_EQ(ni * 8 + Fp8GemmAccumulatorCoord(lane, 1).m, r0 + 1);
        }
      }
    }
    for (int v : seen) EXPECT_EQ(v, 1) << Mxfp4GroupedTileName(tile);
    EXPECT_EQ(l.scale_floats % 16, 0);
    EXPECT_EQ(l.tables, l.scale_floats + s.warps * l.scale_floats_stride);
    EXPECT_EQ(l.total, l.tables + 16);
    // wgmma's 128-byte swizzle is on shared addresses: every X tile (slot,
    // half of the stage, 8-row group) starts on a 1024-byte boundary.
    EXPECT_EQ(l.x_codes % 1024, 0);
    EXPECT_EQ(l.x_codes_stride % 1024, 0);
    EXPECT_EQ(s.block_m * 128 % 1024, 0);
  }
}

// The widened X of the 8-row tiles: after the tables, 128-byte aligned, one
// 16-byte F16B of every (K block, 8-row group, lane) with none shared, and
// nothing else moved; the other tiles and the wgmma math keep no such area.
TEST(Mxfp4GroupedGemmParamsTest, WidenedXHasASlotPerBlockGroupAndLane) {
  for (Mxfp4GroupedTile tile : kMxfp4GroupedTiles) {
    const Mxfp4GroupedTileShape s = ShapeOfMxfp4GroupedTile(tile);
    EXPECT_FALSE(Mxfp4WidensXOnce(s.block_m, /*wgmma=*/true));
    const bool widen = Mxfp4WidensXOnce(s.block_m, /*wgmma=*/false);
    EXPECT_EQ(widen, s.block_m == 8) << Mxfp4GroupedTileName(tile);
    const Mxfp4GroupedSmemLayout plain = Mxfp4GroupedLayout(s.warps, s.block_m, s.stages);
    const Mxfp4GroupedSmemLayout l = Mxfp4GroupedLayout(s.warps, s.block_m, s.stages, widen);
    EXPECT_EQ(l.tables, plain.tables);
    EXPECT_EQ(l.scale_floats, plain.scale_floats);
    if (!widen) {
      EXPECT_EQ(l.total, plain.total);
      EXPECT_EQ(l.x_f16, l.total);
      continue;
    }
    EXPECT_EQ(l.x_f16 % 128, 0);
    EXPECT_GE(l.x_f16, l.tables + 16);
    const int bytes = l.total - l.x_f16;
    EXPECT_EQ(bytes, kMxfp4GemmBlocksPerStage * s.block_m * 64);
    std::vector<int> seen(bytes / 16, 0);
    for (int j = 0; j < kMxfp4GemmBlocksPerStage; ++j) {
      for (int ni = 0; ni < s.block_m / 8; ++ni) {
        for (int lane = 0; lane < 32; ++lane) {
          const int at = Mxfp4WidenedXOffset(j, ni, lane, s.block_m);
          ASSERT_EQ(at % 16, 0);
          ASSERT_LT(at, bytes);
          ++seen[at / 16];
          // A warp's 32 lanes of one (block, group) are 512 contiguous bytes.
          EXPECT_EQ(at - Mxfp4WidenedXOffset(j, ni, 0, s.block_m), 16 * lane);
        }
      }
    }
    for (int v : seen) EXPECT_EQ(v, 1) << Mxfp4GroupedTileName(tile);
  }
}

// The fragments are emulated from the PTX ISA definitions (EmulatedLdMatrix,
// EmulatedMmaM16n8k32 in dense/test_util.h), values in double (e4m3 products
// and their sums of 32 are exact).
// kWgmmaF16's f16 X tile (Mxfp4WgmmaF16XOffset): every (row, chunk) its own
// 16 bytes inside block_m x 512 bytes, 1024-byte aligned after the rest, and
// every 4- and 8-warp tile but kW8M128 (refused) within an SM's 227 KB.
TEST(Mxfp4GroupedGemmParamsTest, WgmmaF16XTileIsABijectionAndFits) {
  for (Mxfp4GroupedTile tile : kMxfp4GroupedTiles) {
    const Mxfp4GroupedTileShape shape = ShapeOfMxfp4GroupedTile(tile);
    if (shape.warps % 4 != 0) continue;
    const int bm = shape.block_m;
    std::vector<int> seen(static_cast<size_t>(bm) * 32, 0);
    for (int r = 0; r < bm; ++r) {
      for (int c = 0; c < 32; ++c) {
        const int at = Mxfp4WgmmaF16XOffset(r, c, bm);
        ASSERT_EQ(at % 16, 0);
        ASSERT_GE(at, 0);
        ASSERT_LT(at, bm * 512);
        ++seen[at / 16];
      }
    }
    for (int n : seen) EXPECT_EQ(n, 1) << Mxfp4GroupedTileName(tile);
    const Mxfp4GroupedSmemLayout l =
        Mxfp4GroupedLayout(shape.warps, bm, shape.stages, false, /*wgmma_f16=*/true);
    EXPECT_EQ(l.x_f16 % 1024, 0);
    EXPECT_GE(l.x_f16, l.tables + 16);
    EXPECT_EQ(l.total, l.x_f16 + bm * 512);
    const bool fits = l.total + 1024 <= 227 * 1024;  // + the wgmma alignment slack
    EXPECT_EQ(fits, tile != Mxfp4GroupedTile::kW8M128) << Mxfp4GroupedTileName(tile);
  }
}

TEST(Mxfp4GroupedGemmParamsTest, FragmentMappingComputesTheTileProduct) {
  // One stage (256 of K) of a 2-warp CTA's W tile (32 packed rows of 128
  // bytes; warp 1 = rows 16..31) and 24 X rows (tiles 0, 1 by ldmatrix.x4,
  // tile 2 by .x2), copied with the kernel's chunk mapping.
  constexpr int kWRows = 32, kXRows = 24, kBm = 24;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> w(kWRows * 128), x(kXRows * 256);
  for (auto& v : w) v = static_cast<uint8_t>(byte(rng));
  for (auto& v : x) {
    do v = static_cast<uint8_t>(byte(rng));
    while ((v & 0x7F) == 0x7F);  // no NaN codes
  }
  std::vector<uint8_t> w_smem(w.size()), x_smem(x.size());
  for (int c = 0; c < kWRows * 8; ++c) {  // chunk c: row c / 8, chunk c % 8
    std::memcpy(&w_smem[Fp8GemmSwizzledOffset(c / 8, c % 8)], &w[c * 16], 16);
  }
  for (int c = 0; c < kXRows * 16; ++c) {  // chunk c: row c / 16, chunk c % 16
    std::memcpy(&x_smem[Mxfp4GroupedXOffset(c / 16, c % 16, kBm)], &x[c * 16], 16);
  }
  auto w_value = [&](int n, int k) {  // element k of packed row n
    return static_cast<double>(E2m1ToFloat((w[n * 128 + k / 2] >> (4 * (k & 1))) & 0xF));
  };
  auto x_value = [&](int m, int k) { return static_cast<double>(E4m3ToFloat(x[m * 256 + k])); };
  for (int warp = 0; warp < 2; ++warp) {
    for (int j = 0; j < kMxfp4GemmBlocksPerStage; ++j) {
      std::array<std::array<uint32_t, 4>, 32> a{};
      for (int lane = 0; lane < 32; ++lane) {
        for (int q = 0; q < 4; ++q) {
          const int off = Mxfp4PackedAOffset(16 * warp, lane, j, q);
          const uint32_t v = w_smem[off] | (static_cast<uint32_t>(w_smem[off + 1]) << 8);
          a[lane][q] = HostE2m1x4ToE4m3x4(v);
        }
      }
      const int half = (j >> 2) * kBm * 128, jj = j & 3;
      std::array<int, 32> b_address{}, b2_address{};
      for (int lane = 0; lane < 32; ++lane) {
        const Fp8GemmRowChunk sb = Fp8GemmBLdmatrixSource(lane, jj);
        b_address[lane] = half + Fp8GemmSwizzledOffset(sb.row, sb.chunk);
        const Fp8GemmRowChunk sb2 = Fp8GemmBLdmatrixSource(lane & 15, jj);
        b2_address[lane] = half + Fp8GemmSwizzledOffset(16 + sb2.row, sb2.chunk);
      }
      std::array<std::array<uint32_t, 2>, 32> b[3]{};
      for (int lane = 0; lane < 32; ++lane) {
        const auto r = EmulatedLdMatrix(x_smem, b_address, lane, 4);
        const auto r2 = EmulatedLdMatrix(x_smem, b2_address, lane, 2);
        b[0][lane] = {r[0], r[1]};
        b[1][lane] = {r[2], r[3]};
        b[2][lane] = {r2[0], r2[1]};
      }
      for (int tile = 0; tile < 3; ++tile) {
        const auto d = EmulatedMmaM16n8k32<double>(
            a, b[tile], [](uint8_t code) { return static_cast<double>(E4m3ToFloat(code)); });
        for (int lane = 0; lane < 32; ++lane) {
          for (int r = 0; r < 4; ++r) {
            const Fp8GemmAccCoord c = Fp8GemmAccumulatorCoord(lane, r);
            double want = 0;
            for (int kk = 0; kk < 32; ++kk) {
              want += w_value(16 * warp + c.n, 32 * j + kk) * x_value(8 * tile + c.m, 32 * j + kk);
            }
            ASSERT_EQ(d[lane][r], want) << "warp " << warp << " block " << j << " tile " << tile
                                        << " lane " << lane << " reg " << r;
          }
        }
      }
    }
  }
}

// The packed A reads of one warp's K block hit 16 distinct 4-byte words in 16
// distinct banks per register (conflict-free), for every block and row tile.
TEST(Mxfp4GroupedGemmParamsTest, PackedAReadsAreConflictFree) {
  for (int row0 : {0, 16, 48}) {
    for (int j = 0; j < 8; ++j) {
      for (int q = 0; q < 4; ++q) {
        std::array<int, 32> word_of_bank;
        word_of_bank.fill(-1);
        for (int lane = 0; lane < 32; ++lane) {
          const int word = Mxfp4PackedAOffset(row0, lane, j, q) / 4;
          const int bank = word % 32;
          EXPECT_TRUE(word_of_bank[bank] == -1 || word_of_bank[bank] == word)
              << "row0 " << row0 << " j " << j << " q " << q << " lane " << lane;
          word_of_bank[bank] = word;
        }
      }
    }
  }
}

// The register form's A fragments (Mxfp4Bf16GatherQuadByte,
// Mxfp4Bf16FragmentRegister, prmt emulated): for every quad lane, K block
// and pair, the two nibbles a fragment register widens are the codes of the
// K indices wgmma's A layout wants there (register 4 s + r: row r % 2, K
// 16 s + 8 (r / 2) + 2c, + 1), and the 16 registers x 4 lanes x 2 rows cover
// every code of the stage once.
TEST(Mxfp4GroupedGemmParamsTest, RegisterFormFragmentsHoldWgmmasKPairs) {
  const auto prmt = [](uint32_t a, uint32_t b, uint32_t c) { return EmulatedPrmt(a, b, c); };
  std::mt19937 rng(36);
  for (int trial = 0; trial < 50; ++trial) {
    uint32_t words[2][8];  // two W rows' stage: nibble i of word w is K 8w + i
    for (auto& row : words) {
      for (uint32_t& w : row) w = rng();
    }
    const auto code = [&](int q, int k) { return (words[q][k / 8] >> (4 * (k % 8))) & 0xFu; };
    std::vector<int> seen(2 * kMxfp4Bf16StageK, 0);
    for (uint32_t c = 0; c < 4; ++c) {
      for (int q = 0; q < 2; ++q) {
        for (int b = 0; b < 2; ++b) {
          const uint32_t v = Mxfp4Bf16GatherQuadByte(&words[q][4 * b], c, prmt);
          for (int j = 0; j < 4; ++j) {
            const int reg = Mxfp4Bf16FragmentRegister(b, j, q);
            ASSERT_GE(reg, 0);
            ASSERT_LT(reg, 16);
            const int s = reg / 4, r = reg % 4;
            ASSERT_EQ(r % 2, q) << "the register's row";
            const int k = 16 * s + 8 * (r / 2) + 2 * static_cast<int>(c);
            for (int e = 0; e < 2; ++e) {  // element 2j + e of v, the pair's low then high half
              ASSERT_EQ((v >> (4 * (2 * j + e))) & 0xFu, code(q, k + e))
                  << "lane " << c << " row " << q << " block " << b << " pair " << j;
              ++seen[q * kMxfp4Bf16StageK + k + e];
            }
          }
        }
      }
    }
    for (int n : seen) ASSERT_EQ(n, 1);
  }
}

// The decode form's shared memory: two CTAs an SM at 8 and 16 X rows (228
// KB an SM, 1 KB of it reserved a CTA; 227 KB a CTA at most), the rings
// after the X buffers, every ring slot's codes and scale words apart, and
// each of a warp's 64 copy units a 16-byte piece of one W row of the slot's
// codes, once. (Gated: each warp's slots hold the gate's 16 rows and the up
// product's, X comes in chunks of 512, and the staged sums fit the X
// buffers.)
TEST(Mxfp4Bf16GroupedGemmParamsTest, DecodeLayoutFitsTwoCtasAnSmAndCopiesEachCodeOnce) {
  for (const bool gated : {false, true}) {
    const int w_rows = Mxfp4Bf16DecodeWRows(gated);
    EXPECT_EQ(w_rows, gated ? 32 : 16);
    EXPECT_EQ(Mxfp4Bf16DecodeChunkK(gated) % kMxfp4Bf16DecodeStageK, 0);
    EXPECT_EQ(Mxfp4Bf16DecodeXPitch(gated) % 128, 16) << "8 rows in 8 bank quads";
    for (int rows : {8, 16}) {
      SCOPED_TRACE(::testing::Message() << "gated " << gated << " rows " << rows);
      const Mxfp4Bf16DecodeLayout l = Mxfp4Bf16DecodeLayoutOf(rows, gated);
      EXPECT_EQ(l.x_buffer, rows * Mxfp4Bf16DecodeXPitch(gated));
      EXPECT_EQ(l.ring, 2 * l.x_buffer);
      EXPECT_EQ(l.ring % 16, 0) << "cp.async's 16-byte destinations";
      EXPECT_EQ(l.slot_bytes % 16, 0);
      EXPECT_EQ(l.slot_scales, w_rows * kMxfp4Bf16DecodeStageK / 2);
      EXPECT_EQ(l.total, l.ring + kMxfp4Bf16DecodeWarps * kMxfp4Bf16DecodeDepth * l.slot_bytes);
      EXPECT_LE(2 * (l.total + 1024), 228 * 1024);
      EXPECT_LE(l.total, 227 * 1024);
      if (gated) EXPECT_LE(Mxfp4Bf16DecodeStagedFloats(rows) * 4, 2 * l.x_buffer);
    }
    std::vector<int> seen(w_rows * kMxfp4Bf16DecodeStageK / 2, 0);
    for (int u = 0; u < 4 * w_rows; ++u) {
      const int at = Mxfp4Bf16DecodeUnitOffset(u);
      ASSERT_EQ(at % 16, 0);
      ASSERT_GE(at, 0);
      ASSERT_LE(at + 16, Mxfp4Bf16DecodeLayoutOf(8, gated).slot_scales);
      EXPECT_EQ(at / 64, Mxfp4Bf16DecodeUnitRow(u)) << "a row's 64 code bytes at 64 row";
      for (int i = 0; i < 16; ++i) ++seen[at + i];
    }
    for (int n : seen) EXPECT_EQ(n, 1);
  }
  EXPECT_EQ(kMxfp4Bf16DecodeStageK, 128) << "k is a multiple of 128; four scale bytes a row";
  EXPECT_EQ(kMxfp4Bf16DecodeStagedStride, 2 * 16 * kMxfp4Bf16DecodeWarps + 4);
}

// The decode form's X fragments (ldmatrix emulated from the PTX ISA): in an
// X buffer of padded rows holding value (row, k), the ldmatrix.x4 of n tile
// ni at K k0 gives lane (g, t) X row 8 ni + g at K k0 + 8 i + 2t, + 1 in
// register i (the mma B fragments of K steps k0 / 16 and k0 / 16 + 1), and
// the 8 addresses of each of its phases fall in 8 different bank quads.
TEST(Mxfp4Bf16GroupedGemmParamsTest, DecodeXFragmentsAreTheMmaBOperandsWithoutConflicts) {
  for (const bool gated : {false, true}) {
    const int chunk = Mxfp4Bf16DecodeChunkK(gated), pitch = Mxfp4Bf16DecodeXPitch(gated);
    for (int rows : {8, 16}) {
      const Mxfp4Bf16DecodeLayout l = Mxfp4Bf16DecodeLayoutOf(rows, gated);
      std::vector<uint8_t> smem(l.x_buffer, 0);
      // Element (row, k) holds the 16-bit tag row * 2048 + k (k < 1,024).
      for (int r = 0; r < rows; ++r) {
        for (int k = 0; k < chunk; ++k) {
          const uint16_t tag = static_cast<uint16_t>(r * 2048 + k);
          std::memcpy(&smem[r * pitch + 2 * k], &tag, 2);
        }
      }
      for (int ni = 0; ni < rows / 8; ++ni) {
        for (int k0 = 0; k0 < chunk; k0 += 32) {
          std::array<int, 32> address{};
          for (int lane = 0; lane < 32; ++lane) {
            address[lane] = Mxfp4Bf16DecodeXOffset(lane, ni, k0, gated);
            ASSERT_EQ(address[lane] % 16, 0);
            ASSERT_LE(address[lane] + 16, l.x_buffer);
          }
          for (int matrix = 0; matrix < 4; ++matrix) {  // one phase a matrix
            std::vector<int> quads;
            for (int r = 0; r < 8; ++r) quads.push_back((address[8 * matrix + r] % 128) / 16);
            std::sort(quads.begin(), quads.end());
            EXPECT_EQ(std::unique(quads.begin(), quads.end()), quads.end())
                << "a bank conflict, gated " << gated << " rows " << rows << " k " << k0
                << " matrix " << matrix;
          }
          for (int lane = 0; lane < 32; ++lane) {
            const auto regs = EmulatedLdMatrix(smem, address, lane, 4);
            const int g = lane / 4, t = lane % 4;
            for (int i = 0; i < 4; ++i) {
              for (int e = 0; e < 2; ++e) {
                const int want = (8 * ni + g) * 2048 + k0 + 8 * i + 2 * t + e;
                ASSERT_EQ(static_cast<int>((regs[i] >> (16 * e)) & 0xFFFFu), want)
                    << "gated " << gated << " rows " << rows << " ni " << ni << " k " << k0
                    << " lane " << lane << " register " << i;
              }
            }
          }
        }
      }
    }
  }
}

// The decode form's A fragments of a stage of 128 of K (the register
// form's gather and register map, block b at registers 16 (b / 2) ..): the
// two nibbles of register 4 s + r are the codes of the K indices mma's A
// layout wants for K step s (row r % 2, K 16 s + 8 (r / 2) + 2c, + 1), and
// the 32 registers x 4 lanes x 2 rows cover every code of the stage once.
TEST(Mxfp4Bf16GroupedGemmParamsTest, DecodeFragmentsHoldTheMmaKPairsOfAStage) {
  const auto prmt = [](uint32_t a, uint32_t b, uint32_t c) { return EmulatedPrmt(a, b, c); };
  std::mt19937 rng(147);
  constexpr int kWords =
      kMxfp4Bf16DecodeStageK / 8;  // a row's stage: nibble i of word w is K 8w + i
  for (int trial = 0; trial < 20; ++trial) {
    uint32_t words[2][kWords];
    for (auto& row : words) {
      for (uint32_t& w : row) w = rng();
    }
    const auto code = [&](int q, int k) { return (words[q][k / 8] >> (4 * (k % 8))) & 0xFu; };
    std::vector<int> seen(2 * kMxfp4Bf16DecodeStageK, 0);
    for (uint32_t c = 0; c < 4; ++c) {
      for (int q = 0; q < 2; ++q) {
        for (int b = 0; b < kMxfp4Bf16DecodeStageK / 32; ++b) {
          const uint32_t v = Mxfp4Bf16GatherQuadByte(&words[q][4 * b], c, prmt);
          for (int j = 0; j < 4; ++j) {
            const int reg = 16 * (b >> 1) + Mxfp4Bf16FragmentRegister(b & 1, j, q);
            const int s = reg / 4, r = reg % 4;
            ASSERT_EQ(r % 2, q);
            const int k = 16 * s + 8 * (r / 2) + 2 * static_cast<int>(c);
            for (int e = 0; e < 2; ++e) {
              ASSERT_EQ((v >> (4 * (2 * j + e))) & 0xFu, code(q, k + e));
              ++seen[q * kMxfp4Bf16DecodeStageK + k + e];
            }
          }
        }
      }
    }
    for (int n : seen) ASSERT_EQ(n, 1);
  }
}

// The decode form's one scale test a stage and its bf16x2 scale (prmt
// emulated): for every byte value in every position of either word (the
// other bytes random quantizer scales), Mxfp4ScaleWordsMultiplyInBf16 is
// true exactly when every byte is a scale Mxfp4ScaleMultipliesInBf16
// takes, and Mxfp4ScaleBf16x2 is (byte << 7) in both halves.
TEST(Mxfp4Bf16GroupedGemmParamsTest, DecodeScaleTestAndScalePairAreTheBytewiseOnes) {
  const auto prmt = [](uint32_t a, uint32_t b, uint32_t c) { return EmulatedPrmt(a, b, c); };
  std::mt19937 rng(47);
  const auto plain_word = [&] {
    uint32_t w = 0;
    for (int i = 0; i < 4; ++i) w |= (2 + rng() % 253) << (8 * i);
    return w;
  };
  const auto all_plain = [](uint32_t w) {
    for (int i = 0; i < 4; ++i) {
      if (!Mxfp4ScaleMultipliesInBf16((w >> (8 * i)) & 0xFFu)) return false;
    }
    return true;
  };
  for (int trial = 0; trial < 20; ++trial) {
    for (int which = 0; which < 2; ++which) {
      for (int pos = 0; pos < 4; ++pos) {
        for (uint32_t v = 0; v < 256; ++v) {
          uint32_t w[2] = {plain_word(), plain_word()};
          w[which] = (w[which] & ~(0xFFu << (8 * pos))) | (v << (8 * pos));
          ASSERT_EQ(Mxfp4ScaleWordsMultiplyInBf16(w[0], w[1]), all_plain(w[0]) && all_plain(w[1]))
              << std::hex << w[0] << " " << w[1];
          ASSERT_EQ(Mxfp4ScaleBf16x2(w[which], pos, prmt), (v << 7) * 0x00010001u)
              << std::hex << w[which] << " byte " << pos;
        }
      }
    }
  }
  // Two rare bytes at once, in both words.
  EXPECT_FALSE(Mxfp4ScaleWordsMultiplyInBf16(0x01FF7F7Fu, 0x7F7F7F00u));
  EXPECT_TRUE(Mxfp4ScaleWordsMultiplyInBf16(0x02FE7F80u, 0xFEFE0202u));
}

}  // namespace
}  // namespace weir::kernels::cuda
