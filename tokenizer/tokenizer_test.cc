#include "tokenizer/tokenizer.h"

#include <thread>

#include "gtest/gtest.h"
#include "tokenizer/test_json.h"

namespace weir::tokenizer {
namespace {

using ::weir::tokenizer::testing::AddedTokenJson;
using ::weir::tokenizer::testing::ByteLevelTokenizer;

// "Ġ" is the byte-level character of ' '.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"Ġ", "w"}, {"o", "r"}};

std::unique_ptr<Tokenizer> Load(const Json& j, const std::string& config = "") {
  auto t = Tokenizer::FromJson(j.dump(), config);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(TokenizerTest, EncodesWithMergesAndRoundTrips) {
  auto tok = Load(ByteLevelTokenizer(kMerges));
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode("hello world", false);
  ASSERT_TRUE(ids.ok());
  // hello -> 259 ("hello" = merge 3 -> id 259), " w" -> 260, "or" -> 261, l, d
  EXPECT_EQ(*ids, (std::vector<int32_t>{259, 260, 261, 'l', 'd'}));
  EXPECT_EQ(tok->Decode(*ids, false), "hello world");
  EXPECT_EQ(tok->vocab_size(), 262);
  EXPECT_EQ(tok->IdToToken(260), "Ġw");
  EXPECT_EQ(tok->TokenToId("or"), 261);
}

TEST(TokenizerTest, InvalidUtf8BecomesReplacementCharacter) {
  auto tok = Load(ByteLevelTokenizer({}));
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode(std::string("a\xff" "b", 3), false);
  ASSERT_TRUE(ids.ok());
  // U+FFFD is EF BF BD.
  EXPECT_EQ(*ids, (std::vector<int32_t>{'a', 0xEF, 0xBF, 0xBD, 'b'}));
  // Decoding a lone continuation byte yields U+FFFD too.
  EXPECT_EQ(tok->Decode(std::vector<int32_t>{'a', 0x80}, false), "a\xEF\xBF\xBD");
}

TEST(TokenizerTest, SpecialTokensAndTemplate) {
  Json j = ByteLevelTokenizer(kMerges);
  j["added_tokens"] = {AddedTokenJson(300, "<bos>", true), AddedTokenJson(301, "<eos>", true),
                       AddedTokenJson(302, "[X]", false, /*lstrip=*/true, /*rstrip=*/true)};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", Json::array()},
      {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {300}}, {"tokens", {"<bos>"}}}}}}};
  auto tok = Load(j, R"({"bos_token": "<bos>", "eos_token": {"content": "<eos>"}})");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->bos_id(), 300);
  EXPECT_EQ(tok->eos_id(), 301);
  auto ids = tok->Encode("hello<eos>a  [X]  b", true);
  ASSERT_TRUE(ids.ok());
  // [X] strips the spaces on both sides.
  EXPECT_EQ(*ids, (std::vector<int32_t>{300, 259, 301, 'a', 302, 'b'}));
  EXPECT_EQ(tok->Decode(*ids, false), "<bos>hello<eos>a[X]b");
  EXPECT_EQ(tok->Decode(*ids, true), "helloa[X]b");
  EXPECT_TRUE(tok->IsSpecial(300));
  EXPECT_FALSE(tok->IsSpecial(302));
  auto plain = tok->Encode("hello", false);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, (std::vector<int32_t>{259}));
}

TEST(TokenizerTest, SingleWordTokenOnlyMatchesWholeWords) {
  Json j = ByteLevelTokenizer({});
  j["added_tokens"] = {AddedTokenJson(300, "cat", false, false, false, /*single_word=*/true)};
  auto tok = Load(j);
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode("cat concat cat.", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ((*ids)[0], 300);
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 300), 2);
}

TEST(TokenizerTest, LongestAddedTokenWins) {
  Json j = ByteLevelTokenizer({});
  j["added_tokens"] = {AddedTokenJson(300, "<a>", true), AddedTokenJson(301, "<a><b>", true)};
  auto tok = Load(j);
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode("<a><b><a>", false);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{301, 300}));
}

TEST(TokenizerTest, NormalizerAppliesBeforePreTokenizer) {
  Json j = ByteLevelTokenizer({});
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFKC"}}}}};
  auto tok = Load(j);
  ASSERT_NE(tok, nullptr);
  auto ids = tok->Encode("\xEF\xAC\x81", false);  // U+FB01 LATIN SMALL LIGATURE FI
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{'f', 'i'}));
}

TEST(TokenizerTest, RejectsUnknownFieldsAndComponentsByName) {
  struct Case {
    std::function<void(Json&)> mutate;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](Json& j) { j["extra"] = 1; }, "'extra'"},
      {[](Json& j) { j["truncation"] = {{"max_length", 4}}; }, "'truncation'"},
      {[](Json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "'Lowercase'"},
      {[](Json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }, "'Metaspace'"},
      {[](Json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "'WordPiece'"},
      {[](Json& j) { j["post_processor"] = {{"type", "BertProcessing"}}; }, "'BertProcessing'"},
      {[](Json& j) { j["model"]["type"] = "Unigram"; }, "'Unigram'"},
      {[](Json& j) { j["model"]["dropout"] = 0.1; }, "'dropout'"},
      {[](Json& j) { j["model"]["merges"] = {"a zz"}; }, "merge 0"},
      {[](Json& j) { j["model"]["merges"] = {"abc"}; }, "merge 0"},
      {[](Json& j) { j["model"]["surprise"] = true; }, "'surprise'"},
      {[](Json& j) {
         j["pre_tokenizer"] = {{"type", "Split"},
                               {"pattern", {{"Regex", "(unclosed"}}},
                               {"behavior", "Isolated"},
                               {"invert", false}};
       },
       "regex"},
      {[](Json& j) {
         j["pre_tokenizer"] = {
             {"type", "Sequence"},
             {"pretokenizers", {j["pre_tokenizer"], {{"type", "Digits"}}}}};
       },
       "ByteLevel must be last"},
  };
  for (const Case& c : cases) {
    Json j = ByteLevelTokenizer({{"a", "b"}});
    c.mutate(j);
    auto t = Tokenizer::FromJson(j.dump());
    ASSERT_FALSE(t.ok()) << "accepted: " << c.expected;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(c.expected), std::string::npos) << t.status();
  }
  EXPECT_FALSE(Tokenizer::FromJson("{not json").ok());
}

TEST(TokenizerTest, LoadsTinyModelDirectory) {
  const std::string dir = std::string(std::getenv("TEST_SRCDIR")) + "/" +
                          std::getenv("TEST_WORKSPACE") + "/models/random/tiny";
  auto tok = Tokenizer::FromDirectory(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 4096);
  EXPECT_EQ((*tok)->bos_id(), 0);  // models/random/tiny/config.json: bos 0, eos 1, pad 2
  EXPECT_EQ((*tok)->eos_id(), 1);
  EXPECT_EQ((*tok)->TokenToId("<｜▁pad▁｜>"), 2);
  auto ids = (*tok)->Encode("Permission is hereby granted", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), 0);
  EXPECT_LE(ids->size(), 8u);  // BOS + about one token per word
  EXPECT_EQ((*tok)->Decode(*ids, true), "Permission is hereby granted");
  EXPECT_EQ(Tokenizer::FromDirectory("/nonexistent").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(TokenizerTest, ConcurrentEncodesAgree) {
  auto tok = Load(ByteLevelTokenizer(kMerges));
  ASSERT_NE(tok, nullptr);
  const std::string text = "hello world, hello again; the world says hello.";
  auto want = tok->Encode(text, false);
  ASSERT_TRUE(want.ok());
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        auto got = tok->Encode(text + std::to_string(i % 7), false);
        if (!got.ok() || got->size() < want->size()) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace weir::tokenizer
