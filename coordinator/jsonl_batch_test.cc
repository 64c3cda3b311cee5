#include "coordinator/jsonl_batch.h"

#include "gtest/gtest.h"

namespace weir::coordinator {
namespace {

TEST(JsonlBatchTest, ParsesEveryInputKind) {
  absl::StatusOr<v1::GenerateBatchRequest> batch = ParseBatchJsonl(
      "{\"custom_id\": \"a\", \"text\": \"hi\", \"max_new_tokens\": 4, \"temperature\": 0}\n"
      "\n"
      "{\"tokens\": [1, 2, 3], \"seed\": 9, \"top_k\": 5, \"stop\": [\"x\"]}\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"yo\"}], \"ignore_eos\": true}\n");
  ASSERT_TRUE(batch.ok()) << batch.status();
  ASSERT_EQ(batch->items_size(), 3);
  EXPECT_EQ(batch->items(0).custom_id(), "a");
  EXPECT_EQ(batch->items(0).request().text(), "hi");
  EXPECT_EQ(batch->items(0).request().stop().max_new_tokens(), 4u);
  EXPECT_TRUE(batch->items(0).request().sampling().has_temperature());
  EXPECT_EQ(batch->items(1).custom_id(), "line-3");
  EXPECT_EQ(batch->items(1).request().tokens().ids_size(), 3);
  EXPECT_EQ(batch->items(1).request().sampling().seed(), 9u);
  EXPECT_EQ(batch->items(2).request().chat().messages(0).content(), "yo");
  EXPECT_TRUE(batch->items(2).request().stop().ignore_eos());
}

TEST(JsonlBatchTest, ErrorsNameTheLine) {
  auto error = [](const char* text) { return std::string(ParseBatchJsonl(text).status().message()); };
  EXPECT_NE(error("{\"text\": \"a\"}\n{oops").find("line 2"), std::string::npos);
  EXPECT_NE(error("{\"text\": \"a\", \"colour\": 1}").find("unknown key"), std::string::npos);
  EXPECT_NE(error("{\"text\": 5}").find("must be a string"), std::string::npos);
  EXPECT_NE(error("{\"text\": \"a\", \"tokens\": [1]}").find("exactly one"), std::string::npos);
  EXPECT_NE(error("{\"tokens\": [-1]}").find("non-id"), std::string::npos);
  EXPECT_NE(error("[1, 2]").find("not a JSON object"), std::string::npos);
  EXPECT_FALSE(ParseBatchJsonl("\n\n").ok());
}

TEST(JsonlBatchTest, FormatsResultsAndErrors) {
  v1::BatchEvent::ItemResult ok;
  ok.set_custom_id("a");
  v1::GenerateEvent::Final* f = ok.mutable_result()->add_samples();
  f->set_full_text("hello");
  f->add_full_token_ids(7);
  f->set_reason(v1::FINISH_REASON_MAX_TOKENS);
  f->mutable_usage()->set_completion_tokens(1);
  EXPECT_EQ(FormatResultJsonl(ok),
            "{\"custom_id\":\"a\",\"finish_reason\":\"MAX_TOKENS\",\"text\":\"hello\","
            "\"token_ids\":[7],\"usage\":{\"completion_tokens\":1,\"prompt_tokens\":0}}");
  v1::BatchEvent::ItemResult bad;
  bad.set_custom_id("b");
  bad.mutable_error()->set_code(3);
  bad.mutable_error()->set_message("no");
  EXPECT_EQ(FormatResultJsonl(bad),
            "{\"custom_id\":\"b\",\"error\":{\"code\":\"INVALID_ARGUMENT\",\"message\":\"no\"}}");
}

}  // namespace
}  // namespace weir::coordinator
