// grammar/fuzz_test.cc
//
// Deterministic mutation fuzzing of the three text front-ends (regex, EBNF,
// JSON Schema) and of PDA compilation: malformed input must produce
// INVALID_ARGUMENT (never a crash, hang or other code), and memory stays
// bounded by the limits.

#include <sys/resource.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "grammar/constraint.h"
#include "grammar/json_schema_corpus.h"
#include "grammar/matcher.h"
#include "grammar/test_util.h"
#include "gtest/gtest.h"

namespace weir::grammar {
namespace {

constexpr int kMutantsPerSeed = 150;

// `structural` favors word swaps, which keep JSON well formed.
std::string Mutate(const std::string& seed, bool structural, std::mt19937_64& rng) {
  static const std::string kAlphabet = "()[]{}*+?|\\^$\".,:-0123456789az\"#\n ::=u\xc3\xa9\xff";
  std::string s = seed;
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (structural && rng() % 4 != 0 ? 5 : rng() % 6) {
      case 5: {  // swap a quoted word for a keyword or value (reaches schema semantics)
        static const char* const kWords[] = {"\"type\"",
                                             "\"items\"",
                                             "\"enum\"",
                                             "\"anyOf\"",
                                             "\"$ref\"",
                                             "\"minItems\"",
                                             "\"properties\"",
                                             "\"required\"",
                                             "\"pattern\"",
                                             "\"additionalProperties\"",
                                             "\"integer\"",
                                             "\"object\"",
                                             "\"#/$defs/x\"",
                                             "\"#\"",
                                             "null",
                                             "-1",
                                             "[]",
                                             "{}",
                                             "true",
                                             "\"(\"",
                                             "4097"};
        const size_t open = s.find('"', pos);
        const size_t close = open == std::string::npos ? open : s.find('"', open + 1);
        if (close != std::string::npos) {
          s.replace(open, close - open + 1, kWords[rng() % (sizeof(kWords) / sizeof(kWords[0]))]);
        }
        break;
      }
      case 0:  // insert a syntax character
        s.insert(pos, 1, kAlphabet[rng() % kAlphabet.size()]);
        break;
      case 1:  // delete a span
        if (!s.empty()) s.erase(std::min(pos, s.size() - 1), 1 + rng() % 8);
        break;
      case 2:  // replace a byte with anything
        if (pos < s.size()) s[pos] = static_cast<char>(rng() % 256);
        break;
      case 3:  // duplicate a span (nesting, repetition)
        if (pos < s.size()) s.insert(pos, s.substr(pos, 1 + rng() % 16));
        break;
      default:  // truncate
        s.resize(pos);
        break;
    }
  }
  return s;
}

void FuzzKind(ConstraintKind kind, const std::vector<std::string>& seeds, uint64_t seed) {
  GrammarLimits limits;
  limits.max_exprs = 50'000;
  PdaLimits pda_limits;
  pda_limits.max_nodes = 50'000;
  pda_limits.max_edges = 500'000;
  std::mt19937_64 rng(seed);
  int compiled = 0, rejected = 0;
  for (const std::string& s : seeds) {
    for (int i = 0; i < kMutantsPerSeed; ++i) {
      Constraint c{kind, Mutate(s, kind == ConstraintKind::kJsonSchema, rng), {}};
      auto grammar = ConstraintToGrammar(c, limits);
      absl::Status status = grammar.status();
      if (grammar.ok()) {
        auto pda = Pda::Build(*grammar, pda_limits);
        status = pda.status();
        if (pda.ok()) {
          auto g =
              std::make_shared<const CompiledGrammar>(*std::move(pda), testing::TestVocabulary());
          Matcher m(g);
          std::vector<uint32_t> mask(g->vocab().mask_words());
          m.FillNextTokenBitmask(mask);
          ++compiled;
          continue;
        }
      }
      ASSERT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.text << "\n" << status;
      ++rejected;
    }
  }
  std::printf("kind %d: %d compiled, %d rejected\n", static_cast<int>(kind), compiled, rejected);
  EXPECT_GT(rejected, 0);  // the mutations do reach the error paths
  EXPECT_GT(compiled, 0);  // and some still compile
}

TEST(FuzzTest, Regex) {
  FuzzKind(ConstraintKind::kRegex,
           {"[a-z]+@[a-z]+\\.(com|org)", "\\d{3}-\\d{4}", "(a|b)*c?[^x-z]{2,5}",
            "(?:\\w+\\s?){1,3}", "\"[^\"]*\"", "^v\\d+\\.\\d+$"},
           1);
}

TEST(FuzzTest, Ebnf) {
  FuzzKind(ConstraintKind::kEbnf,
           {"root ::= \"a\" [0-9]+ (\"x\" | \"y\")* tail?\ntail ::= [^a-z]",
            "root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= list | [0-9]",
            "root ::= [\\u00e9-\\u00ff]{2,3} \"\\n\" # c"},
           2);
}

TEST(FuzzTest, JsonSchema) {
  std::vector<std::string> seeds;
  for (const CorpusSchema& s : JsonSchemaCorpus()) {
    if (seeds.size() < 8) seeds.push_back(s.schema);
  }
  FuzzKind(ConstraintKind::kJsonSchema, seeds, 3);
}

TEST(FuzzTest, PathologicalInputsAreBounded) {
  GrammarLimits limits;
  std::string chain = "root ::= r0\n";  // 30k rules, each calling the next
  for (int i = 0; i < 30000; ++i)
    chain += "r" + std::to_string(i) + " ::= \"x\" r" + std::to_string(i + 1) + "?\n";
  chain += "r30000 ::= \"y\"\n";
  {
    auto g = ConstraintToGrammar(Constraint{ConstraintKind::kEbnf, chain, {}}, limits);
    ASSERT_TRUE(g.ok()) << g.status();
    auto pda = Pda::Build(*g);  // compiles (or is too complex), never overflows the stack
    EXPECT_TRUE(pda.ok() || pda.status().code() == absl::StatusCode::kInvalidArgument);
  }
  for (const Constraint& c : {
           Constraint{ConstraintKind::kRegex, std::string(200000, '('), {}},
           Constraint{ConstraintKind::kRegex, "((((a{4096}){4096}){4096}){4096})", {}},
           Constraint{ConstraintKind::kEbnf, "root ::= " + std::string(200000, '('), {}},
           Constraint{ConstraintKind::kJsonSchema, std::string(200000, '['), {}},
           Constraint{ConstraintKind::kJsonSchema, std::string(3 << 20, ' '), {}},
       }) {
    auto g = ConstraintToGrammar(c, limits);
    absl::Status status = g.status();
    if (g.ok()) status = Pda::Build(*g).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.text.substr(0, 40);
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  EXPECT_LT(usage.ru_maxrss, 1 << 20) << "peak RSS in KiB";  // under 1 GiB
}

}  // namespace
}  // namespace weir::grammar
