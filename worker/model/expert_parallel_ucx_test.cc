// Expert-parallel models in forked rank processes connected over UCX
// (tcp,self): every rank loads only its experts and its rows of the Engram
// tables from the shared checkpoint, runs its sequences (some ranks idle at
// some steps) and writes its results; the parent compares them with a
// single-process run of every sequence alone.
#include <stdlib.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "parallel/file_rendezvous.h"
#include "parallel/fork_ranks.h"
#include "parallel/ucx_communicator.h"
#include "worker/model/ep_schedule_test_util.h"
#include "worker/model/expert_parallel_model.h"
#include "worker/model/tiny_checkpoint.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

std::string FreshDir(const std::string& name) {
  const char* root = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(root != nullptr ? root : "/tmp", "/", name, "XXXXXX");
  char* made = mkdtemp(pattern.data());
  return made != nullptr ? std::string(made) : std::string();
}

const Checkpoint& Tiny() {
  static const Checkpoint* ckpt = [] {
    auto c = GenerateAndOpenCheckpoint("models/random/tiny/config.json", FreshDir("tiny"), 11);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? c->release() : nullptr;
  }();
  return *ckpt;
}

std::vector<int64_t> Tokens(int n, uint32_t seed) { return RandomTokens(n, seed); }

int Fail(int rank, const absl::Status& status) {
  std::fprintf(stderr, "rank %d: %s\n", rank, status.ToString().c_str());
  return 1;
}

// Child body: connect, build the rank's model, run, write results to dir/result.<rank>.
int RunRank(int rank, const std::string& dir, const ExpertPlacement& placement,
            const std::vector<ScheduledSequence>& schedule) {
  auto ctx = parallel::UcxContext::Create({.transports = "tcp,self"});
  if (!ctx.ok()) return Fail(rank, ctx.status());
  auto table = parallel::ExchangeThroughDirectory(dir, rank, placement.world_size,
                                                  (*ctx)->address(), absl::Seconds(20));
  if (!table.ok()) return Fail(rank, table.status());
  auto comm =
      parallel::UcxCommunicator::Create(**ctx, Rank(rank), *table, {.timeout = absl::Seconds(20)});
  if (!comm.ok()) return Fail(rank, comm.status());
  {
    auto ep = CreateExpertParallelModel(Tiny().config(), Tiny(), placement, **comm);
    if (!ep.ok()) return Fail(rank, ep.status());
    auto results = RunRankSchedule(*ep->model, schedule, rank);
    if (!results.ok()) return Fail(rank, results.status());
    // Engram tables are row-sharded: this rank holds its shard and served rows.
    const ModelConfig& c = Tiny().config();
    for (size_t l = 0; l < c.engram_layer_ids.size(); ++l) {
      const EngramWeights& e = ep->model->weights().layers[c.engram_layer_ids[l]].engram;
      const EngramRowRange want = EngramShardRange(e.rows, rank, placement.world_size);
      if (ep->engram == nullptr || e.row_begin != want.begin || e.row_end != want.end ||
          ep->engram->served()[l] == 0) {
        return Fail(rank, absl::InternalError(absl::StrCat("Engram layer ", l, " not sharded")));
      }
    }
    std::ofstream out(absl::StrCat(dir, "/result.", rank), std::ios::binary);
    out << SerializeResults(*results);
    if (!out.good()) return Fail(rank, absl::InternalError("cannot write results"));
  }
  comm->reset();
  return 0;
}

void RunOverUcx(const ExpertPlacement& placement, const std::vector<ScheduledSequence>& schedule) {
  const int world = placement.world_size;
  const Checkpoint& ckpt = Tiny();  // generated before forking; children share the mapping
  const std::string dir = FreshDir("ep");
  ASSERT_FALSE(dir.empty());
  auto outcome = parallel::ForkRanks(
      world, [&](int rank) { return RunRank(rank, dir, placement, schedule); }, absl::Seconds(60));
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  for (int r = 0; r < world; ++r) ASSERT_EQ((*outcome)[r], 0) << "rank " << r;
  // The reference runs in the parent after the children are gone.
  auto reference = Model::Create(ckpt.config(), ckpt);
  ASSERT_TRUE(reference.ok()) << reference.status();
  auto want = RunReferenceSchedule(**reference, schedule);
  ASSERT_TRUE(want.ok()) << want.status();
  std::vector<SequenceResult> merged(schedule.size());
  for (int r = 0; r < world; ++r) {
    std::ifstream in(absl::StrCat(dir, "/result.", r), std::ios::binary);
    std::stringstream bytes;
    bytes << in.rdbuf();
    auto got = ParseResults(bytes.str());
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), schedule.size());
    for (size_t i = 0; i < schedule.size(); ++i) {
      if (schedule[i].rank == r) merged[i] = (*got)[i];
    }
  }
  std::string mismatch;
  const double rel = CompareResults(merged, *want, &mismatch);
  EXPECT_EQ(mismatch, "");
  EXPECT_LE(rel, 1e-5);
  std::printf("UCX world %d: max relative logit difference %.3g\n", world, rel);
}

TEST(ExpertParallelUcxTest, TwoRanks) {
  const ModelConfig& c = Tiny().config();
  RunOverUcx(
      IdentityPlacement(static_cast<int>(c.n_layers), static_cast<int>(c.n_routed_experts), 2),
      {{.rank = 0, .start_step = 0, .prompt = Tokens(8, 1), .decode_steps = 3},
       {.rank = 1, .start_step = 1, .prompt = Tokens(5, 2), .decode_steps = 3}});
}

TEST(ExpertParallelUcxTest, FourRanksWithReplicasAndAnIdleRank) {
  const ModelConfig& c = Tiny().config();
  // 3 slots per rank: experts 0..7 and replicas of 0..3, rotated per layer.
  ExpertPlacement p{.num_layers = static_cast<int>(c.n_layers),
                    .num_logical = static_cast<int>(c.n_routed_experts),
                    .slots_per_rank = 3,
                    .world_size = 4};
  for (int l = 0; l < p.num_layers; ++l) {
    for (int s = 0; s < p.num_physical(); ++s) {
      p.physical_to_logical.push_back((s + l) % p.num_physical() % p.num_logical);
    }
  }
  RunOverUcx(p, {{.rank = 0, .start_step = 0, .prompt = Tokens(6, 3), .decode_steps = 3},
                 {.rank = 1, .start_step = 0, .prompt = Tokens(11, 4), .decode_steps = 2},
                 {.rank = 1, .start_step = 2, .prompt = Tokens(2, 5), .decode_steps = 2},
                 {.rank = 3, .start_step = 1, .prompt = Tokens(4, 6), .decode_steps = 3}});
}

}  // namespace
}  // namespace weir::model
