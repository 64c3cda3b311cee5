#include "base/model_summary.h"

#include "gtest/gtest.h"

namespace weir {
namespace {

TEST(ModelSummaryTest, ReadsHfLayoutWithTextConfig) {
  absl::StatusOr<ModelSummary> s = ParseModelSummary(R"({
    "model_type": "deepseek_v41",
    "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2,
    "quantization_config": {"quant_method": "fp8"},
    "text_config": {"vocab_size": 129280, "num_hidden_layers": 40,
                    "max_position_embeddings": 1048576, "n_routed_experts": 384}
  })", "v41-flash");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name, "v41-flash");
  EXPECT_EQ(s->vocab_size, 129280);
  EXPECT_EQ(s->num_layers, 40);
  EXPECT_EQ(s->max_context_tokens, 1048576);
  EXPECT_EQ(s->num_routed_experts, 384);
  EXPECT_EQ(s->bos_token_id, 0);
  ASSERT_EQ(s->eos_token_ids.size(), 1u);
  EXPECT_EQ(s->eos_token_ids[0], 1);
  EXPECT_EQ(s->quantization, "fp8");
  EXPECT_EQ(s->revision.size(), 16u);
}

TEST(ModelSummaryTest, ReadsInferenceLayout) {
  auto s = ParseModelSummary(R"({"name": "tiny", "vocab_size": 512, "n_layers": 4,
                                 "max_seq_len": 4096, "n_routed_experts": 8})", "dir");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name, "tiny");
  EXPECT_EQ(s->num_layers, 4);
  EXPECT_EQ(s->max_context_tokens, 4096);
  EXPECT_EQ(s->quantization, "none");
}

TEST(ModelSummaryTest, RevisionFollowsContent) {
  auto a = ParseModelSummary(R"({"vocab_size": 5, "n_layers": 1})", "m");
  auto b = ParseModelSummary(R"({"vocab_size": 6, "n_layers": 1})", "m");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->revision, b->revision);
  EXPECT_EQ(a->revision, ParseModelSummary(R"({"vocab_size": 5, "n_layers": 1})", "m")->revision);
}

TEST(ModelSummaryTest, BadConfigsNameTheProblem) {
  EXPECT_EQ(ParseModelSummary("{not json", "m").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseModelSummary("[1,2]", "m").status().code(), absl::StatusCode::kInvalidArgument);
  auto no_vocab = ParseModelSummary(R"({"n_layers": 2})", "m");
  EXPECT_NE(no_vocab.status().message().find("vocab_size"), std::string::npos);
  auto bad_layers = ParseModelSummary(R"({"vocab_size": 3, "n_layers": 0})", "m");
  EXPECT_NE(bad_layers.status().message().find("num_hidden_layers"), std::string::npos);
  auto string_vocab = ParseModelSummary(R"({"vocab_size": "big", "n_layers": 1})", "m");
  EXPECT_EQ(string_vocab.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelSummaryTest, MissingDirectoryIsNotFound) {
  EXPECT_EQ(LoadModelSummary("/nonexistent/model").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace weir
