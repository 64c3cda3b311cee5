#include "kernels/cuda/attention/topk.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/topk.h"
#include "kernels/cuda/device_buffer.h"

namespace weir::kernels::cuda {
namespace {

using testing::DeviceBuffer;

constexpr float kInf = std::numeric_limits<float>::infinity();

// How a test row's scores are drawn.
enum class Draw {
  kNormal,    // distinct values (plus a few -inf)
  kCoarse,    // values from a small set: many ties, -inf, NaN, +inf, -0 and +0
  kAllEqual,  // one value everywhere
};

std::vector<float> Scores(int64_t n, Draw draw, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> pick(0, 19);
  const float coarse[] = {-kInf, -kInf, -kInf, std::numeric_limits<float>::quiet_NaN(),
                          kInf,  -2.0f,  -1.0f, -0.0f, 0.0f, 0.5f, 1.0f, 1.0f, 2.0f, 3.0f,
                          3.0f,  -0.5f,  0.25f, 7.0f, 7.0f, 1e30f};
  std::vector<float> s(n);
  for (float& v : s) {
    switch (draw) {
      case Draw::kNormal: v = pick(rng) == 0 ? -kInf : normal(rng); break;
      case Draw::kCoarse: v = coarse[pick(rng)]; break;
      case Draw::kAllEqual: v = 0.75f; break;
    }
  }
  return s;
}

std::vector<int64_t> Visible(int64_t rows, int64_t width, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> pick(0, width);
  std::vector<int64_t> v(rows);
  for (int64_t r = 0; r < rows; ++r) v[r] = r == 0 ? width : r == 1 ? 0 : pick(rng);
  return v;
}

// TopkPositions on both backends; the outputs must be identical.
// `masked`: every score past its row's visible length is -inf (IndexerScore's
// rows), and the device runs with masked_past_visible.
void CompareTopk(int64_t rows, int64_t width, int k, int32_t offset, Draw draw, uint32_t seed,
                 bool masked = false) {
  SCOPED_TRACE(::testing::Message() << "rows " << rows << " width " << width << " k " << k
                                    << " draw " << static_cast<int>(draw) << " masked " << masked);
  std::mt19937 rng(seed);
  std::vector<float> scores = Scores(rows * width, draw, rng);
  const std::vector<int64_t> visible = Visible(rows, width, rng);
  if (masked) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = visible[r]; i < width; ++i) scores[r * width + i] = -kInf;
    }
  }
  std::vector<int32_t> want(rows * k);
  ASSERT_TRUE(cpu::TopkPositions({.scores = scores, .visible_len = visible, .out = want,
                                  .rows = rows, .width = width, .k = k, .offset = offset})
                  .ok());
  DeviceBuffer<float> dscores(scores);
  DeviceBuffer<int64_t> dvisible(visible);
  DeviceBuffer<int32_t> dout(want.size());
  // Both kernels: rereading the row, and (in_registers; rows of width up to
  // kTopkRegMaxWidth) holding it in registers.
  for (bool in_registers : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "in_registers " << in_registers);
    dout.Poison(0x7F);
    ASSERT_TRUE(TopkPositions({.scores = dscores.get(),
                               .visible_len = dvisible.get(),
                               .out = dout.get(),
                               .rows = rows,
                               .width = width,
                               .k = k,
                               .offset = offset,
                               .masked_past_visible = masked,
                               .in_registers = in_registers},
                              nullptr)
                    .ok());
    const std::vector<int32_t> got = dout.Download();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < k; ++j) {
        ASSERT_EQ(got[r * k + j], want[r * k + j])
            << "row " << r << " slot " << j << " (visible " << visible[r] << ")";
      }
    }
  }
  int64_t kept = 0;
  for (int32_t v : want) kept += v >= 0;
  std::printf("TopkPositions rows %lld width %lld k %d draw %d: identical, %lld positions kept\n",
              static_cast<long long>(rows), static_cast<long long>(width), k,
              static_cast<int>(draw), static_cast<long long>(kept));
}

// CandidateBlocks on both backends; the pools must be identical.
void CompareBlocks(int64_t rows, int64_t width, int topk_blocks, int block_size, Draw draw,
                   uint32_t seed, bool masked = false) {
  SCOPED_TRACE(::testing::Message() << "rows " << rows << " width " << width << " topk_blocks "
                                    << topk_blocks << " block_size " << block_size << " draw "
                                    << static_cast<int>(draw) << " masked " << masked);
  std::mt19937 rng(seed);
  std::vector<float> scores = Scores(rows * width, draw, rng);
  const std::vector<int64_t> visible = Visible(rows, width, rng);
  if (masked) {  // as TopkPositions' masked case
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = visible[r]; i < width; ++i) scores[r * width + i] = -kInf;
    }
  }
  std::vector<uint8_t> want(rows * width);
  ASSERT_TRUE(cpu::CandidateBlocks({.scores = scores, .visible_len = visible, .pool = want,
                                    .rows = rows, .width = width, .topk_blocks = topk_blocks,
                                    .block_size = block_size})
                  .ok());
  DeviceBuffer<float> dscores(scores);
  DeviceBuffer<int64_t> dvisible(visible);
  DeviceBuffer<uint8_t> dpool(want.size());
  dpool.Poison(0x5A);
  ASSERT_TRUE(CandidateBlocks({.scores = dscores.get(),
                               .visible_len = dvisible.get(),
                               .pool = dpool.get(),
                               .rows = rows,
                               .width = width,
                               .topk_blocks = topk_blocks,
                               .block_size = block_size,
                               .masked_past_visible = masked},
                              nullptr)
                  .ok());
  const std::vector<uint8_t> got = dpool.Download();
  int64_t marked = 0;
  for (int64_t i = 0; i < rows * width; ++i) {
    ASSERT_EQ(int{got[i]}, int{want[i]}) << "row " << i / width << " position " << i % width;
    marked += want[i];
  }
  std::printf("CandidateBlocks rows %lld width %lld topk_blocks %d block_size %d draw %d: "
              "identical, %lld positions marked\n",
              static_cast<long long>(rows), static_cast<long long>(width), topk_blocks,
              block_size, static_cast<int>(draw), static_cast<long long>(marked));
}

TEST(TopkCudaTest, TopkPositionsIdenticalToTheCpuReference) {
  uint32_t seed = 1;
  for (Draw draw : {Draw::kNormal, Draw::kCoarse, Draw::kAllEqual}) {
    CompareTopk(4, 3000, 512, 0, draw, seed++);        // V4.1 index_topk 512
    CompareTopk(1, 262144, 512, 0, draw, seed++);      // decode at 1M tokens, ratio 4
    CompareTopk(33, 700, 50, 128, draw, seed++);       // offset past the window
    CompareTopk(5, 40, 64, 0, draw, seed++);           // k > width
    CompareTopk(6, 1, 1, 3, draw, seed++);
    CompareTopk(3, 513, 1, 0, draw, seed++);
    CompareTopk(2, 9, 0, 0, draw, seed++);             // k 0
    CompareTopk(3, 0, 4, 0, draw, seed++);             // nothing compressed yet
    // Scores past the visible length -inf, read only up to it: the same
    // positions (a long decoder width with short visible rows among them).
    CompareTopk(4, 3000, 512, 0, draw, seed++, true);
    CompareTopk(9, 262144, 512, 0, draw, seed++, true);
    CompareTopk(5, 40, 64, 0, draw, seed++, true);
    // The register kernel's widest rows and the first width past them.
    CompareTopk(3, kTopkRegMaxWidth, 512, 0, draw, seed++);
    CompareTopk(3, kTopkRegMaxWidth, 512, 0, draw, seed++, true);
    CompareTopk(2, kTopkRegMaxWidth + 1, 512, 0, draw, seed++, true);
    // Masked rows of a wider decoder: rows of up to 8,192 visible entries in
    // registers, the longer ones from memory, in one launch.
    CompareTopk(8, 20000, 512, 0, draw, seed++, true);
    CompareTopk(4, 4100, 2048, 7, draw, seed++);  // k past half the row
  }
}

TEST(TopkCudaTest, InvisibleScoresStillTakeTheirPlaces) {
  // Positions past visible_len score highest: they fill the top k and are
  // then dropped, leaving -1s (the CPU's rule, not "best k visible").
  const int64_t width = 16;
  const int k = 4;
  std::vector<float> scores(width);
  for (int64_t i = 0; i < width; ++i) scores[i] = static_cast<float>(i);
  const std::vector<int64_t> visible = {14};
  std::vector<int32_t> want(k);
  ASSERT_TRUE(cpu::TopkPositions({.scores = scores, .visible_len = visible, .out = want,
                                  .rows = 1, .width = width, .k = k})
                  .ok());
  ASSERT_EQ(want, (std::vector<int32_t>{12, 13, -1, -1}));
  DeviceBuffer<float> dscores(scores);
  DeviceBuffer<int64_t> dvisible(visible);
  DeviceBuffer<int32_t> dout(k);
  ASSERT_TRUE(TopkPositions({.scores = dscores.get(), .visible_len = dvisible.get(),
                             .out = dout.get(), .rows = 1, .width = width, .k = k},
                            nullptr)
                  .ok());
  EXPECT_EQ(dout.Download(), want);
}

TEST(TopkCudaTest, CandidateBlocksIdenticalToTheCpuReference) {
  uint32_t seed = 100;
  for (Draw draw : {Draw::kNormal, Draw::kCoarse, Draw::kAllEqual}) {
    CompareBlocks(4, 3000, 64, 8, draw, seed++);       // V4.1 block 8 (topk_blocks scaled down)
    CompareBlocks(1, 262144, 2048, 8, draw, seed++);   // V4.1 at 1M tokens
    CompareBlocks(7, 101, 3, 3, draw, seed++);         // last block padded
    CompareBlocks(3, 50, 100, 8, draw, seed++);        // topk_blocks > blocks
    CompareBlocks(5, 20, 1, 1, draw, seed++);
    CompareBlocks(3, 10, 2, 1000, draw, seed++);       // one block wider than the row
    CompareBlocks(6, 1, 1, 8, draw, seed++);
    // Scores past the visible length -inf, blocks selected up to it only.
    CompareBlocks(4, 3000, 64, 8, draw, seed++, true);
    CompareBlocks(9, 262144, 2048, 8, draw, seed++, true);
    CompareBlocks(7, 101, 3, 3, draw, seed++, true);
  }
}

TEST(TopkCudaTest, RefusesWhatItDoesNotSupport) {
  float* f = reinterpret_cast<float*>(16);
  int64_t* v = reinterpret_cast<int64_t*>(16);
  int32_t* o = reinterpret_cast<int32_t*>(16);
  uint8_t* pool = reinterpret_cast<uint8_t*>(16);
  const TopkParams topk{.scores = f, .visible_len = v, .out = o, .rows = 2, .width = 8, .k = 4};
  EXPECT_TRUE(SupportsTopkPositions(topk));
  TopkParams t = topk;
  t.k = -1;
  EXPECT_EQ(TopkPositions(t, nullptr).code(), absl::StatusCode::kInvalidArgument);
  t = topk;
  t.out = nullptr;
  EXPECT_EQ(TopkPositions(t, nullptr).code(), absl::StatusCode::kInvalidArgument);
  t = topk;
  t.width = int64_t{1} << 31;
  EXPECT_EQ(TopkPositions(t, nullptr).code(), absl::StatusCode::kInvalidArgument);

  const CandidateBlocksParams blocks{.scores = f, .visible_len = v, .pool = pool, .rows = 2,
                                     .width = 8, .topk_blocks = 2, .block_size = 4};
  EXPECT_TRUE(SupportsCandidateBlocks(blocks));
  CandidateBlocksParams b = blocks;
  b.block_size = 0;
  EXPECT_EQ(CandidateBlocks(b, nullptr).code(), absl::StatusCode::kInvalidArgument);
  b = blocks;
  b.topk_blocks = 0;
  EXPECT_EQ(CandidateBlocks(b, nullptr).code(), absl::StatusCode::kInvalidArgument);
  b = blocks;
  b.scores = nullptr;
  EXPECT_EQ(CandidateBlocks(b, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda
