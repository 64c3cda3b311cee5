// grammar/matcher.h
//
// Matcher tracks one sequence's position in a compiled grammar and produces
// the next-token bitmask over the vocabulary.
//
// Thread safety: not thread-safe; one Matcher per sequence, used by one
// thread at a time. Many matchers may share one CompiledGrammar. A copy is
// an independent matcher at the same position (forking a sequence).

#ifndef WEIR_GRAMMAR_MATCHER_H_
#define WEIR_GRAMMAR_MATCHER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "grammar/compiled_grammar.h"
#include "grammar/stack_dfa.h"

namespace weir::grammar {

// Per-sequence grammar state with bounded rollback for speculative decoding.
//
//   Matcher m(grammar);
//   std::vector<uint32_t> mask(grammar->vocab().mask_words());
//   m.FillNextTokenBitmask(mask);   // apply to logits, sample `token`
//   RETURN_IF_ERROR(m.AcceptToken(token));
//   if (m.IsTerminated()) ...       // finish the request
class Matcher {
 public:
  // `grammar` is shared with the compile cache and other sequences.
  // `max_rollback` is the number of accepted tokens Rollback can undo
  // (nextn + 2 for speculative decoding).
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar, int max_rollback = 7);

  // Advances by one token. A stop token is accepted only where the grammar
  // can end, and terminates the matcher. On error the state is unchanged.
  // Errors: INVALID_ARGUMENT if the token is out of range, special, or not
  // allowed here; FAILED_PRECONDITION if already terminated.
  absl::Status AcceptToken(int32_t token_id);

  // Advances by raw bytes (counts as one step for Rollback). Same errors.
  absl::Status AcceptBytes(std::string_view bytes);

  // Writes the allowed next tokens into `mask` [vocab().mask_words()], bit
  // (id % 32) of word (id / 32). All zero once terminated.
  // REQUIRES: mask.size() >= vocab().mask_words().
  void FillNextTokenBitmask(std::span<uint32_t> mask);

  // Masks for consecutive positions of a draft ("by step"): row i
  // [mask_words] is the mask after accepting draft[0..i). Stops after the
  // first draft token the grammar rejects (its row is still filled). Leaves
  // the matcher unchanged. Returns the number of rows filled (1..n+1).
  // REQUIRES: masks.size() >= (draft.size() + 1) * mask_words and
  // draft.size() <= max_rollback.
  int FillNextTokenBitmasks(std::span<const int32_t> draft, std::span<uint32_t> masks);

  // Undoes the last `k` accepted tokens. Errors: INVALID_ARGUMENT if k < 0 or
  // k exceeds the tokens still held (at most max_rollback).
  absl::Status Rollback(int k);

  // True after a stop token, or when the grammar has ended and nothing may
  // follow; the sequence should finish (GRAMMAR_TERMINATED or EOS).
  bool IsTerminated() const;
  // True if the input so far is a complete match (a stop token is allowed).
  bool CanTerminate() const;

  // Returns to the start of the grammar and clears the history.
  void Reset();

  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  struct Step {
    FrameSet frames;
    bool terminated = false;
  };
  absl::StatusOr<FrameSet> Advance(std::string_view bytes);
  void Push(Step next);
  // ORs into `mask` the uncertain tokens of `f`'s node that the real stack accepts.
  void CheckUncertain(const Frame& f, const NodeTokenCache& cache, uint32_t* mask);

  std::shared_ptr<const CompiledGrammar> grammar_;
  int max_rollback_;
  mutable StackDfa dfa_;  // a memo: const queries may fill it
  Step current_;
  std::deque<Step> history_;             // oldest first; at most max_rollback_
  std::vector<StackDfa::StateId> walk_;  // scratch for CheckUncertain
};

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_MATCHER_H_
