#include "tokenizer/pre_tokenizer.h"

#include "gtest/gtest.h"

namespace weir::tokenizer {
namespace {

std::vector<std::string> PreTokenize(const Json& j, std::string_view text) {
  auto p = PreTokenizer::FromJson(j);
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return {};
  std::vector<std::string_view> pieces;
  std::deque<std::string> arena;
  EXPECT_TRUE((*p)->Apply(text, pieces, arena).ok());
  return std::vector<std::string>(pieces.begin(), pieces.end());
}

Json SplitJson(const std::string& literal, const std::string& behavior, bool invert = false) {
  return Json{{"type", "Split"}, {"pattern", {{"String", literal}}},
              {"behavior", behavior}, {"invert", invert}};
}

using V = std::vector<std::string>;

TEST(PreTokenizerTest, SplitBehaviorsMatchHuggingFaceDocs) {
  const std::string text = "the-final--countdown";
  EXPECT_EQ(PreTokenize(SplitJson("-", "Removed"), text), (V{"the", "final", "countdown"}));
  EXPECT_EQ(PreTokenize(SplitJson("-", "Isolated"), text),
            (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(PreTokenize(SplitJson("-", "MergedWithPrevious"), text),
            (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(PreTokenize(SplitJson("-", "MergedWithNext"), text),
            (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(PreTokenize(SplitJson("-", "Contiguous"), text), (V{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(PreTokenize(SplitJson("-", "Removed", /*invert=*/true), text), (V{"-", "-", "-"}));
}

TEST(PreTokenizerTest, RegexSplitWithLookahead) {
  Json j = {{"type", "Split"},
            {"pattern", {{"Regex", R"(\s+(?!\S)|\s+|\S+)"}}},
            {"behavior", "Isolated"},
            {"invert", false}};
  EXPECT_EQ(PreTokenize(j, "a   b"), (V{"a", "  ", " ", "b"}));
  // U+0085 (NEL) is whitespace for Oniguruma's \s, as in Hugging Face.
  EXPECT_EQ(PreTokenize(j, "x\xC2\x85y"), (V{"x", "\xC2\x85", "y"}));
}

TEST(PreTokenizerTest, ByteLevelGpt2RegexAndPrefixSpace) {
  Json j = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(PreTokenize(j, "Hello world's 123!!"), (V{" Hello", " world", "'s", " 123", "!!"}));
  j["add_prefix_space"] = false;
  EXPECT_EQ(PreTokenize(j, "Hello  you"), (V{"Hello", " ", " you"}));
}

TEST(PreTokenizerTest, DigitsAndSequence) {
  Json j = {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Digits"}, {"individual_digits", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  EXPECT_EQ(PreTokenize(j, "ab123cd4"), (V{"ab", "123", "cd", "4"}));
  j["pretokenizers"][0]["individual_digits"] = true;
  EXPECT_EQ(PreTokenize(j, "a12"), (V{"a", "1", "2"}));
}

TEST(PreTokenizerTest, DeepSeekPatternsSplitCjkAndNumbers) {
  auto split = [](const std::string& re) {
    return Json{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"},
                {"invert", false}};
  };
  Json j = {{"type", "Sequence"},
            {"pretokenizers",
             {split(R"(\p{N}{1,3})"), split("[一-龥\u3040-ゟ゠-ヿ]+"),
              split(R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)")}}};
  EXPECT_EQ(PreTokenize(j, "价格12345元 is.cool"),
            (V{"价格", "123", "45", "元", " is", ".cool"}));
}

TEST(PreTokenizerTest, RejectsBadComponents) {
  EXPECT_FALSE(PreTokenizer::FromJson(Json{{"type", "Whitespace"}}).ok());
  EXPECT_FALSE(PreTokenizer::FromJson(SplitJson("-", "Sideways")).ok());
  EXPECT_FALSE(PreTokenizer::FromJson(Json{{"type", "Digits"}, {"digits", true}}).ok());
  EXPECT_FALSE(PreTokenizer::FromJson(Json::array()).ok());
}

}  // namespace
}  // namespace weir::tokenizer
