#include "kernels/cuda/attention/indexer_score.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/indexer_score.h"
#include "kernels/cpu/quant.h"
#include "kernels/cuda/decode/rows.h"
#include "kernels/cuda/dense/fake_quant.h"
#include "kernels/cuda/device_buffer.h"

namespace weir::kernels::cuda {
namespace {

using testing::DeviceBuffer;

// kSharedKeysMma runs its tensor-core dots where q_mxfp4 and MXFP4 keys are
// given (FusedInputs..., V41PrefillChunk..., Mxfp4Keys... with q_mxfp4) and
// is kSharedKeys elsewhere; the cases' inputs keep every dot's sum exact in
// fp32, so it must give the CPU's bits there too.
// kSharedKeysMmaSum (the head sum through shared memory) and
// kSharedKeysMmaBf16 (its operands staged once as bf16, a term's roundings
// two values a conversion) likewise; and kDecodeMmaBf16 (a block a query,
// its four warps splitting each tile), kPerQuery where it does not apply.
constexpr IndexerScoreForm kForms[] = {
    IndexerScoreForm::kPerQuery,         IndexerScoreForm::kGrouped,
    IndexerScoreForm::kSharedKeys,       IndexerScoreForm::kSharedKeysMma,
    IndexerScoreForm::kSharedKeysMmaSum, IndexerScoreForm::kSharedKeysMmaBf16,
    IndexerScoreForm::kDecodeMmaBf16};

struct Shape {
  int64_t queries;
  int heads;
  int dim;
  int64_t keys;
};

// Runs both backends on fresh random inputs and requires bit-identical
// scores: the GPU performs the CPU's operations in the CPU's order with the
// same roundings (the header's contract), in both modes.
void Compare(const Shape& shape, bool round_bf16, uint32_t seed, IndexerScoreForm form) {
  SCOPED_TRACE(::testing::Message() << "queries " << shape.queries << " heads " << shape.heads
                                    << " dim " << shape.dim << " keys " << shape.keys << " bf16 "
                                    << round_bf16 << " form " << static_cast<int>(form));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(shape.queries * shape.heads * shape.dim), k(shape.keys * shape.dim),
      weights(shape.queries * shape.heads);
  // Inputs as the model feeds them: bf16 values in bf16 mode.
  auto value = [&](float scale) {
    const float v = scale * normal(rng);
    return round_bf16 ? RoundToBf16(v) : v;
  };
  for (float& v : q) v = value(1.0f);
  for (float& v : k) v = value(1.0f);
  for (float& v : weights) v = value(0.02f);
  // Visible lengths: none, all, and everything between.
  std::vector<int64_t> visible(shape.queries);
  std::uniform_int_distribution<int64_t> pick(0, shape.keys);
  for (int64_t s = 0; s < shape.queries; ++s) {
    visible[s] = s == 0 ? shape.keys : s == 1 ? 0 : pick(rng);
  }
  std::vector<float> want(shape.queries * shape.keys);
  ASSERT_TRUE(cpu::IndexerScore({.q = q, .k = k, .weights = weights, .visible_len = visible,
                                 .out = want, .queries = shape.queries, .heads = shape.heads,
                                 .dim = shape.dim, .keys = shape.keys, .round_bf16 = round_bf16})
                  .ok());

  DeviceBuffer<float> dq(q), dk(k), dweights(weights), dout(want.size());
  DeviceBuffer<int64_t> dvisible(visible);
  dout.Poison();
  ASSERT_TRUE(IndexerScore({.q = dq.get(),
                            .k = dk.get(),
                            .weights = dweights.get(),
                            .visible_len = dvisible.get(),
                            .out = dout.get(),
                            .queries = shape.queries,
                            .heads = shape.heads,
                            .dim = shape.dim,
                            .keys = shape.keys,
                            .round_bf16 = round_bf16,
                            .form = form},
                           nullptr)
                  .ok());
  const std::vector<float> got = dout.Download();
  int64_t mismatches = 0, first = -1, finite = 0;
  double max_abs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      if (mismatches++ == 0) first = static_cast<int64_t>(i);
      if (std::isfinite(want[i])) max_abs = std::max(max_abs, std::fabs(double(got[i]) - want[i]));
    }
    finite += std::isfinite(want[i]);
  }
  std::printf("queries %lld heads %d dim %d keys %lld bf16 %d: %lld finite scores, %lld differ "
              "(max abs %.3g)\n",
              static_cast<long long>(shape.queries), shape.heads, shape.dim,
              static_cast<long long>(shape.keys), round_bf16, static_cast<long long>(finite),
              static_cast<long long>(mismatches), max_abs);
  EXPECT_GT(finite, 0);
  EXPECT_EQ(mismatches, 0) << "first at query " << first / shape.keys << " key "
                           << first % shape.keys << ": got " << got[first] << " want "
                           << want[first];
}

TEST(IndexerScoreCudaTest, BitIdenticalToTheCpuReference) {
  const Shape shapes[] = {
      {.queries = 5, .heads = 32, .dim = 128, .keys = 3000},  // V4.1 (index_n_heads 32)
      {.queries = 2, .heads = 64, .dim = 128, .keys = 129},   // 64 heads, a 1-key tail tile
      {.queries = 3, .heads = 1, .dim = 1, .keys = 1},
      {.queries = 9, .heads = 3, .dim = 37, .keys = 300},
      // More queries than one grid column takes (65535): blocks loop over queries.
      {.queries = 70000, .heads = 1, .dim = 4, .keys = 3},
  };
  uint32_t seed = 1;
  for (const Shape& shape : shapes) {
    for (bool round_bf16 : {false, true}) {
      for (IndexerScoreForm form : kForms) Compare(shape, round_bf16, seed++, form);
    }
  }
}

// Per-query key blocks of one pool (key_offset): row s must equal the CPU
// reference run on query s alone with the `keys` pool rows from
// key_offset[s], bit for bit, -inf past visible_len[s]. Blocks overlap, one
// query repeats another's offset, and the last query's visible keys end
// exactly at the pool's end (rows past a query's visible length need not
// exist: the kernel must not read them).
//
// With `mxfp4_keys` the pool goes to the device as MXFP4 codes + scales
// (cpu::QuantizeFp4, block 32, E8M0) and the CPU reference scores their
// dequantized values.
void CompareWithOffsets(const Shape& shape, int64_t pool_rows, bool round_bf16, uint32_t seed,
                        IndexerScoreForm form, bool mxfp4_keys = false) {
  SCOPED_TRACE(::testing::Message()
               << "key_offset: queries " << shape.queries << " heads " << shape.heads << " dim "
               << shape.dim << " keys " << shape.keys << " pool " << pool_rows << " bf16 "
               << round_bf16 << " mxfp4 keys " << mxfp4_keys << " form " << static_cast<int>(form));
  ASSERT_GE(pool_rows, 1);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto value = [&](float scale) {
    const float v = scale * normal(rng);
    return round_bf16 ? RoundToBf16(v) : v;
  };
  const int64_t qsize = int64_t{shape.heads} * shape.dim;
  std::vector<float> q(shape.queries * qsize), pool(pool_rows * shape.dim),
      weights(shape.queries * shape.heads);
  for (float& v : q) v = value(1.0f);
  for (float& v : pool) v = value(1.0f);
  for (float& v : weights) v = value(0.02f);
  // Each query: an offset into the pool and a visible length that fits it.
  std::vector<int64_t> offset(shape.queries), visible(shape.queries);
  std::uniform_int_distribution<int64_t> pick_offset(0, pool_rows - 1);
  for (int64_t s = 0; s < shape.queries; ++s) {
    offset[s] = pick_offset(rng);
    const int64_t room = std::min(shape.keys, pool_rows - offset[s]);
    // A lone query sees at least one key, so the comparison has finite scores.
    const int64_t least = shape.queries == 1 ? std::min<int64_t>(1, room) : 0;
    visible[s] = std::uniform_int_distribution<int64_t>(least, room)(rng);
  }
  if (shape.queries > 1) {  // the last query's visible keys end at the pool's end
    const int64_t s = shape.queries - 1;
    visible[s] = std::min(shape.keys, pool_rows);
    offset[s] = pool_rows - visible[s];
  }
  if (shape.queries > 2) {  // offset 0 with every key visible, shared with query 1
    offset[0] = 0;
    visible[0] = std::min(shape.keys, pool_rows);
    offset[1] = 0;
  }
  std::vector<uint8_t> codes(mxfp4_keys ? pool.size() / 2 : 1),
      scales(mxfp4_keys ? pool.size() / 32 : 1);
  if (mxfp4_keys) {
    ASSERT_EQ(shape.dim % 32, 0);
    ASSERT_TRUE(cpu::QuantizeFp4(pool, 32, cpu::Fp4Scale::kE8m0, codes, scales).ok());
    ASSERT_TRUE(cpu::DequantizeFp4(codes, scales, 32, cpu::Fp4Scale::kE8m0, pool).ok());
  }
  DeviceBuffer<float> dq(q), dpool(pool), dweights(weights), dout(shape.queries * shape.keys);
  DeviceBuffer<uint8_t> dcodes(codes), dscales(scales);
  DeviceBuffer<int64_t> dvisible(visible), doffset(offset);
  dout.Poison();
  IndexerScoreParams params{.q = dq.get(),
                            .k = dpool.get(),
                            .weights = dweights.get(),
                            .visible_len = dvisible.get(),
                            .out = dout.get(),
                            .queries = shape.queries,
                            .heads = shape.heads,
                            .dim = shape.dim,
                            .keys = shape.keys,
                            .round_bf16 = round_bf16,
                            .key_offset = doffset.get(),
                            .form = form};
  if (mxfp4_keys) {
    params.k = nullptr;
    params.k_codes = dcodes.get();
    params.k_scales = dscales.get();
  }
  ASSERT_TRUE(IndexerScore(params, nullptr).ok());
  const std::vector<float> got = dout.Download();
  int64_t mismatches = 0, finite = 0, first = -1;
  std::vector<float> block(shape.keys * shape.dim), want(shape.keys);
  for (int64_t s = 0; s < shape.queries; ++s) {
    // The query's own keys; rows past the pool (never visible) are filled
    // with a value the scores would show.
    for (int64_t t = 0; t < shape.keys; ++t) {
      for (int c = 0; c < shape.dim; ++c) {
        const int64_t row = offset[s] + t;
        block[t * shape.dim + c] = row < pool_rows ? pool[row * shape.dim + c] : 1e30f;
      }
    }
    const int64_t vis = visible[s];
    ASSERT_TRUE(cpu::IndexerScore({.q = std::span<const float>(q).subspan(s * qsize, qsize),
                                   .k = block,
                                   .weights = std::span<const float>(weights).subspan(
                                       s * shape.heads, shape.heads),
                                   .visible_len = std::span<const int64_t>(&vis, 1),
                                   .out = want, .queries = 1, .heads = shape.heads,
                                   .dim = shape.dim, .keys = shape.keys,
                                   .round_bf16 = round_bf16})
                    .ok());
    for (int64_t t = 0; t < shape.keys; ++t) {
      const float g = got[s * shape.keys + t];
      finite += std::isfinite(want[t]);
      if (std::memcmp(&g, &want[t], sizeof(float)) != 0) {
        if (mismatches++ == 0) first = s * shape.keys + t;
      }
      if (t >= vis && g != -INFINITY) ++mismatches;  // redundant with the CPU, but explicit
    }
  }
  std::printf("key_offset: queries %lld heads %d dim %d keys %lld pool %lld bf16 %d: %lld finite "
              "scores, %lld differ\n",
              static_cast<long long>(shape.queries), shape.heads, shape.dim,
              static_cast<long long>(shape.keys), static_cast<long long>(pool_rows), round_bf16,
              static_cast<long long>(finite), static_cast<long long>(mismatches));
  EXPECT_GT(finite, 0);
  EXPECT_EQ(mismatches, 0) << "first at query " << first / shape.keys << " key "
                           << first % shape.keys << " (offset "
                           << (first >= 0 ? offset[first / shape.keys] : -1) << ", visible "
                           << (first >= 0 ? visible[first / shape.keys] : -1) << ")";
}

TEST(IndexerScoreCudaTest, PerQueryKeyOffsetsAreBitIdenticalToTheCpuOnEachBlock) {
  struct OffsetCase {
    Shape shape;
    int64_t pool_rows;
  };
  const OffsetCase cases[] = {
      {{.queries = 6, .heads = 32, .dim = 128, .keys = 300}, 1000},  // V4.1 heads, tile tails
      {{.queries = 9, .heads = 3, .dim = 37, .keys = 129}, 200},
      {{.queries = 1, .heads = 2, .dim = 16, .keys = 50}, 50},       // one query, whole pool
      {{.queries = 4, .heads = 1, .dim = 1, .keys = 1}, 3},
      // More queries than one grid column takes: a block restages the tile
      // for each of its queries.
      {{.queries = 70000, .heads = 1, .dim = 4, .keys = 3}, 500},
  };
  uint32_t seed = 50;
  for (const OffsetCase& c : cases) {
    for (bool round_bf16 : {false, true}) {
      for (IndexerScoreForm form : kForms) {
        CompareWithOffsets(c.shape, c.pool_rows, round_bf16, seed++, form);
      }
    }
  }
}

// The decoder's stored index keys: MXFP4 codes + E8M0 scales score exactly
// as their dequantized fp32 values (bit for bit against the CPU on those).
TEST(IndexerScoreCudaTest, Mxfp4KeysScoreAsTheirDequantizedValues) {
  struct OffsetCase {
    Shape shape;
    int64_t pool_rows;
  };
  const OffsetCase cases[] = {
      {{.queries = 6, .heads = 32, .dim = 128, .keys = 300}, 1000},  // V4.1 indexer shapes
      {{.queries = 3, .heads = 4, .dim = 32, .keys = 129}, 200},
      {{.queries = 1, .heads = 2, .dim = 64, .keys = 50}, 50},
  };
  uint32_t seed = 90;
  for (const OffsetCase& c : cases) {
    for (bool round_bf16 : {false, true}) {
      for (IndexerScoreForm form : kForms) {
        CompareWithOffsets(c.shape, c.pool_rows, round_bf16, seed++, form, /*mxfp4_keys=*/true);
      }
    }
  }
  // dim not a multiple of 32, or both key forms at once: refused.
  IndexerScoreParams bad{.q = reinterpret_cast<const float*>(256),
                         .weights = reinterpret_cast<const float*>(256),
                         .visible_len = reinterpret_cast<const int64_t*>(256),
                         .out = reinterpret_cast<float*>(256),
                         .queries = 1,
                         .heads = 1,
                         .dim = 48,
                         .keys = 4,
                         .k_codes = reinterpret_cast<const uint8_t*>(256),
                         .k_scales = reinterpret_cast<const uint8_t*>(256)};
  EXPECT_FALSE(SupportsIndexerScore(bad));
  bad.dim = 64;
  EXPECT_TRUE(SupportsIndexerScore(bad));
  bad.k = reinterpret_cast<const float*>(256);
  EXPECT_FALSE(SupportsIndexerScore(bad));
}

// A negative offset cannot be refused on the host: that query reads no keys
// and scores its visible keys NaN (-inf past visible_len); the other queries
// are unaffected.
TEST(IndexerScoreCudaTest, ANegativeKeyOffsetGivesNaNForThatQueryOnly) {
  constexpr int kHeads = 4, kDim = 8;
  constexpr int64_t kKeys = 140, kQueries = 3;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q(kQueries * kHeads * kDim), pool(kKeys * kDim), weights(kQueries * kHeads);
  for (float& v : q) v = normal(rng);
  for (float& v : pool) v = normal(rng);
  for (float& v : weights) v = 0.02f * normal(rng);
  const std::vector<int64_t> offset = {0, -5, 0}, visible = {kKeys, 130, 7};
  std::vector<float> want(kQueries * kKeys);
  ASSERT_TRUE(cpu::IndexerScore({.q = q, .k = pool, .weights = weights, .visible_len = visible,
                                 .out = want, .queries = kQueries, .heads = kHeads, .dim = kDim,
                                 .keys = kKeys})
                  .ok());
  DeviceBuffer<float> dq(q), dpool(pool), dweights(weights), dout(want.size());
  DeviceBuffer<int64_t> dvisible(visible), doffset(offset);
  for (IndexerScoreForm form : kForms) {
    dout.Poison(0);
    ASSERT_TRUE(IndexerScore({.q = dq.get(),
                              .k = dpool.get(),
                              .weights = dweights.get(),
                              .visible_len = dvisible.get(),
                              .out = dout.get(),
                              .queries = kQueries,
                              .heads = kHeads,
                              .dim = kDim,
                              .keys = kKeys,
                              .key_offset = doffset.get(),
                              .form = form},
                             nullptr)
                    .ok());
    const std::vector<float> got = dout.Download();
    int64_t wrong = 0;
    for (int64_t s = 0; s < kQueries; ++s) {
      for (int64_t t = 0; t < kKeys; ++t) {
        const float g = got[s * kKeys + t];
        if (s == 1) {
          wrong += t < visible[s] ? !std::isnan(g) : g != -INFINITY;
        } else {
          wrong += std::memcmp(&g, &want[s * kKeys + t], sizeof(float)) != 0;
        }
      }
    }
    EXPECT_EQ(wrong, 0) << "form " << static_cast<int>(form);
  }
}

// Paged key pools (block_table): the slots' tables share a pool of blocks of
// e keys, handed out in a shuffled order, so a slot's keys are scattered
// over the pool; each query (a slot, a visible length inside its table's
// coverage) must equal the CPU reference on the keys gathered through its
// table, bit for bit, with fp32 and with MXFP4 keys. A query whose slot is
// -1 scores its visible keys NaN; blocks past a slot's coverage are -1 and
// never read.
void CompareWithTables(const Shape& shape, int slots, int table_width, int e, bool round_bf16,
                       uint32_t seed, bool mxfp4_keys, IndexerScoreForm form, int run = 1,
                       bool causal = false) {
  SCOPED_TRACE(::testing::Message()
               << "block_table: queries " << shape.queries << " heads " << shape.heads << " dim "
               << shape.dim << " keys " << shape.keys << " e " << e << " bf16 " << round_bf16
               << " mxfp4 keys " << mxfp4_keys << " form " << static_cast<int>(form) << " run "
               << run << " causal " << causal);
  ASSERT_GE(int64_t{table_width} * e, shape.keys);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto value = [&](float scale) {
    const float v = scale * normal(rng);
    return round_bf16 ? RoundToBf16(v) : v;
  };
  const int64_t blocks = int64_t{slots} * table_width, pool_rows = blocks * e;
  const int64_t qsize = int64_t{shape.heads} * shape.dim;
  std::vector<float> q(shape.queries * qsize), pool(pool_rows * shape.dim),
      weights(shape.queries * shape.heads);
  for (float& v : q) v = value(1.0f);
  for (float& v : pool) v = value(1.0f);
  for (float& v : weights) v = value(0.02f);
  std::vector<int32_t> order(blocks);
  for (int64_t b = 0; b < blocks; ++b) order[b] = static_cast<int32_t>(b);
  std::shuffle(order.begin(), order.end(), rng);
  // Slot s holds covered[s] blocks (the rest of its row -1).
  std::vector<int32_t> table(blocks, -1);
  std::vector<int64_t> covered(slots);
  for (int sl = 0; sl < slots; ++sl) {
    covered[sl] = std::uniform_int_distribution<int64_t>(1, table_width)(rng);
    for (int64_t j = 0; j < covered[sl]; ++j) {
      table[sl * table_width + j] = order[sl * table_width + j];
    }
  }
  std::vector<int32_t> qslot(shape.queries);
  std::vector<int64_t> visible(shape.queries);
  // Slots in runs of `run` queries (a prefill chunk's rows share one); with
  // `causal` a run's visible lengths grow as a prompt's positions do.
  for (int64_t s = 0; s < shape.queries; ++s) {
    qslot[s] = static_cast<int32_t>((s / run) % slots);
    const int64_t room = std::min(shape.keys, covered[qslot[s]] * e);
    visible[s] = causal ? std::max<int64_t>(1, room * (s % run + 1) / run)
                        : std::uniform_int_distribution<int64_t>(1, room)(rng);
  }
  const int64_t lost = shape.queries > 2 ? 1 : -1;  // the query without a slot
  if (lost >= 0) qslot[lost] = -1;
  std::vector<uint8_t> codes(mxfp4_keys ? pool.size() / 2 : 1),
      scales(mxfp4_keys ? pool.size() / 32 : 1);
  if (mxfp4_keys) {
    ASSERT_EQ(shape.dim % 32, 0);
    ASSERT_TRUE(cpu::QuantizeFp4(pool, 32, cpu::Fp4Scale::kE8m0, codes, scales).ok());
    ASSERT_TRUE(cpu::DequantizeFp4(codes, scales, 32, cpu::Fp4Scale::kE8m0, pool).ok());
  }
  DeviceBuffer<float> dq(q), dpool(pool), dweights(weights), dout(shape.queries * shape.keys);
  DeviceBuffer<uint8_t> dcodes(codes), dscales(scales);
  DeviceBuffer<int64_t> dvisible(visible);
  DeviceBuffer<int32_t> dtable(table), dslot(qslot);
  dout.Poison();
  IndexerScoreParams params{.q = dq.get(),
                            .k = dpool.get(),
                            .weights = dweights.get(),
                            .visible_len = dvisible.get(),
                            .out = dout.get(),
                            .queries = shape.queries,
                            .heads = shape.heads,
                            .dim = shape.dim,
                            .keys = shape.keys,
                            .round_bf16 = round_bf16,
                            .block_table = dtable.get(),
                            .table_slot = dslot.get(),
                            .table_width = table_width,
                            .entries_per_block = e,
                            .form = form};
  if (mxfp4_keys) {
    params.k = nullptr;
    params.k_codes = dcodes.get();
    params.k_scales = dscales.get();
  }
  ASSERT_TRUE(IndexerScore(params, nullptr).ok());
  const std::vector<float> got = dout.Download();
  int64_t mismatches = 0, finite = 0, first = -1;
  std::vector<float> block(shape.keys * shape.dim), want(shape.keys);
  for (int64_t s = 0; s < shape.queries; ++s) {
    const int64_t vis = visible[s];
    if (s == lost) {
      for (int64_t t = 0; t < shape.keys; ++t) {
        const float g = got[s * shape.keys + t];
        mismatches += t < vis ? !std::isnan(g) : g != -INFINITY;
      }
      continue;
    }
    for (int64_t t = 0; t < shape.keys; ++t) {
      const int32_t b = table[qslot[s] * table_width + t / e];
      for (int c = 0; c < shape.dim; ++c) {
        block[t * shape.dim + c] = b < 0 ? 1e30f : pool[(b * e + t % e) * shape.dim + c];
      }
    }
    ASSERT_TRUE(cpu::IndexerScore({.q = std::span<const float>(q).subspan(s * qsize, qsize),
                                   .k = block,
                                   .weights = std::span<const float>(weights).subspan(
                                       s * shape.heads, shape.heads),
                                   .visible_len = std::span<const int64_t>(&vis, 1),
                                   .out = want,
                                   .queries = 1,
                                   .heads = shape.heads,
                                   .dim = shape.dim,
                                   .keys = shape.keys,
                                   .round_bf16 = round_bf16})
                    .ok());
    for (int64_t t = 0; t < shape.keys; ++t) {
      const float g = got[s * shape.keys + t];
      finite += std::isfinite(want[t]);
      if (std::memcmp(&g, &want[t], sizeof(float)) != 0 && mismatches++ == 0) {
        first = s * shape.keys + t;
      }
    }
  }
  std::printf(
      "block_table: queries %lld heads %d dim %d keys %lld e %d bf16 %d mxfp4 %d: %lld "
      "finite scores, %lld differ\n",
      static_cast<long long>(shape.queries), shape.heads, shape.dim,
      static_cast<long long>(shape.keys), e, round_bf16, mxfp4_keys, static_cast<long long>(finite),
      static_cast<long long>(mismatches));
  EXPECT_GT(finite, 0);
  EXPECT_EQ(mismatches, 0) << "first at query " << first / shape.keys << " key "
                           << first % shape.keys;
}

TEST(IndexerScoreCudaTest, PagedKeysThroughBlockTablesAreBitIdenticalToTheCpu) {
  struct TableCase {
    Shape shape;
    int slots, table_width, e;
  };
  const TableCase cases[] = {
      {{.queries = 6, .heads = 32, .dim = 128, .keys = 300}, 4, 10, 32},  // V4.1 heads, ratio 4
      {{.queries = 5, .heads = 4, .dim = 32, .keys = 130}, 3, 130, 1},    // ratio 128: 1 a block
      {{.queries = 9, .heads = 2, .dim = 64, .keys = 129}, 9, 5, 27},     // blocks across tiles
  };
  uint32_t seed = 300;
  for (const TableCase& c : cases) {
    for (bool mxfp4 : {false, true}) {
      for (bool round_bf16 : {false, true}) {
        for (IndexerScoreForm form : kForms) {
          CompareWithTables(c.shape, c.slots, c.table_width, c.e, round_bf16, seed++, mxfp4, form);
        }
      }
    }
  }
}

TEST(IndexerScoreCudaTest, RefusesWhatItDoesNotSupport) {
  float* f = reinterpret_cast<float*>(16);
  int64_t* v = reinterpret_cast<int64_t*>(16);
  const IndexerScoreParams good{.q = f, .k = f, .weights = f, .visible_len = v, .out = f,
                                .queries = 1, .heads = 32, .dim = 128, .keys = 8};
  EXPECT_TRUE(SupportsIndexerScore(good));
  IndexerScoreParams p = good;
  p.dim = 0;
  EXPECT_EQ(IndexerScore(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.heads = 1024;  // the query's heads no longer fit in shared memory
  EXPECT_EQ(IndexerScore(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.visible_len = nullptr;
  EXPECT_EQ(IndexerScore(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  p = good;
  p.keys = -1;
  EXPECT_EQ(IndexerScore(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // key_offset is optional; the key pool is still required.
  p = good;
  p.key_offset = v;
  EXPECT_TRUE(SupportsIndexerScore(p));
  p.k = nullptr;
  EXPECT_EQ(IndexerScore(p, nullptr).code(), absl::StatusCode::kInvalidArgument);
  // A block table excludes key_offset and needs its slots, width and entries.
  int32_t* i = reinterpret_cast<int32_t*>(16);
  p = good;
  p.block_table = i;
  p.table_slot = i;
  p.table_width = 4;
  p.entries_per_block = 2;
  EXPECT_TRUE(SupportsIndexerScore(p));
  p.key_offset = v;
  EXPECT_FALSE(SupportsIndexerScore(p));
  p.key_offset = nullptr;
  p.table_slot = nullptr;
  EXPECT_FALSE(SupportsIndexerScore(p));
  p.table_slot = i;
  p.entries_per_block = 0;
  EXPECT_FALSE(SupportsIndexerScore(p));
}

}  // namespace
}  // namespace weir::kernels::cuda

namespace weir::kernels::cuda {
namespace {

// q_mxfp4 and weights_factor (the fast decoder's indexer inputs made in the
// scoring launch) give the bits of FakeQuant kMxfp4 over q and Scale over the
// weights, launched before: both modes, shapes of V4.1 and small, and a NaN
// in one query's block; with the keys as fp32 rows and as their MXFP4 codes
// (the mma forms then run: 64 heads in two passes, 8 and 4 heads padded to
// a pass, contiguous keys without a table, the NaN block through the tensor
// cores).
TEST(IndexerScoreCudaTest, FusedInputsGiveTheSeparateLaunchesBits) {
  const Shape shapes[] = {{.queries = 5, .heads = 64, .dim = 128, .keys = 200},
                          {.queries = 3, .heads = 8, .dim = 128, .keys = 70},
                          {.queries = 2, .heads = 4, .dim = 32, .keys = 33}};
  uint32_t seed = 700;
  for (const Shape& shape : shapes) {
    for (bool round_bf16 : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "heads " << shape.heads << " dim " << shape.dim << " bf16 " << round_bf16);
      std::mt19937 rng(seed++);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> q(shape.queries * shape.heads * shape.dim), w(shape.queries * shape.heads);
      for (float& v : q) v = std::ldexp(normal(rng), static_cast<int>(rng() % 9) - 4);
      for (float& v : w) v = round_bf16 ? RoundToBf16(normal(rng)) : normal(rng);
      q[shape.heads * shape.dim + 3] = NAN;  // query 1, head 0, its first block
      std::vector<int64_t> visible(shape.queries, shape.keys);
      visible[shape.queries - 1] = shape.keys / 2;
      std::vector<float> k(shape.keys * shape.dim);
      for (float& v : k) v = round_bf16 ? RoundToBf16(normal(rng)) : normal(rng);
      // The keys' MXFP4 form, and k its exact values (both key forms score
      // the same keys).
      std::vector<uint8_t> codes(k.size() / 2), scales(k.size() / 32);
      ASSERT_TRUE(cpu::QuantizeFp4(k, 32, cpu::Fp4Scale::kE8m0, codes, scales).ok());
      ASSERT_TRUE(cpu::DequantizeFp4(codes, scales, 32, cpu::Fp4Scale::kE8m0, k).ok());
      DeviceBuffer<uint8_t> dcodes(codes), dscales(scales);
      const float factor = 0.0625f * 1.0f / std::sqrt(3.0f);
      DeviceBuffer<float> dq(q), dk(k), dw(w), dq2(q.size()), dw2(w);
      DeviceBuffer<int64_t> dvisible(visible);
      ASSERT_TRUE(dense::FakeQuant({.x = dq.get(),
                                    .out = dq2.get(),
                                    .n = static_cast<int64_t>(q.size()),
                                    .format = dense::FakeQuantFormat::kMxfp4},
                                   nullptr)
                      .ok());
      ASSERT_TRUE(decode::Scale({.x = dw2.get(),
                                 .n = static_cast<int64_t>(w.size()),
                                 .factor = factor,
                                 .round_bf16 = round_bf16},
                                nullptr)
                      .ok());
      DeviceBuffer<float> want(shape.queries * shape.keys), got(shape.queries * shape.keys);
      want.Poison();
      got.Poison();
      IndexerScoreParams p{.q = dq2.get(),
                           .k = dk.get(),
                           .weights = dw2.get(),
                           .visible_len = dvisible.get(),
                           .out = want.get(),
                           .queries = shape.queries,
                           .heads = shape.heads,
                           .dim = shape.dim,
                           .keys = shape.keys,
                           .round_bf16 = round_bf16};
      p.form = IndexerScoreForm::kPerQuery;
      ASSERT_TRUE(IndexerScore(p, nullptr).ok());
      p.q = dq.get();
      p.weights = dw.get();
      p.out = got.get();
      p.q_mxfp4 = true;
      p.weights_factor = factor;
      for (bool mxfp4_keys : {false, true}) {
        p.k = mxfp4_keys ? nullptr : dk.get();
        p.k_codes = mxfp4_keys ? dcodes.get() : nullptr;
        p.k_scales = mxfp4_keys ? dscales.get() : nullptr;
        for (IndexerScoreForm form : kForms) {
          p.form = form;
          got.Poison();
          ASSERT_TRUE(IndexerScore(p, nullptr).ok());
          const std::vector<float> a = got.Download(), b = want.Download();
          int64_t differ = 0, nan = 0;
          for (size_t i = 0; i < a.size(); ++i) {
            differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
            nan += std::isnan(b[i]);
          }
          EXPECT_EQ(differ, 0) << "form " << static_cast<int>(form) << " ran "
                               << static_cast<int>(ResolveIndexerScoreForm(p)) << " mxfp4 keys "
                               << mxfp4_keys;
          EXPECT_GT(nan, 0);  // the NaN block reached query 1's scores
        }
      }
    }
  }
  IndexerScoreParams bad{.q = reinterpret_cast<const float*>(256),
                         .k = reinterpret_cast<const float*>(256),
                         .weights = reinterpret_cast<const float*>(256),
                         .visible_len = reinterpret_cast<const int64_t*>(256),
                         .out = reinterpret_cast<float*>(256),
                         .queries = 1,
                         .heads = 1,
                         .dim = 48,
                         .keys = 4};
  EXPECT_TRUE(SupportsIndexerScore(bad));
  bad.q_mxfp4 = true;  // 48 is not whole MXFP4 blocks
  EXPECT_FALSE(SupportsIndexerScore(bad));
}

// The grouped form on a prefill chunk's pattern: many queries of one slot in
// a row (they share each staged key tile) with visible lengths that grow as
// a prompt's positions do, next to runs of other slots and a query without
// one; heads that do not fill a warp's 16 (8, 20) and V4.1's 32, MXFP4 and
// fp32 keys. Bit for bit the CPU's, in both forms.
TEST(IndexerScoreCudaTest, GroupedFormOnPrefillRunsIsBitIdenticalToTheCpu) {
  struct RunCase {
    Shape shape;
    int slots, table_width, e, run;
  };
  const RunCase cases[] = {
      {{.queries = 300, .heads = 32, .dim = 128, .keys = 200}, 2, 50, 4, 150},  // V4.1, ratio 4
      {{.queries = 97, .heads = 8, .dim = 128, .keys = 70}, 3, 10, 8, 40},      // small's heads
      {{.queries = 41, .heads = 20, .dim = 64, .keys = 65}, 4, 3, 32, 7},       // 20: two warps
  };
  uint32_t seed = 900;
  for (const RunCase& c : cases) {
    for (bool mxfp4 : {false, true}) {
      for (IndexerScoreForm form : kForms) {
        CompareWithTables(c.shape, c.slots, c.table_width, c.e, /*round_bf16=*/true, seed++, mxfp4,
                          form, c.run, /*causal=*/true);
      }
    }
  }
  const IndexerScoreParams prefill{.queries = 4096, .heads = 32, .dim = 128, .keys = 1026};
  EXPECT_EQ(ResolveIndexerScoreForm(prefill), IndexerScoreForm::kPerQuery);  // kAuto
  IndexerScoreParams p = prefill;
  p.form = IndexerScoreForm::kGrouped;
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kGrouped);
  p.dim = 37;  // not whole float4 steps
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kPerQuery);
  p = prefill;
  p.heads = 129;  // past 8 warps of 16 heads
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kPerQuery);
  p = prefill;
  p.form = IndexerScoreForm::kSharedKeys;
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kSharedKeys);
  p.heads = 64;  // 169 KB: one block an SM, still within 227 KiB
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kSharedKeys);
  p.heads = 96;  // past 227 KiB
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kPerQuery);
  p.heads = 32;
  p.dim = 37;  // not whole float4 steps
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kPerQuery);
  p.dim = 36;  // the runtime-dim instance
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kSharedKeys);
  p = prefill;
  p.form = IndexerScoreForm::kSharedKeysMma;  // without q's MXFP4 form and MXFP4 keys: fp32
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kSharedKeys);
  p.q_mxfp4 = true;
  p.k_codes = reinterpret_cast<const uint8_t*>(256);
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kSharedKeysMma);
  p.form = IndexerScoreForm::kSharedKeysMmaSum;
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kSharedKeysMmaSum);
  p.q_mxfp4 = false;  // the fp32 staging's form
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kSharedKeys);
  p.q_mxfp4 = true;
  p.form = IndexerScoreForm::kSharedKeysMmaBf16;
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kSharedKeysMmaBf16);
  p.q_mxfp4 = false;
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kSharedKeys);
  p.q_mxfp4 = true;
  p.dim = 48;  // the mma forms need dim % 32 == 0
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kSharedKeys);
  p.dim = 128;
  p.heads = 96;  // bf16 staging: 131 KB, where the fp32 forms pass 227 KiB
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kSharedKeysMmaBf16);
  p.heads = 32;
  p.form = IndexerScoreForm::kSharedKeysMma;
  p.heads = 96;  // past 227 KiB
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kPerQuery);
  p = prefill;
  p.form = IndexerScoreForm::kDecodeMmaBf16;  // fp32 keys: the per-query form
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kPerQuery);
  p.q_mxfp4 = true;
  p.k_codes = reinterpret_cast<const uint8_t*>(256);
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kDecodeMmaBf16);
  p.heads = 96;  // 41 KB
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kDecodeMmaBf16);
  p.dim = 48;
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kPerQuery);
  p.dim = 128;
  p.q_mxfp4 = false;
  EXPECT_EQ(ResolveIndexerScoreForm(p), IndexerScoreForm::kPerQuery);
}

// A V4.1 prefill chunk as the device decoder launches it (SelectCompressed
// with fold_row_ops): 32 heads x 128, MXFP4 keys of one sequence through its
// slot's block table (32 entries a block, the blocks shuffled), q's MXFP4 form
// and the weights' scale made in the launch, both rounding modes. The rows'
// visible lengths grow as a causal chunk's do at ratio 4, from 0 (the first
// chunk of a prompt) or from deep in the context (a later chunk), and the key
// count (context / 4 + 2) is not a multiple of 64; 602 rows leave the last
// group of four short. Every form, bit for bit the CPU's on q fake-quantized
// (FakeQuant kMxfp4), the weights scaled as decode's Scale and the keys
// dequantized.
// Also at 96 heads (three passes of 32; the bf16 staging's form runs where
// the fp32 shared-keys forms pass 227 KiB and fall back), the first context.
TEST(IndexerScoreCudaTest, V41PrefillChunkIsBitIdenticalToTheCpu) {
  constexpr int kDim = 128, kEntries = 32, kRatio = 4;
  constexpr int64_t kQueries = 602;
  const float factor = static_cast<float>(1.0 / std::sqrt(128.0) / std::sqrt(32.0));
  uint32_t seed = 1100;
  for (const auto& [kHeads, context] :
       {std::pair<int, int64_t>{32, kQueries}, std::pair<int, int64_t>{32, 2000},
        std::pair<int, int64_t>{96, kQueries}}) {
    for (bool round_bf16 : {false, true}) {
      const int64_t keys = context / kRatio + 2;
      SCOPED_TRACE(::testing::Message() << "heads " << kHeads << " context " << context << " keys "
                                        << keys << " bf16 " << round_bf16);
      ASSERT_NE(keys % 64, 0);
      std::mt19937 rng(seed++);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      auto value = [&](float v) { return round_bf16 ? RoundToBf16(v) : v; };
      const int table_width = static_cast<int>((keys + kEntries - 1) / kEntries);
      const int64_t pool_rows = int64_t{table_width} * kEntries;
      std::vector<float> q(kQueries * kHeads * kDim), w(kQueries * kHeads), pool(pool_rows * kDim);
      for (float& v : q) v = value(std::ldexp(normal(rng), static_cast<int>(rng() % 9) - 4));
      for (float& v : w) v = value(normal(rng));
      for (float& v : pool) v = value(normal(rng));
      std::vector<uint8_t> codes(pool.size() / 2), scales(pool.size() / 32);
      ASSERT_TRUE(cpu::QuantizeFp4(pool, 32, cpu::Fp4Scale::kE8m0, codes, scales).ok());
      ASSERT_TRUE(cpu::DequantizeFp4(codes, scales, 32, cpu::Fp4Scale::kE8m0, pool).ok());
      std::vector<int32_t> table(table_width);
      for (int b = 0; b < table_width; ++b) table[b] = b;
      std::shuffle(table.begin(), table.end(), rng);
      const std::vector<int32_t> slot(kQueries, 0);
      std::vector<int64_t> visible(kQueries);
      for (int64_t s = 0; s < kQueries; ++s) {
        visible[s] = std::min(keys, (context - kQueries + s + 1) / kRatio);
      }
      // The CPU's inputs: q as FakeQuant kMxfp4 makes it, the weights as
      // Scale does, the keys in key order through the table.
      DeviceBuffer<float> dq(q), dqf(q.size()), dw(w);
      ASSERT_TRUE(dense::FakeQuant({.x = dq.get(),
                                    .out = dqf.get(),
                                    .n = static_cast<int64_t>(q.size()),
                                    .format = dense::FakeQuantFormat::kMxfp4},
                                   nullptr)
                      .ok());
      const std::vector<float> qf = dqf.Download();
      std::vector<float> ws(w.size()), k(keys * kDim);
      for (size_t i = 0; i < w.size(); ++i) ws[i] = value(w[i] * factor);
      for (int64_t t = 0; t < keys; ++t) {
        const int64_t row = int64_t{table[t / kEntries]} * kEntries + t % kEntries;
        std::copy_n(pool.begin() + row * kDim, kDim, k.begin() + t * kDim);
      }
      std::vector<float> want(kQueries * keys);
      ASSERT_TRUE(cpu::IndexerScore({.q = qf,
                                     .k = k,
                                     .weights = ws,
                                     .visible_len = visible,
                                     .out = want,
                                     .queries = kQueries,
                                     .heads = kHeads,
                                     .dim = kDim,
                                     .keys = keys,
                                     .round_bf16 = round_bf16})
                      .ok());
      DeviceBuffer<uint8_t> dcodes(codes), dscales(scales);
      DeviceBuffer<int32_t> dtable(table), dslot(slot);
      DeviceBuffer<int64_t> dvisible(visible);
      DeviceBuffer<float> dout(want.size());
      IndexerScoreParams p{.q = dq.get(),
                           .weights = dw.get(),
                           .visible_len = dvisible.get(),
                           .out = dout.get(),
                           .queries = kQueries,
                           .heads = kHeads,
                           .dim = kDim,
                           .keys = keys,
                           .round_bf16 = round_bf16,
                           .block_table = dtable.get(),
                           .table_slot = dslot.get(),
                           .table_width = table_width,
                           .entries_per_block = kEntries,
                           .k_codes = dcodes.get(),
                           .k_scales = dscales.get(),
                           .q_mxfp4 = true,
                           .weights_factor = factor};
      for (IndexerScoreForm form : kForms) {
        p.form = form;
        dout.Poison();
        ASSERT_TRUE(IndexerScore(p, nullptr).ok());
        const std::vector<float> got = dout.Download();
        int64_t differ = 0, finite = 0, first = -1;
        for (size_t i = 0; i < got.size(); ++i) {
          finite += std::isfinite(want[i]);
          if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && differ++ == 0) {
            first = static_cast<int64_t>(i);
          }
        }
        std::printf(
            "V4.1 prefill: heads %d context %lld keys %lld bf16 %d form %d: %lld finite "
            "scores, %lld differ\n",
            kHeads, static_cast<long long>(context), static_cast<long long>(keys), round_bf16,
            static_cast<int>(form), static_cast<long long>(finite), static_cast<long long>(differ));
        EXPECT_GT(finite, 0);
        EXPECT_EQ(differ, 0) << "form " << static_cast<int>(form) << ", first at query "
                             << first / keys << " key " << first % keys << ": got " << got[first]
                             << " want " << want[first];
      }
    }
  }
}

}  // namespace
}  // namespace weir::kernels::cuda
