#include "coordinator/speculation_flags.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace weir::coordinator {
namespace {

model::ModelConfig Tiny() {
  absl::StatusOr<model::ModelConfig> c = model::LoadModelConfig("models/random/tiny/config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : model::ModelConfig{};
}

TEST(SpeculationFlagsTest, OffIsZeroAndDsparkDefaultsToTheBlock) {
  const model::ModelConfig c = Tiny();
  ASSERT_EQ(c.dspark_block_size, 5);
  EXPECT_EQ(*NumDraftTokensFromFlags("off", 0, c), 0);
  EXPECT_EQ(*NumDraftTokensFromFlags("dspark", 0, c), 5);
  EXPECT_EQ(*NumDraftTokensFromFlags("dspark", 1, c), 1);
  EXPECT_EQ(*NumDraftTokensFromFlags("dspark", 5, c), 5);
}

TEST(SpeculationFlagsTest, BadValuesAreInvalidArgumentNamingTheFlag) {
  model::ModelConfig c = Tiny();
  auto refused = [&](std::string_view mode, int n, std::string_view flag) {
    absl::StatusOr<int32_t> r = NumDraftTokensFromFlags(mode, n, c);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << mode << " " << n;
    EXPECT_NE(std::string(r.status().message()).find(flag), std::string::npos) << r.status();
  };
  refused("eagle", 0, "--speculative");
  refused("", 0, "--speculative");
  refused("DSPARK", 0, "--speculative");
  refused("dspark", 6, "--num_draft_tokens");
  refused("dspark", -1, "--num_draft_tokens");
  refused("off", 3, "--num_draft_tokens");
  c.n_mtp_layers = 0;
  refused("dspark", 0, "--speculative=dspark");
}

TEST(SpeculationFlagsTest, VerifyLengthConfidenceNeedsDspark) {
  EXPECT_TRUE(VerifyLengthFromFlags("", 0).ok());
  EXPECT_TRUE(VerifyLengthFromFlags("", 5).ok());
  EXPECT_TRUE(VerifyLengthFromFlags("fixed", 0).ok());
  EXPECT_TRUE(VerifyLengthFromFlags("fixed", 5).ok());
  EXPECT_TRUE(VerifyLengthFromFlags("confidence", 5).ok());
  EXPECT_EQ(VerifyLengthFromFlags("longest", 5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyLengthFromFlags("confidence", 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SpeculationFlagsTest, MaxBatchNeedsDsparkAndIsNotNegative) {
  EXPECT_TRUE(SpeculativeMaxBatchFromFlags(0, 0).ok());
  EXPECT_TRUE(SpeculativeMaxBatchFromFlags(0, 5).ok());
  EXPECT_TRUE(SpeculativeMaxBatchFromFlags(4, 5).ok());
  const absl::Status negative = SpeculativeMaxBatchFromFlags(-1, 5);
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(negative.message().find("--speculative_max_batch"), std::string_view::npos);
  EXPECT_EQ(SpeculativeMaxBatchFromFlags(4, 0).code(), absl::StatusCode::kInvalidArgument);
}

// --ngram_lookup: unset means 3 with speculation on and off without it; 0
// turns it off; out of range, or set with speculation off, is refused.
TEST(SpeculationFlagsTest, NgramLookup) {
  EXPECT_EQ(NgramLookupFromFlags(-1, 5).value(), kDefaultNgramLookup);
  EXPECT_EQ(NgramLookupFromFlags(-1, 0).value(), 0);
  EXPECT_EQ(NgramLookupFromFlags(0, 5).value(), 0);
  EXPECT_EQ(NgramLookupFromFlags(2, 5).value(), 2);
  EXPECT_EQ(NgramLookupFromFlags(0, 0).value(), 0);
  for (int bad : {-2, worker::kMaxNgramMatch + 1}) {
    const absl::Status s = NgramLookupFromFlags(bad, 5).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--ngram_lookup"), std::string_view::npos);
  }
  EXPECT_EQ(NgramLookupFromFlags(3, 0).status().code(), absl::StatusCode::kInvalidArgument);
}

// --ngram_lookup_tokens: in [0, 16], and only with lookup on; the rows are
// booked for the longer of DSpark's drafts and a lookup's.
TEST(SpeculationFlagsTest, NgramLookupTokens) {
  EXPECT_TRUE(NgramLookupTokensFromFlags(0, 0).ok());
  EXPECT_TRUE(NgramLookupTokensFromFlags(8, 3).ok());
  for (int bad : {-1, worker::kMaxNgramMatch + 1}) {
    const absl::Status s = NgramLookupTokensFromFlags(bad, 3);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("--ngram_lookup_tokens"), std::string_view::npos);
  }
  EXPECT_EQ(NgramLookupTokensFromFlags(8, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MaxDraftTokens(5, 3, 8), 8);
  EXPECT_EQ(MaxDraftTokens(5, 3, 0), 5);
  EXPECT_EQ(MaxDraftTokens(5, 3, 4), 5);
  EXPECT_EQ(MaxDraftTokens(5, 0, 8), 5);
  EXPECT_EQ(MaxDraftTokens(0, 0, 0), 0);
}

// Unset, every draft is verified.
TEST(SpeculationFlagsTest, FixedIsTheDefault) {
  EXPECT_EQ(EffectiveVerifyLength(""), "fixed");
  EXPECT_EQ(EffectiveVerifyLength("fixed"), "fixed");
  EXPECT_EQ(EffectiveVerifyLength("confidence"), "confidence");
}

// CPU workers measure the curve at load when the model directory has none;
// CUDA workers always measure their own (not this flag).
TEST(SpeculationFlagsTest, CpuWorkersMeasureWithoutACostCurve) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/verify_length_flags";
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir + "/verify_cost.json");
  EXPECT_TRUE(MeasureVerifyCost("confidence", "cpu", dir));
  EXPECT_FALSE(MeasureVerifyCost("fixed", "cpu", dir));
  EXPECT_FALSE(MeasureVerifyCost("confidence", "cuda", dir));
  std::ofstream(dir + "/verify_cost.json") << "{}";
  EXPECT_FALSE(MeasureVerifyCost("confidence", "cpu", dir));
}

}  // namespace
}  // namespace weir::coordinator
