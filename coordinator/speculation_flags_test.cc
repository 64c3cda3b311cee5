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

TEST(SpeculationFlagsTest, VerifyLengthConfidenceNeedsDsparkAndTheCostCurve) {
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/verify_length_flags";
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(VerifyLengthFromFlags("fixed", 0, dir).ok());
  EXPECT_TRUE(VerifyLengthFromFlags("fixed", 5, dir).ok());
  EXPECT_EQ(VerifyLengthFromFlags("longest", 5, dir).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VerifyLengthFromFlags("confidence", 0, dir).code(), absl::StatusCode::kInvalidArgument);
  const absl::Status missing = VerifyLengthFromFlags("confidence", 5, dir);
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(missing.message()).find("verify_cost.json"), std::string::npos);
  std::ofstream(dir + "/verify_cost.json") << "{}";
  EXPECT_TRUE(VerifyLengthFromFlags("confidence", 5, dir).ok());
  // CUDA workers measure their own curve: no file needed.
  EXPECT_TRUE(VerifyLengthFromFlags("confidence", 5, "/nonexistent", true).ok());
  EXPECT_EQ(VerifyLengthFromFlags("confidence", 0, dir, true).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::coordinator
