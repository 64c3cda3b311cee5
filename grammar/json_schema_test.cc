// grammar/json_schema_test.cc

#include "grammar/json_schema.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grammar/matcher.h"
#include "grammar/test_util.h"
#include "gtest/gtest.h"

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

TEST(JsonSchemaTest, OneOfBranchesMustBeProvablyDisjoint) {
  // Enforced as anyOf, so a value matching two branches would violate oneOf.
  for (const char* overlapping : {
           R"({"oneOf":[{"type":"integer"},{"type":"number"}]})",  // 1 matches both
           R"({"oneOf":[{"type":"string"},{"type":"string","maxLength":3}]})",
           R"({"oneOf":[{"enum":[1,2]},{"enum":[2.0,3]}]})",  // 2 == 2.0
           R"({"oneOf":[{"type":"integer"},{"type":["string","number"]}]})",
           R"({"oneOf":[{"type":"object"},{"properties":{"a":{"type":"integer"}}}]})",
           R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"}}},
                        {"type":"object","properties":{"k":{"const":"b"}},"required":["k"]}]})",
           R"({"oneOf":[{"type":"null"},{}]})",
       }) {
    EXPECT_NE(ErrorOf(overlapping).find("'oneOf' branches"), std::string::npos) << overlapping;
  }
  EXPECT_NE(ErrorOf(R"({"type":"object","properties":{"x":{"oneOf":[{"type":"integer"},
                                                                  {"type":"number"}]}}})")
                .find("'oneOf' branches 0 and 1 may both match one value, which the engine "
                      "cannot exclude; use 'anyOf'"),
            std::string::npos);
  auto types = JsonSchemaToGrammar(
      R"({"oneOf":[{"type":"integer"},{"type":"string"},{"type":"null"},{"const":1.5}]})");
  EXPECT_TRUE(Accepts(types, "7"));
  EXPECT_TRUE(Accepts(types, R"("x")"));
  EXPECT_TRUE(Accepts(types, "null"));
  EXPECT_TRUE(Accepts(types, "1.5"));
  EXPECT_FALSE(Accepts(types, "true"));
  EXPECT_TRUE(Accepts(JsonSchemaToGrammar(R"({"oneOf":[{"const":"a"},{"enum":["b","c"]}]})"),
                      R"("c")"));
  // A discriminator: a property both branches require, with disjoint values
  // (through $refs too).
  auto tagged = JsonSchemaToGrammar(
      R"({"$defs":{"circle":{"type":"object","properties":{"kind":{"const":"circle"},
                                                          "r":{"type":"integer"}},
                             "required":["kind","r"]}},
          "oneOf":[{"$ref":"#/$defs/circle"},
                   {"type":"object","properties":{"kind":{"enum":["rect","square"]},
                                                  "w":{"type":"integer"}},
                    "required":["kind","w"]}]})");
  EXPECT_TRUE(Accepts(tagged, R"({"kind":"circle","r":2})"));
  EXPECT_TRUE(Accepts(tagged, R"({"kind":"square","w":2})"));
  EXPECT_FALSE(Accepts(tagged, R"({"kind":"circle","w":2})"));
}

TEST(JsonSchemaTest, ConstAndEnumKeepOnlyValuesOfTheirType) {
  auto strings = JsonSchemaToGrammar(R"({"type":"string","enum":["a",1,null]})");
  EXPECT_TRUE(Accepts(strings, R"("a")"));
  EXPECT_FALSE(Accepts(strings, "1"));
  EXPECT_FALSE(Accepts(strings, "null"));
  auto integers = JsonSchemaToGrammar(R"({"type":"integer","enum":[1,2.5,3.0,"x"]})");
  EXPECT_TRUE(Accepts(integers, "1"));
  EXPECT_TRUE(Accepts(integers, "3.0"));  // 3.0 is an integer in JSON Schema
  EXPECT_FALSE(Accepts(integers, "2.5"));
  EXPECT_NE(ErrorOf(R"({"type":"string","const":5})").find("matches nothing"), std::string::npos);
  EXPECT_NE(ErrorOf(R"({"type":"integer","enum":["a",0.5]})").find("matches nothing"),
            std::string::npos);
}

TEST(JsonSchemaTest, ExtraPropertiesNeverRepeatADeclaredName) {
  // A parser keeps the last duplicate: {"a":1,"a":"x"} would be "a":"x".
  auto g = JsonSchemaToGrammar(
      R"({"type":"object","properties":{"a":{"type":"integer"},"ab":{"type":"integer"}},
          "additionalProperties":{"type":"string"}})");
  for (const char* ok : {R"({"a":1,"b":"x"})", R"({"a":1,"abc":"x"})", R"({"":"x"})",
                         R"({"b":"x"})", R"({"é":"x"})", R"({"A":"x"})",
                         R"({"a":1,"ab":2,"x":"y","z":"w"})"}) {
    EXPECT_TRUE(Accepts(g, ok)) << ok;
  }
  for (const char* bad : {R"({"a":"x"})", R"({"a":1,"a":"x"})", R"({"ab":"x"})",
                          R"({"a":1,"ab":2,"ab":"s"})", R"({"\u0061":"x"})"}) {
    EXPECT_FALSE(Accepts(g, bad)) << bad;
  }
  JsonSchemaOptions open;
  open.strict_properties = false;
  auto implicit = JsonSchemaToGrammar(R"({"type":"object","properties":{"a":{"type":"integer"}}})",
                                      open);
  EXPECT_TRUE(Accepts(implicit, R"({"a":1,"b":[true]})"));
  EXPECT_FALSE(Accepts(implicit, R"({"a":1,"a":"s"})"));
  // Without declared properties any name goes.
  EXPECT_TRUE(Accepts(JsonSchemaToGrammar(R"({"type":"object","additionalProperties":true})"),
                      R"({"a":1,"a":2})"));
}

TEST(JsonSchemaTest, NoSurrogateEscapesSoLengthsCountCodePoints) {
  // A surrogate pair escape is one code point written as two escapes: it
  // would pass maxLength 2 counted per escape and fail minLength 2 in a
  // validator, so such characters are only written as UTF-8.
  auto g = JsonSchemaToGrammar(R"({"type":"string","minLength":2,"maxLength":2})");
  EXPECT_FALSE(Accepts(g, R"("\ud83d\ude00")"));
  EXPECT_FALSE(Accepts(g, R"("\uDC00x")"));
  EXPECT_TRUE(Accepts(g, "\"\xF0\x9F\x98\x80\xF0\x9F\x98\x80\""));  // two emoji as UTF-8
  EXPECT_TRUE(Accepts(g, R"("\u00e9\uD7FF")"));
  EXPECT_TRUE(Accepts(JsonSchemaToGrammar(R"({"type":"string"})"), R"("\uE000\uFFFF")"));
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
