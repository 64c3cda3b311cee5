#include "coordinator/model_provisioning.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace weir::coordinator {
namespace {
namespace fs = std::filesystem;

TEST(ModelProvisioningTest, GeneratesOnceAndReuses) {
  const std::string tiny = std::string(std::getenv("TEST_SRCDIR")) + "/weir/models/random/tiny";
  const std::string cache = std::string(std::getenv("TEST_TMPDIR")) + "/cache";
  absl::StatusOr<std::string> first = EnsureWeights(tiny, cache, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_NE(*first, tiny);
  EXPECT_TRUE(fs::exists(fs::path(*first) / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(fs::path(*first) / "tokenizer.json"));
  const auto written = fs::last_write_time(fs::path(*first) / "config.json");

  absl::StatusOr<std::string> again = EnsureWeights(tiny, cache, 0);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);
  EXPECT_EQ(fs::last_write_time(fs::path(*again) / "config.json"), written);  // Not regenerated.

  // A directory with shards is used as it is.
  EXPECT_EQ(*EnsureWeights(*first, cache, 0), *first);
  // Another seed is another checkpoint.
  EXPECT_NE(*EnsureWeights(tiny, cache, 1), *first);
  // No temporary directories are left behind.
  for (const auto& entry : fs::directory_iterator(cache)) {
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

TEST(ModelProvisioningTest, MissingOrBadConfig) {
  const std::string tmp = std::string(std::getenv("TEST_TMPDIR"));
  EXPECT_EQ(EnsureWeights(tmp + "/nothing", tmp + "/c", 0).status().code(),
            absl::StatusCode::kNotFound);
  fs::create_directories(tmp + "/bad");
  std::ofstream(tmp + "/bad/config.json") << "{\"vocab_size\": -3}";
  EXPECT_EQ(EnsureWeights(tmp + "/bad", tmp + "/c", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::coordinator
