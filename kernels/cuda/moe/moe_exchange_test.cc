#include "kernels/cuda/moe/moe_exchange.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/decode/rows.h"
#include "kernels/cuda/moe/moe_gate.h"
#include "kernels/cuda/moe/moe_permute.h"
#include "kernels/cuda/moe/test_util.h"

namespace weir::kernels::cuda {
namespace {

using moe_test::BitMismatches;
using moe_test::DeviceBuffer;
using moe_test::Synced;

// A placement of `logical` experts on world * per_rank physical slots: every
// expert once, the remaining slots random replicas, the whole table shuffled.
struct Placement {
  int world = 0, per_rank = 0, logical = 0;
  std::vector<int32_t> slot_logical;          // [world * per_rank]
  std::vector<int32_t> offsets, replicas;     // replica slots per expert, ascending
};

Placement RandomPlacement(int logical, int world, int per_rank, std::mt19937& rng) {
  Placement pl{.world = world, .per_rank = per_rank, .logical = logical};
  const int physical = world * per_rank;
  for (int s = 0; s < physical; ++s) {
    pl.slot_logical.push_back(s < logical ? s : static_cast<int>(rng() % logical));
  }
  std::shuffle(pl.slot_logical.begin(), pl.slot_logical.end(), rng);
  pl.offsets.assign(logical + 1, 0);
  for (int e = 0; e < logical; ++e) {
    for (int s = 0; s < physical; ++s) {
      if (pl.slot_logical[s] == e) pl.replicas.push_back(s);
    }
    pl.offsets[e + 1] = static_cast<int32_t>(pl.replicas.size());
  }
  return pl;
}

// One rank's step: routed pairs (distinct experts per token, a few invalid
// ids), route weights and activations.
struct Tokens {
  std::vector<int32_t> experts;
  std::vector<float> weight, x;
};

Tokens RandomTokens(int64_t tokens, int topk, int logical, int64_t dim, std::mt19937& rng,
                    bool invalid_ids) {
  Tokens in;
  std::vector<int32_t> ids(logical);
  std::iota(ids.begin(), ids.end(), 0);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t t = 0; t < tokens; ++t) {
    std::shuffle(ids.begin(), ids.end(), rng);
    for (int k = 0; k < topk; ++k) {
      int32_t e = ids[k % logical];
      if (invalid_ids && rng() % 17 == 0) e = (k % 2) ? -1 : logical + 2;
      in.experts.push_back(e);
      in.weight.push_back(u(rng) * 4);
    }
  }
  for (int64_t i = 0; i < tokens * dim; ++i) in.x.push_back(u(rng));
  return in;
}

struct Packed {
  std::vector<float> x, weight;
  std::vector<int32_t> slot, return_row;
};

// The CPU statement of MoeDispatchPack (rows of send_x without a pair are
// left as `fill`).
Packed ReferencePack(const Tokens& in, const Placement& pl, int rank, int64_t tokens,
                     int64_t valid, int topk, int64_t dim, float fill) {
  const int world = pl.world;
  Packed out;
  out.x.assign(world * tokens * dim, fill);
  out.slot.assign(world * tokens * topk, -1);
  out.weight.assign(world * tokens * topk, 0.0f);
  out.return_row.assign(tokens * topk, -1);
  for (int64_t t = 0; t < valid; ++t) {
    for (int k = 0; k < topk; ++k) {
      const int32_t e = in.experts[t * topk + k];
      if (e < 0 || e >= pl.logical) continue;
      const int n = pl.offsets[e + 1] - pl.offsets[e];
      const int slot = pl.replicas[pl.offsets[e] + (t + rank) % n];
      const int dest = slot / pl.per_rank;
      const int64_t at = (dest * tokens + t) * topk + k;
      out.slot[at] = slot % pl.per_rank;
      out.weight[at] = in.weight[t * topk + k];
      out.return_row[t * topk + k] = static_cast<int32_t>(at);
      std::copy_n(in.x.data() + t * dim, dim, out.x.data() + (dest * tokens + t) * dim);
    }
  }
  return out;
}

struct Shape {
  int world, per_rank, logical, topk;
  int64_t tokens, valid, dim;
  bool invalid_ids;
};

class MoeDispatchPackTest : public ::testing::TestWithParam<Shape> {};

// Physical slots of `experts` on the device (ExpertSlots, the replica rule).
std::unique_ptr<DeviceBuffer<int32_t>> Slots(const DeviceBuffer<int32_t>& experts,
                                             const DeviceBuffer<int32_t>& offsets,
                                             const DeviceBuffer<int32_t>& replicas,
                                             int64_t tokens, int topk, int logical, int rank) {
  auto slots = std::make_unique<DeviceBuffer<int32_t>>(tokens * topk);
  EXPECT_TRUE(ExpertSlots({.indices = experts.get(), .replica_offsets = offsets.get(),
                           .replica_slots = replicas.get(), .slots = slots->get(),
                           .tokens = tokens, .topk = topk, .num_logical = logical,
                           .rank = rank},
                          nullptr)
                  .ok());
  return slots;
}

// ExpertSlots then MoeDispatchPack equal the CPU statement, bit for bit, on
// every rank of the world.
TEST_P(MoeDispatchPackTest, MatchesReference) {
  const Shape sh = GetParam();
  std::mt19937 rng(sh.world * 1000 + sh.tokens);
  const Placement pl = RandomPlacement(sh.logical, sh.world, sh.per_rank, rng);
  DeviceBuffer<int32_t> offsets(pl.offsets), replicas(pl.replicas);
  for (int rank = 0; rank < sh.world; ++rank) {
    const Tokens in = RandomTokens(sh.tokens, sh.topk, sh.logical, sh.dim, rng, sh.invalid_ids);
    DeviceBuffer<int32_t> experts(in.experts);
    auto slots = Slots(experts, offsets, replicas, sh.tokens, sh.topk, sh.logical, rank);
    DeviceBuffer<float> weight(in.weight), x(in.x);
    DeviceBuffer<int64_t> valid(std::vector<int64_t>{sh.valid});
    DeviceBuffer<float> send_x(sh.world * sh.tokens * sh.dim), send_w(sh.world * sh.tokens * sh.topk);
    DeviceBuffer<int32_t> send_slot(sh.world * sh.tokens * sh.topk), ret(sh.tokens * sh.topk);
    ASSERT_EQ(cudaMemset(send_x.get(), 0, send_x.size() * sizeof(float)), cudaSuccess);
    send_w.Poison();
    send_slot.Poison();
    ret.Poison();
    ASSERT_TRUE(MoeDispatchPack({.slots = slots->get(), .route_weight = weight.get(),
                                 .x = x.get(),
                                 .valid_tokens = sh.valid < sh.tokens ? valid.get() : nullptr,
                                 .send_x = send_x.get(), .send_slot = send_slot.get(),
                                 .send_weight = send_w.get(), .return_row = ret.get(),
                                 .tokens = sh.tokens, .dim = sh.dim, .topk = sh.topk,
                                 .world = sh.world, .slots_per_rank = sh.per_rank},
                                nullptr)
                    .ok());
    ASSERT_TRUE(Synced());
    const Packed want =
        ReferencePack(in, pl, rank, sh.tokens, sh.valid, sh.topk, sh.dim, /*fill=*/0.0f);
    EXPECT_EQ(send_slot.Download(), want.slot) << "rank " << rank;
    EXPECT_EQ(ret.Download(), want.return_row) << "rank " << rank;
    EXPECT_EQ(BitMismatches(send_w.Download(), want.weight), 0) << "rank " << rank;
    EXPECT_EQ(BitMismatches(send_x.Download(), want.x), 0) << "rank " << rank;
  }
}

// A whole MoE layer over `world` simulated ranks on one device: pack, the
// blocks moved between the ranks' buffers (what NCCL does), MoeGroupRows on
// the receiver, an "expert" whose output is w * x * (1 + logical id), the
// outputs packed back with CopyRows, moved back, and MoeCombine with
// return_row. The result equals the single-rank combine of the same pairs bit
// for bit, whatever replica served each pair.
TEST_P(MoeDispatchPackTest, RoundTripEqualsLocalCombine) {
  const Shape sh = GetParam();
  if (sh.valid < sh.tokens) GTEST_SKIP() << "covered by MatchesReference";
  std::mt19937 rng(sh.world * 7 + sh.topk);
  const Placement pl = RandomPlacement(sh.logical, sh.world, sh.per_rank, rng);
  const int W = sh.world, K = sh.topk;
  const int64_t T = sh.tokens, D = sh.dim;
  DeviceBuffer<int32_t> offsets(pl.offsets), replicas(pl.replicas);
  std::vector<Tokens> in(W);
  std::vector<std::unique_ptr<DeviceBuffer<float>>> sx(W), sw(W);
  std::vector<std::unique_ptr<DeviceBuffer<int32_t>>> ss(W), rr(W), ex(W);
  for (int r = 0; r < W; ++r) {
    in[r] = RandomTokens(T, K, sh.logical, D, rng, /*invalid_ids=*/false);
    ex[r] = std::make_unique<DeviceBuffer<int32_t>>(in[r].experts);
    auto slots = Slots(*ex[r], offsets, replicas, T, K, sh.logical, r);
    DeviceBuffer<float> weight(in[r].weight), x(in[r].x);
    sx[r] = std::make_unique<DeviceBuffer<float>>(W * T * D);
    sw[r] = std::make_unique<DeviceBuffer<float>>(W * T * K);
    ss[r] = std::make_unique<DeviceBuffer<int32_t>>(W * T * K);
    rr[r] = std::make_unique<DeviceBuffer<int32_t>>(T * K);
    ASSERT_TRUE(MoeDispatchPack({.slots = slots->get(), .route_weight = weight.get(),
                                 .x = x.get(), .send_x = sx[r]->get(),
                                 .send_slot = ss[r]->get(), .send_weight = sw[r]->get(),
                                 .return_row = rr[r]->get(), .tokens = T, .dim = D, .topk = K,
                                 .world = W, .slots_per_rank = sh.per_rank},
                                nullptr)
                    .ok());
    ASSERT_TRUE(Synced());
  }
  // Exchange: block p of rank r's send buffers -> block r of rank p's receive buffers.
  auto exchange = [&](auto& send, auto& recv, int64_t block) {
    for (int r = 0; r < W; ++r) {
      for (int p = 0; p < W; ++p) {
        ASSERT_EQ(cudaMemcpy(recv[p]->get() + r * block, send[r]->get() + p * block,
                             block * sizeof(*send[r]->get()), cudaMemcpyDeviceToDevice),
                  cudaSuccess);
      }
    }
  };
  std::vector<std::unique_ptr<DeviceBuffer<float>>> rx(W), rw(W), back(W), ret(W);
  std::vector<std::unique_ptr<DeviceBuffer<int32_t>>> rs(W);
  for (int r = 0; r < W; ++r) {
    rx[r] = std::make_unique<DeviceBuffer<float>>(W * T * D);
    rw[r] = std::make_unique<DeviceBuffer<float>>(W * T * K);
    rs[r] = std::make_unique<DeviceBuffer<int32_t>>(W * T * K);
    back[r] = std::make_unique<DeviceBuffer<float>>(W * T * K * D);
    ret[r] = std::make_unique<DeviceBuffer<float>>(W * T * K * D);
  }
  exchange(sx, rx, T * D);
  exchange(sw, rw, T * K);
  exchange(ss, rs, T * K);
  // Expert ranks: group the received pairs by local slot, compute, pack back.
  for (int r = 0; r < W; ++r) {
    const int64_t pairs = W * T * K;
    DeviceBuffer<int64_t> goff(sh.per_rank + 1);
    DeviceBuffer<int32_t> pair_row(pairs);
    DeviceBuffer<float> xg(pairs * D), wg(pairs);
    ASSERT_TRUE(MoeGroupRows({.groups = rs[r]->get(), .x = rx[r]->get(),
                              .route_weight = rw[r]->get(), .group_offsets = goff.get(),
                              .pair_row = pair_row.get(), .x_grouped = xg.get(),
                              .weight_grouped = wg.get(), .tokens = W * T, .dim = D,
                              .topk = K, .num_groups = sh.per_rank},
                             nullptr)
                    .ok());
    ASSERT_TRUE(Synced());
    const std::vector<int64_t> off = goff.Download();
    std::vector<float> xs = xg.Download(), ws = wg.Download(), ys(pairs * D, 0.0f);
    for (int g = 0; g < sh.per_rank; ++g) {
      const float scale = 1.0f + pl.slot_logical[r * sh.per_rank + g];
      for (int64_t row = off[g]; row < off[g + 1]; ++row) {
        for (int64_t c = 0; c < D; ++c) ys[row * D + c] = ws[row] * xs[row * D + c] * scale;
      }
    }
    DeviceBuffer<float> yg(ys);
    ASSERT_TRUE(decode::CopyRows({.src = yg.get(), .dst = back[r]->get(),
                                  .src_rows = pair_row.get(), .rows = pairs, .width = D},
                                 nullptr)
                    .ok());
    ASSERT_TRUE(Synced());
  }
  exchange(back, ret, T * K * D);
  for (int r = 0; r < W; ++r) {
    DeviceBuffer<float> out(T * D);
    ASSERT_TRUE(MoeCombine({.y_grouped = ret[r]->get(), .pair_row = rr[r]->get(),
                            .experts = ex[r]->get(), .out = out.get(), .tokens = T, .dim = D,
                            .topk = K, .round_bf16 = false},
                           nullptr)
                    .ok());
    ASSERT_TRUE(Synced());
    std::vector<float> want(T * D, 0.0f);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<int> order(K);
      std::iota(order.begin(), order.end(), 0);
      std::sort(order.begin(), order.end(), [&](int a, int b) {
        return in[r].experts[t * K + a] < in[r].experts[t * K + b];
      });
      for (int64_t c = 0; c < D; ++c) {
        float acc = 0.0f;
        for (int k : order) {
          const float scale = 1.0f + in[r].experts[t * K + k];
          acc += in[r].weight[t * K + k] * in[r].x[t * D + c] * scale;
        }
        want[t * D + c] = acc;
      }
    }
    EXPECT_EQ(BitMismatches(out.Download(), want), 0) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeDispatchPackTest,
    ::testing::Values(Shape{1, 8, 8, 2, 8, 8, 64, false},     // a world of 1
                      Shape{1, 10, 8, 3, 16, 11, 33, true},   // redundant slots, padding
                      Shape{2, 4, 8, 2, 8, 8, 128, false},    // even split
                      Shape{3, 5, 12, 4, 24, 24, 96, false},  // replicas across ranks
                      Shape{4, 3, 10, 3, 64, 40, 257, true},  // invalid ids, padding
                      Shape{8, 48, 384, 6, 64, 64, 64, false}));  // the EP8 shape

TEST(MoeDispatchPack, RefusesBadShapes) {
  int32_t i = 0;
  float f = 0;
  MoeDispatchPackParams p{.slots = &i, .route_weight = &f, .x = &f, .send_x = &f,
                          .send_slot = &i, .send_weight = &f, .return_row = &i, .tokens = 4,
                          .dim = 8, .topk = 2, .world = 2, .slots_per_rank = 2};
  EXPECT_TRUE(SupportsMoeDispatchPack(p));
  MoeDispatchPackParams q = p;
  q.slots_per_rank = 0;
  EXPECT_EQ(MoeDispatchPack(q, nullptr).code(), absl::StatusCode::kInvalidArgument);
  q = p;
  q.world = 300;
  q.topk = 4;
  EXPECT_EQ(MoeDispatchPack(q, nullptr).code(), absl::StatusCode::kInvalidArgument);
  q = p;
  q.send_x = nullptr;
  EXPECT_EQ(MoeDispatchPack(q, nullptr).code(), absl::StatusCode::kInvalidArgument);
  q = p;
  q.tokens = 0;
  EXPECT_FALSE(SupportsMoeDispatchPack(q));
}

// The load counters add exactly the valid tokens' in-range pairs per expert
// to what they held, and the served total from the group offsets or the
// counted pairs.
TEST(AccumulateExpertLoad, CountsValidPairsOntoTheCounters) {
  std::mt19937 rng(17);
  constexpr int kExperts = 37, kTopk = 5;
  constexpr int64_t kTokens = 300, kValid = 211;
  const Tokens in = RandomTokens(kTokens, kTopk, kExperts, 1, rng, /*invalid_ids=*/true);
  std::vector<int64_t> routed(kExperts), want(kExperts);
  for (int e = 0; e < kExperts; ++e) routed[e] = want[e] = 1000 + e;
  int64_t counted = 0;
  for (int64_t i = 0; i < kValid * kTopk; ++i) {
    const int32_t e = in.experts[i];
    if (e >= 0 && e < kExperts) {
      ++want[e];
      ++counted;
    }
  }
  DeviceBuffer<int32_t> experts(in.experts);
  DeviceBuffer<int64_t> counts(routed), served(std::vector<int64_t>{5}),
      valid(std::vector<int64_t>{kValid}), offsets(std::vector<int64_t>{0, 3, 3, 9});
  ASSERT_TRUE(AccumulateExpertLoad({.experts = experts.get(), .valid_tokens = valid.get(),
                                    .routed = counts.get(), .served = served.get(),
                                    .tokens = kTokens, .topk = kTopk, .num_experts = kExperts},
                                   nullptr)
                  .ok());
  ASSERT_TRUE(Synced());
  EXPECT_EQ(counts.Download(), want);
  EXPECT_EQ(served.Download()[0], 5 + counted);
  // With group offsets, served adds the grouped pairs instead.
  ASSERT_TRUE(AccumulateExpertLoad({.experts = experts.get(), .valid_tokens = valid.get(),
                                    .group_offsets = offsets.get(), .routed = counts.get(),
                                    .served = served.get(), .tokens = kTokens, .topk = kTopk,
                                    .num_experts = kExperts, .num_groups = 3},
                                   nullptr)
                  .ok());
  ASSERT_TRUE(Synced());
  EXPECT_EQ(served.Download()[0], 5 + counted + 9);
  for (int e = 0; e < kExperts; ++e) want[e] += want[e] - routed[e];
  EXPECT_EQ(counts.Download(), want);
  EXPECT_EQ(AccumulateExpertLoad({.experts = experts.get(), .routed = nullptr, .tokens = 1,
                                  .topk = 1, .num_experts = 1},
                                 nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::kernels::cuda
