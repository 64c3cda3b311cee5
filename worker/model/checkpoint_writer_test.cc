#include "worker/model/checkpoint_writer.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "gtest/gtest.h"
#include "base/read_file.h"
#include "kernels/cpu/weight_quant.h"
#include "worker/model/checkpoint.h"

namespace weir::model {
namespace {

std::string TmpDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(CheckpointWriterTest, TinyCheckpointLoadsBackThroughTheChecker) {
  absl::StatusOr<std::string> read = ReadFile("models/random/tiny/config.json");
  ASSERT_TRUE(read.ok()) << read.status();
  const std::string& json = *read;
  absl::StatusOr<ModelConfig> config = ParseModelConfig(json);
  ASSERT_TRUE(config.ok()) << config.status();
  const std::string dir = TmpDir("tiny_a");
  GenerateOptions options;
  options.seed = 7;
  options.max_shard_bytes = 2 << 20;  // several shards, exercising the index
  ASSERT_TRUE(GenerateCheckpoint(*config, json, dir, options).ok());

  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_GT((*ckpt)->tensors().files().size(), 2u);
  EXPECT_TRUE((*ckpt)->unexpected().empty());
  EXPECT_EQ((*ckpt)->tensors().size(), ExpectedTensors(*config).size());

  // An FP8 tile-quantized weight dequantizes to its generated values within
  // e4m3 precision (3 mantissa bits: relative step 2^-3 near the tile max).
  const ParamSpec wq_a{"layers.2.attn.wq_a", ParamFormat::kFp8Block, {64, 256},
                       ParamInit::kLinear};
  const std::vector<float> want = GenerateParamValues(wq_a, 7);
  std::vector<float> got(want.size());
  ASSERT_TRUE(kernels::cpu::DequantizeFp8Weight(*(*ckpt)->Bytes("layers.2.attn.wq_a.weight"),
                                                *(*ckpt)->Bytes("layers.2.attn.wq_a.scale"), 64,
                                                256, 32, got)
                  .ok());
  const float bound = std::sqrt(3.0f / 256);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], bound / 16) << i;
  }
  // MXFP4 experts: e2m1 keeps one mantissa bit.
  const ParamSpec w1{"layers.3.ffn.experts.5.w1", ParamFormat::kMxfp4, {64, 256},
                     ParamInit::kLinear};
  const std::vector<float> want_w1 = GenerateParamValues(w1, 7);
  ASSERT_TRUE(kernels::cpu::DequantizeMxfp4Weight(
                  *(*ckpt)->Bytes("layers.3.ffn.experts.5.w1.weight"),
                  *(*ckpt)->Bytes("layers.3.ffn.experts.5.w1.scale"), 64, 256, got)
                  .ok());
  for (size_t i = 0; i < want_w1.size(); ++i) ASSERT_NEAR(got[i], want_w1[i], bound / 3) << i;
}

TEST(CheckpointWriterTest, DeterministicPerSeedAndIndependentOfSharding) {
  absl::StatusOr<std::string> read = ReadFile("models/random/tiny/config.json");
  ASSERT_TRUE(read.ok()) << read.status();
  const std::string& json = *read;
  absl::StatusOr<ModelConfig> config = ParseModelConfig(json);
  ASSERT_TRUE(config.ok());
  auto generate = [&](const std::string& name, uint64_t seed, int64_t shard) {
    const std::string dir = TmpDir(name);
    GenerateOptions options;
    options.seed = seed;
    options.max_shard_bytes = shard;
    EXPECT_TRUE(GenerateCheckpoint(*config, json, dir, options).ok());
    absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status();
    return *std::move(ckpt);
  };
  std::unique_ptr<Checkpoint> a = generate("det_a", 1, int64_t{1} << 30);
  std::unique_ptr<Checkpoint> b = generate("det_b", 1, 1 << 20);
  std::unique_ptr<Checkpoint> c = generate("det_c", 2, int64_t{1} << 30);
  int differing = 0;
  int values = 0;
  for (const std::string& name : a->tensors().Names()) {
    std::span<const uint8_t> x = *a->Bytes(name), y = *b->Bytes(name), z = *c->Bytes(name);
    ASSERT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end())) << name;
    // Block scales depend only on each block's amax, which uniform draws pin
    // near the range bound, so only value tensors must change with the seed.
    if (name.size() > 6 && name.compare(name.size() - 6, 6, ".scale") == 0) continue;
    ++values;
    differing += !std::equal(x.begin(), x.end(), z.begin(), z.end());
  }
  EXPECT_EQ(differing, values);
  EXPECT_GT(values, 500);
}

}  // namespace
}  // namespace weir::model
