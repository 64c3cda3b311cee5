#include "kernels/cuda/moe/hc_norm_split.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace weir::kernels::cuda::moe {
namespace {

// Every float4 column of a row belongs to exactly one rank, in rank order,
// each rank's share starting on a whole FP8 quantization group (8 float4s)
// and every share but the last ending on one: what NormalizeRowColumns
// needs to quantize its columns alone.
TEST(HcNormSplitTest, RanksShareTheColumnsInWholeQuantizationGroups) {
  for (int64_t n4 : {1, 2, 7, 8, 9, 64, 255, 256, 257, 1280, 3064}) {
    for (int ranks : {1, 2, 4, 8}) {
      std::vector<int> owner(n4, -1);
      int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const HcNormColumns c = HcNormColumnsOf(n4, ranks, r);
        ASSERT_LE(c.lo, c.hi) << n4 << " " << ranks << " " << r;
        ASSERT_EQ(c.lo, next) << n4 << " " << ranks << " " << r;
        if (c.lo < n4) EXPECT_EQ(c.lo % kHcNormColumnQuantum4, 0);
        if (c.hi < n4) EXPECT_EQ(c.hi % kHcNormColumnQuantum4, 0);
        for (int64_t i = c.lo; i < c.hi; ++i) {
          ASSERT_EQ(owner[i], -1);
          owner[i] = r;
        }
        next = c.hi;
      }
      EXPECT_EQ(next, n4) << n4 << " " << ranks;
    }
  }
  // V4.1's rows (5,120 floats) split evenly: 160 float4s a rank of 8.
  const HcNormColumns last = HcNormColumnsOf(1280, 8, 7);
  EXPECT_EQ(last.lo, 1120);
  EXPECT_EQ(last.hi, 1280);
}

// The automatic cluster size fills about 128 CTAs, then falls back to one
// block a token.
TEST(HcNormSplitTest, AutomaticRanksFollowTheTokenCount) {
  EXPECT_EQ(HcNormClusterRanks(1), 8);
  EXPECT_EQ(HcNormClusterRanks(16), 8);
  EXPECT_EQ(HcNormClusterRanks(17), 4);
  EXPECT_EQ(HcNormClusterRanks(32), 4);
  EXPECT_EQ(HcNormClusterRanks(33), 2);
  EXPECT_EQ(HcNormClusterRanks(64), 2);
  EXPECT_EQ(HcNormClusterRanks(65), 1);
  EXPECT_EQ(HcNormClusterRanks(4096), 1);
  for (int64_t tokens = 1; tokens <= 300; ++tokens) {
    const int r = HcNormClusterRanks(tokens);
    EXPECT_TRUE(r == 1 || tokens * r <= kHcNormTargetCtas) << tokens;
    EXPECT_LE(r, kHcNormMaxRanks);
  }
}

}  // namespace
}  // namespace weir::kernels::cuda::moe
