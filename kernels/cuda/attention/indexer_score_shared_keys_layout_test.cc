#include "kernels/cuda/attention/indexer_score_shared_keys_layout.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace weir::kernels::cuda {
namespace {

using L = IndexerSharedKeysLayout;

// The 16-byte bank group (of 8) a float offset starts in.
int BankGroup(int64_t floats) { return static_cast<int>(floats / 4 % 8); }

// Every head of a query lands on its own row, inside its pass, and the lane
// that reads row HeadRow(h) in the kernel (row pass + 4 j + g for lane group
// g, j-th head) is the lane whose heads are 8 g .. 8 g + 7 of the pass.
TEST(IndexerSharedKeysLayoutTest, HeadRowsArePermutationsOfEachPass) {
  for (int heads : {1, 3, 8, 20, 32, 33, 64, 96}) {
    const L layout(heads, 128);
    EXPECT_EQ(layout.head_rows % L::kHeadPass, 0);
    EXPECT_GE(layout.head_rows, heads);
    EXPECT_LT(layout.head_rows - heads, L::kHeadPass);
    std::set<int> rows;
    for (int h = 0; h < layout.head_rows; ++h) {
      const int row = L::HeadRow(h);
      EXPECT_EQ(row / L::kHeadPass, h / L::kHeadPass) << h;
      rows.insert(row);
      const int pass = h / L::kHeadPass * L::kHeadPass, g = h % L::kHeadPass / L::kLaneHeads,
                j = h % L::kLaneHeads;
      EXPECT_EQ(row, pass + 4 * j + g) << h;
    }
    EXPECT_EQ(static_cast<int>(rows.size()), layout.head_rows);
    EXPECT_EQ(*rows.rbegin(), layout.head_rows - 1);
  }
}

// Lanes: a quad's four lanes are the head groups 0 .. 3, eight quads the key
// groups 0 .. 7; each lane's 8 keys, over a warp, are the 64 keys of the tile
// four times (once per head group), and each lane writes the two of its keys
// with i % 4 == its head group: every key of the tile once.
TEST(IndexerSharedKeysLayoutTest, LanesCoverEveryHeadAndKeyOfATile) {
  std::vector<int> dots(L::kHeadPass * L::kKeys, 0), writes(L::kKeys, 0);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = L::HeadGroup(lane);
    EXPECT_EQ(g, lane % 4);
    EXPECT_EQ(L::KeyGroup(lane), lane / 4);
    for (int i = 0; i < L::kLaneKeys; ++i) {
      const int key = L::LaneKey(lane, i);
      ASSERT_LT(key, L::kKeys);
      for (int j = 0; j < L::kLaneHeads; ++j) ++dots[(g * L::kLaneHeads + j) * L::kKeys + key];
      if (i % 4 == g) ++writes[key];
    }
  }
  for (int d : dots) EXPECT_EQ(d, 1);
  for (int w : writes) EXPECT_EQ(w, 1);
  EXPECT_EQ(L::kThreads, L::kQueries * 32);
}

// A head load (the quad's 4 lanes read rows pass + 4 j + g, g = 0..3) and a
// key load (8 key groups read rows kg + 8 i) each touch distinct 16-byte
// bank groups, so each is one shared-memory wavefront; every region starts
// 16-byte aligned for the float4 loads.
TEST(IndexerSharedKeysLayoutTest, LoadsAreFreeOfBankConflictsAndAligned) {
  for (int dim : {4, 8, 12, 32, 36, 64, 100, 128, 256}) {
    for (int heads : {1, 32, 64}) {
      const L layout(heads, dim);
      SCOPED_TRACE(::testing::Message() << "dim " << dim << " heads " << heads);
      EXPECT_GE(layout.stride, dim);
      EXPECT_EQ(layout.stride % 4, 0);
      EXPECT_EQ(layout.stride / 4 % 2, 1);
      EXPECT_EQ(layout.q_floats % 4, 0);
      EXPECT_EQ((layout.q_floats + layout.w_floats) % 4, 0);
      EXPECT_EQ(layout.Floats(), int64_t{L::kQueries} * layout.head_rows * (layout.stride + 1) +
                                     int64_t{L::kKeys} * layout.stride);
      for (int query = 0; query < L::kQueries; ++query) {
        for (int pass = 0; pass < layout.head_rows; pass += L::kHeadPass) {
          for (int j = 0; j < L::kLaneHeads; ++j) {
            std::set<int> groups;
            for (int g = 0; g < 4; ++g) {
              const int h = pass + g * L::kLaneHeads + j;
              groups.insert(
                  BankGroup((int64_t{query} * layout.head_rows + L::HeadRow(h)) * layout.stride));
            }
            EXPECT_EQ(groups.size(), 4u);
          }
        }
      }
      for (int i = 0; i < L::kLaneKeys; ++i) {
        std::set<int> groups;
        for (int kg = 0; kg < 8; ++kg) {
          groups.insert(BankGroup(layout.q_floats + layout.w_floats +
                                  int64_t{kg + L::kLaneKeys * i} * layout.stride));
        }
        EXPECT_EQ(groups.size(), 8u);
      }
    }
  }
  // V4.1's indexer: ~100 KB a block, so two blocks fit an SM's 228 KB.
  EXPECT_EQ(L(32, 128).Floats() * 4, 101888);
}

// Every (group, range) pair is one block's, the last groups first; the
// ranges cover each group's tiles exactly.
TEST(IndexerSharedKeysLayoutTest, BlocksTakeEveryGroupAndRangeOnceLastGroupsFirst) {
  struct Case {
    int64_t queries, keys, target;
  };
  const Case cases[] = {{4096, 1026, 1024}, {5, 3000, 1024},     {1, 1, 1024}, {70000, 3, 1024},
                        {300, 200, 1024},   {4096, 16386, 1024}, {7, 64, 1},   {9, 65, 3}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.queries << " x " << c.keys);
    const IndexerSharedKeysGrid grid = IndexerSharedKeysGrid::Make(c.queries, c.keys, c.target);
    EXPECT_EQ(grid.groups, (c.queries + 3) / 4);
    EXPECT_EQ(grid.tiles, (c.keys + 63) / 64);
    EXPECT_GE(grid.tiles_per_block, 1);
    EXPECT_LE(grid.tiles_per_block, grid.tiles);
    EXPECT_GT(grid.ranges * grid.tiles_per_block, grid.tiles - 1);
    EXPECT_LT((grid.ranges - 1) * grid.tiles_per_block, grid.tiles);
    std::vector<int> seen(grid.groups * grid.ranges, 0);
    int64_t last_group = grid.groups;
    for (int64_t b = 0; b < grid.Blocks(); ++b) {
      const int64_t group = grid.Group(b), range = grid.Range(b);
      ASSERT_GE(group, 0);
      ASSERT_LT(group, grid.groups);
      ASSERT_GE(range, 0);
      ASSERT_LT(range, grid.ranges);
      EXPECT_LE(group, last_group);
      last_group = group;
      ++seen[group * grid.ranges + range];
    }
    for (int s : seen) EXPECT_EQ(s, 1);
  }
  // The EP8 prefill chunk (4,096 rows, 1,026 keys): one range a group.
  const IndexerSharedKeysGrid prefill = IndexerSharedKeysGrid::Make(4096, 1026, 1024);
  EXPECT_EQ(prefill.ranges, 1);
  EXPECT_EQ(prefill.Blocks(), 1024);
}

// kMma's accumulators: over a warp, every (head, key) of a pass and tile is
// one lane's element exactly once, and every key is written by one lane.
TEST(IndexerSharedKeysLayoutTest, MmaAccumulatorsCoverEveryHeadAndKeyOnce) {
  std::vector<int> held(L::kHeadPass * L::kKeys, 0), writes(L::kKeys, 0);
  for (int lane = 0; lane < 32; ++lane) {
    for (int mt = 0; mt < L::kMmaTiles; ++mt) {
      for (int nt = 0; nt < L::kMmaKeyTiles; ++nt) {
        for (int e = 0; e < 4; ++e) {
          const int h = L::MmaHead(lane, mt, e), k = L::MmaKey(lane, nt, e);
          ASSERT_LT(h, L::kHeadPass);
          ASSERT_LT(k, L::kKeys);
          ++held[h * L::kKeys + k];
          // The mma's C layout: rows g, g + 8; columns 2 t, 2 t + 1.
          EXPECT_EQ(h % 16, lane / 4 + 8 * (e / 2));
          EXPECT_EQ(k % 8, 2 * (lane % 4) + e % 2);
        }
      }
    }
    for (int j = 0; j < 2; ++j) ++writes[L::MmaKey(lane, L::MmaWriteTile(lane), j)];
  }
  for (int h : held) EXPECT_EQ(h, 1);
  for (int w : writes) EXPECT_EQ(w, 1);
}

// The kernel's head sum emulated lane by lane (its segments of 8 heads, the
// shuffle up by 4 lanes and lane 7's broadcast, the writers' keys) on
// integer-valued terms of distinct magnitudes whose fp32 sum is order-
// sensitive: every key's total must be the sum in head order from 0,
// skipping heads past `heads`, as the CPU adds its terms.
TEST(IndexerSharedKeysLayoutTest, MmaHeadSumRunsInHeadOrder) {
  for (int heads : {32, 20, 8, 3}) {
    // term(h, k): large and tiny values, so a wrong order changes the bits.
    auto term = [](int h, int k) {
      return (h + k) % 3 == 0 ? 1.0e8f : 1.0f + static_cast<float>((h * 7 + k) % 5);
    };
    float total[32][L::kMmaKeyTiles][2] = {};
    for (int mt = 0; mt < L::kMmaTiles; ++mt) {
      for (int half = 0; half < 2; ++half) {
        const int first = 16 * mt + 8 * half;
        for (int gg = 0; gg < 8; ++gg) {
          for (int lane = 0; lane < 32; ++lane) {
            if (lane / 4 != gg || first + gg >= heads) continue;
            for (int nt = 0; nt < L::kMmaKeyTiles; ++nt) {
              for (int j = 0; j < 2; ++j) {
                const int e = 2 * half + j;
                ASSERT_EQ(L::MmaHead(lane, mt, e), first + gg);
                total[lane][nt][j] += term(first + gg, L::MmaKey(lane, nt, e));
              }
            }
          }
          if (gg < 7) {  // __shfl_up_sync by 4: lane l takes lane l - 4's (l >= 4)
            float next[32][L::kMmaKeyTiles][2];
            for (int lane = 0; lane < 32; ++lane) {
              const int from = lane >= 4 ? lane - 4 : lane;
              for (int nt = 0; nt < L::kMmaKeyTiles; ++nt) {
                for (int j = 0; j < 2; ++j) next[lane][nt][j] = total[from][nt][j];
              }
            }
            std::copy(&next[0][0][0], &next[0][0][0] + 32 * L::kMmaKeyTiles * 2, &total[0][0][0]);
          }
        }
        float next[32][L::kMmaKeyTiles][2];  // lane 28 | t's totals to the lanes of t
        for (int lane = 0; lane < 32; ++lane) {
          for (int nt = 0; nt < L::kMmaKeyTiles; ++nt) {
            for (int j = 0; j < 2; ++j) next[lane][nt][j] = total[28 | (lane & 3)][nt][j];
          }
        }
        std::copy(&next[0][0][0], &next[0][0][0] + 32 * L::kMmaKeyTiles * 2, &total[0][0][0]);
      }
    }
    std::vector<int> written(L::kKeys, 0);
    for (int lane = 0; lane < 32; ++lane) {
      const int nt = L::MmaWriteTile(lane);
      for (int j = 0; j < 2; ++j) {
        const int k = L::MmaKey(lane, nt, j);
        ++written[k];
        float want = 0.0f;
        for (int h = 0; h < heads; ++h) want += term(h, k);
        EXPECT_EQ(total[lane][nt][j], want) << "heads " << heads << " key " << k;
      }
    }
    for (int w : written) EXPECT_EQ(w, 1);
  }
}

// kSharedKeysMmaBf16's layout: the parts follow each other 16-byte aligned
// (uint4 key stores, ldmatrix rows), V4.1's 32 x 128 takes about 61 KB (three
// blocks an SM with the static table), and each ldmatrix phase's 8 row
// addresses start in 8 distinct 16-byte bank groups.
TEST(IndexerSharedKeysLayoutTest, Bf16LayoutIsAlignedAndFreeOfBankConflicts) {
  using B = IndexerSharedKeysBf16Layout;
  for (int heads : {1, 4, 32, 33, 64, 96}) {
    for (int dim : {32, 64, 128, 256}) {
      const B b(heads, dim);
      EXPECT_EQ(b.head_rows, L(heads, dim).head_rows);
      EXPECT_EQ(b.stride, dim + 8);
      EXPECT_EQ(b.w_offset, int64_t{L::kQueries} * b.head_rows * b.stride * 2);
      EXPECT_GE(b.k_offset, b.w_offset + int64_t{L::kQueries} * b.head_rows * 4);
      EXPECT_EQ(b.sum_offset, b.k_offset + int64_t{L::kKeys} * b.stride * 2);
      EXPECT_EQ(b.bytes, b.sum_offset + L::SumFloats() * 4);
      for (int64_t offset : {b.q_offset, b.w_offset, b.k_offset, b.sum_offset}) {
        EXPECT_EQ(offset % 16, 0) << heads << " " << dim;
      }
      EXPECT_EQ(b.stride * 2 % 16, 0);
      // A phase of ldmatrix: lanes 8 m .. 8 m + 7 give matrix m's 8 rows.
      for (int m = 0; m < 4; ++m) {
        std::set<int> a_groups, b_groups;
        for (int lane = 8 * m; lane < 8 * m + 8; ++lane) {
          a_groups.insert(static_cast<int>(b.ARowOffset(lane) * 2 / 16 % 8));
          b_groups.insert(static_cast<int>(b.BRowOffset(lane, 1) * 2 / 16 % 8));
          EXPECT_EQ(b.ARowOffset(lane) * 2 % 16, 0);
        }
        EXPECT_EQ(a_groups.size(), 8u) << dim;
        EXPECT_EQ(b_groups.size(), 8u) << dim;
      }
    }
  }
  const B v41(32, 128);
  EXPECT_EQ(v41.bytes, 61952);
  EXPECT_LE(3 * (v41.bytes + 1024 + 1024), 228 * 1024);  // + static table, + reserved
}

// kDecodeMmaBf16's layout: one query's heads, weights, the key tile and four
// warps' scratch, each part 16-byte aligned; V4.1's 32 x 128 takes about
// 35 KB. Warp w's ldmatrix pair w reads keys 16 w .. 16 w + 15, so the four
// warps split the tile.
TEST(IndexerSharedKeysLayoutTest, DecodeLayoutIsAlignedAndSplitsTheTile) {
  using B = IndexerSharedKeysBf16Layout;
  using D = IndexerDecodeBf16Layout;
  for (int heads : {1, 4, 32, 33, 64, 96}) {
    for (int dim : {32, 64, 128, 256}) {
      const D d(heads, dim);
      EXPECT_EQ(d.head_rows, L(heads, dim).head_rows);
      EXPECT_EQ(d.stride, dim + 8);
      EXPECT_EQ(d.w_offset, int64_t{d.head_rows} * d.stride * 2);
      EXPECT_GE(d.k_offset, d.w_offset + int64_t{d.head_rows} * 4);
      EXPECT_EQ(d.sum_offset, d.k_offset + int64_t{L::kKeys} * d.stride * 2);
      EXPECT_EQ(d.bytes, d.sum_offset + 4 * L::kSumWarpFloats * 4);
      for (int64_t offset : {d.q_offset, d.w_offset, d.k_offset, d.sum_offset}) {
        EXPECT_EQ(offset % 16, 0) << heads << " " << dim;
      }
    }
  }
  EXPECT_EQ(D::kWarpKeys * D::kWarps, L::kKeys);
  const D v41(32, 128);
  EXPECT_EQ(v41.bytes, 35456);
  for (int warp = 0; warp < D::kWarps; ++warp) {
    std::set<int> keys;
    for (int lane = 0; lane < 32; ++lane) {
      keys.insert(B::BRowOffsetAt(v41.stride, lane, warp) / v41.stride);
    }
    EXPECT_EQ(keys.size(), 16u);
    EXPECT_EQ(*keys.begin(), D::kWarpKeys * warp);
    EXPECT_EQ(*keys.rbegin(), D::kWarpKeys * warp + 15);
  }
}

// The decode grid: every (query, range) pair one block's, the ranges
// covering each query's tiles exactly; a batch of 64 rows at V4.1's 1,026
// keys two tiles a block, one row a tile a block.
TEST(IndexerSharedKeysLayoutTest, DecodeBlocksTakeEveryQueryAndRangeOnce) {
  struct Case {
    int64_t queries, keys, target;
  };
  const Case cases[] = {{64, 1026, 1024}, {1, 1026, 1024}, {1, 1, 1024}, {70000, 3, 1024},
                        {300, 200, 1024}, {7, 64, 1},      {9, 65, 3}};
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.queries << " x " << c.keys);
    const IndexerDecodeGrid grid = IndexerDecodeGrid::Make(c.queries, c.keys, c.target);
    EXPECT_EQ(grid.tiles, (c.keys + 63) / 64);
    EXPECT_GE(grid.tiles_per_block, 1);
    EXPECT_LE(grid.tiles_per_block, grid.tiles);
    EXPECT_LT((grid.ranges - 1) * grid.tiles_per_block, grid.tiles);
    EXPECT_GE(grid.ranges * grid.tiles_per_block, grid.tiles);
    std::vector<int> seen(c.queries * grid.ranges, 0);
    for (int64_t b = 0; b < grid.Blocks(); ++b) {
      const int64_t query = grid.Query(b), range = grid.Range(b);
      ASSERT_GE(query, 0);
      ASSERT_LT(query, c.queries);
      ASSERT_GE(range, 0);
      ASSERT_LT(range, grid.ranges);
      ++seen[query * grid.ranges + range];
    }
    for (int s : seen) EXPECT_EQ(s, 1);
  }
  EXPECT_EQ(IndexerDecodeGrid::Make(64, 1026, 1024).tiles_per_block, 2);
  EXPECT_EQ(IndexerDecodeGrid::Make(64, 1026, 1024).Blocks(), 576);
  EXPECT_EQ(IndexerDecodeGrid::Make(1, 1026, 1024).Blocks(), 17);
}

// ldmatrix .x4 gives lane (g = lane / 4, t = lane % 4) in register j the
// values 2 t and 2 t + 1 of row g of matrix j, matrix j's rows being the
// addresses lanes 8 j .. 8 j + 7 gave. With ARowOffset / BRowOffset those
// are exactly the mma.sync m16n8k16 fragments the fp32 staging packed: A
// register j = heads g + 8 (j & 1), channels 2 t + 8 (j >> 1) (+ 0, 1); B of
// n tile 2 p + (j >> 1), register j & 1 = key g of that tile, channels 2 t +
// 8 (j & 1) (+ 0, 1).
TEST(IndexerSharedKeysLayoutTest, Bf16LdmatrixGivesTheMmaFragments) {
  using B = IndexerSharedKeysBf16Layout;
  const B b(32, 128);
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int j = 0; j < 4; ++j) {
      // The element offset lane `lane` reads first in register j.
      const int a_at = b.ARowOffset(8 * j + g) + 2 * t;
      EXPECT_EQ(a_at, (g + 8 * (j & 1)) * b.stride + 2 * t + 8 * (j >> 1)) << lane << " " << j;
      for (int p = 0; p < 4; ++p) {
        const int b_at = b.BRowOffset(8 * j + g, p) + 2 * t;
        const int nt = 2 * p + (j >> 1), key = 8 * nt + g;
        EXPECT_EQ(b_at, key * b.stride + 2 * t + 8 * (j & 1)) << lane << " " << j << " " << p;
      }
    }
  }
}

}  // namespace
}  // namespace weir::kernels::cuda
