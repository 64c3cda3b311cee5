// grammar/regex_parser_test.cc

#include "grammar/regex_parser.h"

#include <string>

#include "grammar/matcher.h"
#include "grammar/test_util.h"
#include "gtest/gtest.h"

namespace weir::grammar {
namespace {

bool FullMatch(const Grammar& g, const std::string& text) {
  auto compiled = testing::CompileForTest(g);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  Matcher m(*compiled);
  return m.AcceptBytes(text).ok() && m.CanTerminate();
}

bool RegexMatches(const std::string& pattern, const std::string& text) {
  auto g = ParseRegex(pattern);
  EXPECT_TRUE(g.ok()) << pattern << ": " << g.status();
  return g.ok() && FullMatch(*g, text);
}

TEST(RegexParserTest, CoreSyntax) {
  EXPECT_TRUE(RegexMatches("ab|cd", "cd"));
  EXPECT_FALSE(RegexMatches("ab|cd", "abcd"));
  EXPECT_TRUE(RegexMatches("^a(?:b|c)*d$", "abcbd"));
  EXPECT_TRUE(RegexMatches("\\d{3}-\\d{2,}", "123-4567"));
  EXPECT_FALSE(RegexMatches("\\d{3}-\\d{2,}", "12-4567"));
  EXPECT_TRUE(RegexMatches("x{2,3}?", "xxx"));
  EXPECT_TRUE(RegexMatches("[\\w.-]+@\\w+\\.com", "a.b-c@mail.com"));
  EXPECT_TRUE(RegexMatches("\\S+\\s\\S+", "ab\tcd"));
  EXPECT_FALSE(RegexMatches("\\S+\\s\\S+", "ab  cd"));
  EXPECT_TRUE(RegexMatches("a{,2}", "a{,2}"));  // not a quantifier: literal braces
  EXPECT_TRUE(RegexMatches("(?<year>\\d{4})", "2024"));
  EXPECT_TRUE(RegexMatches("[]a]+", "]a]"));
}

TEST(RegexParserTest, Utf8AwareDotAndClasses) {
  EXPECT_TRUE(RegexMatches(".{2}", "中é"));
  EXPECT_FALSE(RegexMatches(".{2}", "中"));
  EXPECT_FALSE(RegexMatches(".", "\n"));
  EXPECT_TRUE(RegexMatches("[à-ÿ]+", "éü"));
  EXPECT_TRUE(RegexMatches("[^a]", "😀"));
  EXPECT_TRUE(RegexMatches("é+", "ééé"));
  EXPECT_TRUE(RegexMatches("\\u00e9\\x41", "éA"));
}

TEST(RegexParserTest, SearchModeAndAllowedFilter) {
  Grammar g;
  RuleId root = g.DeclareRule("root");
  RegexOptions options;
  options.search = true;
  options.allowed = {{'a', 'z'}};
  auto body = AddRegex(g, "b[a-z\"]c", options);
  ASSERT_TRUE(body.ok()) << body.status();
  g.DefineRule(root, *body);
  g.set_root(root);
  EXPECT_TRUE(FullMatch(g, "xxbzcyy"));
  EXPECT_FALSE(FullMatch(g, "xxb\"cyy"));
  EXPECT_FALSE(FullMatch(g, "xxbc"));
}

TEST(RegexParserTest, UnsupportedAndMalformed) {
  for (const char* bad : {"(a", "a)", "[a-", "a**+", "*a", "a{3,1}", "(?=a)", "(a)\\1", "\\bx",
                          "a^b", "x\\", "\\q", "[z-a]", "\xff"}) {
    auto status = ParseRegex(bad).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(std::string(status.message()).find("regex"), std::string::npos) << bad << status;
  }
  EXPECT_NE(std::string(ParseRegex("a{99999}").status().message()).find("GRAMMAR_TOO_COMPLEX"),
            std::string::npos);
}

TEST(RegexParserTest, ChoiceLists) {
  auto g = ChoicesToGrammar({"red", "green", "greenish"});
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(FullMatch(*g, "green"));
  EXPECT_TRUE(FullMatch(*g, "greenish"));
  EXPECT_FALSE(FullMatch(*g, "gree"));
  EXPECT_FALSE(ChoicesToGrammar({}).ok());
  GrammarLimits small;
  small.max_exprs = 1000;
  std::vector<std::string> many(5000, "option");
  EXPECT_NE(
      std::string(ChoicesToGrammar(many, small).status().message()).find("GRAMMAR_TOO_COMPLEX"),
      std::string::npos);
}

}  // namespace
}  // namespace weir::grammar
