#include "worker/model/config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "base/read_file.h"
#include "nlohmann/json.hpp"

namespace weir::model {
namespace {

using ::testing::HasSubstr;

nlohmann::json V41Json() { return nlohmann::json::parse(ReadFile("models/v41-flash/config.json").value()); }

// The same model written with the flat inference config.json keys.
constexpr char kV41Inference[] = R"({
  "vocab_size": 129280, "dim": 5120, "moe_inter_dim": 2304, "n_layers": 40, "n_mtp_layers": 3,
  "n_heads": 64, "head_dim": 512, "rope_head_dim": 64, "q_lora_rank": 1280, "o_groups": 8,
  "o_lora_rank": 1024, "norm_eps": 1e-20, "n_routed_experts": 384, "n_shared_experts": 1,
  "n_activated_experts": 6, "score_func": "sqrtsoftplus", "gate_temp": 1.0,
  "norm_topk_prob": true, "route_scale": 1.5, "swiglu_limit": 10.0, "window_size": 128,
  "compress_ratios": [0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
                      1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0],
  "kv_source_layers": [2, 8, 14, 20], "index_source_layers": [2, 8, 14, 20, 24, 28, 32, 36],
  "candidate_source_layer": 20, "candidate_topk_blocks": 2048, "candidate_block_size": 8,
  "index_n_heads": 32, "index_head_dim": 128, "index_topk": 512,
  "rope_theta": 10000.0, "compress_rope_theta": 160000.0, "original_seq_len": 65536,
  "rope_factor": 16, "beta_fast": 32, "beta_slow": 1,
  "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
  "engram_layer_ids": [1, 14], "engram_num_embeddings": [384006168, 384016682],
  "engram_max_ngram_size": 4, "engram_vocab_size": 16000000, "engram_n_heads": 8,
  "engram_head_dim": 256, "engram_pad_id": 2, "engram_compressed_vocab_size": 99092,
  "dspark_block_size": 5, "dspark_noise_token_id": 128799, "dspark_target_layer_ids": [37, 38, 39],
  "dspark_markov_rank": 256, "dspark_n_routed_experts": 128, "dspark_n_activated_experts": 3,
  "dtype": "fp8", "expert_dtype": "fp4", "scale_fmt": "ue8m0", "image_token_id": 129264
})";

void ExpectV41(const ModelConfig& c) {
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.dim, 5120);
  EXPECT_EQ(c.moe_inter_dim, 2304);
  EXPECT_EQ(c.n_layers, 40);
  EXPECT_EQ(c.n_mtp_layers, 3);
  EXPECT_EQ(c.n_heads, 64);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_head_dim, 64);
  EXPECT_EQ(c.q_lora_rank, 1280);
  EXPECT_EQ(c.o_groups, 8);
  EXPECT_EQ(c.o_lora_rank, 1024);
  EXPECT_EQ(c.norm_eps, 1e-20);
  EXPECT_EQ(c.n_routed_experts, 384);
  EXPECT_EQ(c.n_activated_experts, 6);
  EXPECT_EQ(c.score_func, ScoreFunc::kSqrtSoftplus);
  EXPECT_EQ(c.route_scale, 1.5);
  EXPECT_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.window_size, 128);
  ASSERT_EQ(c.compress_ratios.size(), 43u);
  EXPECT_EQ(c.compress_ratios[1], 0);
  EXPECT_EQ(c.compress_ratios[2], 2);
  EXPECT_EQ(c.compress_ratios[19], 2);
  EXPECT_EQ(c.compress_ratios[20], 1);
  EXPECT_EQ(c.compress_ratios[42], 0);
  EXPECT_EQ(c.kv_source_layers, (std::vector<int>{2, 8, 14, 20}));
  EXPECT_EQ(c.index_source_layers, (std::vector<int>{2, 8, 14, 20, 24, 28, 32, 36}));
  EXPECT_EQ(c.candidate_source_layer, 20);
  EXPECT_EQ(c.candidate_topk_blocks, 2048);
  EXPECT_EQ(c.candidate_block_size, 8);
  EXPECT_EQ(c.index_n_heads, 32);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.compress_rope_theta, 160000.0);
  EXPECT_EQ(c.original_seq_len, 65536);
  EXPECT_EQ(c.rope_factor, 16.0);
  EXPECT_EQ(c.beta_fast, 32.0);
  EXPECT_EQ(c.beta_slow, 1.0);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.hc_eps, 1e-6);
  EXPECT_EQ(c.engram_layer_ids, (std::vector<int>{1, 14}));
  EXPECT_EQ(c.engram_num_embeddings, (std::vector<int64_t>{384006168, 384016682}));
  EXPECT_EQ(c.engram_pad_id, 2);
  EXPECT_EQ(c.engram_compressed_vocab_size, 99092);
  EXPECT_EQ(c.dspark_noise_token_id, 128799);
  EXPECT_EQ(c.dspark_target_layer_ids, (std::vector<int>{37, 38, 39}));
  EXPECT_EQ(c.dspark_n_routed_experts, 128);
  EXPECT_EQ(c.dspark_n_activated_experts, 3);
  EXPECT_EQ(c.image_token_id, 129264);
  EXPECT_EQ(c.fp8_block_size, 32);
  // Derived quantities.
  EXPECT_EQ(c.num_total_layers(), 43);
  EXPECT_EQ(c.nope_head_dim(), 448);
  EXPECT_EQ(c.hc_mix_dim(), 24);
  EXPECT_EQ(c.o_group_in_dim(), 4096);
  EXPECT_EQ(c.decoder_start(), 20);
  EXPECT_EQ(c.engram_hash_cols(), 24);
  EXPECT_EQ(c.engram_embed_dim(), 6144);
  EXPECT_EQ(c.dspark_main_dim(), 15360);
  EXPECT_EQ(c.engram_index(14), 1);
  EXPECT_EQ(c.engram_index(2), -1);
}

TEST(ModelConfigTest, ParsesHfLayoutOfV41Flash) {
  absl::StatusOr<ModelConfig> c = LoadModelConfig("models/v41-flash/config.json");
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectV41(*c);
  EXPECT_EQ(c->bos_token_id, 0);
  EXPECT_EQ(c->eos_token_id, 1);
}

TEST(ModelConfigTest, ParsesInferenceLayoutOfV41Flash) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(kV41Inference);
  ASSERT_TRUE(c.ok()) << c.status();
  ExpectV41(*c);
}

TEST(ModelConfigTest, ShippedConfigsParse) {
  for (const char* name : {"tiny", "small"}) {
    absl::StatusOr<ModelConfig> c = LoadModelConfig(std::string("models/") + name + "/config.json");
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    EXPECT_EQ(c->hc_mult, 4) << name;
    EXPECT_EQ(c->n_mtp_layers, 3) << name;
  }
}

TEST(ModelConfigTest, MissingKeyIsNamed) {
  for (const char* key : {"hidden_size", "num_hidden_layers", "compress_ratios", "head_dim",
                          "kv_source_layer_ids", "index_topk", "routed_scaling_factor",
                          "engram_num_embeddings", "dspark_target_layer_ids"}) {
    nlohmann::json j = V41Json();
    j["text_config"].erase(key);
    absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump());
    ASSERT_FALSE(c.ok()) << key;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(std::string("text_config.") + key));
  }
  nlohmann::json flat = nlohmann::json::parse(kV41Inference);
  flat.erase("dim");
  absl::StatusOr<ModelConfig> c = ParseModelConfig(flat.dump());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("'dim'"));
}

TEST(ModelConfigTest, WrongTypesAndRangesAreNamed) {
  struct Case {
    const char* key;
    nlohmann::json value;
  };
  const Case cases[] = {{"hidden_size", "5120"},       {"hidden_size", -1},
                        {"compress_ratios", 3},        {"compress_ratios", {0, "x"}},
                        {"rms_norm_eps", "tiny"},      {"norm_topk_prob", 1},
                        {"scoring_func", "relu"},      {"num_hidden_layers", 2.5},
                        {"num_key_value_heads", 8},    {"rope_scaling", 16}};
  for (const Case& tc : cases) {
    nlohmann::json j = V41Json();
    j["text_config"][tc.key] = tc.value;
    absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump());
    ASSERT_FALSE(c.ok()) << tc.key << "=" << tc.value;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(tc.key));
  }
}

TEST(ModelConfigTest, MalformedJsonIsInvalidArgument) {
  for (const char* text : {"", "{", "[1,2]", "{\"text_config\": 3}", "nul"}) {
    absl::StatusOr<ModelConfig> c = ParseModelConfig(text);
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(ModelConfigTest, InconsistentTopologyIsNamed) {
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* message_key;
  };
  std::vector<int> ratios = V41Json()["text_config"]["compress_ratios"];
  ratios[42] = 1;  // a DSpark stage must be SWA-only
  const Case cases[] = {
      // A kv source on a ratio-0 layer.
      {"kv_source_layer_ids", {1, 2, 8, 14, 20}, "kv_source_layer_ids"},
      // Layer 20 (ratio 1) would reuse layer 14 (ratio 2).
      {"kv_source_layer_ids", {2, 8, 14}, "kv_source_layer_ids"},
      {"index_source_layer_ids", {8, 2, 14, 20}, "index_source_layer_ids"},
      // kv source 8 without its own indexer.
      {"index_source_layer_ids", {2, 14, 20, 24}, "index_source_layer_ids"},
      {"candidate_source_layer_id", 21, "candidate_source_layer_id"},
      {"compress_ratios", ratios, "compress_ratios"},
      {"compress_ratios", {0, 0, 2}, "compress_ratios"},
      {"engram_num_embeddings", {5}, "engram_num_embeddings"},
      {"engram_layer_ids", {1, 40}, "engram_layer_ids"},
      {"dspark_target_layer_ids", {37, 37, 39}, "dspark_target_layer_ids"},
      {"dspark_noise_token_id", 129280, "dspark_noise_token_id"},
      {"o_groups", 7, "o_groups"},
      {"qk_rope_head_dim", 512, "rope_head_dim"},
      {"num_experts_per_tok", 385, "n_activated_experts"},
  };
  for (const Case& tc : cases) {
    nlohmann::json j = V41Json();
    j["text_config"][tc.key] = tc.value;
    absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump());
    ASSERT_FALSE(c.ok()) << tc.key << "=" << tc.value;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(c.status().message()), HasSubstr(tc.message_key)) << tc.value;
  }
}

TEST(ModelConfigTest, UnsupportedQuantizationIsNamed) {
  nlohmann::json j = V41Json();
  j["quantization_config"]["quant_method"] = "gptq";
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("quantization_config.quant_method"));
  j = V41Json();
  j["quantization_config"]["weight_block_size"] = {32, 64};
  c = ParseModelConfig(j.dump());
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("weight_block_size"));
}

TEST(ModelConfigTest, BackboneOnlyRatioListLeavesDsparkStagesSwaOnly) {
  nlohmann::json j = V41Json();
  std::vector<int> ratios = j["text_config"]["compress_ratios"];
  ratios.resize(40);
  j["text_config"]["compress_ratios"] = ratios;
  absl::StatusOr<ModelConfig> c = ParseModelConfig(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->compress_ratios.size(), 43u);
  EXPECT_EQ(c->compress_ratios[41], 0);
}

TEST(ModelConfigTest, MissingFileIsNotFound) {
  EXPECT_EQ(LoadModelConfig("models/nope/config.json").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace weir::model
