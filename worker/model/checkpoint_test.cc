#include "worker/model/checkpoint.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/model/checkpoint_layout.h"
#include "worker/model/safetensors_writer.h"

namespace weir::model {
namespace {

using ::testing::HasSubstr;

ModelConfig Load(const char* name) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig(std::string("models/") + name + "/config.json");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

std::map<std::string, TensorDecl> ByName(const std::vector<TensorDecl>& decls) {
  std::map<std::string, TensorDecl> out;
  for (const TensorDecl& d : decls) out[d.name] = d;
  return out;
}

void ExpectTensor(const std::map<std::string, TensorDecl>& m, const std::string& name, DType dtype,
                  std::vector<int64_t> shape) {
  auto it = m.find(name);
  ASSERT_NE(it, m.end()) << name;
  EXPECT_EQ(it->second.dtype, dtype) << name;
  EXPECT_EQ(it->second.shape, shape) << name;
}

// Shapes of spec §4.3-§4.10 for the real V4.1-Flash dimensions.
TEST(CheckpointLayoutTest, V41FlashTensors) {
  const ModelConfig c = Load("v41-flash");
  const std::map<std::string, TensorDecl> m = ByName(ExpectedTensors(c));
  const DType e4m3 = DType::kF8E4M3, e8m0 = DType::kF8E8M0;
  ExpectTensor(m, "embed.weight", DType::kBF16, {129280, 5120});
  ExpectTensor(m, "head.weight", DType::kBF16, {129280, 5120});
  ExpectTensor(m, "layers.0.hc_attn_fn", DType::kF32, {24, 20480});
  ExpectTensor(m, "layers.0.hc_ffn_base", DType::kF32, {24});
  ExpectTensor(m, "layers.0.hc_ffn_scale", DType::kF32, {3});
  ExpectTensor(m, "layers.0.attn.wq_a.weight", e4m3, {1280, 5120});
  ExpectTensor(m, "layers.0.attn.wq_a.scale", e8m0, {40, 160});
  ExpectTensor(m, "layers.0.attn.wq_b.weight", e4m3, {32768, 1280});
  ExpectTensor(m, "layers.0.attn.wkv.weight", e4m3, {512, 5120});
  ExpectTensor(m, "layers.0.attn.wo_a.weight", e4m3, {8192, 4096});
  ExpectTensor(m, "layers.0.attn.wo_b.weight", e4m3, {5120, 8192});
  ExpectTensor(m, "layers.0.attn.attn_sink", DType::kF32, {64});
  ExpectTensor(m, "layers.2.attn.compressor.wgate.weight", DType::kBF16, {512, 5120});
  ExpectTensor(m, "layers.2.attn.indexer.wk.weight", DType::kBF16, {128, 512});
  ExpectTensor(m, "layers.2.attn.indexer.wq_b.weight", e4m3, {4096, 1280});
  ExpectTensor(m, "layers.2.attn.indexer.weights_proj.weight", DType::kBF16, {32, 5120});
  ExpectTensor(m, "layers.20.attn.compressor.wkv.weight", DType::kBF16, {512, 5120});
  ExpectTensor(m, "layers.24.attn.indexer.wq_b.weight", e4m3, {4096, 1280});
  ExpectTensor(m, "layers.7.ffn.experts.383.w1.weight", DType::kI8, {2304, 2560});
  ExpectTensor(m, "layers.7.ffn.experts.383.w1.scale", e8m0, {2304, 160});
  ExpectTensor(m, "layers.7.ffn.experts.0.w2.weight", DType::kI8, {5120, 1152});
  ExpectTensor(m, "layers.7.ffn.experts.0.w2.scale", e8m0, {5120, 72});
  ExpectTensor(m, "layers.7.ffn.shared_experts.w2.weight", e4m3, {5120, 2304});
  ExpectTensor(m, "layers.7.ffn.gate.bias_vl", DType::kF32, {384});
  ExpectTensor(m, "layers.14.engram.embed.weight", e4m3, {384016682, 256});
  ExpectTensor(m, "layers.14.engram.embed.scale", e8m0, {384016682, 8});
  ExpectTensor(m, "layers.14.engram.wkv.weight", e4m3, {25600, 6144});
  ExpectTensor(m, "layers.1.engram.q_weight", DType::kBF16, {4, 5120});
  ExpectTensor(m, "mtp.0.main_proj.weight", e4m3, {5120, 15360});
  ExpectTensor(m, "mtp.0.ffn.experts.127.w3.weight", DType::kI8, {2304, 2560});
  ExpectTensor(m, "mtp.2.markov_head.markov_w1.weight", DType::kBF16, {129280, 256});
  ExpectTensor(m, "mtp.2.confidence_head.proj.weight", DType::kF32, {1, 5376});
  // Ownership by role: no compressor on Reuse/Reindex layers, no indexer on Reuse
  // layers, no wgate at ratio 1, no Engram or experts beyond the stage count.
  for (const char* absent : {"layers.3.attn.compressor.wkv.weight",
                             "layers.24.attn.compressor.wkv.weight",
                             "layers.24.attn.indexer.wk.weight", "layers.3.attn.indexer.wq_b.weight",
                             "layers.20.attn.compressor.wgate.weight", "layers.0.attn.indexer.wq_b.weight",
                             "layers.2.engram.wkv.weight", "mtp.0.ffn.experts.128.w1.weight",
                             "mtp.1.main_proj.weight", "mtp.0.norm.weight", "layers.40.attn_norm.weight"}) {
    EXPECT_EQ(m.count(absent), 0u) << absent;
  }
  // 40 x 384 + 3 x 128 routed experts, 3 tensors each, weight + scale.
  int64_t expert_tensors = 0;
  for (const auto& [name, d] : m) expert_tensors += name.find(".experts.") != std::string::npos;
  EXPECT_EQ(expert_tensors, (40 * 384 + 3 * 128) * 3 * 2);
}

TEST(CheckpointLayoutTest, ShippedModelSizes) {
  const int64_t tiny = ExpectedCheckpointBytes(Load("random/tiny"));
  const int64_t small = ExpectedCheckpointBytes(Load("small"));
  EXPECT_LT(tiny, int64_t{32} << 20);
  EXPECT_GT(small, int64_t{100} << 20);
  EXPECT_LT(small, int64_t{1} << 30);
}

// Writes ExpectedTensors(config) with `edit` applied, zero-filled.
std::string WriteEdited(const std::string& name, const std::vector<TensorDecl>& decls) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(WriteSafetensors(dir + "/model.safetensors", decls,
                               [](const TensorDecl&, std::span<uint8_t>) { return absl::OkStatus(); })
                  .ok());
  std::filesystem::copy_file("models/random/tiny/config.json", dir + "/config.json");
  return dir;
}

TEST(CheckpointTest, NamesMissingAndMismatchedTensors) {
  const ModelConfig c = Load("random/tiny");
  std::vector<TensorDecl> decls = ExpectedTensors(c);
  std::vector<TensorDecl> edited;
  for (TensorDecl d : decls) {
    if (d.name == "layers.6.attn.compressor.wkv.weight") continue;                   // missing
    if (d.name == "layers.2.attn.wq_a.weight") d.dtype = DType::kBF16;               // wrong dtype
    if (d.name == "layers.3.ffn.experts.1.w2.scale") d.shape[1] += 1;                // wrong shape
    if (d.name == "layers.0.attn_norm.weight") d.dtype = DType::kF32;                // accepted
    edited.push_back(d);
  }
  edited.push_back({"vision.patch_embed.weight", DType::kBF16, {2, 2}});             // unexpected
  const std::string dir = WriteEdited("edited", edited);
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
  ASSERT_FALSE(ckpt.ok());
  EXPECT_EQ(ckpt.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(ckpt.status().message());
  EXPECT_THAT(msg, HasSubstr("1 missing and 2 mismatched"));
  EXPECT_THAT(msg, HasSubstr("layers.6.attn.compressor.wkv.weight"));
  EXPECT_THAT(msg, HasSubstr("layers.2.attn.wq_a.weight: expected F8_E4M3 [64, 256], found BF16"));
  EXPECT_THAT(msg, HasSubstr("layers.3.ffn.experts.1.w2.scale"));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("attn_norm")));
}

TEST(CheckpointTest, AcceptsCompleteSetAndReportsExtras) {
  const ModelConfig c = Load("random/tiny");
  std::vector<TensorDecl> decls = ExpectedTensors(c);
  decls.push_back({"vision.patch_embed.weight", DType::kBF16, {2, 2}});
  const std::string dir = WriteEdited("complete", decls);
  absl::StatusOr<std::unique_ptr<Checkpoint>> ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ((*ckpt)->unexpected(), (std::vector<std::string>{"vision.patch_embed.weight"}));
  EXPECT_EQ((*ckpt)->config().n_layers, 12);
  absl::StatusOr<std::span<const uint8_t>> b = (*ckpt)->Bytes("norm.weight");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->size(), 2u * 256);
  EXPECT_EQ((*ckpt)->Bytes("nope").status().code(), absl::StatusCode::kNotFound);
  ASSERT_NE((*ckpt)->Info("head.weight"), nullptr);
}

}  // namespace
}  // namespace weir::model
