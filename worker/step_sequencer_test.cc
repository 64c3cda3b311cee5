#include "worker/step_sequencer.h"

#include "gtest/gtest.h"

namespace weir::worker {
namespace {

TEST(StepSequencerTest, AcceptsConsecutiveStepsFromItsEpoch) {
  StepSequencer seq(/*epoch=*/77);
  for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(seq.Accept(77, i).ok()) << i;
  EXPECT_EQ(seq.next_step_id(), 5u);
}

TEST(StepSequencerTest, RefusesForeignEpochGapsAndRepeats) {
  StepSequencer seq(77);
  EXPECT_EQ(seq.Accept(76, 0).code(), absl::StatusCode::kAborted);
  EXPECT_EQ(seq.Accept(77, 1).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(seq.Accept(77, 0).ok());
  EXPECT_EQ(seq.Accept(77, 0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(seq.next_step_id(), 1u);  // Refusals do not advance.
  EXPECT_TRUE(seq.Accept(77, 1).ok());
}

}  // namespace
}  // namespace weir::worker
