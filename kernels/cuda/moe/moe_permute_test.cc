#include "kernels/cuda/moe/moe_permute.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/moe_expert.h"
#include "kernels/cuda/dense/act_quant_fp8.h"
#include "kernels/cuda/moe/expert_ffn.h"
#include "kernels/cuda/moe/test_util.h"
#include "kernels/cuda/moe/weight_test_util.h"

namespace weir::kernels::cuda {
namespace {

using moe_test::BitMismatches;
using moe_test::DeviceBuffer;
using moe_test::MakeWeight;
using moe_test::MaxAbsError;
using moe_test::RelativeError;
using moe_test::StoredWeight;
using moe_test::Synced;

// Per token, topk distinct groups out of `num`; a fraction `invalid` of the
// pairs is replaced by ids outside [0, num) (not handled locally).
std::vector<int32_t> RandomRouting(int64_t tokens, int topk, int num, double invalid,
                                   std::mt19937& rng) {
  std::vector<int32_t> ids(num), out;
  std::iota(ids.begin(), ids.end(), 0);
  std::uniform_real_distribution<double> u(0, 1);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int k = 0; k < topk; ++k) {
      out.push_back(u(rng) < invalid ? (k % 2 ? -1 : num + 3) : ids[k % num]);
    }
  }
  return out;
}

// The CPU executors' grouping: rows of a group in ascending pair index.
void ReferenceGrouping(const std::vector<int32_t>& groups, int num, std::vector<int64_t>* offsets,
                       std::vector<int32_t>* pair_row) {
  offsets->assign(num + 1, 0);
  for (int32_t g : groups) {
    if (g >= 0 && g < num) ++(*offsets)[g + 1];
  }
  for (int g = 0; g < num; ++g) (*offsets)[g + 1] += (*offsets)[g];
  std::vector<int64_t> next(offsets->begin(), offsets->end() - 1);
  pair_row->clear();
  for (int32_t g : groups) pair_row->push_back(g >= 0 && g < num ? next[g]++ : -1);
}

TEST(MoeGroupRowsCudaTest, GroupsAsTheCpuExecutorDoes) {
  struct Case {
    int64_t tokens;
    int topk, groups;
    double invalid;
    int64_t dim;
    int64_t valid = -1;  // >= 0: *valid_tokens (the rest are padding rows)
  };
  // Every case numbered both ways: warp after warp, and (wide) each warp
  // its own span where the pairs pass kGroupRowsWidePairs.
  for (const bool wide : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "wide " << wide);
    for (const Case& c :
         {Case{1, 1, 1, 0.0, 8}, Case{300, 8, 256, 0.0, 64}, Case{2000, 6, 37, 0.1, 33},
          Case{5, 4, 1024, 0.0, 128}, Case{3, 6, 48, 0.0, 2500},  // a row over 3 column blocks
          // A decode step of 1 row padded to 8, other partial steps, none, all, past the end.
          Case{8, 6, 48, 0.0, 64, 1}, Case{300, 8, 256, 0.0, 64, 299},
          Case{2000, 6, 37, 0.1, 33, 1500}, Case{5, 4, 1024, 0.0, 128, 0},
          Case{5, 4, 16, 0.0, 128, 5}, Case{5, 4, 16, 0.0, 128, 9},
          // Past kGroupRowsWidePairs (the wide numbering; 2,000 x 6 above too):
          // spans not a multiple of 32, 384 and 1,024 groups (128 KB of counts).
          Case{6001, 6, 384, 0.05, 8}, Case{6001, 6, 384, 0.05, 8, 4321},
          Case{4100, 8, 1024, 0.0, 8}, Case{4097, 1, 48, 0.0, 8}}) {
      std::mt19937 rng(c.tokens + c.topk + c.groups);
      const std::vector<int32_t> routed = RandomRouting(c.tokens, c.topk, c.groups, c.invalid, rng);
      const int64_t pairs = c.tokens * c.topk;
      // The CPU's view of a padded step: the padding rows' pairs go nowhere.
      std::vector<int32_t> groups = routed;
      if (c.valid >= 0) {
        for (int64_t i = std::min(c.valid, c.tokens) * c.topk; i < pairs; ++i) groups[i] = -1;
      }
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> x(c.tokens * c.dim), rw(pairs);
      for (float& v : x) v = normal(rng);
      for (float& v : rw) v = normal(rng);
      std::vector<int64_t> want_off;
      std::vector<int32_t> want_row;
      ReferenceGrouping(groups, c.groups, &want_off, &want_row);

      DeviceBuffer<int32_t> dgroups(routed), drow(pairs);
      DeviceBuffer<float> dx(x), drw(rw), dxg(pairs * c.dim), dwg(pairs);
      DeviceBuffer<int64_t> doff(c.groups + 1), dvalid(std::vector<int64_t>{c.valid});
      drow.Poison();
      doff.Poison();
      ASSERT_TRUE(MoeGroupRows({.groups = dgroups.get(),
                                .x = dx.get(),
                                .route_weight = drw.get(),
                                .group_offsets = doff.get(),
                                .pair_row = drow.get(),
                                .x_grouped = dxg.get(),
                                .weight_grouped = dwg.get(),
                                .tokens = c.tokens,
                                .dim = c.dim,
                                .topk = c.topk,
                                .num_groups = c.groups,
                                .valid_tokens = c.valid >= 0 ? dvalid.get() : nullptr,
                                .wide = wide},
                               nullptr)
                      .ok());
      ASSERT_TRUE(Synced());
      EXPECT_EQ(doff.Download(), want_off) << c.tokens << "x" << c.topk << " groups " << c.groups;
      EXPECT_EQ(drow.Download(), want_row) << c.tokens << "x" << c.topk << " groups " << c.groups;
      const std::vector<float> xg = dxg.Download(), wg = dwg.Download();
      for (int64_t i = 0; i < pairs; ++i) {
        if (want_row[i] < 0) continue;
        const int64_t r = want_row[i], t = i / c.topk;
        ASSERT_TRUE(
            std::equal(x.begin() + t * c.dim, x.begin() + (t + 1) * c.dim, xg.begin() + r * c.dim))
            << "pair " << i;
        ASSERT_EQ(wg[r], rw[i]) << "pair " << i;
      }
      // Role-major (token_role): the same pairs grouped by group + groups x
      // role, so role 0's rows come first, then role 1's, each as the CPU
      // executor numbers a group's rows; x and weights follow the rows.
      if (2 * c.groups > kMoeGroupRowsMaxGroups) continue;
      std::vector<int32_t> roles(c.tokens), by_role(pairs);
      for (int32_t& r : roles) r = static_cast<int32_t>(rng() % 2);
      for (int64_t i = 0; i < pairs; ++i) {
        by_role[i] =
            groups[i] >= 0 && groups[i] < c.groups ? groups[i] + c.groups * roles[i / c.topk] : -1;
      }
      std::vector<int64_t> role_off;
      std::vector<int32_t> role_row;
      ReferenceGrouping(by_role, 2 * c.groups, &role_off, &role_row);
      DeviceBuffer<int32_t> droles(roles);
      DeviceBuffer<int64_t> doff2(2 * c.groups + 1);
      drow.Poison();
      doff2.Poison();
      dxg.Poison();
      dwg.Poison();
      MoeGroupRowsParams major{.groups = dgroups.get(),
                               .x = dx.get(),
                               .route_weight = drw.get(),
                               .group_offsets = doff2.get(),
                               .pair_row = drow.get(),
                               .x_grouped = dxg.get(),
                               .weight_grouped = dwg.get(),
                               .tokens = c.tokens,
                               .dim = c.dim,
                               .topk = c.topk,
                               .num_groups = 2 * c.groups,
                               .valid_tokens = c.valid >= 0 ? dvalid.get() : nullptr,
                               .token_role = droles.get(),
                               .role_stride = c.groups,
                               .wide = wide};
      ASSERT_TRUE(MoeGroupRows(major, nullptr).ok());
      ASSERT_TRUE(Synced());
      EXPECT_EQ(doff2.Download(), role_off) << "role-major, " << c.tokens << "x" << c.topk;
      EXPECT_EQ(drow.Download(), role_row) << "role-major, " << c.tokens << "x" << c.topk;
      const std::vector<float> xg2 = dxg.Download(), wg2 = dwg.Download();
      for (int64_t i = 0; i < pairs; ++i) {
        if (role_row[i] < 0) continue;
        const int64_t r = role_row[i], t = i / c.topk;
        ASSERT_TRUE(
            std::equal(x.begin() + t * c.dim, x.begin() + (t + 1) * c.dim, xg2.begin() + r * c.dim))
            << "role-major pair " << i;
        ASSERT_EQ(wg2[r], rw[i]) << "role-major pair " << i;
      }
      major.num_groups = c.groups;  // must be twice the stride
      EXPECT_FALSE(SupportsMoeGroupRows(major));
    }
  }
}

// With the FP8 form of x (the decoder's h, quantized by the norm before it):
// the gathered codes and scales are byte for byte ActQuantFp8 of the fp32
// gather, padding and foreign pairs included, and the route weights as
// without codes; with bf16_grouped the gathered rows' bf16 values are
// Fp8ActBf16's of the gathered codes.
TEST(MoeGroupRowsCudaTest, GathersTheFp8FormActQuantWouldMake) {
  struct Case {
    int64_t tokens;
    int topk, groups;
    double invalid;
    int64_t dim;
    int64_t valid = -1;
  };
  for (const Case& c : {Case{1, 6, 48, 0.0, 5120}, Case{8, 6, 48, 0.0, 512, 1},
                        Case{64, 6, 48, 0.1, 1024}, Case{300, 8, 256, 0.0, 2048, 299}}) {
    std::mt19937 rng(7 * c.tokens + c.dim);
    const std::vector<int32_t> routed = RandomRouting(c.tokens, c.topk, c.groups, c.invalid, rng);
    const int64_t pairs = c.tokens * c.topk, blocks = c.dim / 32;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> magnitude(-12.0f, 12.0f);
    std::vector<float> x(c.tokens * c.dim), rw(pairs);
    for (float& v : x) v = normal(rng) * std::exp2(magnitude(rng));  // scales spread widely
    for (float& v : rw) v = normal(rng);
    DeviceBuffer<int32_t> dgroups(routed), drow(pairs), drow2(pairs);
    DeviceBuffer<float> dx(x), drw(rw), dxg(pairs * c.dim), dwg(pairs), dwg2(pairs);
    DeviceBuffer<int64_t> doff(c.groups + 1), doff2(c.groups + 1),
        dvalid(std::vector<int64_t>{c.valid});
    DeviceBuffer<uint8_t> codes(c.tokens * c.dim), scales(c.tokens * blocks),
        want_codes(pairs * c.dim), want_scales(pairs * blocks), got_codes(pairs * c.dim),
        got_scales(pairs * blocks);
    ASSERT_TRUE(dense::ActQuantFp8({.x = dx.get(),
                                    .codes = codes.get(),
                                    .scales = scales.get(),
                                    .rows = c.tokens,
                                    .cols = c.dim},
                                   nullptr)
                    .ok());
    const MoeGroupRowsParams by_rows{.groups = dgroups.get(),
                                     .x = dx.get(),
                                     .route_weight = drw.get(),
                                     .group_offsets = doff.get(),
                                     .pair_row = drow.get(),
                                     .x_grouped = dxg.get(),
                                     .weight_grouped = dwg.get(),
                                     .tokens = c.tokens,
                                     .dim = c.dim,
                                     .topk = c.topk,
                                     .num_groups = c.groups,
                                     .valid_tokens = c.valid >= 0 ? dvalid.get() : nullptr};
    ASSERT_TRUE(MoeGroupRows(by_rows, nullptr).ok());
    ASSERT_TRUE(dense::ActQuantFp8({.x = dxg.get(),
                                    .codes = want_codes.get(),
                                    .scales = want_scales.get(),
                                    .rows = pairs,
                                    .cols = c.dim},
                                   nullptr)
                    .ok());
    // The same call with the FP8 form instead of x, into outputs of its own.
    MoeGroupRowsParams by_codes = by_rows;
    by_codes.x = nullptr;
    by_codes.x_grouped = nullptr;
    by_codes.group_offsets = doff2.get();
    by_codes.pair_row = drow2.get();
    by_codes.weight_grouped = dwg2.get();
    by_codes.codes = codes.get();
    by_codes.scales = scales.get();
    by_codes.codes_grouped = got_codes.get();
    by_codes.scales_grouped = got_scales.get();
    DeviceBuffer<uint16_t> got16(pairs * c.dim), want16(pairs * c.dim);
    got16.Poison(0xAB);
    by_codes.bf16_grouped = got16.get();
    ASSERT_TRUE(SupportsMoeGroupRows(by_codes));
    ASSERT_TRUE(MoeGroupRows(by_codes, nullptr).ok());
    ASSERT_TRUE(dense::Fp8ActBf16({.codes = got_codes.get(),
                                   .scales = got_scales.get(),
                                   .out = want16.get(),
                                   .rows = pairs,
                                   .cols = c.dim},
                                  nullptr)
                    .ok());
    ASSERT_TRUE(Synced());
    const std::vector<uint16_t> w16 = want16.Download(), g16 = got16.Download();
    const std::vector<int32_t> rows = drow.Download();
    EXPECT_EQ(drow2.Download(), rows);
    EXPECT_EQ(doff2.Download(), doff.Download());
    const std::vector<uint8_t> wc = want_codes.Download(), ws = want_scales.Download(),
                               gc = got_codes.Download(), gs = got_scales.Download();
    const std::vector<float> wg = dwg.Download(), wg2 = dwg2.Download();
    int64_t checked = 0;
    for (int64_t i = 0; i < pairs; ++i) {
      const int64_t r = rows[i];
      if (r < 0) continue;
      ++checked;
      ASSERT_TRUE(
          std::equal(wc.begin() + r * c.dim, wc.begin() + (r + 1) * c.dim, gc.begin() + r * c.dim))
          << "codes of pair " << i;
      ASSERT_TRUE(std::equal(ws.begin() + r * blocks, ws.begin() + (r + 1) * blocks,
                             gs.begin() + r * blocks))
          << "scales of pair " << i;
      ASSERT_EQ(wg2[r], wg[r]) << "pair " << i;
      ASSERT_TRUE(std::equal(w16.begin() + r * c.dim, w16.begin() + (r + 1) * c.dim,
                             g16.begin() + r * c.dim))
          << "bf16 values of pair " << i;
    }
    EXPECT_GT(checked, 0);
  }
  // Codes need dim % 512 and aligned rows; without them the launcher refuses.
  DeviceBuffer<uint8_t> b(4096);
  DeviceBuffer<int32_t> i(8);
  DeviceBuffer<int64_t> o(9);
  MoeGroupRowsParams bad{.groups = i.get(),
                         .group_offsets = o.get(),
                         .pair_row = i.get(),
                         .tokens = 1,
                         .dim = 256,
                         .topk = 1,
                         .num_groups = 8,
                         .codes = b.get(),
                         .scales = b.get(),
                         .codes_grouped = b.get(),
                         .scales_grouped = b.get()};
  EXPECT_FALSE(SupportsMoeGroupRows(bad));
  bad.dim = 512;
  EXPECT_TRUE(SupportsMoeGroupRows(bad));
  bad.scales = b.get() + 4;
  EXPECT_FALSE(SupportsMoeGroupRows(bad));
  bad.scales = b.get();
  bad.bf16_grouped = reinterpret_cast<uint16_t*>(b.get() + 16);  // 16-byte aligned
  EXPECT_TRUE(SupportsMoeGroupRows(bad));
  bad.bf16_grouped = reinterpret_cast<uint16_t*>(b.get() + 8);
  EXPECT_FALSE(SupportsMoeGroupRows(bad));
  bad.bf16_grouped = reinterpret_cast<uint16_t*>(b.get() + 16);
  bad.codes = nullptr;  // bf16 values only with the codes
  EXPECT_FALSE(SupportsMoeGroupRows(bad));
}

TEST(MoeCombineCudaTest, BitIdenticalToTheCpuSum) {
  for (bool bf16 : {false, true}) {
    for (bool with_shared : {false, true}) {
      // 2500: a row over 3 column blocks of the kernel (77 tokens) or one
      // block walking it (600: CombineChunk's whole rows); 2056 and 8200 at
      // 600 tokens: the whole rows 16 bytes of columns a thread (8200: more
      // than one pass of the block's 1,024 threads over a bf16 row).
      for (const int64_t dim : {int64_t{300}, int64_t{2500}, int64_t{2056}, int64_t{8200}}) {
        for (const int64_t tokens : {int64_t{77}, int64_t{600}}) {
          const int topk = 6, experts = 20;
          std::mt19937 rng(bf16 * 2 + with_shared);
          const std::vector<int32_t> ids = RandomRouting(tokens, topk, experts, 0.15, rng);
          std::vector<int64_t> offsets;
          std::vector<int32_t> pair_row;
          ReferenceGrouping(ids, experts, &offsets, &pair_row);
          const int64_t rows = offsets.back();
          std::normal_distribution<float> normal(0.0f, 1.0f);
          std::vector<float> yg(rows * dim), shared(tokens * dim);
          for (float& v : yg) v = RoundToBf16(normal(rng));
          for (float& v : shared) v = RoundToBf16(normal(rng));
          // CPU Moe / LocalExpertExecutor: acc = 0, += each expert's rows in
          // ascending expert id, += shared, then bf16.
          std::vector<float> want(tokens * dim, 0.0f);
          for (int e = 0; e < experts; ++e) {
            for (int64_t i = 0; i < tokens * topk; ++i) {
              if (ids[i] != e) continue;
              for (int64_t c = 0; c < dim; ++c)
                want[(i / topk) * dim + c] += yg[pair_row[i] * dim + c];
            }
          }
          for (int64_t i = 0; i < tokens * dim; ++i) {
            if (with_shared) want[i] += shared[i];
            if (bf16) want[i] = RoundToBf16(want[i]);
          }
          // The outputs as held (fp32) and as bf16 bits (y_grouped_bf16): the
          // same values, so the same sums.
          std::vector<uint16_t> yg16(yg.size());
          for (size_t i = 0; i < yg.size(); ++i) {
            uint32_t bits = 0;
            std::memcpy(&bits, &yg[i], sizeof(bits));
            yg16[i] = static_cast<uint16_t>(bits >> 16);
          }
          DeviceBuffer<float> dyg(yg), dshared(shared), out(tokens * dim);
          DeviceBuffer<uint16_t> dyg16(yg16);
          DeviceBuffer<int32_t> drow(pair_row), dids(ids);
          for (int form = 0; form < 4; ++form) {
            // The outputs' two forms, each summed a column a thread and 16
            // bytes of columns a thread (vec16: taken for the whole rows of
            // 600 tokens where dim allows).
            const bool from_bf16 = form % 2 == 1, vec16 = form >= 2;
            out.Poison();
            ASSERT_TRUE(MoeCombine({.y_grouped = from_bf16 ? nullptr : dyg.get(),
                                    .y_grouped_bf16 = from_bf16 ? dyg16.get() : nullptr,
                                    .pair_row = drow.get(),
                                    .experts = dids.get(),
                                    .shared = with_shared ? dshared.get() : nullptr,
                                    .out = out.get(),
                                    .tokens = tokens,
                                    .dim = dim,
                                    .topk = topk,
                                    .round_bf16 = bf16,
                                    .vec16 = vec16},
                                   nullptr)
                            .ok());
            ASSERT_TRUE(Synced());
            const std::vector<float> got = out.Download();
            EXPECT_EQ(BitMismatches(got, want), 0)
                << "bf16 " << bf16 << " shared " << with_shared << " dim " << dim
                << " outputs from bf16 " << from_bf16 << " vec16 " << vec16 << ", max abs err "
                << MaxAbsError(got, want);
          }
        }
      }
    }
  }
}

struct MoeCase {
  cpu::WeightFormat routed, shared;
  int64_t tokens, dim, inter;
  int experts, topk;
  std::vector<int> not_held;  // experts another rank holds
  bool bf16;
  double tolerance;
};

// Gate output -> MoeGroupRows -> GroupedExpertFfn (routed, and the shared
// expert as one group) -> MoeCombine, against kernels/cpu Moe.
void RunMoe(const MoeCase& c, int seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t pairs = c.tokens * c.topk;
  const std::vector<int32_t> indices = RandomRouting(c.tokens, c.topk, c.experts, 0.0, rng);
  std::vector<float> x(c.tokens * c.dim), weights(pairs);
  for (float& v : x) v = normal(rng);
  for (float& v : weights) v = 0.05f + 0.5f * std::fabs(normal(rng));
  auto make_expert = [&](cpu::WeightFormat f) {
    return std::vector<StoredWeight>{
        MakeWeight(f, c.inter, c.dim, 4.0f / std::sqrt(float(c.dim)), rng),
        MakeWeight(f, c.dim, c.inter, 1.0f / std::sqrt(float(c.inter)), rng),
        MakeWeight(f, c.inter, c.dim, 2.0f / std::sqrt(float(c.dim)), rng)};  // w1, w2, w3
  };
  std::vector<std::vector<StoredWeight>> routed;
  for (int e = 0; e < c.experts; ++e) routed.push_back(make_expert(c.routed));
  const std::vector<StoredWeight> shared = make_expert(c.shared);
  // CPU.
  std::vector<cpu::ExpertWeights> views;
  for (const auto& w : routed) views.push_back({w[0].View(), w[1].View(), w[2].View()});
  std::vector<const cpu::ExpertWeights*> held(c.experts);
  std::vector<int32_t> local_of(c.experts, -1);
  int num_local = 0;
  for (int e = 0; e < c.experts; ++e) {
    if (std::find(c.not_held.begin(), c.not_held.end(), e) != c.not_held.end()) continue;
    held[e] = &views[e];
    local_of[e] = num_local++;
  }
  const cpu::ExpertWeights shared_view{shared[0].View(), shared[1].View(), shared[2].View()};
  std::vector<float> want(c.tokens * c.dim);
  const absl::Status cpu_status =
      cpu::Moe({.x = x, .indices = indices, .weights = weights, .experts = held,
                .shared = &shared_view, .y = want, .tokens = c.tokens, .topk = c.topk,
                .swiglu_limit = 10.0f, .bf16_boundaries = c.bf16});
  ASSERT_TRUE(cpu_status.ok()) << cpu_status;
  // GPU.
  std::vector<int32_t> groups(pairs);
  for (int64_t i = 0; i < pairs; ++i) groups[i] = local_of[indices[i]];
  std::vector<std::unique_ptr<DeviceBuffer<float>>> owned;
  auto upload = [&](const StoredWeight& w) {
    owned.push_back(std::make_unique<DeviceBuffer<float>>(w.dequant));
    return static_cast<const float*>(owned.back()->get());
  };
  std::vector<const float*> p1, p2, p3;
  for (int e = 0; e < c.experts; ++e) {
    if (local_of[e] < 0) continue;
    p1.push_back(upload(routed[e][0]));
    p2.push_back(upload(routed[e][1]));
    p3.push_back(upload(routed[e][2]));
  }
  const std::vector<const float*> s1 = {upload(shared[0])}, s2 = {upload(shared[1])},
                                  s3 = {upload(shared[2])};
  DeviceBuffer<const float*> d1(p1), d2(p2), d3(p3), ds1(s1), ds2(s2), ds3(s3);
  DeviceBuffer<int32_t> dgroups(groups), dindices(indices), drow(pairs);
  DeviceBuffer<float> dx(x), dw(weights), xg(pairs * c.dim), wg(pairs), yg(pairs * c.dim);
  DeviceBuffer<float> hidden(std::max(pairs, c.tokens) * c.inter), sy(c.tokens * c.dim);
  DeviceBuffer<float> out(c.tokens * c.dim);
  DeviceBuffer<int64_t> doff(num_local + 1), dshared_off(std::vector<int64_t>{0, c.tokens});
  out.Poison();
  const bool rq = c.routed != cpu::WeightFormat::kF32, sq = c.shared != cpu::WeightFormat::kF32;
  ASSERT_TRUE(MoeGroupRows({.groups = dgroups.get(), .x = dx.get(), .route_weight = dw.get(),
                            .group_offsets = doff.get(), .pair_row = drow.get(),
                            .x_grouped = xg.get(), .weight_grouped = wg.get(),
                            .tokens = c.tokens, .dim = c.dim, .topk = c.topk,
                            .num_groups = num_local},
                           nullptr)
                  .ok());
  ASSERT_TRUE(GroupedExpertFfn({.x = xg.get(), .group_offsets = doff.get(),
                                .route_weight = wg.get(), .w1 = d1.get(), .w3 = d3.get(),
                                .w2 = d2.get(), .hidden = hidden.get(), .y = yg.get(),
                                .rows = pairs, .dim = c.dim, .inter = c.inter,
                                .num_groups = num_local, .swiglu_limit = 10.0f,
                                .w13_fp8_activation = rq, .w2_fp8_activation = rq,
                                .round_bf16 = c.bf16},
                               nullptr)
                  .ok());
  ASSERT_TRUE(GroupedExpertFfn({.x = dx.get(), .group_offsets = dshared_off.get(),
                                .w1 = ds1.get(), .w3 = ds3.get(), .w2 = ds2.get(),
                                .hidden = hidden.get(), .y = sy.get(), .rows = c.tokens,
                                .dim = c.dim, .inter = c.inter, .num_groups = 1,
                                .swiglu_limit = 10.0f, .w13_fp8_activation = sq,
                                .w2_fp8_activation = sq, .round_bf16 = c.bf16},
                               nullptr)
                  .ok());
  ASSERT_TRUE(MoeCombine({.y_grouped = yg.get(), .pair_row = drow.get(),
                          .experts = dindices.get(), .shared = sy.get(), .out = out.get(),
                          .tokens = c.tokens, .dim = c.dim, .topk = c.topk,
                          .round_bf16 = c.bf16},
                         nullptr)
                  .ok());
  ASSERT_TRUE(Synced());
  const std::vector<float> got = out.Download();
  const double rel = RelativeError(got, want);
  const int64_t differ = BitMismatches(got, want);
  EXPECT_LT(rel, c.tolerance) << "tokens " << c.tokens << " dim " << c.dim;
  if (c.bf16) {
    EXPECT_LE(differ * 20, c.tokens * c.dim) << differ << " of " << c.tokens * c.dim;
  }
  std::printf("MoE pipeline tokens %lld dim %lld inter %lld experts %d (held %d) topk %d bf16 %d: "
              "rel err %.3g, max abs err %.3g, %lld/%lld differ\n",
              static_cast<long long>(c.tokens), static_cast<long long>(c.dim),
              static_cast<long long>(c.inter), c.experts, num_local, c.topk, c.bf16, rel,
              MaxAbsError(got, want), static_cast<long long>(differ),
              static_cast<long long>(c.tokens * c.dim));
}

// Tolerances as in expert_ffn_test.cc: fp32 1e-5; FP8/MXFP4 activations
// with bf16 boundaries 5e-3 and at most 5% of outputs differing at all.
TEST(MoePipelineCudaTest, MatchesTheCpuMoe) {
  using F = cpu::WeightFormat;
  RunMoe({F::kF32, F::kF32, 40, 96, 64, 8, 3, {}, false, 1e-5}, 1);
  RunMoe({F::kMxfp4, F::kFp8, 50, 256, 128, 16, 4, {3, 7}, true, 5e-3}, 2);
  RunMoe({F::kMxfp4, F::kFp8, 1, 512, 256, 32, 6, {0}, true, 5e-3}, 3);
}

TEST(MoePermuteCudaTest, RefusesBadArguments) {
  float* f = reinterpret_cast<float*>(256);
  int32_t* i = reinterpret_cast<int32_t*>(256);
  int64_t* o = reinterpret_cast<int64_t*>(256);
  const MoeGroupRowsParams good{.groups = i, .x = f, .group_offsets = o, .pair_row = i,
                                .x_grouped = f, .tokens = 2, .dim = 8, .topk = 2,
                                .num_groups = 4};
  EXPECT_TRUE(SupportsMoeGroupRows(good));
  MoeGroupRowsParams bad = good;
  bad.num_groups = kMoeGroupRowsMaxGroups + 1;
  EXPECT_EQ(MoeGroupRows(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  bad = good;
  bad.route_weight = f;  // without weight_grouped
  EXPECT_EQ(MoeGroupRows(bad, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MoeCombine({.y_grouped = f, .pair_row = i, .experts = i, .out = f, .tokens = 1,
                        .dim = 8, .topk = 65},
                       nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  // Both forms of the expert outputs, or neither.
  const uint16_t* h = reinterpret_cast<const uint16_t*>(f);
  EXPECT_EQ(MoeCombine({.y_grouped = f,
                        .y_grouped_bf16 = h,
                        .pair_row = i,
                        .experts = i,
                        .out = f,
                        .tokens = 1,
                        .dim = 8,
                        .topk = 2},
                       nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      MoeCombine({.pair_row = i, .experts = i, .out = f, .tokens = 1, .dim = 8, .topk = 2}, nullptr)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda
