#include "worker/model/tiny_model_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>

#include "base/read_file.h"
#include "gtest/gtest.h"
#include "tokenizer/engram_vocab.h"
#include "tokenizer/tokenizer.h"
#include "worker/model/cpu_ops.h"
#include "worker/model/golden_file.h"
#include "worker/model/tiny_checkpoint.h"

namespace weir::model {

const Checkpoint* DerivedCheckpoint(const std::string& model, const std::string& name,
                                    const std::vector<std::pair<std::string, std::string>>& edits,
                                    uint64_t seed) {
  static std::mutex mu;
  static auto* made = new std::map<std::string, std::unique_ptr<Checkpoint>>();
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = made->find(name); it != made->end()) return it->second.get();
  absl::StatusOr<std::string> read = ReadFile("models/" + model + "/config.json");
  EXPECT_TRUE(read.ok()) << read.status();
  if (!read.ok()) return nullptr;
  std::string json = *std::move(read);
  for (const auto& [from, to] : edits) {
    const size_t at = json.find(from);
    EXPECT_NE(at, std::string::npos) << model << ": no " << from;
    if (at == std::string::npos) return nullptr;
    json.replace(at, from.size(), to);
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  std::ofstream(dir + "/config.json") << json;
  auto c = GenerateAndOpenCheckpoint(dir + "/config.json", dir + "/ckpt", seed);
  EXPECT_TRUE(c.ok()) << c.status();
  if (!c.ok()) return nullptr;
  return ((*made)[name] = std::move(*c)).get();
}

const Checkpoint& TinyCheckpoint(uint64_t seed) {
  return *DerivedCheckpoint("random/tiny", "tiny_seed" + std::to_string(seed), {}, seed);
}

const Checkpoint* SmallCheckpoint(uint64_t seed) {
  return DerivedCheckpoint("small", "small_seed" + std::to_string(seed), {}, seed);
}

const Checkpoint* TrainedTinyCheckpoint() {
  static const Checkpoint* checkpoint = []() -> const Checkpoint* {
    auto c = Checkpoint::Open("models/tiny");
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? c->release() : nullptr;
  }();
  return checkpoint;
}

std::vector<int64_t> TrainedTinyEngramMap() {
  auto tok = tokenizer::Tokenizer::FromDirectory("models/tiny");
  EXPECT_TRUE(tok.ok()) << tok.status();
  if (!tok.ok()) return {};
  auto engram = tokenizer::BuildEngramVocab(**tok);
  EXPECT_TRUE(engram.ok()) << engram.status();
  if (!engram.ok()) return {};
  return std::vector<int64_t>(engram->compressed_id.begin(), engram->compressed_id.end());
}

std::vector<std::vector<int64_t>> TrainedTinyPrompts() {
  std::vector<std::vector<int64_t>> out;
  Golden g("tests/golden/tiny_trained/ref_fp32.safetensors");
  EXPECT_TRUE(g.ok());
  if (!g.ok()) return out;
  const std::vector<int32_t> lens = g.Get<int32_t>("prompt_lens");
  const std::vector<int32_t> tokens = g.Get<int32_t>("tf.tokens");
  const std::vector<int32_t> offsets = g.Get<int32_t>("tf.offsets");
  EXPECT_GE(lens.size(), 8u);
  EXPECT_GE(offsets.size(), 8u);
  for (size_t p = 0; p < 8 && p < lens.size() && p < offsets.size(); ++p) {
    out.emplace_back(tokens.begin() + offsets[p], tokens.begin() + offsets[p] + lens[p]);
  }
  return out;
}

std::unique_ptr<Model> NewModelOrFail(const Checkpoint& ckpt, ModelOptions options) {
  absl::StatusOr<std::unique_ptr<Model>> m = Model::Create(ckpt.config(), ckpt, std::move(options));
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

std::unique_ptr<Model> RowStableCpuModel(const Checkpoint& ckpt, ActivationPrecision precision,
                                         std::vector<int64_t> engram_token_map) {
  ModelOptions options;
  options.precision = precision;
  options.engram_token_map = std::move(engram_token_map);
  options.make_ops = [](ActivationPrecision p) -> absl::StatusOr<std::unique_ptr<Ops>> {
    return std::unique_ptr<Ops>(new CpuOps(p, {.row_stable_logits = true}));
  };
  return NewModelOrFail(ckpt, std::move(options));
}

std::vector<int64_t> RandomTokens(int n, uint32_t seed, int64_t max_id) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> u(0, max_id);
  std::vector<int64_t> t(n);
  for (int64_t& x : t) x = u(gen);
  return t;
}

int64_t ArgmaxRow(const float* row, int64_t n) {
  return std::max_element(row, row + n) - row;
}

double RowRelativeDifference(const float* a, const float* b, int64_t n) {
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    diff = std::max(diff, double{std::fabs(a[i] - b[i])});
    scale = std::max(scale, double{std::fabs(b[i])});
  }
  return diff / scale;
}

double RelativeL2(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  if (!std::isfinite(num)) return INFINITY;
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

}  // namespace weir::model
