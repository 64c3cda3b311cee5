// Expert re-placement: the move plan (pure), and on a 4-rank FakeCommunicator
// world, sequences that prefill under one placement, switch to another (the
// gained experts received from peers, the dropped ones freed) and decode on:
// their logits equal a single-process model's at every step.
#include "worker/model/expert_moves.h"

#include <cmath>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/fake_communicator.h"
#include "worker/model/ep_schedule_test_util.h"
#include "worker/model/expert_parallel_model.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

using parallel::Communicator;
using parallel::FakeCommunicator;

const Checkpoint& Tiny() { return TinyCheckpoint(11); }

ExpertPlacement Shuffled(int world, int slots_per_rank, uint32_t seed) {
  return ShuffledPlacement(Tiny().config(), world, slots_per_rank, seed);
}

std::set<int32_t> Held(const ExpertPlacement& p, int layer, int rank) {
  std::set<int32_t> out;
  for (int s = rank * p.slots_per_rank; s < (rank + 1) * p.slots_per_rank; ++s) {
    out.insert(p.logical(layer, s));
  }
  return out;
}

TEST(PlanExpertMovesTest, SamePlacementMovesNothing) {
  const ExpertPlacement p = Shuffled(4, 3, 1);
  EXPECT_TRUE(PlanExpertMoves(p, p).empty());
}

TEST(PlanExpertMovesTest, EveryGainedExpertComesFromAHolder) {
  const ExpertPlacement from = Shuffled(4, 3, 1);
  const ExpertPlacement to = Shuffled(4, 3, 2);
  const std::vector<ExpertMove> moves = PlanExpertMoves(from, to);
  ASSERT_FALSE(moves.empty());
  std::set<std::tuple<int, int32_t, int>> planned;
  for (const ExpertMove& m : moves) {
    EXPECT_TRUE(Held(from, m.layer, m.src).contains(m.expert));
    EXPECT_FALSE(Held(from, m.layer, m.dst).contains(m.expert));
    EXPECT_TRUE(Held(to, m.layer, m.dst).contains(m.expert));
    EXPECT_TRUE(planned.insert({m.layer, m.expert, m.dst}).second) << "duplicate move";
  }
  for (int r = 0; r < 4; ++r) {
    for (int l = 0; l < from.num_layers; ++l) {
      for (int32_t e : Held(to, l, r)) {
        if (!Held(from, l, r).contains(e)) {
          EXPECT_TRUE(planned.contains({l, e, r}));
        }
      }
    }
  }
  EXPECT_EQ(moves, PlanExpertMoves(from, to));  // deterministic
}

TEST(ExpertMovesTest, SwitchBetweenStepsKeepsLogitsExact) {
  constexpr int kWorld = 4;
  const ExpertPlacement before = Shuffled(kWorld, 3, 5);
  const ExpertPlacement after = Shuffled(kWorld, 3, 6);
  const std::vector<ExpertMove> moves = PlanExpertMoves(before, after);
  ASSERT_FALSE(moves.empty());
  constexpr int kDecode = 3;

  // Reference: each rank's sequence alone in one process.
  auto reference = Model::Create(Tiny().config(), Tiny());
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::vector<std::vector<std::vector<float>>> want(kWorld);
  std::vector<std::vector<int64_t>> prompts(kWorld), decode(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    prompts[r] = RandomTokens(5 + r, 40 + r);
    decode[r] = RandomTokens(kDecode, 80 + r);
    auto state = (*reference)->NewSequence();
    auto logits = (*reference)->Forward(*state, prompts[r], 0);
    ASSERT_TRUE(logits.ok()) << logits.status();
    want[r].push_back(std::move(*logits));
    for (int t = 0; t < kDecode; ++t) {
      auto step = (*reference)->Forward(*state, std::span(&decode[r][t], 1), state->length());
      ASSERT_TRUE(step.ok()) << step.status();
      want[r].push_back(std::move(*step));
    }
  }

  std::vector<uint64_t> received(kWorld, 0);
  std::vector<double> worst(kWorld, 0);
  auto comms = FakeCommunicator::CreateWorld(kWorld, {.timeout = absl::Seconds(30)});
  std::vector<absl::Status> st = parallel::RunOnRankThreads(comms, [&](Communicator& c) {
    const int r = c.rank().value();
    absl::StatusOr<ExpertParallelModel> ep = CreateExpertParallelModel(
        Tiny().config(), Tiny(), before, c, {}, {.shard_engram = false});
    if (!ep.ok()) return ep.status();
    Model& model = *ep->model;
    auto state = model.NewSequence();
    auto compare = [&](const std::vector<float>& got, const std::vector<float>& ref) {
      EXPECT_EQ(got.size(), ref.size());
      for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
        worst[r] = std::max(worst[r], std::abs(static_cast<double>(got[i]) - ref[i]) /
                                          std::max(1e-6, std::abs(static_cast<double>(ref[i]))));
      }
    };
    auto step = [&](std::span<const int64_t> tokens) -> absl::Status {
      SequenceState* states[] = {state.get()};
      std::span<const int64_t> rows[] = {tokens};
      const int64_t start[] = {state->length()};
      absl::StatusOr<std::vector<std::vector<float>>> out =
          model.ForwardBatch(states, rows, start);
      if (!out.ok()) return out.status();
      const size_t index = start[0] == 0 ? 0 : static_cast<size_t>(start[0]) - prompts[r].size() + 1;
      // Prefill compares its last row only through the full logits vector.
      compare((*out)[0], want[r][index]);
      return absl::OkStatus();
    };
    if (absl::Status s = step(prompts[r]); !s.ok()) return s;
    // Stage (collective), then switch between steps.
    absl::StatusOr<StagedExperts> staged =
        ExchangeExperts(c, moves, model.weights(), before.num_layers);
    if (!staged.ok()) return staged.status();
    received[r] = staged->bytes_received;
    if (absl::Status s = InstallPlacement(model, *ep->executor, after, std::move(*staged));
        !s.ok()) {
      return s;
    }
    for (int l = 0; l < after.num_layers; ++l) {
      const std::set<int32_t> held = Held(after, l, r);
      const auto& experts = model.weights().layers[l].ffn.experts;
      for (int32_t e = 0; e < static_cast<int32_t>(experts.size()); ++e) {
        EXPECT_EQ(!experts[e].w1.w.empty(), held.contains(e))
            << "rank " << r << " layer " << l << " expert " << e;
      }
    }
    EXPECT_EQ(ep->executor->placement().physical_to_logical, after.physical_to_logical);
    for (int t = 0; t < kDecode; ++t) {
      if (absl::Status s = step(std::span(&decode[r][t], 1)); !s.ok()) return s;
    }
    return absl::OkStatus();
  });
  uint64_t total = 0;
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    EXPECT_EQ(worst[r], 0.0) << "rank " << r;
    total += received[r];
  }
  const ModelConfig& c = Tiny().config();
  const uint64_t expert_bytes = 3 * c.moe_inter_dim * c.dim * sizeof(float);
  EXPECT_EQ(total, moves.size() * expert_bytes);
  std::printf("%zu experts moved, %llu bytes\n", moves.size(),
              static_cast<unsigned long long>(total));
}

TEST(ExpertMovesTest, RefusesAnExpertNobodyStaged) {
  constexpr int kWorld = 2;
  const ExpertPlacement before = Shuffled(kWorld, 5, 7);
  const ExpertPlacement after = Shuffled(kWorld, 5, 8);
  ASSERT_FALSE(PlanExpertMoves(before, after).empty());
  auto comms = FakeCommunicator::CreateWorld(kWorld, {.timeout = absl::Seconds(30)});
  std::vector<absl::Status> st = parallel::RunOnRankThreads(comms, [&](Communicator& c) {
    absl::StatusOr<ExpertParallelModel> ep = CreateExpertParallelModel(
        Tiny().config(), Tiny(), before, c, {}, {.shard_engram = false});
    if (!ep.ok()) return ep.status();
    // Nothing staged: a rank that gains experts must refuse and keep `before`.
    absl::Status s = InstallPlacement(*ep->model, *ep->executor, after, StagedExperts{});
    const bool gains = [&] {
      for (const ExpertMove& m : PlanExpertMoves(before, after)) {
        if (m.dst == c.rank().value()) return true;
      }
      return false;
    }();
    if (gains) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_EQ(ep->executor->placement().physical_to_logical, before.physical_to_logical);
    }
    return absl::OkStatus();
  });
  for (const absl::Status& s : st) EXPECT_TRUE(s.ok()) << s;
}

}  // namespace
}  // namespace weir::model
