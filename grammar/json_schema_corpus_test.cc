// grammar/json_schema_corpus_test.cc
//
// For every corpus schema: random walks over the compiled grammar, each
// output parsed by nlohmann::json and checked by the independent
// schema_checker. Alternates compact and flexible whitespace.

#include "grammar/json_schema_corpus.h"

#include <random>
#include <string>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/schema_checker.h"
#include "grammar/test_util.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace weir::grammar {
namespace {

using Json = nlohmann::ordered_json;
constexpr int kWalksPerSchema = 30;

TEST(JsonSchemaCorpusTest, CorpusHasFiftySchemas) { EXPECT_GE(JsonSchemaCorpus().size(), 50u); }

TEST(JsonSchemaCorpusTest, EveryWalkIsValidJsonForItsSchema) {
  uint64_t seed = 1;
  int checked = 0;
  for (const CorpusSchema& entry : JsonSchemaCorpus()) {
    JsonSchemaOptions options;
    options.whitespace = seed % 2 ? JsonWhitespace::kCompact : JsonWhitespace::kFlexible;
    auto grammar = JsonSchemaToGrammar(entry.schema, options);
    ASSERT_TRUE(grammar.ok()) << entry.name << ": " << grammar.status();
    auto compiled = testing::CompileForTest(*grammar);
    ASSERT_TRUE(compiled.ok()) << entry.name << ": " << compiled.status();
    const Json schema = Json::parse(entry.schema);
    std::mt19937_64 rng(seed++);
    for (int walk = 0; walk < kWalksPerSchema; ++walk) {
      Matcher m(*compiled);
      auto out = testing::RandomWalk(m, rng);
      ASSERT_TRUE(out.ok()) << entry.name << ": " << out.status();
      const Json doc = Json::parse(*out, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(doc.is_discarded()) << entry.name << " produced malformed JSON: " << *out;
      const std::string why = testing::CheckSchema(doc, schema, schema, options.strict_properties);
      EXPECT_EQ(why, "") << entry.name << " produced: " << *out;
      ++checked;
    }
  }
  EXPECT_EQ(checked, static_cast<int>(JsonSchemaCorpus().size()) * kWalksPerSchema);
}

TEST(JsonSchemaCorpusTest, CheckerRejectsViolations) {
  // The checker must be able to fail, or the walk test proves nothing.
  const Json schema = Json::parse(JsonSchemaCorpus()[0].schema);
  EXPECT_EQ(testing::CheckSchema(Json::parse(R"({"id":1,"name":"a","email":"a@b.com"})"), schema,
                                 schema, true),
            "");
  EXPECT_NE(testing::CheckSchema(Json::parse(R"({"id":1,"name":"a"})"), schema, schema, true), "");
  EXPECT_NE(testing::CheckSchema(Json::parse(R"({"id":1.5,"name":"a","email":"a@b.com"})"), schema,
                                 schema, true),
            "");
  EXPECT_NE(testing::CheckSchema(Json::parse(R"({"id":1,"name":"a","email":"ab.com"})"), schema,
                                 schema, true),
            "");
  EXPECT_NE(testing::CheckSchema(Json::parse(R"({"id":1,"name":"a","email":"a@b.com","x":1})"),
                                 schema, schema, true),
            "");
}

}  // namespace
}  // namespace weir::grammar
