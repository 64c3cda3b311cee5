// ProfileVerifyCost on HostDecodeBackend (the CPU stand-in of a drafting
// DeviceDecoder) over the random tiny: a curve of the batch sizes that fit,
// every cost positive, the backend's slots empty again; the ranks of a group
// profiling their collective backends in step; the refusals.
#include "worker/verify_profile.h"

#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/host_decode_backend.h"
#include "worker/step_executor_test_util.h"

namespace weir::worker {
namespace {

struct Fixture {
  const model::Checkpoint* checkpoint =
      model::DerivedCheckpoint("random/tiny", "random_tiny_seed5", {}, 5);
  std::unique_ptr<model::Model> model =
      checkpoint == nullptr ? nullptr : model::NewModelOrFail(*checkpoint);
};

TEST(VerifyProfileTest, MeasuresTheBatchSizesThatFit) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  // 4 slots, 12 rows a step: batch 8 does not fit, nor 4 x (3 + 1) = 16 rows.
  model::HostDecodeBackend backend(*f.model, /*max_sequences=*/4, /*max_batch=*/12,
                                   /*max_positions=*/64, /*collective=*/false,
                                   /*max_rows_per_slot=*/4);
  backend.ExpectBlockTables(8, 32);
  backend.EnableDrafting(/*max_rollback=*/3);  // as the decoder of a worker drafting 3
  const int64_t batches[] = {1, 2, 3, 4, 8};
  VerifyProfileOptions options{
      .drafts = 3, .reps = 1, .backend = "cpu", .measured_on = "test", .model = "random tiny"};
  // The blocks a slot needs, as a worker sizes them (46 positions: 6 blocks).
  options.blocks_per_slot = backend.BlocksFor(ProfileVerifyPositions(5, options));
  EXPECT_EQ(options.blocks_per_slot, 6);
  absl::StatusOr<VerifyCostCurve> curve = ProfileVerifyCost(backend, batches, options);
  ASSERT_TRUE(curve.ok()) << curve.status();
  ASSERT_EQ(curve->points.size(), 3u);  // 1, 2, 3
  EXPECT_EQ(curve->max_drafts(), 3);
  for (size_t i = 0; i < curve->points.size(); ++i) {
    const VerifyCostCurve::Point& p = curve->points[i];
    EXPECT_EQ(p.batch, static_cast<int64_t>(i + 1));
    EXPECT_GT(p.draft_ms, 0);
    for (double ms : p.step_ms) EXPECT_TRUE(std::isfinite(ms) && ms > 0) << ms;
  }
  // The JSON form round-trips (what a worker would log or keep).
  absl::StatusOr<VerifyCostCurve> parsed = ParseVerifyCostCurve(VerifyCostCurveToJson(*curve));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->points.size(), 3u);
  // Every slot is free again, and the backend still works.
  for (int s = 0; s < 4; ++s) EXPECT_FALSE(backend.holds(s)) << s;
  EXPECT_GT(backend.stats().drafts, 0);
  EXPECT_GT(backend.stats().rollbacks, 0);
  ASSERT_TRUE(ProfileVerifyCost(backend, batches, options).ok());
}

// A backend that rolls back but does not draft (prompt lookup alone): the
// steps are measured, no draft pass (draft_ms 0, nothing drafted).
TEST(VerifyProfileTest, ABackendThatOnlyRollsBackHasNoDraftCost) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  model::HostDecodeBackend backend(*f.model, 2, 8, 64, false, 4);
  backend.EnableRollback(3);
  const int64_t batches[] = {1, 2};
  absl::StatusOr<VerifyCostCurve> curve =
      ProfileVerifyCost(backend, batches, {.drafts = 3, .reps = 1, .backend = "cpu"});
  ASSERT_TRUE(curve.ok()) << curve.status();
  ASSERT_EQ(curve->points.size(), 2u);
  for (const VerifyCostCurve::Point& p : curve->points) {
    EXPECT_EQ(p.draft_ms, 0);
    ASSERT_EQ(p.step_ms.size(), 4u);
    for (double ms : p.step_ms) EXPECT_TRUE(std::isfinite(ms) && ms > 0) << ms;
  }
  EXPECT_EQ(backend.stats().drafts, 0);
  EXPECT_GT(backend.stats().rollbacks, 0);
  // It must roll back as many positions as a verification holds drafts.
  model::HostDecodeBackend shallow(*f.model, 2, 8, 64, false, 4);
  shallow.EnableRollback(2);
  EXPECT_EQ(ProfileVerifyCost(shallow, batches, {.drafts = 3}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// The ranks of an expert-parallel group profile at load, each on its
// collective backend (every step a collective of the group): the steps
// depend only on the batches, options and capacities, so both ranks take
// the same ones (an unpaired collective would time out) and measure the
// same batch sizes.
TEST(VerifyProfileTest, RanksOfAGroupProfileInStep) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  constexpr int kWorld = 2;
  const int64_t batches[] = {1, 2, 4, 8};
  std::vector<absl::StatusOr<VerifyCostCurve>> curves(kWorld, absl::InternalError("not run"));
  std::vector<int64_t> steps(kWorld);
  std::vector<absl::Status> st =
      OnExpertParallelRanks(*f.checkpoint, kWorld, [&](int r, model::Model& m) -> absl::Status {
        model::HostDecodeBackend backend(m, /*max_sequences=*/4, /*max_batch=*/16,
                                         /*max_positions=*/64, /*collective=*/true,
                                         /*max_rows_per_slot=*/4);
        backend.EnableDrafting(/*max_rollback=*/3);
        curves[r] = ProfileVerifyCost(
            backend, batches,
            {.drafts = 3, .reps = 1, .backend = "cpu", .measured_on = "test", .model = "tiny"});
        steps[r] = backend.stats().steps;
        return absl::OkStatus();
      });
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    ASSERT_TRUE(curves[r].ok()) << "rank " << r << ": " << curves[r].status();
    ASSERT_EQ(curves[r]->points.size(), 3u) << "rank " << r;  // 1, 2, 4 (8: 4 slots)
  }
  EXPECT_EQ(steps[0], steps[1]);
  // 4 starts, then per batch size 4 lengths x 2 runs.
  EXPECT_EQ(steps[0], 4 + 3 * 4 * 2);
}

TEST(VerifyProfileTest, Refusals) {
  Fixture f;
  ASSERT_NE(f.model, nullptr);
  const int64_t batches[] = {1, 2};
  model::HostDecodeBackend plain(*f.model, 2, 8, 64, false, 4);
  EXPECT_EQ(ProfileVerifyCost(plain, batches, {.drafts = 3}).status().code(),
            absl::StatusCode::kFailedPrecondition);  // neither drafts nor rolls back
  model::HostDecodeBackend backend(*f.model, 2, 8, 64, false, 4);
  backend.EnableDrafting();
  EXPECT_EQ(ProfileVerifyCost(backend, batches, {.drafts = 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ProfileVerifyCost(backend, batches, {.drafts = 4}).status().code(),
            absl::StatusCode::kFailedPrecondition);  // 5 rows a slot
  const int64_t unordered[] = {2, 1};
  EXPECT_EQ(ProfileVerifyCost(backend, unordered, {.drafts = 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const int64_t unordered_past_the_fit[] = {1, 64, 2};  // 64 does not fit; still unordered
  EXPECT_EQ(ProfileVerifyCost(backend, unordered_past_the_fit, {.drafts = 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const int64_t big[] = {16};
  EXPECT_EQ(ProfileVerifyCost(backend, big, {.drafts = 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::worker
