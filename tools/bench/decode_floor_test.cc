#include "tools/bench/decode_floor.h"

#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "worker/model/checkpoint_layout.h"
#include "worker/model/config.h"
#include "worker/model/layer_roles.h"

namespace weir::bench {
namespace {

model::ModelConfig Config(const std::string& name) {
  absl::StatusOr<model::ModelConfig> c = model::LoadModelConfig("models/" + name + "/config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// The parts the floor counts plus the parts it leaves out add up to the
// checkpoint's own size, whatever the config.
TEST(DecodeFloorTest, WeightPartsAddUpToTheCheckpoint) {
  for (const char* name : {"random/tiny", "small", "v41-flash"}) {
    const model::ModelConfig c = Config(name);
    const StoredWeightBytes w = CountStoredWeights(c);
    double left_out = 0;
    for (const model::ParamSpec& p : model::ModelParams(c)) {
      if (p.name.rfind("mtp.", 0) == 0 || p.name.find(".engram.embed") != std::string::npos) {
        for (const auto& t : model::StoredTensors(p, c)) left_out += t.num_bytes();
      }
    }
    const double total = w.dense + w.per_expert * c.n_layers * c.n_routed_experts +
                         w.embed_row * c.vocab_size + left_out;
    EXPECT_NEAR(total, static_cast<double>(model::ExpectedCheckpointBytes(c)), 1.0) << name;
    EXPECT_GT(w.dense, 0) << name;
    EXPECT_GT(w.per_expert, 0) << name;
  }
}

// An MXFP4 expert is half a byte per weight plus one scale byte per 32.
TEST(DecodeFloorTest, ExpertsAreCountedInMxfp4) {
  const model::ModelConfig c = Config("v41-flash");
  const double weights = 3.0 * static_cast<double>(c.moe_inter_dim) * static_cast<double>(c.dim);
  EXPECT_DOUBLE_EQ(CountStoredWeights(c).per_expert, weights * (0.5 + 1.0 / 32));
}

// Position 0 reads one window row per layer, plus on layers of ratio 1 one
// compressed entry (and its index key where the layer owns the indexer).
TEST(DecodeFloorTest, KvAtTheFirstPosition) {
  const model::ModelConfig c = Config("random/tiny");
  const model::LayerRoles roles(c);
  double expected = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    expected += c.head_dim * (1.0 + 1.0 / 32);
    if (roles[l].ratio == 1) {
      expected += c.head_dim * (0.5 + 1.0 / 16);
      if (roles[l].index_source == l) expected += c.index_head_dim * (0.5 + 1.0 / 32);
    }
  }
  EXPECT_DOUBLE_EQ(StoredKvBytes(c, 0), expected);
}

// Far past the window and the top-k, one more position only adds index keys.
TEST(DecodeFloorTest, KvGrowsOnlyByIndexKeysAtLongContext) {
  const model::ModelConfig c = Config("v41-flash");
  const model::LayerRoles roles(c);
  int64_t max_ratio = 1;
  for (int l = 0; l < c.n_layers; ++l) max_ratio = std::max<int64_t>(max_ratio, roles[l].ratio);
  const int64_t p = (c.window_size + c.index_topk + 8) * max_ratio * 4;
  // A step that is a multiple of every ratio: a ratio-r layer gains step/r keys.
  const int64_t step = 4 * max_ratio;
  double index_growth = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    if (roles[l].ratio > 0 && roles[l].index_source == l) {
      index_growth += static_cast<double>(step / roles[l].ratio) * c.index_head_dim *
                      (0.5 + 1.0 / 32);
    }
  }
  EXPECT_NEAR(StoredKvBytes(c, p + step) - StoredKvBytes(c, p), index_growth, 1e-6);
  EXPECT_LT(StoredKvBytes(c, 10), StoredKvBytes(c, 4096));
}

TEST(DecodeFloorTest, ExpectedHitBounds) {
  EXPECT_DOUBLE_EQ(ExpectedExpertsHit(32, 6, 0), 0.0);
  EXPECT_NEAR(ExpectedExpertsHit(256, 6, 1), 6.0, 1e-9);  // one token: its top-k
  EXPECT_NEAR(ExpectedExpertsHit(8, 8, 3), 8.0, 1e-12);   // every expert, every token
  EXPECT_LT(ExpectedExpertsHit(256, 6, 64), 256.0);
  EXPECT_GT(ExpectedExpertsHit(256, 6, 64), 6.0 * 64 * 0.5);
  EXPECT_LT(ExpectedExpertsHit(256, 6, 8), ExpectedExpertsHit(256, 6, 9));
  EXPECT_EQ(ExpectedExpertsHit(0, 5, 5), 0.0);
}

TEST(DecodeFloorTest, StepSumsItsParts) {
  const model::ModelConfig c = Config("small");
  const StoredWeightBytes w = CountStoredWeights(c);
  const double one = StoredStepBytes(c, 1, 100);
  EXPECT_NEAR(one,
              w.dense + w.per_expert * c.n_layers * c.n_activated_experts + w.embed_row +
                  StoredKvBytes(c, 100),
              1e-3 * one);
}

}  // namespace
}  // namespace weir::bench
