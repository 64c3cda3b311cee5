#include "kernels/cuda/decode/attention_index.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/decode/test_util.h"

namespace weir::kernels::cuda::decode {
namespace {

using testing::DeviceBuffer;
using testing::FromBits;
using testing::SameBits;
using testing::SameValues;

int32_t Wrap(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

TEST(AssembleIndexTest, OffsetsWindowAndTopkEntriesIntoOnePool) {
  struct Case {
    int64_t rows;
    int window_width, k_width;
    int32_t window_base, topk_base;
  };
  const Case cases[] = {
      {1, 128, 512, 1000, 70000},  // V4.1 decode widths
      {5, 3, 7, 0, 0},
      {64, 128, 0, 12, 0},  // window only: topk and topk_row_base stay null
      {9, 0, 33, 0, -40},   // top-k only, a negative base
      {3, 4, 4, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()},  // wraps
  };
  for (const Case& c : cases) {
    std::mt19937 rng(c.rows * 13 + c.window_width + c.k_width);
    std::uniform_int_distribution<int32_t> entry(-3, 100000), base(0, 1 << 20);
    std::vector<int32_t> window(c.rows * c.window_width), topk(c.rows * c.k_width),
        row_base(c.k_width > 0 ? c.rows : 0);
    for (int32_t& v : window) v = entry(rng);  // about 1 in 33000 negative...
    for (int32_t& v : topk) v = entry(rng);
    for (int32_t& v : row_base) v = base(rng);
    // ...so put unused slots in on purpose: -1 and other negatives.
    if (!window.empty()) {
      window[0] = -1;
      window[window.size() / 2] = -7;
    }
    if (!topk.empty()) {
      topk[topk.size() - 1] = -1;
      topk[topk.size() / 3] = std::numeric_limits<int32_t>::min();
    }
    const int64_t width = int64_t{c.window_width} + c.k_width;
    std::vector<int32_t> want(c.rows * width);
    for (int64_t t = 0; t < c.rows; ++t) {
      for (int j = 0; j < c.window_width; ++j) {
        const int32_t w = window[t * c.window_width + j];
        want[t * width + j] = w < 0 ? -1 : Wrap(int64_t{w} + c.window_base);
      }
      for (int k = 0; k < c.k_width; ++k) {
        const int32_t e = topk[t * c.k_width + k];
        want[t * width + c.window_width + k] =
            e < 0 ? -1 : Wrap(int64_t{row_base[t]} + c.topk_base + e);
      }
    }
    DeviceBuffer<int32_t> d_window(window), d_topk(topk), d_base(row_base), d_out(want.size());
    d_out.Poison(0x5A);
    ASSERT_TRUE(AssembleIndex({.window = d_window.get(),
                               .topk = c.k_width > 0 ? d_topk.get() : nullptr,
                               .topk_row_base = c.k_width > 0 ? d_base.get() : nullptr,
                               .out = d_out.get(),
                               .rows = c.rows,
                               .window_width = c.window_width,
                               .k_width = c.k_width,
                               .window_base = c.window_base,
                               .topk_base = c.topk_base},
                              nullptr)
                    .ok());
    EXPECT_TRUE(SameValues(d_out.Download(), want))
        << "rows " << c.rows << " window " << c.window_width << " k " << c.k_width;
  }
}

// Paged pools: a top-k entry k of row t is row k % e of block
// table[slot[t]][k / e], offset by topk_base; -1 for unused entries, a
// negative slot, a negative block and an entry past the table's width.
TEST(AssembleIndexTest, MapsTopkEntriesThroughBlockTables) {
  struct Case {
    int64_t rows;
    int window_width, k_width, slots, table_width, e;
    int32_t topk_base;
  };
  const Case cases[] = {
      {4, 128, 512, 3, 64, 32, 5000},  // V4.1 widths, ratio 4 at 128 positions a block
      {7, 2, 9, 5, 6, 1, 0},           // one entry a block (ratio 128)
      {3, 0, 17, 2, 3, 5, -11},        // top-k only, entries past the table
  };
  for (const Case& c : cases) {
    std::mt19937 rng(c.rows * 7 + c.k_width + c.e);
    const int32_t entries = c.table_width * c.e;
    std::uniform_int_distribution<int32_t> entry(-2, entries + c.e),
        block(-1, c.slots * c.table_width * 2), slot(0, c.slots - 1);
    std::vector<int32_t> window(c.rows * c.window_width), topk(c.rows * c.k_width),
        table(c.slots * c.table_width), slots(c.rows);
    for (int32_t& v : window) v = entry(rng);
    for (int32_t& v : topk) v = entry(rng);
    for (int32_t& v : table) v = block(rng);
    for (int32_t& v : slots) v = slot(rng);
    slots[c.rows - 1] = -1;  // a row without a table: every entry -1
    const int64_t width = int64_t{c.window_width} + c.k_width;
    std::vector<int32_t> want(c.rows * width);
    int64_t mapped = 0;
    for (int64_t t = 0; t < c.rows; ++t) {
      for (int j = 0; j < c.window_width; ++j) {
        const int32_t w = window[t * c.window_width + j];
        want[t * width + j] = w < 0 ? -1 : w;
      }
      for (int k = 0; k < c.k_width; ++k) {
        const int32_t e = topk[t * c.k_width + k];
        int32_t v = -1;
        if (e >= 0 && slots[t] >= 0 && e / c.e < c.table_width) {
          const int32_t b = table[slots[t] * c.table_width + e / c.e];
          if (b >= 0) v = Wrap(int64_t{b} * c.e + c.topk_base + e % c.e);
        }
        mapped += v >= 0;
        want[t * width + c.window_width + k] = v;
      }
    }
    EXPECT_GT(mapped, 0);
    DeviceBuffer<int32_t> d_window(window), d_topk(topk), d_table(table), d_slots(slots),
        d_out(want.size());
    d_out.Poison(0x5A);
    ASSERT_TRUE(AssembleIndex({.window = d_window.get(),
                               .topk = d_topk.get(),
                               .block_table = d_table.get(),
                               .table_slot = d_slots.get(),
                               .table_width = c.table_width,
                               .entries_per_block = c.e,
                               .out = d_out.get(),
                               .rows = c.rows,
                               .window_width = c.window_width,
                               .k_width = c.k_width,
                               .topk_base = c.topk_base},
                              nullptr)
                    .ok());
    EXPECT_TRUE(SameValues(d_out.Download(), want))
        << "rows " << c.rows << " window " << c.window_width << " k " << c.k_width;
  }
}

TEST(MaskScoresTest, SetsMinusInfinityWhereNotKept) {
  for (int64_t n : {int64_t{1}, int64_t{4097}, int64_t{1} << 20}) {
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::normal_distribution<float> normal(0.0f, 4.0f);
    std::uniform_int_distribution<int> byte(0, 255);
    std::vector<float> scores(n);
    std::vector<uint8_t> keep(n);
    for (int64_t i = 0; i < n; ++i) {
      scores[i] = i % 101 == 5 ? FromBits(0x7FC01234u) : normal(rng);  // NaNs are masked too
      const int b = byte(rng);
      keep[i] = b < 128 ? 0 : static_cast<uint8_t>(b);  // any non-zero byte keeps
    }
    keep[0] = 0;
    std::vector<float> want(scores);
    for (int64_t i = 0; i < n; ++i) {
      if (!keep[i]) want[i] = -std::numeric_limits<float>::infinity();
    }
    DeviceBuffer<float> d_scores(scores);
    DeviceBuffer<uint8_t> d_keep(keep);
    ASSERT_TRUE(MaskScores({.scores = d_scores.get(), .keep = d_keep.get(), .n = n}, nullptr).ok());
    EXPECT_TRUE(SameBits(d_scores.Download(), want)) << "n " << n;
  }
}

TEST(AttentionIndexArgumentsTest, RefusesBadParamsAndSkipsEmptyWork) {
  int32_t* p = reinterpret_cast<int32_t*>(256);
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(AssembleIndex({.window = p, .topk = p, .topk_row_base = p, .out = p, .rows = -1,
                           .window_width = 2, .k_width = 2},
                          nullptr)
                .code(),
            kInvalid);
  EXPECT_EQ(AssembleIndex({.window = p, .topk = p, .topk_row_base = p, .out = p, .rows = 2,
                           .window_width = -2, .k_width = 2},
                          nullptr)
                .code(),
            kInvalid);
  EXPECT_EQ(AssembleIndex({.window = p, .topk = nullptr, .topk_row_base = p, .out = p, .rows = 2,
                           .window_width = 2, .k_width = 2},
                          nullptr)
                .code(),
            kInvalid);
  EXPECT_EQ(AssembleIndex({.window = p, .topk = p, .topk_row_base = nullptr, .out = p, .rows = 2,
                           .window_width = 2, .k_width = 2},
                          nullptr)
                .code(),
            kInvalid);
  EXPECT_EQ(AssembleIndex({.window = nullptr, .out = p, .rows = 2, .window_width = 2}, nullptr)
                .code(),
            kInvalid);
  EXPECT_EQ(AssembleIndex({.window = p, .out = nullptr, .rows = 2, .window_width = 2}, nullptr)
                .code(),
            kInvalid);
  // A block table needs its slots, width and entries a block.
  EXPECT_EQ(AssembleIndex({.window = p,
                           .topk = p,
                           .block_table = p,
                           .table_slot = nullptr,
                           .table_width = 2,
                           .entries_per_block = 2,
                           .out = p,
                           .rows = 2,
                           .window_width = 2,
                           .k_width = 2},
                          nullptr)
                .code(),
            kInvalid);
  EXPECT_EQ(AssembleIndex({.window = p,
                           .topk = p,
                           .block_table = p,
                           .table_slot = p,
                           .table_width = 2,
                           .entries_per_block = 0,
                           .out = p,
                           .rows = 2,
                           .window_width = 2,
                           .k_width = 2},
                          nullptr)
                .code(),
            kInvalid);
  EXPECT_TRUE(AssembleIndex({.rows = 0, .window_width = 4, .k_width = 4}, nullptr).ok());
  EXPECT_TRUE(AssembleIndex({.rows = 3}, nullptr).ok());
  float* f = reinterpret_cast<float*>(256);
  EXPECT_EQ(MaskScores({.scores = f, .keep = nullptr, .n = 4}, nullptr).code(), kInvalid);
  EXPECT_EQ(MaskScores({.scores = nullptr, .keep = reinterpret_cast<uint8_t*>(256), .n = 4},
                       nullptr)
                .code(),
            kInvalid);
  EXPECT_EQ(MaskScores({.scores = f, .keep = reinterpret_cast<uint8_t*>(256), .n = -4}, nullptr)
                .code(),
            kInvalid);
  EXPECT_TRUE(MaskScores({.n = 0}, nullptr).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // nothing above reached the device
}

}  // namespace
}  // namespace weir::kernels::cuda::decode
