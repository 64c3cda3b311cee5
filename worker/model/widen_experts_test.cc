// WriteWidenedExperts: the trained tiny with its experts widened from 64 to
// 256 units computes the same logits, bit for bit, on the CPU (prompt rows and
// decode steps, bf16 and fp32 activations), and bad sizes are refused.
#include "worker/model/widen_experts.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/checkpoint.h"
#include "worker/model/golden_file.h"
#include "worker/model/model.h"
#include "worker/model/tiny_model_test_util.h"

namespace weir::model {
namespace {

std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

// Every logit of `tokens[0..n)` as a prompt, then of `steps` decode steps
// fed tokens[n..], on `model`.
std::vector<float> Logits(Model& model, const std::vector<int64_t>& tokens, int64_t n) {
  std::vector<float> out;
  auto seq = model.NewSequence();
  const std::vector<int64_t> prompt(tokens.begin(), tokens.begin() + n);
  auto logits = model.Forward(*seq, prompt, 0);
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (!logits.ok()) return out;
  out.insert(out.end(), logits->begin(), logits->end());
  for (int64_t t = n; t < static_cast<int64_t>(tokens.size()); ++t) {
    const int64_t next[1] = {tokens[t]};
    logits = model.Forward(*seq, next, t);
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return out;
    out.insert(out.end(), logits->begin(), logits->end());
  }
  return out;
}

TEST(WidenExpertsTest, TheWidenedTrainedTinyGivesTheSameLogits) {
  const std::string dir = TempDir("tiny_wide256");
  ASSERT_TRUE(WriteWidenedExperts("models/tiny", 256, dir).ok());
  auto wide = Checkpoint::Open(dir);
  ASSERT_TRUE(wide.ok()) << wide.status();
  const Checkpoint* tiny = TrainedTinyCheckpoint();
  ASSERT_NE(tiny, nullptr);
  ASSERT_EQ(tiny->config().moe_inter_dim, 64);
  EXPECT_EQ((*wide)->config().moe_inter_dim, 256);
  EXPECT_EQ((*wide)->unexpected(), tiny->unexpected());
  // The padding is where it should be: a routed expert's down projection
  // has 256 columns now, its first 64 the original ones.
  const TensorInfo* w2 = (*wide)->Info("layers.0.ffn.experts.0.w2.weight");
  ASSERT_NE(w2, nullptr);
  EXPECT_EQ(w2->shape, (std::vector<int64_t>{256, 128}));

  Golden g("tests/golden/tiny_trained/ref_fp32.safetensors");
  ASSERT_TRUE(g.ok());
  const std::vector<int32_t> lens = g.Get<int32_t>("prompt_lens");
  const std::vector<int32_t> tokens = g.Get<int32_t>("tf.tokens");
  const std::vector<int32_t> offsets = g.Get<int32_t>("tf.offsets");
  ASSERT_GE(lens.size(), 3u);
  const std::vector<int64_t> map = TrainedTinyEngramMap();
  ASSERT_FALSE(map.empty());
  for (const ActivationPrecision precision :
       {ActivationPrecision::kBf16, ActivationPrecision::kFp32}) {
    ModelOptions options;
    options.precision = precision;
    options.engram_token_map = map;
    auto narrow_model = NewModelOrFail(*tiny, options);
    auto wide_model = NewModelOrFail(**wide, options);
    ASSERT_NE(narrow_model, nullptr);
    ASSERT_NE(wide_model, nullptr);
    for (int p = 0; p < 3; ++p) {
      // The prompt, then 8 decode steps on the held-out tokens after it.
      const std::vector<int64_t> text(tokens.begin() + offsets[p],
                                      tokens.begin() + offsets[p] + lens[p] + 8);
      const std::vector<float> want = Logits(*narrow_model, text, lens[p]);
      const std::vector<float> got = Logits(*wide_model, text, lens[p]);
      ASSERT_EQ(got.size(), want.size());
      ASSERT_FALSE(want.empty());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << "prompt " << p << " precision " << static_cast<int>(precision);
    }
  }
}

TEST(WidenExpertsTest, RefusesSizesItCannotPadTo) {
  EXPECT_EQ(WriteWidenedExperts("models/tiny", 32, TempDir("narrower")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteWidenedExperts("models/tiny", 100, TempDir("odd")).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(WriteWidenedExperts("models/no_such_model", 256, TempDir("none")).ok());
}

}  // namespace
}  // namespace weir::model
