// grammar/ebnf_parser_test.cc

#include "grammar/ebnf_parser.h"

#include <string>

#include "grammar/matcher.h"
#include "grammar/test_util.h"
#include "gtest/gtest.h"

namespace weir::grammar {
namespace {

// Returns whether `text` is a complete match of the EBNF `source`.
bool Matches(const std::string& source, const std::string& text) {
  auto grammar = ParseEbnf(source);
  EXPECT_TRUE(grammar.ok()) << grammar.status();
  auto compiled = testing::CompileForTest(*grammar);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  Matcher m(*compiled);
  return m.AcceptBytes(text).ok() && m.CanTerminate();
}

TEST(EbnfParserTest, LiteralsClassesAndOperators) {
  const std::string g = R"(root ::= "a" [0-9]+ ("x" | "yz")? tail*   # comment
                           tail ::= [^a-z\n]
  )";
  EXPECT_TRUE(Matches(g, "a1"));
  EXPECT_TRUE(Matches(g, "a12yz"));
  EXPECT_TRUE(Matches(g, "a0x!!"));
  EXPECT_FALSE(Matches(g, "a"));
  EXPECT_FALSE(Matches(g, "a1q"));
  EXPECT_FALSE(Matches(g, "a1xx"));
}

TEST(EbnfParserTest, EscapesUnicodeAndBoundedRepeat) {
  EXPECT_TRUE(Matches(R"(root ::= "\"\\\n" [\u00e9-\u00ff]{2,3})", "\"\\\néé"));
  EXPECT_FALSE(Matches(R"(root ::= "\"\\\n" [\u00e9-\u00ff]{2,3})", "\"\\\né"));
  EXPECT_TRUE(Matches(R"(root ::= [^x]{2})", "中é"));
  EXPECT_FALSE(Matches(R"(root ::= [^x]{2})", "中x"));
  EXPECT_TRUE(Matches("root ::= \"a\"{2,}", "aaaaa"));
}

TEST(EbnfParserTest, RecursionAcrossRules) {
  const std::string g = R"(root ::= list
                           list ::= "[" (item ("," item)*)? "]"
                           item ::= list | [0-9])";
  EXPECT_TRUE(Matches(g, "[]"));
  EXPECT_TRUE(Matches(g, "[1,[2,[]],3]"));
  EXPECT_FALSE(Matches(g, "[1,]"));
}

TEST(EbnfParserTest, ErrorsNamePosition) {
  auto status = ParseEbnf("root ::= \"abc").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(status.message()).find("unterminated string"), std::string::npos);
  status = ParseEbnf("root ::= a\nb ::= \"x\"").status();
  EXPECT_NE(std::string(status.message()).find("undefined rule 'a'"), std::string::npos) << status;
  status = ParseEbnf("root ::= \"x\"\n  ) ").status();
  EXPECT_NE(std::string(status.message()).find("line 2, column 3"), std::string::npos) << status;
  EXPECT_FALSE(ParseEbnf("other ::= \"x\"").ok());
  EXPECT_FALSE(ParseEbnf("root ::= [b-a]").ok());
  EXPECT_FALSE(ParseEbnf("root ::= \"x\"{3,2}").ok());
  EXPECT_FALSE(ParseEbnf("root ::= \"\\q\"").ok());
  EXPECT_FALSE(ParseEbnf("root ::= \"x\"\nroot ::= \"y\"").ok());
}

TEST(EbnfParserTest, LimitsAreEnforced) {
  std::string deep = "root ::= " + std::string(500, '(') + "\"x\"" + std::string(500, ')');
  auto status = ParseEbnf(deep).status();
  EXPECT_NE(std::string(status.message()).find("GRAMMAR_TOO_COMPLEX"), std::string::npos);
  status = ParseEbnf("root ::= \"x\"{100000}").status();
  EXPECT_NE(std::string(status.message()).find("GRAMMAR_TOO_COMPLEX"), std::string::npos);
}

TEST(EbnfParserTest, PdaRejectsLeftRecursionAndEmptyLanguages) {
  auto g = ParseEbnf("root ::= root \"x\" | \"y\"");
  ASSERT_TRUE(g.ok());
  auto status = testing::CompileForTest(*g).status();
  EXPECT_NE(std::string(status.message()).find("left recursion"), std::string::npos) << status;
  g = ParseEbnf("root ::= a? root \"x\" | \"y\"\na ::= \"z\"");
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(testing::CompileForTest(*g).ok());
  g = ParseEbnf("root ::= \"x\" root");
  ASSERT_TRUE(g.ok());
  status = testing::CompileForTest(*g).status();
  EXPECT_NE(std::string(status.message()).find("matches no string"), std::string::npos) << status;
}

}  // namespace
}  // namespace weir::grammar
