// CommunicatorExpertExecutor on FakeCommunicator worlds (ranks as threads):
// every rank's combined output is bit-identical to LocalExpertExecutor on the
// same tokens with all experts, for identity and redundant-replica placements,
// with different token counts per rank (one rank with none); served rows add
// up to the routed pairs; argument errors.
#include "worker/model/communicator_expert_executor.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/fake_communicator.h"
#include "worker/model/cpu_ops.h"
#include "worker/model/local_expert_executor.h"

namespace weir::model {
namespace {

using parallel::Communicator;
using parallel::FakeCommunicator;

constexpr int kLayers = 2, kExperts = 6, kTopk = 3;  // 3: the summation order matters
constexpr int64_t kDim = 64, kInter = 32;

DenseWeight RandomDense(int64_t out, int64_t in, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-0.3f, 0.3f);
  DenseWeight w{.out = out, .in = in, .w = std::vector<float>(out * in), .fp8_activation = true};
  for (float& v : w.w) v = u(gen);
  return w;
}

ModelWeights AllExperts() {
  std::mt19937 gen(5);
  ModelWeights w;
  w.layers.resize(kLayers);
  for (BlockWeights& b : w.layers) {
    for (int e = 0; e < kExperts; ++e) {
      b.ffn.experts.push_back({RandomDense(kInter, kDim, gen), RandomDense(kDim, kInter, gen),
                               RandomDense(kInter, kDim, gen)});
    }
  }
  return w;
}

// Copy of `all` keeping only the experts `filter` accepts (as the loader does).
ModelWeights Filtered(const ModelWeights& all, const ExpertFilter& filter) {
  ModelWeights w = all;
  for (int l = 0; l < kLayers; ++l) {
    for (int e = 0; e < kExperts; ++e) {
      if (!filter(l, e)) w.layers[l].ffn.experts[e] = ExpertWeightsF32{};
    }
  }
  return w;
}

// Random placement: every expert once, then random replicas in the spare slots.
ExpertPlacement Redundant(int world, int slots_per_rank, uint32_t seed) {
  std::mt19937 gen(seed);
  ExpertPlacement p{.num_layers = kLayers,
                    .num_logical = kExperts,
                    .slots_per_rank = slots_per_rank,
                    .world_size = world};
  for (int l = 0; l < kLayers; ++l) {
    std::vector<int32_t> slots(p.num_physical());
    for (int s = 0; s < p.num_physical(); ++s) slots[s] = s < kExperts ? s : gen() % kExperts;
    std::shuffle(slots.begin(), slots.end(), gen);
    p.physical_to_logical.insert(p.physical_to_logical.end(), slots.begin(), slots.end());
  }
  return p;
}

struct RankInput {
  std::vector<float> x;
  std::vector<int32_t> experts;
  std::vector<float> weights;
  int64_t tokens = 0;
};

RankInput RandomInput(int64_t tokens, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  RankInput in;
  in.tokens = tokens;
  in.x.resize(tokens * kDim);
  for (float& v : in.x) v = u(gen);
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int32_t> ids(kExperts);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), gen);  // distinct, unsorted experts per token
    for (int k = 0; k < kTopk; ++k) {
      in.experts.push_back(ids[k]);
      // Magnitudes 2^-12..2^12 apart, so the fp32 sum of the bf16 outputs
      // depends on its order (the contract: ascending expert id).
      in.weights.push_back(
          std::ldexp(0.5f + 0.25f * (u(gen) + 1.0f), static_cast<int>(gen() % 25) - 12));
    }
  }
  return in;
}

void CheckWorld(const ExpertPlacement& placement, const std::vector<int64_t>& tokens_per_rank) {
  const int world = placement.world_size;
  const ModelWeights all = AllExperts();
  std::vector<ModelWeights> weights;
  for (int r = 0; r < world; ++r) weights.push_back(Filtered(all, OwnedExpertFilter(placement, r)));
  std::vector<std::vector<int64_t>> served(world);
  auto comms = FakeCommunicator::CreateWorld(world, {.timeout = absl::Seconds(20)});
  std::vector<absl::Status> st = parallel::RunOnRankThreads(comms, [&](Communicator& c) {
    const int r = c.rank().value();
    CpuOps ops;
    auto ep = CommunicatorExpertExecutor::Create(c, ops, weights[r], placement, 10.0f);
    if (!ep.ok()) return ep.status();
    LocalExpertExecutor local(ops, all, 10.0f);
    for (int step = 0; step < 3; ++step) {
      for (int layer = 0; layer < kLayers; ++layer) {
        const RankInput in = RandomInput(tokens_per_rank[r], 100 * step + 10 * layer + r);
        const ExpertAssignments a{
            .experts = in.experts, .weights = in.weights, .tokens = in.tokens, .topk = kTopk};
        std::vector<float> got(in.tokens * kDim, -1.0f), want(in.tokens * kDim);
        if (absl::Status s = (*ep)->Dispatch(layer, in.x, a); !s.ok()) return s;
        if (absl::Status s = (*ep)->RunExperts(); !s.ok()) return s;
        if (absl::Status s = (*ep)->Combine(got); !s.ok()) return s;
        if (in.tokens > 0) {
          EXPECT_TRUE(local.Dispatch(layer, in.x, a).ok());
          EXPECT_TRUE(local.RunExperts().ok());
          EXPECT_TRUE(local.Combine(want).ok());
        }
        EXPECT_EQ(got, want) << "rank " << r << " layer " << layer << " step " << step;
      }
    }
    for (int l = 0; l < kLayers; ++l) {
      const std::vector<int64_t>& counts = (*ep)->served().layer_counts(l);
      served[r].insert(served[r].end(), counts.begin(), counts.end());
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < world; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  const int64_t routed =
      3 * kLayers * kTopk *
      std::accumulate(tokens_per_rank.begin(), tokens_per_rank.end(), int64_t{0});
  int64_t total = 0;
  for (const auto& counts : served) total = std::accumulate(counts.begin(), counts.end(), total);
  EXPECT_EQ(total, routed);
}

TEST(CommunicatorExpertExecutorTest, TwoRanksIdentityPlacement) {
  CheckWorld(IdentityPlacement(kLayers, kExperts, 2), {7, 3});
}

TEST(CommunicatorExpertExecutorTest, FourRanksIdentityWithAnIdleRank) {
  // 6 experts over 4 ranks: 2 slots per rank, slots 6 and 7 are replicas.
  CheckWorld(IdentityPlacement(kLayers, kExperts, 4), {5, 0, 9, 1});
}

TEST(CommunicatorExpertExecutorTest, RedundantReplicas) {
  CheckWorld(Redundant(2, 5, 1), {6, 0});
  CheckWorld(Redundant(4, 3, 2), {2, 11, 0, 4});
}

TEST(CommunicatorExpertExecutorTest, AllRanksIdle) {
  CheckWorld(IdentityPlacement(kLayers, kExperts, 3), {0, 0, 0});
}

TEST(CommunicatorExpertExecutorTest, ArgumentErrors) {
  const ModelWeights all = AllExperts();
  auto comms = FakeCommunicator::CreateWorld(1, {.timeout = absl::Seconds(2)});
  CpuOps ops;
  ExpertPlacement p = IdentityPlacement(kLayers, kExperts, 1);
  ExpertPlacement wrong_world = IdentityPlacement(kLayers, kExperts, 2);
  EXPECT_EQ(CommunicatorExpertExecutor::Create(*comms[0], ops, all, wrong_world, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExpertPlacement missing = p;
  missing.physical_to_logical[3] = 0;  // layer 0 loses expert 3
  EXPECT_EQ(CommunicatorExpertExecutor::Create(*comms[0], ops, all, missing, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  ModelWeights unloaded = all;
  unloaded.layers[1].ffn.experts[2] = ExpertWeightsF32{};
  EXPECT_EQ(CommunicatorExpertExecutor::Create(*comms[0], ops, unloaded, p, 0).status().code(),
            absl::StatusCode::kInvalidArgument);

  auto ep = CommunicatorExpertExecutor::Create(*comms[0], ops, all, p, 0);
  ASSERT_TRUE(ep.ok()) << ep.status();
  const RankInput in = RandomInput(2, 9);
  std::vector<int32_t> bad = in.experts;
  bad[1] = kExperts;
  EXPECT_EQ(
      (*ep)
          ->Dispatch(0, in.x, {.experts = bad, .weights = in.weights, .tokens = 2, .topk = kTopk})
          .code(),
      absl::StatusCode::kInvalidArgument);
  const ExpertAssignments a{
      .experts = in.experts, .weights = in.weights, .tokens = 2, .topk = kTopk};
  EXPECT_EQ((*ep)->Dispatch(kLayers, in.x, a).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> y(2 * kDim);
  EXPECT_EQ((*ep)->RunExperts().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*ep)->Dispatch(1, in.x, a).ok());
  EXPECT_EQ((*ep)->Dispatch(1, in.x, a).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*ep)->Combine(y).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*ep)->RunExperts().ok());
  ASSERT_TRUE((*ep)->Combine(y).ok());
  for (int e = 0; e < kExperts; ++e) {
    EXPECT_EQ((*ep)->served().count(1, e), std::count(in.experts.begin(), in.experts.end(), e));
  }
}

TEST(ExpertPlacementTest, ValidationAndFilter) {
  EXPECT_TRUE(ValidatePlacement(IdentityPlacement(3, 8, 3)).ok());
  ExpertPlacement p = IdentityPlacement(1, 4, 2);  // slots [0 1 | 2 3]
  EXPECT_EQ(p.slots_per_rank, 2);
  ExpertFilter f = OwnedExpertFilter(p, 1);
  EXPECT_FALSE(f(0, 0));
  EXPECT_TRUE(f(0, 3));
  p.physical_to_logical.pop_back();
  EXPECT_EQ(ValidatePlacement(p).code(), absl::StatusCode::kInvalidArgument);
  p = IdentityPlacement(1, 4, 2);
  p.physical_to_logical[0] = 4;
  EXPECT_EQ(ValidatePlacement(p).code(), absl::StatusCode::kInvalidArgument);
  p.slots_per_rank = 0;
  EXPECT_EQ(ValidatePlacement(p).code(), absl::StatusCode::kInvalidArgument);
  const auto replicas = ReplicaSlots(IdentityPlacement(1, 3, 2));  // slots [0 1 | 2 0]
  EXPECT_EQ(replicas[0][0], (std::vector<int>{0, 3}));
  EXPECT_EQ(replicas[0][2], (std::vector<int>{2}));
}

}  // namespace
}  // namespace weir::model
