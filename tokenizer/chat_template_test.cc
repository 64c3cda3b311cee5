#include "tokenizer/chat_template.h"

#include "gtest/gtest.h"

namespace weir::tokenizer {
namespace {

TEST(ChatTemplateTest, RendersDeepSeekFormat) {
  const std::vector<ChatMessage> chat = {{"system", "Be brief."},
                                         {"user", "Hi"},
                                         {"assistant", "reasoning</think>Hello!"},
                                         {"system", "Use English."},
                                         {"user", "Bye"}};
  auto text = ApplyChatTemplate(chat, ChatOptions{});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<｜begin▁of▁sentence｜>Be brief.\n\nUse English.<｜User｜>Hi<｜Assistant｜></think>"
            "Hello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜></think>");
  auto thinking = ApplyChatTemplate(chat, ChatOptions{.thinking = true});
  ASSERT_TRUE(thinking.ok());
  EXPECT_TRUE(thinking->ends_with("<｜User｜>Bye<｜Assistant｜><think>"));
  auto no_prompt = ApplyChatTemplate(chat, ChatOptions{.add_generation_prompt = false});
  ASSERT_TRUE(no_prompt.ok());
  EXPECT_TRUE(no_prompt->ends_with("<｜User｜>Bye"));
}

TEST(ChatTemplateTest, NoGenerationPromptAfterAssistant) {
  auto text = ApplyChatTemplate(std::vector<ChatMessage>{{"user", "a"}, {"assistant", "b"}},
                                ChatOptions{});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text,
            "<｜begin▁of▁sentence｜><｜User｜>a<｜Assistant｜></think>b<｜end▁of▁sentence｜>");
}

TEST(ChatTemplateTest, RejectsBadInput) {
  EXPECT_FALSE(ApplyChatTemplate({}, ChatOptions{}).ok());
  EXPECT_FALSE(ApplyChatTemplate(std::vector<ChatMessage>{{"tool", "x"}}, ChatOptions{}).ok());
  EXPECT_FALSE(
      ApplyChatTemplate(std::vector<ChatMessage>{{"user", "\xff"}}, ChatOptions{}).ok());
  EXPECT_FALSE(ParseTemplateKwargs({{"thinking", "yes"}}).ok());
  EXPECT_FALSE(ParseTemplateKwargs({{"tools", "[]"}}).ok());
  auto o = ParseTemplateKwargs({{"thinking", "true"}});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->thinking);
}

TEST(ChatTemplateTest, EncodesRoleTokensAsSingleSpecialIds) {
  Json vocab = Json::object();
  int next = 0;
  for (const char* s : {kBosToken, kEosToken, kUserToken, kAssistantToken, kThinkEnd}) {
    vocab[s] = next++;
  }
  Json added = Json::array();
  for (int i = 0; i < next; ++i) {
    std::string content;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (it.value() == i) content = it.key();
    }
    added.push_back({{"id", i}, {"content", content}, {"special", true}, {"normalized", false}});
  }
  for (char c = 'a'; c <= 'z'; ++c) vocab[std::string(1, c)] = next++;
  Json j = {{"added_tokens", added},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", Json::array()}}}};
  auto tok = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = EncodeChat(**tok, std::vector<ChatMessage>{{"user", "hi"}}, ChatOptions{});
  ASSERT_TRUE(ids.ok()) << ids.status();
  const int32_t h = *(*tok)->TokenToId("h"), i = *(*tok)->TokenToId("i");
  EXPECT_EQ(*ids, (std::vector<int32_t>{0, 2, h, i, 3, 4}));
}

}  // namespace
}  // namespace weir::tokenizer
