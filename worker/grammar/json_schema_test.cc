// worker/grammar/json_schema_test.cc

#include "worker/grammar/json_schema.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/grammar/matcher.h"
#include "worker/grammar/test_util.h"

namespace weir::grammar {
namespace {

bool Accepts(const absl::StatusOr<Grammar>& g, const std::string& text) {
  EXPECT_TRUE(g.ok()) << g.status();
  auto compiled = testing::CompileForTest(*g);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  Matcher m(*compiled);
  return m.AcceptBytes(text).ok() && m.CanTerminate();
}

std::string ErrorOf(const std::string& schema) {
  auto g = JsonSchemaToGrammar(schema);
  EXPECT_FALSE(g.ok()) << schema;
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(g.status().message());
}

TEST(JsonSchemaTest, OptionalPropertiesGetCommasRight) {
  auto g = JsonSchemaToGrammar(
      R"({"properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
          "required":["b"]})");
  EXPECT_TRUE(Accepts(g, R"({"b":"x"})"));
  EXPECT_TRUE(Accepts(g, R"({"a":1,"b":"x","c":true})"));
  EXPECT_TRUE(Accepts(g, R"({"b":"x","c":false})"));
  EXPECT_FALSE(Accepts(g, R"({"a":1})"));
  EXPECT_FALSE(Accepts(g, R"({"a":1,,"b":"x"})"));
  EXPECT_FALSE(Accepts(g, R"({"b":"x","a":1})"));  // declaration order
  EXPECT_FALSE(Accepts(g, R"({"b":"x","d":1})"));  // strict: no extras
}

TEST(JsonSchemaTest, WhitespacePolicyAndNonStrictExtras) {
  JsonSchemaOptions flexible;
  flexible.whitespace = JsonWhitespace::kFlexible;
  flexible.strict_properties = false;
  const std::string schema = R"({"type":"object","properties":{"a":{"type":"array"}}})";
  EXPECT_TRUE(Accepts(JsonSchemaToGrammar(schema, flexible),
                      "{ \"a\" : [ 1 , {\"x\":null} ] ,\n \"z\":2 }"));
  EXPECT_FALSE(Accepts(JsonSchemaToGrammar(schema), "{ \"a\":[]}"));
  EXPECT_TRUE(Accepts(JsonSchemaToGrammar(schema), "{\"a\":[1,\"s\"]}"));
}

TEST(JsonSchemaTest, StringsNumbersAndEscapes) {
  auto g = JsonSchemaToGrammar(R"({"type":"array","items":{"type":"string","maxLength":2}})");
  EXPECT_TRUE(Accepts(g, R"(["","\u00e9\n","中文"])"));
  EXPECT_FALSE(Accepts(g, R"(["abc"])"));
  EXPECT_FALSE(Accepts(g, "[\"a\nb\"]"));  // raw control character
  auto n = JsonSchemaToGrammar(R"({"type":"number"})");
  EXPECT_TRUE(Accepts(n, "-0.5e+10"));
  EXPECT_FALSE(Accepts(n, "01"));
  EXPECT_FALSE(Accepts(JsonSchemaToGrammar(R"({"type":"integer"})"), "1.0"));
}

TEST(JsonSchemaTest, PatternSearchSemanticsAndRefs) {
  EXPECT_TRUE(Accepts(JsonSchemaToGrammar(R"({"type":"string","pattern":"ab"})"), R"("xxaby")"));
  EXPECT_FALSE(Accepts(JsonSchemaToGrammar(R"({"type":"string","pattern":"^ab$"})"), R"("xab")"));
  auto g = JsonSchemaToGrammar(
      R"({"$defs":{"n":{"type":"object","properties":{"next":{"anyOf":[{"$ref":"#/$defs/n"},{"type":"null"}]}},"required":["next"]}},"$ref":"#/$defs/n"})");
  EXPECT_TRUE(Accepts(g, R"({"next":{"next":{"next":null}}})"));
}

TEST(JsonSchemaTest, IntegerBoundsAreExact) {
  // Every integer in a window around each range, accepted iff inside it.
  const std::pair<int64_t, int64_t> ranges[] = {{0, 150},   {-273, 58}, {7, 7},
                                                {-99, -10}, {95, 1203}, {-1000, 1000}};
  for (auto [lo, hi] : ranges) {
    auto g = JsonSchemaToGrammar(
        absl::StrCat(R"({"type":"integer","minimum":)", lo, R"(,"maximum":)", hi, "}"));
    ASSERT_TRUE(g.ok()) << g.status();
    auto compiled = testing::CompileForTest(*g);
    ASSERT_TRUE(compiled.ok());
    for (int64_t x = lo - 300; x <= hi + 300; ++x) {
      Matcher m(*compiled);
      const bool ok = m.AcceptBytes(absl::StrCat(x)).ok() && m.CanTerminate();
      ASSERT_EQ(ok, lo <= x && x <= hi) << x << " in [" << lo << "," << hi << "]";
    }
    Matcher m(*compiled);
    EXPECT_FALSE(m.AcceptBytes("007").ok() && m.CanTerminate());
  }
  auto open = JsonSchemaToGrammar(R"({"type":"integer","exclusiveMinimum":9})");
  EXPECT_FALSE(Accepts(open, "9"));
  EXPECT_TRUE(Accepts(open, "10"));
  EXPECT_TRUE(Accepts(open, "123456789012345678"));
  EXPECT_FALSE(Accepts(open, "1234567890123456789"));  // 19 digits
}

TEST(JsonSchemaTest, AnyJson) {
  auto obj = AnyJsonGrammar(/*object_only=*/true);
  EXPECT_TRUE(Accepts(obj, R"({"a":[1,2,{"b":null}],"c":"d"})"));
  EXPECT_FALSE(Accepts(obj, "[1]"));
  EXPECT_TRUE(Accepts(AnyJsonGrammar(false), "[1,true,\"x\"]"));
}

TEST(JsonSchemaTest, ErrorsNameKeywordAndLocation) {
  EXPECT_NE(ErrorOf(R"({"type":"object","properties":{"x":{"type":"integer","multipleOf":2}}})")
                .find("unsupported keyword 'multipleOf' at #/properties/x"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"number","minimum":0})").find("type 'number'"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"integer","minimum":5,"maximum":4})").find("empty integer range"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"allOf":[{},{}]})").find("allOf"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"$ref":"#/$defs/missing"})").find("unresolvable"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"$ref":"http://x/y"})").find("local"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"array","minItems":3,"maxItems":2})").find("maxItems"),
            std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"strin"})").find("unknown type"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"string","pattern":"(a"})").find("'pattern' at #"),
            std::string::npos);
  EXPECT_NE(ErrorOf("{\"type\":").find("malformed JSON at byte 8"), std::string::npos)
      << ErrorOf("{\"type\":");
  EXPECT_NE(ErrorOf(R"({"type":"object","required":["x"]})").find("'x'"), std::string::npos);
  EXPECT_NE(ErrorOf(std::string(5000, '[')).find("GRAMMAR_TOO_COMPLEX"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"string","maxLength":100000})").find("GRAMMAR_TOO_COMPLEX"),
            std::string::npos);
  EXPECT_FALSE(ErrorOf(R"({"type":"integer","const":1,"minimum":3})").empty());
}

}  // namespace
}  // namespace weir::grammar
