// grammar/matcher_test.cc

#include "grammar/matcher.h"

#include <random>
#include <string>
#include <vector>

#include "grammar/ebnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/json_schema_corpus.h"
#include "grammar/test_util.h"
#include "gtest/gtest.h"

namespace weir::grammar {
namespace {

using testing::kTestSpecialId;
using testing::kTestStopId;

std::shared_ptr<const CompiledGrammar> Compile(const std::string& ebnf) {
  auto g = ParseEbnf(ebnf);
  EXPECT_TRUE(g.ok()) << g.status();
  auto c = testing::CompileForTest(*g);
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

bool Allowed(const std::vector<uint32_t>& mask, int32_t id) {
  return mask[id >> 5] >> (id & 31) & 1;
}

// Reference: a token is allowed iff accepting it succeeds on a copy.
std::vector<uint32_t> BruteForceMask(const Matcher& m) {
  const Vocabulary& vocab = m.grammar().vocab();
  std::vector<uint32_t> mask(vocab.mask_words());
  for (int32_t id = 0; id < vocab.size(); ++id) {
    Matcher copy = m;
    if (copy.AcceptToken(id).ok()) mask[id >> 5] |= 1u << (id & 31);
  }
  return mask;
}

TEST(MatcherTest, MaskEqualsBruteForceAlongWalks) {
  auto g = Compile(R"(root ::= "{" pair ("," pair)* "}"
                      pair ::= "\"" [a-z]* "\":" (num | "true" | "null")
                      num ::= "-"? [0-9]+)");
  std::mt19937_64 rng(7);
  for (int walk = 0; walk < 5; ++walk) {
    Matcher m(g);
    std::vector<uint32_t> mask(g->vocab().mask_words());
    for (int step = 0; step < 12 && !m.IsTerminated(); ++step) {
      m.FillNextTokenBitmask(mask);
      ASSERT_EQ(mask, BruteForceMask(m)) << "walk " << walk << " step " << step;
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < g->vocab().size(); ++id) {
        if (Allowed(mask, id) && (step > 8 || id != kTestStopId)) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      ASSERT_TRUE(m.AcceptToken(allowed[rng() % allowed.size()]).ok());
    }
  }
}

// Same check on JSON Schema grammars, which exercise rule inlining, the
// self-loop subtree shortcut and uncertain-token checks across rule returns.
TEST(MatcherTest, JsonSchemaMasksEqualBruteForce) {
  std::mt19937_64 rng(3);
  int schemas = 0;
  for (const CorpusSchema& entry : JsonSchemaCorpus()) {
    if (entry.name != "order" && entry.name != "tree" && entry.name != "unicode_text" &&
        entry.name != "package_manifest" && entry.name != "nullable_fields" &&
        entry.name != "sentiment") {
      continue;
    }
    ++schemas;
    auto grammar = JsonSchemaToGrammar(entry.schema);
    ASSERT_TRUE(grammar.ok());
    auto g = testing::CompileForTest(*grammar);
    ASSERT_TRUE(g.ok());
    Matcher m(*g);
    std::vector<uint32_t> mask((*g)->vocab().mask_words());
    for (int step = 0; step < 40 && !m.IsTerminated(); ++step) {
      m.FillNextTokenBitmask(mask);
      ASSERT_EQ(mask, BruteForceMask(m)) << entry.name << " step " << step;
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < (*g)->vocab().size(); ++id) {
        if (Allowed(mask, id)) allowed.push_back(id);
      }
      ASSERT_FALSE(allowed.empty());
      ASSERT_TRUE(m.AcceptToken(allowed[rng() % allowed.size()]).ok());
    }
  }
  EXPECT_EQ(schemas, 6);
}

// Positions of a long bounded string are equivalent for every token until the
// bound is within one token's length, so they share token caches; masks stay
// exact.
TEST(MatcherTest, EquivalentNodesShareTokenCaches) {
  auto grammar = JsonSchemaToGrammar(R"({"type":"string","maxLength":300})");
  ASSERT_TRUE(grammar.ok());
  auto g = testing::CompileForTest(*grammar);
  ASSERT_TRUE(g.ok());
  int byte_nodes = 0;
  for (int32_t n = 0; n < (*g)->pda().num_nodes(); ++n) {
    byte_nodes += (*g)->pda().node(n).byte_begin != (*g)->pda().node(n).byte_end;
  }
  (*g)->PrecomputeTokenCaches(absl::InfiniteDuration());
  EXPECT_GT(byte_nodes, 300);
  EXPECT_LT((*g)->num_token_caches(), byte_nodes / 4);
  Matcher m(*g);
  std::vector<uint32_t> mask((*g)->vocab().mask_words());
  std::mt19937_64 rng(5);
  for (int step = 0; step < 120 && !m.IsTerminated(); ++step) {
    m.FillNextTokenBitmask(mask);
    ASSERT_EQ(mask, BruteForceMask(m)) << "step " << step;
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < (*g)->vocab().size(); ++id) {
      if (Allowed(mask, id) && id != kTestStopId && (*g)->vocab().token(id) != "\"") {
        allowed.push_back(id);
      }
    }
    if (allowed.empty()) break;
    ASSERT_TRUE(m.AcceptToken(allowed[rng() % allowed.size()]).ok());
  }
}

TEST(MatcherTest, StopTokenOnlyAtEndAndSpecialNever) {
  auto g = Compile(R"(root ::= "ab" "c"?)");
  Matcher m(g);
  std::vector<uint32_t> mask(g->vocab().mask_words());
  m.FillNextTokenBitmask(mask);
  EXPECT_FALSE(Allowed(mask, kTestStopId));
  EXPECT_FALSE(Allowed(mask, kTestSpecialId));
  EXPECT_FALSE(m.AcceptToken(kTestStopId).ok());
  ASSERT_TRUE(m.AcceptBytes("ab").ok());
  m.FillNextTokenBitmask(mask);
  EXPECT_TRUE(Allowed(mask, kTestStopId));
  EXPECT_TRUE(Allowed(mask, 'c'));
  EXPECT_FALSE(m.IsTerminated());
  ASSERT_TRUE(m.AcceptToken('c').ok());
  EXPECT_TRUE(m.IsTerminated());  // nothing may follow "abc"
  ASSERT_TRUE(m.Rollback(1).ok());
  ASSERT_TRUE(m.AcceptToken(kTestStopId).ok());
  EXPECT_TRUE(m.IsTerminated());
  EXPECT_EQ(m.AcceptToken('c').code(), absl::StatusCode::kFailedPrecondition);
  m.FillNextTokenBitmask(mask);
  EXPECT_EQ(mask, std::vector<uint32_t>(mask.size(), 0));
}

TEST(MatcherTest, RejectedTokenLeavesStateAndRollbackIsBounded) {
  auto g = Compile(R"(root ::= [a-c]+)");
  Matcher m(g, /*max_rollback=*/3);
  EXPECT_EQ(m.AcceptToken('z').code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.AcceptToken(-1).code(), absl::StatusCode::kInvalidArgument);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(m.AcceptToken('a').ok());
  EXPECT_FALSE(m.Rollback(4).ok());
  EXPECT_TRUE(m.Rollback(3).ok());
  EXPECT_FALSE(m.Rollback(1).ok());
}

TEST(MatcherTest, DraftMasksMatchSequentialMasks) {
  auto g = Compile(R"(root ::= "[" [0-9]+ ("," [0-9]+)* "]")");
  const Vocabulary& vocab = g->vocab();
  const size_t words = vocab.mask_words();
  Matcher m(g);
  ASSERT_TRUE(m.AcceptToken('[').ok());
  const std::vector<int32_t> draft = {'1', ',', 'x', '2'};
  std::vector<uint32_t> rows((draft.size() + 1) * words);
  const int filled = m.FillNextTokenBitmasks(draft, rows);
  EXPECT_EQ(filled, 3);  // 'x' is rejected: masks before '1', before ',', before 'x'
  Matcher seq(g);
  ASSERT_TRUE(seq.AcceptToken('[').ok());
  std::vector<uint32_t> mask(words);
  for (int i = 0; i < filled; ++i) {
    seq.FillNextTokenBitmask(mask);
    EXPECT_EQ(std::vector<uint32_t>(rows.begin() + i * words, rows.begin() + (i + 1) * words),
              mask);
    if (i + 1 < filled) {
      ASSERT_TRUE(seq.AcceptToken(draft[i]).ok());
    }
  }
  m.FillNextTokenBitmask(mask);  // unchanged by the draft
  EXPECT_TRUE(Allowed(mask, '5'));
  EXPECT_FALSE(Allowed(mask, ']'));
}

}  // namespace
}  // namespace weir::grammar
