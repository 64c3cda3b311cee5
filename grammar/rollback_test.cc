// grammar/rollback_test.cc
//
// Property: any sequence of accepts and rollbacks leaves the matcher in the
// same state (same next-token mask, same termination flags) as a fresh
// matcher that replays only the tokens that were kept.

#include <algorithm>
#include <random>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/json_schema_corpus.h"
#include "grammar/matcher.h"
#include "grammar/test_util.h"
#include "gtest/gtest.h"

namespace weir::grammar {
namespace {

std::vector<int32_t> AllowedTokens(Matcher& m) {
  const Vocabulary& vocab = m.grammar().vocab();
  std::vector<uint32_t> mask(vocab.mask_words());
  m.FillNextTokenBitmask(mask);
  std::vector<int32_t> out;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    if (mask[id >> 5] >> (id & 31) & 1) out.push_back(id);
  }
  return out;
}

void CheckSameState(Matcher& actual, const std::vector<int32_t>& kept,
                    const std::shared_ptr<const CompiledGrammar>& grammar) {
  Matcher replay(grammar);
  for (int32_t t : kept) ASSERT_TRUE(replay.AcceptToken(t).ok());
  ASSERT_EQ(AllowedTokens(actual), AllowedTokens(replay));
  ASSERT_EQ(actual.IsTerminated(), replay.IsTerminated());
  ASSERT_EQ(actual.CanTerminate(), replay.CanTerminate());
}

TEST(RollbackTest, RandomAcceptRollbackEqualsReplay) {
  constexpr int kMaxRollback = 7;
  const std::vector<std::string> schemas = {"order", "tree", "nullable_fields", "tool_call"};
  uint64_t seed = 11;
  int tested = 0;
  for (const CorpusSchema& entry : JsonSchemaCorpus()) {
    if (std::find(schemas.begin(), schemas.end(), entry.name) == schemas.end()) continue;
    auto grammar = JsonSchemaToGrammar(entry.schema);
    ASSERT_TRUE(grammar.ok());
    auto compiled = testing::CompileForTest(*grammar);
    ASSERT_TRUE(compiled.ok());
    std::mt19937_64 rng(seed++);
    ++tested;
    for (int run = 0; run < 8; ++run) {
      Matcher m(*compiled, kMaxRollback);
      std::vector<int32_t> kept;
      int since_check = 0, held = 0;  // held: tokens Rollback may still undo
      for (int op = 0; op < 60 && !m.IsTerminated(); ++op) {
        if (rng() % 3 == 0 && held > 0) {
          const int k = 1 + static_cast<int>(rng() % held);
          ASSERT_TRUE(m.Rollback(k).ok());
          kept.resize(kept.size() - k);
          held -= k;
        } else {
          const std::vector<int32_t> allowed = AllowedTokens(m);
          ASSERT_FALSE(allowed.empty());
          const int32_t t = allowed[rng() % allowed.size()];
          ASSERT_TRUE(m.AcceptToken(t).ok());
          kept.push_back(t);
          held = std::min(held + 1, kMaxRollback);
        }
        if (++since_check % 4 == 0) CheckSameState(m, kept, *compiled);
      }
      CheckSameState(m, kept, *compiled);
      EXPECT_EQ(m.Rollback(held + 1).code(), absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_EQ(tested, static_cast<int>(schemas.size()));
}

}  // namespace
}  // namespace weir::grammar
