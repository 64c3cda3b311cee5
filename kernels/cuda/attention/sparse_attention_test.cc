#include "kernels/cuda/attention/sparse_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/sparse_attention.h"
#include "kernels/cuda/decode/rows.h"
#include "kernels/cuda/device_buffer.h"

namespace weir::kernels::cuda {
namespace {

using testing::DeviceBuffer;

struct Shape {
  int64_t queries;
  int heads;
  int head_dim;
  int64_t kv_len;
  int topk;
  double empty_fraction;  // share of -1 slots
};

// Runs both backends on fresh random inputs and compares. Tolerance: none.
// Both sum in the same orders (dots in fmath::LaneSum order, the denominator
// and the outputs in list order) with the same exp (fmath::ExpF) and no FMA,
// so the outputs must be bit-identical; the relative error is printed.
// heads_per_block goes to the launch (SparseAttentionParams::heads_per_block);
// nan_heads sets q's row of head s % heads to NaN for every third query s (its
// logits are all NaN, so its maximum stays -inf and it gives zeros while the
// other heads of its block do not).
void Compare(const Shape& shape, uint32_t seed, float scale = 0.0f, bool round_bf16 = false,
             bool staged = false, int heads_per_block = 0, bool nan_heads = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int64_t qn = shape.queries * shape.heads * shape.head_dim;
  std::vector<float> q(qn), kv(shape.kv_len * shape.head_dim), sink(shape.heads);
  for (float& v : q) v = normal(rng);
  for (float& v : kv) v = normal(rng);
  for (float& v : sink) v = 2.0f * normal(rng);
  if (nan_heads) {
    for (int64_t s = 0; s < shape.queries; s += 3) {
      const int64_t row = s * shape.heads + s % shape.heads;
      std::fill(q.begin() + row * shape.head_dim, q.begin() + (row + 1) * shape.head_dim, NAN);
    }
  }
  std::vector<int32_t> index(shape.queries * shape.topk);
  std::uniform_int_distribution<int32_t> pick(0, std::max<int64_t>(shape.kv_len - 1, 0));
  for (int32_t& t : index) {
    t = (shape.kv_len == 0 || unit(rng) < shape.empty_fraction) ? -1 : pick(rng);
  }
  std::vector<float> want(qn);
  ASSERT_TRUE(cpu::SparseAttention({.q = q, .kv = kv, .sink = sink, .index = index, .out = want,
                                    .queries = shape.queries, .heads = shape.heads,
                                    .head_dim = shape.head_dim, .kv_len = shape.kv_len,
                                    .topk = shape.topk, .scale = scale})
                  .ok());
  if (round_bf16) {  // the bf16 boundary a RoundBf16 pass would put after it
    for (float& v : want) v = RoundToBf16(v);
  }

  DeviceBuffer<float> dq(q), dkv(kv), dsink(sink), dout(qn);
  DeviceBuffer<int32_t> dindex(index);
  dout.Poison();
  ASSERT_TRUE(SparseAttention({.q = dq.get(),
                               .kv = dkv.get(),
                               .sink = dsink.get(),
                               .index = dindex.get(),
                               .out = dout.get(),
                               .queries = shape.queries,
                               .heads = shape.heads,
                               .head_dim = shape.head_dim,
                               .kv_len = shape.kv_len,
                               .topk = shape.topk,
                               .scale = scale,
                               .round_bf16 = round_bf16,
                               .staged = staged,
                               .heads_per_block = heads_per_block},
                              nullptr)
                  .ok());
  const std::vector<float> got = dout.Download();

  double num = 0, den = 0, max_abs = 0;
  int64_t bad = 0, first_bad = -1;
  for (int64_t i = 0; i < qn; ++i) {
    const double diff = std::fabs(double(got[i]) - want[i]);
    num += diff * diff;
    den += double(want[i]) * want[i];
    max_abs = std::max(max_abs, diff);
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      if (bad++ == 0) first_bad = i;
    }
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  std::printf(
      "queries %lld heads %d head_dim %d kv_len %lld topk %d%s heads a block %d%s: rel %.3g "
      "max_abs %.3g\n",
      static_cast<long long>(shape.queries), shape.heads, shape.head_dim,
      static_cast<long long>(shape.kv_len), shape.topk, staged ? " (staged)" : "", heads_per_block,
      nan_heads ? " (NaN heads)" : "", rel, max_abs);
  EXPECT_EQ(bad, 0) << "heads a block " << heads_per_block << ", first mismatch at " << first_bad
                    << ": got " << (first_bad >= 0 ? got[first_bad] : 0.f) << " want "
                    << (first_bad >= 0 ? want[first_bad] : 0.f);
}

TEST(SparseAttentionCudaTest, MatchesTheCpuReference) {
  const Shape shapes[] = {
      // V4.1: 64 heads of 512, window 128 + index_topk 512.
      {.queries = 3, .heads = 64, .head_dim = 512, .kv_len = 2000, .topk = 640,
       .empty_fraction = 0.1},
      {.queries = 1, .heads = 1, .head_dim = 512, .kv_len = 1, .topk = 1, .empty_fraction = 0},
      // Sizes that are multiples of nothing; many empty slots.
      {.queries = 17, .heads = 5, .head_dim = 33, .kv_len = 50, .topk = 77,
       .empty_fraction = 0.7},
      // A prefill chunk of the window path: every row full.
      {.queries = 64, .heads = 8, .head_dim = 128, .kv_len = 64, .topk = 64,
       .empty_fraction = 0},
      // The longest row the launcher takes.
      {.queries = 2, .heads = 2, .head_dim = 64, .kv_len = 9000,
       .topk = kSparseAttentionMaxTopk, .empty_fraction = 0.2},
  };
  uint32_t seed = 1;
  for (const Shape& shape : shapes) Compare(shape, seed++);
  // An explicit scale.
  Compare(shapes[2], seed++, 0.3f);
  // The output's bf16 boundary in the launch (round_bf16): the rounded CPU
  // output, including a row with no valid slot (zeros).
  Compare(shapes[0], seed++, 0.0f, /*round_bf16=*/true);
  Compare(shapes[2], seed++, 0.0f, /*round_bf16=*/true);
}

// The staged kernel (SparseAttentionParams::staged): the same arithmetic
// through shared memory, so the CPU's bits again, with the list in one chunk
// (small's and tiny's decode shapes, a prefill chunk) and in several (V4.1's
// 640 rows of 512, the longest list), invalid slots, an explicit scale, the
// bf16 boundary and rows with no valid slot. Where it does not apply
// (head_dim 33) the launch falls back to the plain kernel.
TEST(SparseAttentionCudaTest, StagedRowsGiveTheCpuBits) {
  const Shape shapes[] = {
      {.queries = 1, .heads = 8, .head_dim = 256, .kv_len = 500, .topk = 96, .empty_fraction = 0.3},
      {.queries = 64,
       .heads = 8,
       .head_dim = 256,
       .kv_len = 6000,
       .topk = 96,
       .empty_fraction = 0.05},
      {.queries = 5, .heads = 4, .head_dim = 128, .kv_len = 40, .topk = 16, .empty_fraction = 0.4},
      {.queries = 64, .heads = 8, .head_dim = 128, .kv_len = 64, .topk = 64, .empty_fraction = 0},
      {.queries = 3,
       .heads = 64,
       .head_dim = 512,
       .kv_len = 2000,
       .topk = 640,
       .empty_fraction = 0.1},
      {.queries = 2,
       .heads = 2,
       .head_dim = 64,
       .kv_len = 9000,
       .topk = kSparseAttentionMaxTopk,
       .empty_fraction = 0.2},
      {.queries = 4, .heads = 3, .head_dim = 16, .kv_len = 10, .topk = 5, .empty_fraction = 1.0},
      {.queries = 2, .heads = 2, .head_dim = 8, .kv_len = 3, .topk = 0, .empty_fraction = 0},
  };
  // A staged launch of `shape` with placeholder pointers, for the launcher's
  // decisions only (nothing is launched with them).
  const auto staged_params = [](const Shape& shape) {
    float* f = reinterpret_cast<float*>(256);
    return SparseAttentionParams{.q = f,
                                 .kv = f,
                                 .sink = f,
                                 .index = reinterpret_cast<int32_t*>(256),
                                 .out = f,
                                 .queries = shape.queries,
                                 .heads = shape.heads,
                                 .head_dim = shape.head_dim,
                                 .kv_len = shape.kv_len,
                                 .topk = shape.topk,
                                 .staged = true};
  };
  uint32_t seed = 100;
  for (const Shape& shape : shapes) {
    const SparseAttentionParams p = staged_params(shape);
    EXPECT_TRUE(SparseAttentionStages(p))
        << "head_dim " << shape.head_dim << " topk " << shape.topk;
    Compare(shape, seed++, 0.0f, false, /*staged=*/true);
    // Every grouping of heads the shape allows gives the same bits.
    for (const int heads_per_block : {1, 2, 4, 8}) {
      if (shape.heads % heads_per_block != 0) continue;
      SparseAttentionParams grouped = p;
      grouped.heads_per_block = heads_per_block;
      EXPECT_EQ(SparseAttentionStagedHeads(grouped), heads_per_block)
          << "head_dim " << shape.head_dim << " topk " << shape.topk;
      Compare(shape, seed++, 0.0f, false, /*staged=*/true, heads_per_block);
    }
  }
  // Grouped heads with one head of a block giving zeros (its logits NaN)
  // beside heads that do not, each grouping and the bf16 boundary.
  for (const int heads_per_block : {1, 2, 8}) {
    Compare(shapes[1], seed++, 0.0f, false, /*staged=*/true, heads_per_block, /*nan_heads=*/true);
    Compare(shapes[1], seed++, 0.0f, /*round_bf16=*/true, /*staged=*/true, heads_per_block,
            /*nan_heads=*/true);
  }
  Compare(shapes[0], seed++, 0.3f, false, /*staged=*/true);
  Compare(shapes[0], seed++, 0.0f, /*round_bf16=*/true, /*staged=*/true);
  Compare(shapes[4], seed++, 0.0f, /*round_bf16=*/true, /*staged=*/true);
  const Shape odd{
      .queries = 17, .heads = 5, .head_dim = 33, .kv_len = 50, .topk = 77, .empty_fraction = 0.7};
  EXPECT_FALSE(SparseAttentionStages(staged_params(odd)));
  Compare(odd, seed++, 0.0f, false, /*staged=*/true);

  // Chosen from the sizes (heads_per_block 0): heads grouped while the launch
  // keeps 256 blocks and the list stays in one chunk where one head's does;
  // small's decode shape.
  SparseAttentionParams chosen = staged_params(shapes[1]);  // 64 queries, 8 heads of 256, 96 rows
  EXPECT_EQ(SparseAttentionStagedHeads(chosen), 2);
  chosen.queries = 128;
  EXPECT_EQ(SparseAttentionStagedHeads(chosen), 4);
  chosen.queries = 256;  // 8 heads' q rows and logits leave 92 rows a chunk
  EXPECT_EQ(SparseAttentionStagedHeads(chosen), 4);
  chosen.topk = 64;
  EXPECT_EQ(SparseAttentionStagedHeads(chosen), 8);
  chosen.queries = 32;
  EXPECT_EQ(SparseAttentionStagedHeads(chosen), 1);
  chosen.staged = false;
  EXPECT_EQ(SparseAttentionStagedHeads(chosen), 0);
}

// The staged kernel's grouped output (SparseAttentionParams::grouped): the
// bits of the staged output followed by SwapAxes' RoPE form (the decoder's
// transpose into the grouped output projection's layout with the inverse
// RoPE), with and without the bf16 boundaries, a query without a valid slot
// among them, the list in one chunk (small) and in several (head_dim 512).
TEST(SparseAttentionCudaTest, StagedGroupedOutputGivesTheSwapAxesBits) {
  struct Case {
    int heads, head_dim, topk, group_width, rope_dim;
  };
  for (const Case& cs :
       {Case{8, 256, 96, 512, 64}, Case{8, 512, 640, 1024, 64}, Case{4, 128, 16, 128, 32}}) {
    for (const bool round : {true, false}) {
      std::mt19937 rng(cs.head_dim + cs.topk + (round ? 1 : 0));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      const int64_t queries = 5, kv_len = 700, table_rows = 300;
      std::vector<float> q(queries * cs.heads * cs.head_dim), kv(kv_len * cs.head_dim),
          sink(cs.heads), cos_sin(table_rows * cs.rope_dim);
      for (float& v : q) v = normal(rng);
      for (float& v : kv) v = normal(rng);
      for (float& v : sink) v = normal(rng);
      for (float& v : cos_sin) v = normal(rng);
      std::vector<int32_t> index(queries * cs.topk);
      std::uniform_int_distribution<int32_t> pick(0, kv_len - 1);
      for (int64_t i = 0; i < static_cast<int64_t>(index.size()); ++i) {
        index[i] = (i / cs.topk == 2 || i % 5 == 3) ? -1 : pick(rng);  // query 2: no valid slot
      }
      std::vector<int64_t> positions(queries);
      std::uniform_int_distribution<int64_t> pos(0, table_rows - 1);
      for (int64_t& p : positions) p = pos(rng);
      const int64_t n = queries * cs.heads * cs.head_dim;
      DeviceBuffer<float> dq(q), dkv(kv), dsink(sink), dcs(cos_sin), o(n), want(n), got(n);
      DeviceBuffer<int32_t> dindex(index);
      DeviceBuffer<int64_t> dpos(positions);
      SparseAttentionParams p{.q = dq.get(),
                              .kv = dkv.get(),
                              .sink = dsink.get(),
                              .index = dindex.get(),
                              .out = o.get(),
                              .queries = queries,
                              .heads = cs.heads,
                              .head_dim = cs.head_dim,
                              .kv_len = kv_len,
                              .topk = cs.topk,
                              .round_bf16 = round,
                              .staged = true};
      ASSERT_TRUE(SparseAttentionStages(p));
      ASSERT_TRUE(SparseAttention(p, nullptr).ok());
      const int64_t groups = int64_t{cs.heads} * cs.head_dim / cs.group_width;
      decode::SwapAxesParams swap{.src = o.get(),
                                  .dst = want.get(),
                                  .a = queries,
                                  .b = groups,
                                  .width = cs.group_width,
                                  .rope_positions = dpos.get(),
                                  .rope_cos_sin = dcs.get(),
                                  .rope_cos_sin_rows = table_rows,
                                  .rope_head_dim = cs.head_dim,
                                  .rope_dim = cs.rope_dim,
                                  .rope_inverse = true,
                                  .rope_round_bf16 = round};
      ASSERT_TRUE(decode::SwapAxes(swap, nullptr).ok());
      for (const int heads_per_block : {0, 1, 2, 4, 8}) {
        if (heads_per_block != 0 && cs.heads % heads_per_block != 0) continue;
        p.heads_per_block = heads_per_block;
        p.out = nullptr;
        p.grouped = {.out = got.get(),
                     .group_width = cs.group_width,
                     .positions = dpos.get(),
                     .cos_sin = dcs.get(),
                     .cos_sin_rows = table_rows,
                     .rope_dim = cs.rope_dim};
        got.Poison();
        ASSERT_TRUE(SparseAttention(p, nullptr).ok());
        const std::vector<float> w = want.Download(), g = got.Download();
        int64_t differ = 0;
        for (int64_t i = 0; i < n; ++i) differ += std::memcmp(&w[i], &g[i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0) << "head_dim " << cs.head_dim << " round " << round;
        // The bf16 forms (direct_wo_a): the attention's out_bf16 and SwapAxes'
        // dst_bf16 both give ToBf16's bits of the fp32 output above.
        DeviceBuffer<uint16_t> want16(n), swap16(n), got16(n);
        ASSERT_TRUE(decode::ToBf16({.x = want.get(), .out = want16.get(), .n = n}, nullptr).ok());
        swap16.Poison();
        swap.dst = nullptr;
        swap.dst_bf16 = swap16.get();
        ASSERT_TRUE(decode::SwapAxes(swap, nullptr).ok());
        p.grouped.out = nullptr;
        p.grouped.out_bf16 = got16.get();
        got16.Poison();
        ASSERT_TRUE(SparseAttention(p, nullptr).ok());
        const std::vector<uint16_t> w16 = want16.Download(), s16 = swap16.Download(),
                                    g16 = got16.Download();
        EXPECT_EQ(s16, w16) << "SwapAxes' bf16 output, head_dim " << cs.head_dim;
        EXPECT_EQ(g16, w16) << "the attention's bf16 output, head_dim " << cs.head_dim
                            << " heads a block " << heads_per_block;
        swap.dst = want.get();
        swap.dst_bf16 = nullptr;
        p.out = o.get();
        p.grouped = {};
      }
    }
  }
  // Its conditions: a group width that is not a multiple of head_dim, or an
  // unstaged launch, is refused.
  float* f = reinterpret_cast<float*>(256);
  int32_t* i = reinterpret_cast<int32_t*>(256);
  int64_t* pp = reinterpret_cast<int64_t*>(256);
  SparseAttentionParams bad{.q = f,
                            .kv = f,
                            .sink = f,
                            .index = i,
                            .queries = 1,
                            .heads = 4,
                            .head_dim = 128,
                            .kv_len = 4,
                            .topk = 4,
                            .staged = true};
  bad.grouped = {.out = f,
                 .group_width = 192,
                 .positions = pp,
                 .cos_sin = f,
                 .cos_sin_rows = 1,
                 .rope_dim = 32};
  EXPECT_FALSE(SupportsSparseAttention(bad));
  bad.grouped.group_width = 256;
  EXPECT_TRUE(SupportsSparseAttention(bad));
  bad.staged = false;
  EXPECT_FALSE(SupportsSparseAttention(bad));
}

TEST(SparseAttentionCudaTest, EmptyRowsGiveZero) {
  // All slots -1 (and kv_len 0): o = 0 for every head, as on the CPU.
  Compare({.queries = 4, .heads = 3, .head_dim = 16, .kv_len = 0, .topk = 5,
           .empty_fraction = 1.0},
          7);
  Compare({.queries = 4, .heads = 3, .head_dim = 16, .kv_len = 10, .topk = 5,
           .empty_fraction = 1.0},
          8);
  // topk 0.
  Compare({.queries = 2, .heads = 2, .head_dim = 8, .kv_len = 3, .topk = 0,
           .empty_fraction = 0},
          9);
}

TEST(SparseAttentionCudaTest, RefusesWhatItDoesNotSupport) {
  float* f = reinterpret_cast<float*>(16);
  int32_t* i = reinterpret_cast<int32_t*>(16);
  const SparseAttentionParams good{.q = f, .kv = f, .sink = f, .index = i, .out = f,
                                   .queries = 1, .heads = 1, .head_dim = 8, .kv_len = 4,
                                   .topk = 4};
  EXPECT_TRUE(SupportsSparseAttention(good));
  SparseAttentionParams p = good;
  p.topk = kSparseAttentionMaxTopk + 1;
  EXPECT_EQ(SparseAttention(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.heads = 0;
  EXPECT_EQ(SparseAttention(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.index = nullptr;
  EXPECT_EQ(SparseAttention(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.kv = nullptr;
  EXPECT_EQ(SparseAttention(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // heads_per_block: 0 or a power of two up to 8 dividing heads.
  for (const int heads_per_block : {-1, 3, 16, 4}) {
    p = good;
    p.heads = 2;
    p.staged = true;
    p.heads_per_block = heads_per_block;
    EXPECT_EQ(SparseAttention(p, nullptr).code(), absl::StatusCode::kInvalidArgument)
        << heads_per_block;
  }
  // Nothing to do is fine, and launches nothing.
  p = good;
  p.queries = 0;
  EXPECT_TRUE(SparseAttention(p, nullptr).ok());
}

}  // namespace
}  // namespace weir::kernels::cuda
