// kernels/cuda/moe/mxfp4_fp8_tiles_test.cc — Mxfp4ToFp8Tiles on the GPU
// against its CPU specification (kernels/cpu/weight_quant.h), bit for bit.

#include "kernels/cuda/moe/mxfp4_fp8_tiles.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/weight_quant.h"
#include "kernels/cuda/moe/test_util.h"

namespace weir::kernels::cuda {
namespace {

using moe_test::DeviceBuffer;

struct Expert {
  std::vector<uint8_t> packed, scales;
};

// Random codes; row scales spread over `spread` binades from 100, with a NaN
// scale, rows 9 binades apart and rows hundreds apart in some tiles.
Expert MakeExpert(int64_t n, int64_t k, int spread, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255), scale(100, 100 + spread);
  Expert e{std::vector<uint8_t>(n * k / 2), std::vector<uint8_t>(n * k / 32)};
  for (uint8_t& b : e.packed) b = static_cast<uint8_t>(byte(rng));
  for (uint8_t& s : e.scales) s = static_cast<uint8_t>(scale(rng));
  const int64_t blocks = k / 32;
  if (n > 40 && blocks > 2) {
    e.scales[40 * blocks + 1] = 0xFF;  // tile (1, 1): NaN
    e.scales[3 * blocks + 2] = 0;      // tile (0, 2): a row ~100 binades down, on zeros only
    for (int64_t c = 64; c < 96; c += 2) e.packed[(3 * k + c) / 2] = 0;
  }
  return e;
}

TEST(Mxfp4ToFp8TilesTest, EqualsTheCpuSpecificationBitForBit) {
  for (const auto& [n, k, spread] : {std::tuple<int64_t, int64_t, int>{70, 96, 0},
                                     {70, 96, 8},
                                     {70, 96, 12},
                                     {2304, 5120, 4},
                                     {33, 160, 300}}) {
    constexpr int kExperts = 3;
    const int64_t blocks = k / 32, tile_rows = (n + 31) / 32;
    std::vector<Expert> experts;
    for (int e = 0; e < kExperts; ++e) experts.push_back(MakeExpert(n, k, spread, 11 + e));
    std::deque<DeviceBuffer<uint8_t>> dw, ds;
    std::vector<const uint8_t*> pw, ps;
    for (const Expert& e : experts) {
      dw.emplace_back(e.packed);
      ds.emplace_back(e.scales);
      ASSERT_TRUE(dw.back().ok() && ds.back().ok());
      pw.push_back(dw.back().get());
      ps.push_back(ds.back().get());
    }
    pw.push_back(nullptr);  // a missing expert: every tile inexact, nothing written
    ps.push_back(ds[0].get());
    DeviceBuffer<const uint8_t*> w_ptrs(pw), s_ptrs(ps);
    DeviceBuffer<uint8_t> codes((kExperts + 1) * n * k), tiles((kExperts + 1) * tile_rows * blocks);
    DeviceBuffer<int32_t> inexact(kExperts + 1);
    ASSERT_TRUE(w_ptrs.ok() && s_ptrs.ok() && codes.ok() && tiles.ok() && inexact.ok());
    codes.Poison(0xAB);
    inexact.Poison(0x7F);
    ASSERT_TRUE(Mxfp4ToFp8Tiles({.w = w_ptrs.get(),
                                 .w_scales = s_ptrs.get(),
                                 .codes = codes.get(),
                                 .tile_scales = tiles.get(),
                                 .inexact = inexact.get(),
                                 .n = n,
                                 .k = k,
                                 .experts = kExperts + 1},
                                nullptr)
                    .ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint8_t> got_codes = codes.Download(), got_tiles = tiles.Download();
    const std::vector<int32_t> got_inexact = inexact.Download();
    for (int e = 0; e < kExperts; ++e) {
      std::vector<uint8_t> want_codes(n * k), want_tiles(tile_rows * blocks),
          exact(tile_rows * blocks);
      absl::StatusOr<int64_t> want_inexact = cpu::Mxfp4ToFp8Tiles(
          experts[e].packed, experts[e].scales, n, k, want_codes, want_tiles, exact);
      ASSERT_TRUE(want_inexact.ok()) << want_inexact.status();
      EXPECT_EQ(got_inexact[e], *want_inexact)
          << "expert " << e << " n " << n << " spread " << spread;
      int64_t code_mismatch = 0, tile_mismatch = 0;
      for (int64_t i = 0; i < n * k; ++i)
        code_mismatch += got_codes[e * n * k + i] != want_codes[i];
      for (int64_t i = 0; i < tile_rows * blocks; ++i) {
        tile_mismatch += got_tiles[e * tile_rows * blocks + i] != want_tiles[i];
      }
      EXPECT_EQ(code_mismatch, 0) << "expert " << e << " n " << n << " spread " << spread;
      EXPECT_EQ(tile_mismatch, 0) << "expert " << e << " n " << n << " spread " << spread;
      std::printf("n %lld k %lld spread %d expert %d: %lld of %lld tiles inexact\n",
                  static_cast<long long>(n), static_cast<long long>(k), spread, e,
                  static_cast<long long>(*want_inexact),
                  static_cast<long long>(tile_rows * blocks));
    }
    EXPECT_EQ(got_inexact[kExperts], tile_rows * blocks) << "the missing expert";
    // Several tile rows a CTA (the tables built once for them), and the
    // row-major form with one or several: the same codes, scales and counts,
    // the missing expert's tiles each counted.
    for (const auto& [rows_per_cta, coalesced] :
         {std::pair<int, bool>{2, false}, {8, false}, {1, true}, {2, true}, {3, true}}) {
      DeviceBuffer<uint8_t> walked((kExperts + 1) * n * k),
          walked_tiles((kExperts + 1) * tile_rows * blocks);
      DeviceBuffer<int32_t> walked_inexact(kExperts + 1);
      walked.Poison(0xAB);
      ASSERT_TRUE(Mxfp4ToFp8Tiles({.w = w_ptrs.get(),
                                   .w_scales = s_ptrs.get(),
                                   .codes = walked.get(),
                                   .tile_scales = walked_tiles.get(),
                                   .inexact = walked_inexact.get(),
                                   .n = n,
                                   .k = k,
                                   .experts = kExperts + 1,
                                   .tile_rows_per_cta = rows_per_cta,
                                   .coalesced = coalesced},
                                  nullptr)
                      .ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<uint8_t> w_codes = walked.Download(), w_tiles = walked_tiles.Download();
      EXPECT_EQ(std::memcmp(w_codes.data(), got_codes.data(), kExperts * n * k), 0)
          << rows_per_cta << " tile rows a CTA, coalesced " << coalesced << ", n " << n;
      EXPECT_EQ(std::memcmp(w_tiles.data(), got_tiles.data(), kExperts * tile_rows * blocks), 0)
          << rows_per_cta << " tile rows a CTA, coalesced " << coalesced << ", n " << n;
      EXPECT_EQ(walked_inexact.Download(), got_inexact)
          << rows_per_cta << " tile rows a CTA, coalesced " << coalesced;
      for (int64_t i = 0; i < n * k; ++i) {
        ASSERT_EQ(w_codes[kExperts * n * k + i], 0xAB)
            << "the missing expert's codes written, coalesced " << coalesced;
      }
    }
    // The same experts into a buffer with a gap after each (as w1 then w3 of
    // one expert would be): each expert's codes and scales land at its stride.
    for (const bool coalesced : {false, true}) {
      const int64_t cs = 2 * n * k, ts = 2 * tile_rows * blocks;
      DeviceBuffer<uint8_t> strided((kExperts + 1) * cs), strided_tiles((kExperts + 1) * ts);
      ASSERT_TRUE(strided.ok() && strided_tiles.ok());
      strided.Poison(0xCD);
      ASSERT_TRUE(Mxfp4ToFp8Tiles({.w = w_ptrs.get(),
                                   .w_scales = s_ptrs.get(),
                                   .codes = strided.get(),
                                   .tile_scales = strided_tiles.get(),
                                   .inexact = inexact.get(),
                                   .n = n,
                                   .k = k,
                                   .experts = kExperts + 1,
                                   .codes_expert_stride = cs,
                                   .tile_scales_expert_stride = ts,
                                   .coalesced = coalesced},
                                  nullptr)
                      .ok());
      const std::vector<uint8_t> s_codes = strided.Download(), s_tiles = strided_tiles.Download();
      for (int e = 0; e < kExperts; ++e) {
        EXPECT_EQ(std::memcmp(s_codes.data() + e * cs, got_codes.data() + e * n * k, n * k), 0)
            << "expert " << e << " coalesced " << coalesced;
        EXPECT_EQ(std::memcmp(s_tiles.data() + e * ts, got_tiles.data() + e * tile_rows * blocks,
                              tile_rows * blocks),
                  0)
            << "expert " << e << " coalesced " << coalesced;
        EXPECT_EQ(s_codes[e * cs + n * k], 0xCD) << "the gap after expert " << e;
      }
    }
    for (int64_t i = 0; i < n * k; ++i) {
      ASSERT_EQ(got_codes[kExperts * n * k + i], 0xAB) << "the missing expert's codes written";
    }
  }
}

TEST(Mxfp4ToFp8TilesTest, RefusesBadArguments) {
  DeviceBuffer<uint8_t> buf(4096);
  DeviceBuffer<const uint8_t*> ptrs(std::vector<const uint8_t*>{nullptr});
  DeviceBuffer<int32_t> count(1);
  ASSERT_TRUE(buf.ok() && ptrs.ok() && count.ok());
  const Mxfp4Fp8TilesParams ok{.w = ptrs.get(),
                               .w_scales = ptrs.get(),
                               .codes = buf.get(),
                               .tile_scales = buf.get(),
                               .inexact = count.get(),
                               .n = 32,
                               .k = 64,
                               .experts = 1};
  EXPECT_TRUE(Mxfp4ToFp8Tiles(ok, nullptr).ok());
  Mxfp4Fp8TilesParams no_rows = ok;
  no_rows.tile_rows_per_cta = 0;
  EXPECT_EQ(Mxfp4ToFp8Tiles(no_rows, nullptr).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (auto bad :
       {+[](Mxfp4Fp8TilesParams& p) { p.k = 48; }, +[](Mxfp4Fp8TilesParams& p) { p.n = 0; },
        +[](Mxfp4Fp8TilesParams& p) { p.experts = 0; },
        +[](Mxfp4Fp8TilesParams& p) { p.codes = nullptr; },
        +[](Mxfp4Fp8TilesParams& p) { p.inexact = nullptr; },
        +[](Mxfp4Fp8TilesParams& p) { p.codes += 1; },
        +[](Mxfp4Fp8TilesParams& p) { p.codes_expert_stride = 32 * 64 + 8; },
        +[](Mxfp4Fp8TilesParams& p) { p.codes_expert_stride = 16; },
        +[](Mxfp4Fp8TilesParams& p) { p.tile_scales_expert_stride = 1; }}) {
    Mxfp4Fp8TilesParams p = ok;
    bad(p);
    EXPECT_EQ(Mxfp4ToFp8Tiles(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace weir::kernels::cuda
