// Expert-parallel models on FakeCommunicator worlds (ranks as threads, each
// with its own Model holding only its experts, and its own sequences): the
// logits of every rank's sequences over prefill + decode steps equal a
// single-process run of each sequence alone, for 2 and 4 ranks, identity and
// redundant-replica placements, ranks with zero rows at some or all steps;
// Engram tables row-sharded (each rank holds 1/W of the rows, idle ranks
// serve theirs) or whole.
#include "worker/model/expert_parallel_model.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/fake_communicator.h"
#include "worker/model/ep_schedule_test_util.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

using parallel::Communicator;
using parallel::FakeCommunicator;

const Checkpoint& Tiny() { return TinyCheckpoint(11); }

std::vector<int64_t> Tokens(int n, uint32_t seed) { return RandomTokens(n, seed); }

// Rank 1 idles at steps 0-1, rank 0 at steps 5-6.
std::vector<ScheduledSequence> TwoRankSchedule() {
  return {{.rank = 0, .start_step = 0, .prompt = Tokens(10, 1), .decode_steps = 4},
          {.rank = 0, .start_step = 1, .prompt = Tokens(3, 2), .decode_steps = 3},
          {.rank = 1, .start_step = 2, .prompt = Tokens(6, 3), .decode_steps = 4}};
}

// Rank 2 never has rows; the others start and stop at different steps.
std::vector<ScheduledSequence> FourRankSchedule() {
  return {{.rank = 0, .start_step = 0, .prompt = Tokens(9, 4), .decode_steps = 4},
          {.rank = 0, .start_step = 1, .prompt = Tokens(2, 5), .decode_steps = 2},
          {.rank = 1, .start_step = 0, .prompt = Tokens(13, 6), .decode_steps = 3},
          {.rank = 3, .start_step = 2, .prompt = Tokens(5, 7), .decode_steps = 3},
          {.rank = 3, .start_step = 0, .prompt = Tokens(1, 8), .decode_steps = 5}};
}

ExpertPlacement Redundant(int world, int slots_per_rank, uint32_t seed) {
  return ShuffledPlacement(Tiny().config(), world, slots_per_rank, seed);
}

ExpertPlacement Identity(int world) {
  const ModelConfig& c = Tiny().config();
  return IdentityPlacement(static_cast<int>(c.n_layers), static_cast<int>(c.n_routed_experts),
                           world);
}

// Engram rows held per (rank, Engram layer) and gather counters per rank.
struct EngramStats {
  std::vector<std::vector<int64_t>> held;  // [rank][engram layer] rows referenced
  std::vector<std::vector<int64_t>> served, requested;
};

// Checks the Engram tables of a `world`-rank run: sharded = each rank holds
// exactly its EngramShardRange (at most ceil(N/W) rows, the shards adding up
// to N) and every rank, idle ones included, served rows; else whole tables.
void CheckEngram(const EngramStats& s, int world, bool sharded) {
  const ModelConfig& c = Tiny().config();
  for (size_t l = 0; l < c.engram_layer_ids.size(); ++l) {
    const int64_t rows = c.engram_num_embeddings[l];
    int64_t total = 0, served = 0, requested = 0;
    for (int r = 0; r < world; ++r) {
      const int64_t held = s.held[r][l];
      total += held;
      if (sharded) {
        const EngramRowRange want = EngramShardRange(rows, r, world);
        EXPECT_EQ(held, want.end - want.begin) << "rank " << r << " Engram layer " << l;
        EXPECT_LE(held, (rows + world - 1) / world);
        EXPECT_GT(s.served[r][l], 0) << "rank " << r << " Engram layer " << l;
        served += s.served[r][l];
        requested += s.requested[r][l];
      } else {
        EXPECT_EQ(held, rows) << "rank " << r;
      }
    }
    EXPECT_EQ(total, sharded ? rows : rows * world);
    EXPECT_EQ(served, requested);
  }
  std::printf("world %d: Engram rows per rank %s\n", world, sharded ? "1/W" : "all");
}

// Runs the schedule on `placement.world_size` ranks and compares with the
// single-process run; returns the largest relative logit difference.
double RunAndCompare(const ExpertPlacement& placement,
                     const std::vector<ScheduledSequence>& schedule,
                     ExpertParallelOptions ep_options = {}) {
  const int world = placement.world_size;
  auto reference = Model::Create(Tiny().config(), Tiny());
  EXPECT_TRUE(reference.ok()) << reference.status();
  if (!reference.ok()) return INFINITY;
  auto want = RunReferenceSchedule(**reference, schedule);
  EXPECT_TRUE(want.ok()) << want.status();
  std::vector<std::vector<SequenceResult>> got(world);
  std::vector<std::vector<int64_t>> routed(world), served(world);
  EngramStats engram{.held = std::vector<std::vector<int64_t>>(world),
                     .served = std::vector<std::vector<int64_t>>(world),
                     .requested = std::vector<std::vector<int64_t>>(world)};
  auto comms = FakeCommunicator::CreateWorld(world, {.timeout = absl::Seconds(30)});
  std::vector<absl::Status> st = parallel::RunOnRankThreads(comms, [&](Communicator& c) {
    const int r = c.rank().value();
    absl::StatusOr<ExpertParallelModel> ep =
        CreateExpertParallelModel(Tiny().config(), Tiny(), placement, c, {}, ep_options);
    if (!ep.ok()) return ep.status();
    EXPECT_EQ(ep->engram != nullptr, ep_options.shard_engram);
    absl::StatusOr<std::vector<SequenceResult>> res = RunRankSchedule(*ep->model, schedule, r);
    if (!res.ok()) return res.status();
    got[r] = std::move(*res);
    for (int layer : Tiny().config().engram_layer_ids) {
      const EngramWeights& e = ep->model->weights().layers[layer].engram;
      const int64_t held = e.row_end - e.row_begin;
      EXPECT_EQ(static_cast<int64_t>(e.table.size()), held * Tiny().config().engram_head_dim);
      engram.held[r].push_back(held);
    }
    if (ep->engram != nullptr) {
      engram.served[r] = ep->engram->served();
      engram.requested[r] = ep->engram->requested();
    }
    for (int l = 0; l < Tiny().config().n_layers; ++l) {
      for (int64_t n : ep->model->expert_load().layer_counts(l)) routed[r].push_back(n);
      for (int64_t n : ep->executor->served().layer_counts(l)) served[r].push_back(n);
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < world; ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
  if (!want.ok()) return INFINITY;
  std::vector<SequenceResult> merged(schedule.size());
  for (size_t i = 0; i < schedule.size(); ++i) merged[i] = got[schedule[i].rank][i];
  std::string mismatch;
  const double rel = CompareResults(merged, *want, &mismatch);
  EXPECT_EQ(mismatch, "");
  // Routed pairs summed over ranks = the reference's; every pair was served once.
  std::vector<int64_t> want_load, routed_sum(routed[0].size(), 0);
  for (int l = 0; l < Tiny().config().n_layers; ++l) {
    for (int64_t n : (*reference)->expert_load().layer_counts(l)) want_load.push_back(n);
  }
  int64_t total_served = 0, total_routed = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t i = 0; i < routed[r].size(); ++i) routed_sum[i] += routed[r][i];
    for (size_t i = 0; i < served[r].size(); ++i) total_served += served[r][i];
  }
  for (int64_t n : want_load) total_routed += n;
  EXPECT_EQ(routed_sum, want_load);
  EXPECT_EQ(total_served, total_routed);
  CheckEngram(engram, world, ep_options.shard_engram);
  std::printf("world %d, %d slots/rank: max relative logit difference %.3g\n", world,
              placement.slots_per_rank, rel);
  return rel;
}

constexpr double kTol = 1e-5;

TEST(ExpertParallelModelTest, TwoRanksIdentity) {
  EXPECT_LE(RunAndCompare(Identity(2), TwoRankSchedule()), kTol);
}

TEST(ExpertParallelModelTest, TwoRanksRedundantReplicas) {
  EXPECT_LE(RunAndCompare(Redundant(2, 6, 1), TwoRankSchedule()), kTol);
}

TEST(ExpertParallelModelTest, FourRanksIdentity) {
  EXPECT_LE(RunAndCompare(Identity(4), FourRankSchedule()), kTol);
}

TEST(ExpertParallelModelTest, FourRanksRedundantReplicas) {
  EXPECT_LE(RunAndCompare(Redundant(4, 3, 2), FourRankSchedule()), kTol);
}

TEST(ExpertParallelModelTest, TwoRanksWholeEngramTables) {
  EXPECT_LE(RunAndCompare(Identity(2), TwoRankSchedule(), {.shard_engram = false}), kTol);
}

TEST(ExpertParallelModelTest, ShardedEngramTablesNeedAGather) {
  ModelOptions options;
  options.engram_row_filter = ShardedEngramRowFilter(0, 2);  // no make_engram_gather
  EXPECT_EQ(Model::Create(Tiny().config(), Tiny(), std::move(options)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ExpertParallelModelTest, LoadsOnlyOwnedExperts) {
  const ModelConfig& c = Tiny().config();
  const ExpertPlacement p = Redundant(4, 3, 2);
  const LayerRoles roles(c);
  for (int r = 0; r < 4; ++r) {
    auto w = LoadModelWeights(c, roles, Tiny(), OwnedExpertFilter(p, r));
    ASSERT_TRUE(w.ok()) << w.status();
    for (int l = 0; l < static_cast<int>(w->layers.size()); ++l) {
      std::vector<bool> owned(w->layers[l].ffn.experts.size(), l >= c.n_layers);
      for (int s = 3 * r; l < c.n_layers && s < 3 * r + 3; ++s) owned[p.logical(l, s)] = true;
      for (size_t e = 0; e < owned.size(); ++e) {
        EXPECT_EQ(w->layers[l].ffn.experts[e].w1.out > 0, owned[e])
            << "rank " << r << " layer " << l << " expert " << e;
      }
    }
  }
}

TEST(ExpertParallelModelTest, DraftIsLocalAndMatches) {
  const std::vector<int64_t> prompt = Tokens(7, 9);
  auto reference = Model::Create(Tiny().config(), Tiny());
  ASSERT_TRUE(reference.ok());
  auto seq = (*reference)->NewSequence();
  ASSERT_TRUE((*reference)->Forward(*seq, prompt, 0).ok());
  auto want = (*reference)->Draft(*seq, 42);
  ASSERT_TRUE(want.ok()) << want.status();
  auto comms = FakeCommunicator::CreateWorld(2, {.timeout = absl::Seconds(30)});
  std::vector<absl::Status> st = parallel::RunOnRankThreads(comms, [&](Communicator& c) {
    auto ep = CreateExpertParallelModel(Tiny().config(), Tiny(), Identity(2), c);
    if (!ep.ok()) return ep.status();
    auto s = ep->model->NewSequence();
    if (c.rank().value() == 1) {  // a rank without rows still joins the step
      return ep->model->ForwardBatch({}, {}, {}).status();
    }
    auto logits = ep->model->Forward(*s, prompt, 0);  // a one-row step
    if (!logits.ok()) return logits.status();
    auto draft = ep->model->Draft(*s, 42);  // rank 0 only: no collective
    if (!draft.ok()) return draft.status();
    EXPECT_EQ(draft->tokens, want->tokens);
    EXPECT_EQ(draft->confidence, want->confidence);
    return absl::OkStatus();
  });
  EXPECT_TRUE(st[0].ok()) << st[0];
  EXPECT_TRUE(st[1].ok()) << st[1];
}

TEST(ExpertParallelModelTest, BadPlacementsAreRejected) {
  auto comms = FakeCommunicator::CreateWorld(1, {.timeout = absl::Seconds(2)});
  const ModelConfig& c = Tiny().config();
  ExpertPlacement two = Identity(2);
  EXPECT_EQ(CreateExpertParallelModel(c, Tiny(), two, *comms[0]).status().code(),
            absl::StatusCode::kInvalidArgument);
  ExpertPlacement short_map = IdentityPlacement(3, static_cast<int>(c.n_routed_experts), 1);
  EXPECT_EQ(CreateExpertParallelModel(c, Tiny(), short_map, *comms[0]).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::model
