#include "kernels/cuda/moe/engram.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/engram.h"
#include "kernels/cuda/moe/test_util.h"

namespace weir::kernels::cuda {
namespace {

using moe_test::BitMismatches;
using moe_test::DeviceBuffer;
using moe_test::MaxAbsError;
using moe_test::RelativeError;
using moe_test::Synced;

struct Table {
  std::vector<uint8_t> codes, scales;
};

// Every e4m3 code (NaN codes included) and scale codes over the whole E8M0
// range, with the extremes 0 (2^-127) and 0xFF (NaN) present.
Table RandomTable(int64_t rows, int64_t dim, std::mt19937& rng) {
  Table t{std::vector<uint8_t>(rows * dim), std::vector<uint8_t>(rows * dim / 32)};
  for (uint8_t& c : t.codes) c = static_cast<uint8_t>(rng());
  for (uint8_t& s : t.scales) s = static_cast<uint8_t>(100 + rng() % 56);
  t.scales[0] = 0;
  if (t.scales.size() > 2) t.scales[1] = 254, t.scales[2] = 0xFF;
  return t;
}

TEST(EngramLookupCudaTest, BitIdenticalToTheCpu) {
  struct Case {
    int64_t rows, dim, ids;
  };
  for (const Case& c : {Case{1, 32, 1}, Case{1000, 512, 77}, Case{50, 96, 300}}) {
    std::mt19937 rng(c.rows + c.dim + c.ids);
    const Table table = RandomTable(c.rows, c.dim, rng);
    std::vector<int64_t> ids(c.ids);
    for (int64_t& id : ids) id = static_cast<int64_t>(rng() % c.rows);
    ids[0] = 0;
    ids.back() = c.rows - 1;
    std::vector<float> want(c.ids * c.dim);
    ASSERT_TRUE(cpu::EngramLookup(table.codes, table.scales, c.rows, c.dim, ids, want).ok());
    DeviceBuffer<uint8_t> dcodes(table.codes), dscales(table.scales);
    DeviceBuffer<int64_t> dids(ids);
    DeviceBuffer<float> out(want.size());
    DeviceBuffer<int32_t> bad(std::vector<int32_t>{0});
    out.Poison();
    ASSERT_TRUE(EngramLookup({.table = dcodes.get(), .scales = dscales.get(), .ids = dids.get(),
                              .out = out.get(), .bad_count = bad.get(), .table_rows = c.rows,
                              .dim = c.dim, .num_ids = c.ids},
                             nullptr)
                    .ok());
    ASSERT_TRUE(Synced());
    const std::vector<float> got = out.Download();
    EXPECT_EQ(BitMismatches(got, want), 0) << c.rows << "x" << c.dim << " ids " << c.ids;
    EXPECT_EQ(bad.Download()[0], 0);
    // round_bf16: the bf16 boundary in the launch, RoundToBf16 of each value.
    out.Poison();
    ASSERT_TRUE(EngramLookup({.table = dcodes.get(),
                              .scales = dscales.get(),
                              .ids = dids.get(),
                              .out = out.get(),
                              .table_rows = c.rows,
                              .dim = c.dim,
                              .num_ids = c.ids,
                              .round_bf16 = true},
                             nullptr)
                    .ok());
    ASSERT_TRUE(Synced());
    std::vector<float> rounded = want;
    for (float& v : rounded) v = RoundToBf16(v);
    EXPECT_EQ(BitMismatches(out.Download(), rounded), 0)
        << "round_bf16, " << c.rows << "x" << c.dim;
    std::printf("EngramLookup %lldx%lld, %lld ids: %lld bit mismatches\n",
                static_cast<long long>(c.rows), static_cast<long long>(c.dim),
                static_cast<long long>(c.ids), static_cast<long long>(BitMismatches(got, want)));
  }
}

TEST(EngramLookupCudaTest, OutOfRangeIdsGiveNanRowsAndAreCounted) {
  const int64_t rows = 20, dim = 64;
  std::mt19937 rng(3);
  const Table table = RandomTable(rows, dim, rng);
  const std::vector<int64_t> ids = {4, -1, 19, rows, 0};
  DeviceBuffer<uint8_t> dcodes(table.codes), dscales(table.scales);
  DeviceBuffer<int64_t> dids(ids);
  DeviceBuffer<float> out(ids.size() * dim);
  DeviceBuffer<int32_t> bad(std::vector<int32_t>{0});
  ASSERT_TRUE(EngramLookup({.table = dcodes.get(), .scales = dscales.get(), .ids = dids.get(),
                            .out = out.get(), .bad_count = bad.get(), .table_rows = rows,
                            .dim = dim, .num_ids = static_cast<int64_t>(ids.size())},
                           nullptr)
                  .ok());
  ASSERT_TRUE(Synced());
  EXPECT_EQ(bad.Download()[0], 2);
  const std::vector<float> got = out.Download();
  const std::vector<int64_t> good = {4, 19, 0};
  std::vector<float> want(good.size() * dim);
  ASSERT_TRUE(cpu::EngramLookup(table.codes, table.scales, rows, dim, good, want).ok());
  for (int64_t c = 0; c < dim; ++c) {
    EXPECT_TRUE(std::isnan(got[1 * dim + c]));
    EXPECT_TRUE(std::isnan(got[3 * dim + c]));
  }
  const auto row = [&](const std::vector<float>& v, int64_t r) {
    return std::vector<float>(v.begin() + r * dim, v.begin() + (r + 1) * dim);
  };
  EXPECT_EQ(BitMismatches(row(got, 0), row(want, 0)), 0);
  EXPECT_EQ(BitMismatches(row(got, 2), row(want, 1)), 0);
  EXPECT_EQ(BitMismatches(row(got, 4), row(want, 2)), 0);
}

TEST(EngramGateCudaTest, MatchesTheCpuReference) {
  struct Case {
    int64_t tokens;
    int n;
    int64_t dim;
  };
  for (const Case& c : {Case{1, 4, 64}, Case{9, 4, 1024}, Case{3, 1, 33}, Case{17, 4, 4096}}) {
    for (bool bf16 : {false, true}) {
      std::mt19937 rng(c.tokens * 10 + c.n + c.dim + bf16);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      const int64_t sz = c.tokens * c.n * c.dim;
      std::vector<float> x(sz), key(sz), value(c.tokens * c.dim), weight(c.n * c.dim);
      for (float& v : x) v = normal(rng);
      for (float& v : key) v = normal(rng);
      for (float& v : value) v = normal(rng);
      for (float& v : weight) v = 1.0f + 0.3f * normal(rng);
      std::vector<uint8_t> mask(c.tokens);
      for (uint8_t& m : mask) m = rng() % 4 != 0;
      if (c.tokens > 1) mask[0] = 0;
      std::vector<float> want = x;
      ASSERT_TRUE(cpu::EngramGate({.x = want, .key = key, .value = value, .weight = weight,
                                   .token_mask = mask, .tokens = c.tokens, .hc_mult = c.n,
                                   .dim = c.dim, .eps = 1e-20f, .bf16_boundaries = bf16})
                      .ok());
      DeviceBuffer<float> dx(x), dkey(key), dvalue(value), dweight(weight);
      DeviceBuffer<uint8_t> dmask(mask);
      ASSERT_TRUE(EngramGate({.x = dx.get(), .key = dkey.get(), .value = dvalue.get(),
                              .weight = dweight.get(), .token_mask = dmask.get(),
                              .tokens = c.tokens, .hc_mult = c.n, .dim = c.dim, .eps = 1e-20f,
                              .round_bf16 = bf16},
                             nullptr)
                      .ok());
      ASSERT_TRUE(Synced());
      const std::vector<float> got = dx.Download();
      // The sums in the CPU's fmath::LaneSum order, the same sigmoid
      // (fmath::SigmoidF) and no FMA: bit-identical, fp32 and bf16.
      const double rel = RelativeError(got, want);
      int64_t flips = 0;
      for (int64_t i = 0; i < sz; ++i) {
        const double d = std::fabs(double(got[i]) - want[i]);
        if (d == 0) continue;
        ++flips;
        if (mask[i / (c.n * c.dim)] == 0) ADD_FAILURE() << "masked token changed at " << i;
      }
      EXPECT_EQ(BitMismatches(got, want), 0) << c.tokens << "x" << c.n << "x" << c.dim
                                             << " bf16 " << bf16 << ", rel err " << rel;
      // Keys and value read in place from one [tokens, (n + 1) * dim] buffer
      // (the decoder's projection output): the same bits.
      const int64_t row = (c.n + 1) * c.dim;
      std::vector<float> kv(c.tokens * row);
      for (int64_t t = 0; t < c.tokens; ++t) {
        std::copy_n(&key[t * c.n * c.dim], c.n * c.dim, &kv[t * row]);
        std::copy_n(&value[t * c.dim], c.dim, &kv[t * row + c.n * c.dim]);
      }
      DeviceBuffer<float> dx2(x), dkv(kv);
      ASSERT_TRUE(EngramGate({.x = dx2.get(),
                              .key = dkv.get(),
                              .value = dkv.get() + c.n * c.dim,
                              .weight = dweight.get(),
                              .token_mask = dmask.get(),
                              .tokens = c.tokens,
                              .hc_mult = c.n,
                              .dim = c.dim,
                              .eps = 1e-20f,
                              .round_bf16 = bf16,
                              .key_token_stride = row,
                              .value_token_stride = row},
                             nullptr)
                      .ok());
      ASSERT_TRUE(Synced());
      EXPECT_EQ(BitMismatches(dx2.Download(), want), 0)
          << "strided, " << c.tokens << "x" << c.n << "x" << c.dim << " bf16 " << bf16;
      std::printf("EngramGate %lldx%dx%lld bf16 %d: rel err %.3g, max abs err %.3g, %lld/%lld differ\n",
                  static_cast<long long>(c.tokens), c.n, static_cast<long long>(c.dim), bf16,
                  rel, MaxAbsError(got, want), static_cast<long long>(flips),
                  static_cast<long long>(sz));
    }
  }
}

TEST(EngramCudaTest, RefusesBadArguments) {
  uint8_t* b = reinterpret_cast<uint8_t*>(256);
  int64_t* i = reinterpret_cast<int64_t*>(256);
  float* f = reinterpret_cast<float*>(256);
  EXPECT_EQ(EngramLookup({.table = b, .scales = b, .ids = i, .out = f, .table_rows = 4,
                          .dim = 48, .num_ids = 1},
                         nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);  // dim not a multiple of 32
  EXPECT_EQ(EngramGate({.x = f, .key = f, .value = nullptr, .weight = f, .tokens = 1,
                        .hc_mult = 4, .dim = 8},
                       nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EngramGate({.x = f, .key = f, .value = f, .weight = f, .tokens = 1, .hc_mult = 0,
                        .dim = 8},
                       nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda
