// CPU test (no GPU needed) of fp8_block_gemm_params.h: argument checks, the
// tile table, and the shared-memory / fragment mapping the kernel relies on,
// emulated from the PTX ISA's definitions of ldmatrix and of the
// mma.m16n8k32 (8-bit types) fragments.

#include "kernels/cuda/dense/fp8_block_gemm_params.h"

#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

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
  const auto invalid = [](const Fp8BlockGemmParams& p) {
    return CheckFp8BlockGemmParams(p).code() == absl::StatusCode::kInvalidArgument;
  };
  Fp8BlockGemmParams p = Valid();
  p.x = nullptr;
  EXPECT_TRUE(invalid(p));
  p = Valid(), p.x_scales = nullptr;
  EXPECT_TRUE(invalid(p));
  p = Valid(), p.w = nullptr;
  EXPECT_TRUE(invalid(p));
  p = Valid(), p.w_scales = nullptr;
  EXPECT_TRUE(invalid(p));
  p = Valid(), p.y = nullptr;
  EXPECT_TRUE(invalid(p));
  p = Valid(), p.m = 0;
  EXPECT_TRUE(invalid(p));
  p = Valid(), p.n = -1;
  EXPECT_TRUE(invalid(p));
  p = Valid(), p.k = 0;
  EXPECT_TRUE(invalid(p));
  p = Valid(), p.k = 48;  // not a multiple of 32
  EXPECT_TRUE(invalid(p));
  p = Valid(), p.x = FakeDevice(264);  // 8-byte aligned only
  EXPECT_TRUE(invalid(p));
  p = Valid(), p.w = FakeDevice(1032);
  EXPECT_TRUE(invalid(p));
  p = Valid(), p.y = reinterpret_cast<void*>(4098);  // fp32 out needs 4
  EXPECT_TRUE(invalid(p));
  p = Valid(), p.tile = Fp8GemmTile::kN32M8, p.m = int64_t{65536} * 8;  // grid y > 65535
  EXPECT_TRUE(invalid(p));
  p.m = int64_t{65535} * 8;
  EXPECT_TRUE(CheckFp8BlockGemmParams(p).ok());
}

TEST(Fp8BlockGemmParamsTest, TileTableIsConsistent) {
  for (Fp8GemmTile tile :
       {Fp8GemmTile::kN16M8, Fp8GemmTile::kN16M16, Fp8GemmTile::kN16M32, Fp8GemmTile::kN16M64,
        Fp8GemmTile::kN32M8, Fp8GemmTile::kN32M16, Fp8GemmTile::kN32M32, Fp8GemmTile::kN32M64,
        Fp8GemmTile::kN64M64, Fp8GemmTile::kN128M64, Fp8GemmTile::kN128M128}) {
    const Fp8GemmTileShape s = ShapeOfFp8GemmTile(tile);
    const int threads = s.warps_n * s.warps_m * 32;
    EXPECT_TRUE(s.block_n % 32 == 0 || s.block_n == 16);
    EXPECT_EQ(s.block_n / s.warps_n % 16, 0);
    EXPECT_EQ(s.block_m / s.warps_m % 8, 0);
    EXPECT_EQ(s.block_n * 8 % threads, 0);  // 16-byte chunks split evenly
    EXPECT_EQ(s.block_m * 8 % threads, 0);
    EXPECT_GE(s.stages, 3);
    EXPECT_LE(Fp8GemmSharedBytes(s), 227 * 1024);  // sm_90 opt-in limit per block
  }
  EXPECT_EQ(ShapeOfFp8GemmTile(Fp8GemmTile::kAuto).block_m, 0);
  // Decode: one CTA row covers all rows up to 64, so W is read once.
  for (int64_t m : {1, 7, 8, 9, 16, 17, 32, 33, 64}) {
    EXPECT_GE(ShapeOfFp8GemmTile(ChooseFp8GemmTile(m, 5120)).block_m, m) << m;
  }
  EXPECT_EQ(ChooseFp8GemmTile(4096, 5120), Fp8GemmTile::kN128M128);
  EXPECT_EQ(
      Fp8GemmSharedBytes({.block_n = 32, .block_m = 8, .warps_n = 2, .warps_m = 1, .stages = 12}),
      12 * (40 * 128 + (1 + 8) * 4));
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

// ---- Emulation of one warp's K block, from the PTX ISA definitions --------

// ldmatrix.m8n8.x{2,4}.b16: lane L supplies the address of row L % 8 of
// matrix L / 8; register q of lane L receives bytes [4 (L % 4), 4 (L % 4) + 4)
// of row L / 4 of matrix q.
std::array<std::array<uint8_t, 4>, 4> LdMatrix(const std::vector<uint8_t>& smem,
                                               const std::array<int, 32>& address, int lane,
                                               int matrices) {
  std::array<std::array<uint8_t, 4>, 4> regs{};
  for (int q = 0; q < matrices; ++q) {
    const int row_address = address[q * 8 + lane / 4];
    for (int b = 0; b < 4; ++b) regs[q][b] = smem[row_address + 4 * (lane % 4) + b];
  }
  return regs;
}

// mma.m16n8k32 with 8-bit A (row) and B (col), PTX ISA "Matrix Fragments for
// mma.m16n8k32": groupID = lane >> 2, threadID_in_group = lane % 4;
// A element a_i (i = 0..15, register i / 4, byte i % 4):
//   row = groupID (+8 for i in 4..7 and 12..15), col = 4 tig + (i & 3) (+16 for i >= 8);
// B element b_i (i = 0..7): row (k) = 4 tig + (i & 3) (+16 for i >= 4), col = groupID;
// C/D element c_i (i = 0..3): row = groupID (+8 for i >= 2), col = 2 tig + (i & 1).
// Elements are plain integers here: the test is about positions.
std::array<std::array<int64_t, 4>, 32> Mma(const std::array<std::array<uint8_t, 16>, 32>& a,
                                           const std::array<std::array<uint8_t, 8>, 32>& b) {
  int64_t A[16][32] = {}, B[32][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 16; ++i) {
      const int row = g + (((i >> 2) & 1) ? 8 : 0), col = 4 * t + (i & 3) + (i >= 8 ? 16 : 0);
      A[row][col] = a[lane][i];
    }
    for (int i = 0; i < 8; ++i) B[4 * t + (i & 3) + (i >= 4 ? 16 : 0)][g] = b[lane][i];
  }
  std::array<std::array<int64_t, 4>, 32> d{};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) {
      const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
      for (int k = 0; k < 32; ++k) d[lane][i] += A[row][k] * B[k][col];
    }
  }
  return d;
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
    std::array<std::array<uint8_t, 16>, 32> a_frag{};
    std::array<std::array<uint8_t, 8>, 32> b_frag[3]{};
    for (int lane = 0; lane < 32; ++lane) {
      const auto a = LdMatrix(w_smem, a_address, lane, 4);
      for (int r = 0; r < 4; ++r) {
        for (int i = 0; i < 4; ++i) a_frag[lane][4 * r + i] = a[r][i];
      }
      const auto b = LdMatrix(x_smem, b_address, lane, 4);  // b0, b1 of tile 0, then tile 1
      const auto b2 = LdMatrix(x_smem, b2_address, lane, 2);
      for (int i = 0; i < 4; ++i) {
        b_frag[0][lane][i] = b[0][i], b_frag[0][lane][4 + i] = b[1][i];
        b_frag[1][lane][i] = b[2][i], b_frag[1][lane][4 + i] = b[3][i];
        b_frag[2][lane][i] = b2[0][i], b_frag[2][lane][4 + i] = b2[1][i];
      }
    }
    for (int tile = 0; tile < 3; ++tile) {
      const auto d = Mma(a_frag, b_frag[tile]);
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

}  // namespace
}  // namespace weir::kernels::cuda::dense
