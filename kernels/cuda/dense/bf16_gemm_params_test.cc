// CPU test of Bf16Gemm's argument check and shared-memory size.

#include "kernels/cuda/dense/bf16_gemm_params.h"

#include <cstdint>
#include <initializer_list>

#include "gtest/gtest.h"

namespace weir::kernels::cuda::dense {
namespace {

// Fake device addresses: only their alignment is looked at.
const uint16_t* At(uintptr_t address) { return reinterpret_cast<const uint16_t*>(address); }

Bf16GemmParams Good() {
  return {.x = At(0x1000), .w = At(0x2000), .y = reinterpret_cast<void*>(0x3000), .m = 3,
          .n = 40, .k = 24};
}

TEST(Bf16GemmParamsTest, AcceptsGoodArguments) {
  EXPECT_TRUE(CheckBf16GemmParams(Good()).ok());
  Bf16GemmParams p = Good();
  p.groups = 8;
  p.x_group_stride = 3 * 24 + 8;
  EXPECT_TRUE(CheckBf16GemmParams(p).ok());
  p.output = Fp8GemmOutput::kBf16;
  p.y = reinterpret_cast<void*>(0x3002);
  EXPECT_TRUE(CheckBf16GemmParams(p).ok());
}

// y_row_stride puts the groups side by side in each row (u's [m, groups, n])
// or stacks them with padded rows; any layout where two groups would share
// an element is refused.
TEST(Bf16GemmParamsTest, RowStrideLayoutsKeepTheGroupsApart) {
  Bf16GemmParams p = Good();  // m 3, n 40
  p.groups = 4;
  p.y_group_stride = 40;
  p.y_row_stride = 160;  // [3, 4, 40]
  EXPECT_TRUE(Bf16GemmGroupsApart(p));
  EXPECT_TRUE(CheckBf16GemmParams(p).ok());
  p.y_row_stride = 159;  // the last group runs into the next row
  EXPECT_FALSE(Bf16GemmGroupsApart(p));
  EXPECT_EQ(CheckBf16GemmParams(p).code(), absl::StatusCode::kInvalidArgument);
  p.y_group_stride = 39;  // neighbours overlap within a row
  p.y_row_stride = 400;
  EXPECT_FALSE(Bf16GemmGroupsApart(p));
  p.y_group_stride = 0;  // packed groups of padded rows: 3 x 48 apart
  p.y_row_stride = 48;
  EXPECT_TRUE(Bf16GemmGroupsApart(p));
  EXPECT_TRUE(CheckBf16GemmParams(p).ok());
  p.y_group_stride = 2 * 48 + 40;  // stacked, the pad of the last row dropped
  EXPECT_TRUE(Bf16GemmGroupsApart(p));
  p.y_group_stride = 2 * 48 + 39;
  EXPECT_FALSE(Bf16GemmGroupsApart(p));
  p.groups = 1;  // one group never meets another
  EXPECT_TRUE(Bf16GemmGroupsApart(p));
}

// y's FP8 form comes from a split's second kernel over 32-aligned rows and
// groups; elsewhere asking for it is refused.
TEST(Bf16GemmParamsTest, Fp8FormOnlyFromTheSplitReduce) {
  uint8_t codes[64], scales[8];
  Bf16GemmParams p = Good();
  p.n = 64;
  p.k = 1024;
  p.groups = 4;
  p.y_group_stride = 64;
  p.y_row_stride = 256;
  p.k_splits = 2;
  p.split_scratch = reinterpret_cast<float*>(0x4000);
  p.y_codes = codes;
  p.y_scales = scales;
  EXPECT_TRUE(Bf16GemmMakesFp8(p));
  EXPECT_TRUE(CheckBf16GemmParams(p).ok());
  auto refused = [&](auto edit) {
    Bf16GemmParams q = p;
    edit(q);
    return !Bf16GemmMakesFp8(q) &&
           CheckBf16GemmParams(q).code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(refused([](Bf16GemmParams& q) { q.k_splits = 1; }));  // no second kernel
  EXPECT_TRUE(refused([](Bf16GemmParams& q) { q.output = Fp8GemmOutput::kBf16; }));
  EXPECT_TRUE(refused([](Bf16GemmParams& q) { q.y_row_stride = 264; }));  // not 32-aligned
  EXPECT_TRUE(refused([](Bf16GemmParams& q) { q.m = 300; }));  // the ws tile sums in the CTA
  Bf16GemmParams half = p;
  half.y_scales = nullptr;  // codes without scales
  EXPECT_EQ(CheckBf16GemmParams(half).code(), absl::StatusCode::kInvalidArgument);
}

// row_role (write only the rows of one role) goes with every tile, split and
// output, but not with y's FP8 form, and must be 4-byte aligned.
TEST(Bf16GemmParamsTest, RowRoleIsCheckedAndRefusedWithTheFp8Form) {
  const int32_t* roles = reinterpret_cast<const int32_t*>(0x5000);
  Bf16GemmParams p = Good();
  p.row_role = roles;
  p.role = 1;
  EXPECT_TRUE(CheckBf16GemmParams(p).ok());
  p.m = 4096;  // the warp-specialized tile
  EXPECT_TRUE(CheckBf16GemmParams(p).ok());
  p.m = 3;
  p.row_role = reinterpret_cast<const int32_t*>(0x5002);
  EXPECT_EQ(CheckBf16GemmParams(p).code(), absl::StatusCode::kInvalidArgument);
  // A call that makes y's FP8 form (as in Fp8FormOnlyFromTheSplitReduce).
  uint8_t codes[64], scales[8];
  Bf16GemmParams q = Good();
  q.n = 64;
  q.k = 1024;
  q.k_splits = 2;
  q.split_scratch = reinterpret_cast<float*>(0x4000);
  q.row_role = roles;
  EXPECT_TRUE(CheckBf16GemmParams(q).ok());
  q.y_codes = codes;
  q.y_scales = scales;
  ASSERT_TRUE(Bf16GemmMakesFp8(q));
  const absl::Status s = CheckBf16GemmParams(q);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row_role"), absl::string_view::npos) << s;
  q.row_role = nullptr;
  EXPECT_TRUE(CheckBf16GemmParams(q).ok());
}

// kAuto runs the warp-specialized tile where the mma path would take its 128
// x 128 tile (above 256 rows); explicitly it takes any accepted shape.
TEST(Bf16GemmParamsTest, WarpSpecializedTileAboveTheDecodeSizes) {
  Bf16GemmParams p = Good();
  p.m = 4096;
  EXPECT_EQ(ResolveBf16GemmTile(p), Fp8GemmTile::kN128M128Ws);
  EXPECT_TRUE(CheckBf16GemmParams(p).ok());
  p.m = 256;
  EXPECT_NE(ResolveBf16GemmTile(p), Fp8GemmTile::kN128M128Ws);
  p.tile = Fp8GemmTile::kN128M128Ws;
  EXPECT_TRUE(CheckBf16GemmParams(p).ok());
  p.tile = Fp8GemmTile::kN128M128Wg;  // Fp8BlockGemm's wgmma-only tile stays refused
  EXPECT_EQ(CheckBf16GemmParams(p).code(), absl::StatusCode::kInvalidArgument);
}

TEST(Bf16GemmParamsTest, RefusesEachBadArgument) {
  auto refused = [](auto edit) {
    Bf16GemmParams p = Good();
    edit(p);
    return CheckBf16GemmParams(p).code() == absl::StatusCode::kInvalidArgument;
  };
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.x = nullptr; }));
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.y = nullptr; }));
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.m = 0; }));
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.n = -1; }));
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.k = 20; }));  // not a multiple of 8
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.groups = 0; }));
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.groups = 65536; }));
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.x = At(0x1008); }));  // 8-byte aligned only
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.y = reinterpret_cast<void*>(0x3002); }));
  EXPECT_TRUE(refused([](Bf16GemmParams& p) {
    p.groups = 2;
    p.x_group_stride = 3 * 24 - 8;  // overlaps the group before
  }));
  EXPECT_TRUE(refused([](Bf16GemmParams& p) {
    p.groups = 2;
    p.w_group_stride = 40 * 24 + 4;  // rows of the next group lose 16-byte alignment
  }));
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.y_group_stride = -1; }));
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.y_row_stride = 39; }));  // below n
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.y_row_stride = -40; }));
  EXPECT_TRUE(refused([](Bf16GemmParams& p) {
    p.groups = 2;
    p.y_group_stride = 3 * 40 - 1;  // packed rows: group 1 starts inside group 0's last row
  }));
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.m = int64_t{65536} * 128; }));  // grid
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.cutlass_tile_n = 64; }));
  EXPECT_TRUE(refused([](Bf16GemmParams& p) { p.cutlass_tile_n = -2; }));
  for (const int tile_n : {-1, 0, 128, 256}) {
    Bf16GemmParams p = Good();
    p.cutlass_tile_n = tile_n;
    EXPECT_TRUE(CheckBf16GemmParams(p).ok()) << tile_n;
  }
}

// CUTLASS's tile over W rows for cutlass_tile_n -1: 128 where the 128 x 256
// tiles leave a wave's SMs idle (V4.1's small-n products at a 4,096-row
// chunk, most products at shorter chunks), 256 where they fill the waves.
TEST(Bf16GemmParamsTest, CutlassTileFollowsTheWaves) {
  constexpr int kSms = 132;
  EXPECT_EQ(Bf16GemmCutlassTileN(4096, 512, 1, kSms), 128);    // wkv: 64 -> 128 tiles, a wave
  EXPECT_EQ(Bf16GemmCutlassTileN(4096, 1280, 1, kSms), 128);   // wq_a: 2 waves -> 3
  EXPECT_EQ(Bf16GemmCutlassTileN(4096, 384, 1, kSms), 128);    // the gate
  EXPECT_EQ(Bf16GemmCutlassTileN(4096, 5120, 1, kSms), 256);   // wo_b, shared w2: 5 waves
  EXPECT_EQ(Bf16GemmCutlassTileN(4096, 32768, 1, kSms), 256);  // wq_b: 32 waves
  EXPECT_EQ(Bf16GemmCutlassTileN(4096, 4608, 1, kSms), 256);   // shared w1 + w3: 5 waves or 9
  EXPECT_EQ(Bf16GemmCutlassTileN(1024, 5120, 1, kSms), 128);   // a 1,024-row chunk's wo_b
  EXPECT_EQ(Bf16GemmCutlassTileN(4096, 1024, 8, kSms), 256);   // grouped wo_a: 8 groups
  EXPECT_EQ(Bf16GemmCutlassTileN(0, 512, 1, kSms), 256);
  EXPECT_EQ(Bf16GemmCutlassTileN(4096, 512, 1, 0), 256);
}

// The weight as FP8 codes + tile scales instead of bf16 (w_codes): exactly
// one of w and w_codes, scales with it, k a multiple of 32, 16-byte codes and
// code strides, scale strides of at least a group; never the
// warp-specialized tile (kAuto keeps the mma 128 x 128 tile); the code ring
// adds block_n x 64 bytes a stage.
TEST(Bf16GemmParamsTest, Fp8WeightsAreCheckedAndStayOnTheMmaTiles) {
  const uint8_t* codes = reinterpret_cast<const uint8_t*>(0x4000);
  Bf16GemmParams p = Good();
  p.k = 64;
  p.w = nullptr;
  p.w_codes = codes;
  p.w_scales = codes + 0x1000;
  EXPECT_TRUE(CheckBf16GemmParams(p).ok());
  p.groups = 2;
  p.w_group_stride = 40 * 64 + 16;
  p.w_scales_group_stride = Bf16GemmWeightScaleBytes(40, 64);  // 2 x 2
  EXPECT_EQ(p.w_scales_group_stride, 4);
  EXPECT_TRUE(CheckBf16GemmParams(p).ok());
  for (auto bad : std::initializer_list<void (*)(Bf16GemmParams&)>{
           [](Bf16GemmParams& q) { q.w = At(0x2000); },             // both forms
           [](Bf16GemmParams& q) { q.w_scales = nullptr; },         // no scales
           [](Bf16GemmParams& q) { q.k = 48; },                     // k % 32
           [](Bf16GemmParams& q) { q.w_codes += 8; },               // alignment
           [](Bf16GemmParams& q) { q.w_group_stride += 8; },        // code stride % 16
           [](Bf16GemmParams& q) { q.w_scales_group_stride = 3; },  // below a group's scales
           [](Bf16GemmParams& q) { q.tile = Fp8GemmTile::kN128M128Ws; }}) {
    Bf16GemmParams q = p;
    bad(q);
    EXPECT_EQ(CheckBf16GemmParams(q).code(), absl::StatusCode::kInvalidArgument);
  }
  p.m = 4096;
  p.n = 4096;
  EXPECT_EQ(ResolveBf16GemmTile(p), Fp8GemmTile::kN128M128);
  p.w_codes = nullptr;
  p.w = At(0x2000);
  EXPECT_EQ(ResolveBf16GemmTile(p), Fp8GemmTile::kN128M128Ws);
  const Fp8GemmTileShape shape = ShapeOfFp8GemmTile(Fp8GemmTile::kN64M8);
  EXPECT_EQ(Bf16GemmSharedBytes(shape, true),
            int64_t{shape.block_n} * 128 +
                (shape.block_m * 128 + shape.block_n * 64) * int64_t{shape.stages});
}

TEST(Bf16GemmParamsTest, SharedBytesAreTheTilesStages) {
  const Fp8GemmTileShape s = ShapeOfFp8GemmTile(Fp8GemmTile::kN32M8);
  EXPECT_EQ(Bf16GemmSharedBytes(s), (32 + 8) * 128 * s.stages);
  // Every tile fits the H200's 227 KB per CTA.
  for (Fp8GemmTile t : {Fp8GemmTile::kN128M128, Fp8GemmTile::kN128M64, Fp8GemmTile::kN64M64}) {
    EXPECT_LE(Bf16GemmSharedBytes(ShapeOfFp8GemmTile(t)), 227 * 1024);
  }
}

TEST(Bf16GemmParamsTest, SplitsComeFromTheWeightsShapeAndAreChecked) {
  // V4.1's grouped wo_a: 8 x 32 CTAs of 32 rows, 64 stages of 64: 4 splits.
  EXPECT_EQ(ChooseBf16GemmSplits(1024, 4096, 8), 4);
  // The head (129,280 rows) fills the GPU alone; a short K keeps 4 stages a split.
  EXPECT_EQ(ChooseBf16GemmSplits(129280, 5120, 1), 1);
  EXPECT_EQ(ChooseBf16GemmSplits(64, 512, 1), 2);
  EXPECT_EQ(ChooseBf16GemmSplits(64, 128, 1), 1);
  EXPECT_EQ(ChooseBf16GemmSplits(32, 1 << 20, 1), kFp8GemmMaxSplits);
  Bf16GemmParams p = Good();  // k 24: one stage
  p.k_splits = 2;
  p.split_scratch = reinterpret_cast<float*>(0x4000);
  EXPECT_EQ(CheckBf16GemmParams(p).code(), absl::StatusCode::kInvalidArgument);  // > stages
  p.k = 256;                                                                     // 4 stages
  p.k_splits = 4;
  EXPECT_TRUE(CheckBf16GemmParams(p).ok());
  EXPECT_EQ(Bf16GemmSplitScratchFloats(p), 4 * 3 * 40);
  p.split_scratch = nullptr;
  EXPECT_EQ(CheckBf16GemmParams(p).code(), absl::StatusCode::kInvalidArgument);
  p.split_scratch = reinterpret_cast<float*>(0x4000);
  p.k_splits = 0;
  EXPECT_EQ(CheckBf16GemmParams(p).code(), absl::StatusCode::kInvalidArgument);
  p.k_splits = 4;
  p.groups = 20000;  // x 4 splits passes the grid's z
  EXPECT_EQ(CheckBf16GemmParams(p).code(), absl::StatusCode::kInvalidArgument);
  p.groups = 1;
  p.k_splits = 1;
  EXPECT_EQ(Bf16GemmSplitScratchFloats(p), 0);
}

// The 256-row tile where it measured faster: V4.1's wq_b, wo_b and an 8k
// square at 4,096 rows; not shared.w13, shared.w2, wq_a, nor under 2,048 rows.
TEST(Bf16GemmParamsTest, The256RowTilePaysForLargeWeightsAndChunks) {
  EXPECT_TRUE(Bf16GemmWsM256Pays(4096, 32768, 1280));
  EXPECT_TRUE(Bf16GemmWsM256Pays(4096, 5120, 8192));
  EXPECT_TRUE(Bf16GemmWsM256Pays(4096, 8192, 8192));
  EXPECT_TRUE(Bf16GemmWsM256Pays(2048, 5120, 8192));
  EXPECT_FALSE(Bf16GemmWsM256Pays(4096, 4608, 5120));
  EXPECT_FALSE(Bf16GemmWsM256Pays(4096, 5120, 2304));
  EXPECT_FALSE(Bf16GemmWsM256Pays(4096, 1280, 5120));
  EXPECT_FALSE(Bf16GemmWsM256Pays(2047, 5120, 8192));
}

// What Bf16GemmCutlass takes: bf16 w, no split, row_role or y_codes, any
// output, 16-byte rows and group strides.
TEST(Bf16GemmParamsTest, TheCutlassProductsCalls) {
  const auto* x = reinterpret_cast<const uint16_t*>(uintptr_t{4096});
  const Bf16GemmParams ok{
      .x = x, .w = x, .y = reinterpret_cast<void*>(uintptr_t{8192}), .m = 300, .n = 320, .k = 768};
  EXPECT_TRUE(Bf16GemmCutlassTakes(ok));
  Bf16GemmParams p = ok;
  p.output = Fp8GemmOutput::kBf16;
  EXPECT_TRUE(Bf16GemmCutlassTakes(p));
  p.n = 100;  // 200-byte bf16 rows
  EXPECT_FALSE(Bf16GemmCutlassTakes(p));
  p = ok, p.n = 100;  // 400-byte fp32 rows
  EXPECT_TRUE(Bf16GemmCutlassTakes(p));
  p = ok, p.groups = 4, p.y_group_stride = 96, p.y_row_stride = 4 * 96 + 32;
  EXPECT_TRUE(Bf16GemmCutlassTakes(p));
  p.y_row_stride = 4 * 96 + 1;
  EXPECT_FALSE(Bf16GemmCutlassTakes(p));
  p = ok, p.groups = 2, p.x_group_stride = 300 * 768 + 4;  // 8-byte group offsets
  EXPECT_FALSE(Bf16GemmCutlassTakes(p));
  p = ok, p.output = Fp8GemmOutput::kF32RoundedBf16;
  EXPECT_TRUE(Bf16GemmCutlassTakes(p));
  p = ok, p.k_splits = 2;
  EXPECT_FALSE(Bf16GemmCutlassTakes(p));
  p = ok, p.row_role = reinterpret_cast<const int32_t*>(uintptr_t{4096});
  EXPECT_FALSE(Bf16GemmCutlassTakes(p));
  p = ok, p.y_codes = reinterpret_cast<uint8_t*>(uintptr_t{4096});
  EXPECT_FALSE(Bf16GemmCutlassTakes(p));
  p = ok, p.w = nullptr, p.w_codes = reinterpret_cast<const uint8_t*>(uintptr_t{4096});
  EXPECT_FALSE(Bf16GemmCutlassTakes(p));
  p = ok, p.k = 772;
  EXPECT_FALSE(Bf16GemmCutlassTakes(p));
  p = ok, p.y = reinterpret_cast<void*>(uintptr_t{8200});
  EXPECT_FALSE(Bf16GemmCutlassTakes(p));
}

}  // namespace
}  // namespace weir::kernels::cuda::dense
