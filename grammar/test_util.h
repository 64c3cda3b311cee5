// grammar/test_util.h
//
// Test helpers: a deterministic byte-level test vocabulary, one-call grammar
// compilation, and random walks that sample allowed tokens until the matcher
// terminates.
//
// Thread safety: functions are thread-compatible; TestVocabulary() is shared.

#ifndef WEIR_GRAMMAR_TEST_UTIL_H_
#define WEIR_GRAMMAR_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "grammar/compiled_grammar.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"

namespace weir::grammar::testing {

// Token id of the stop token and of a special token in TestVocabulary().
inline constexpr int32_t kTestStopId = 256;
inline constexpr int32_t kTestSpecialId = 257;

// All 256 single bytes (ids 0..255), a stop and a special token, then a few
// thousand multi-byte tokens: JSON punctuation runs, words with quotes and
// spaces, digit runs, UTF-8 characters and split UTF-8 fragments.
std::shared_ptr<const Vocabulary> TestVocabulary();

// Compiles `grammar` to a PDA bound to `vocab`.
absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileForTest(
    const Grammar& grammar, std::shared_ptr<const Vocabulary> vocab = TestVocabulary());

// Samples allowed tokens (checking each mask is non-empty and each sampled
// token is accepted) until the matcher terminates; returns the bytes
// produced. After `soft_limit` tokens it prefers the stop token, then tokens
// that complete a match, then tokens with punctuation or newlines, so walks
// end. Errors: INTERNAL if the mask is empty before the end, a masked-in
// token is rejected, or `hard_limit` tokens pass.
absl::StatusOr<std::string> RandomWalk(Matcher& matcher, std::mt19937_64& rng, int soft_limit = 24,
                                       int hard_limit = 4000);

}  // namespace weir::grammar::testing

#endif  // WEIR_GRAMMAR_TEST_UTIL_H_
