// worker/ngram_lookup.h
//
// Drafts from a sequence's own history ("prompt lookup", vLLM's `ngram`
// speculative method): when the last n tokens of a sequence occurred before
// in it, the tokens that followed them there are proposed as the next
// drafts. Greedy text repeats itself (names, phrases, code, a small model's
// loops), and there a match predicts several tokens for almost nothing: no
// forward pass, a hash probe on the host.
//
// NgramIndex keeps, for one sequence, the last end position of every n-gram
// of its history for each match length n it is asked for (a range
// [n, max_n]: the longest match is tried first, as vLLM's
// prompt_lookup_max .. prompt_lookup_min), indexed lazily up to the history's
// last-but-one token at each Propose. The history is the concatenation
// prompt ++ output ++ {last}, as the step executor keeps them (a slot's
// forwarded prompt, its accepted output, the token just sampled); it only
// grows, so the index never drops an entry (Reset starts over).
//
// Thread safety: a plain value (the step executor keeps one per slot).

#ifndef WEIR_WORKER_NGRAM_LOOKUP_H_
#define WEIR_WORKER_NGRAM_LOOKUP_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace weir::worker {

// The longest match length NgramIndex takes.
inline constexpr int kMaxNgramMatch = 16;

// How far back a lookup looks by default: the n-grams ending at the last
// this many positions before the newest. Older entries are dropped as the
// history grows, so an index holds at most this many entries a length
// (about 2 MiB a length at 32 bytes an entry) whatever the context.
inline constexpr int64_t kDefaultNgramWindow = int64_t{1} << 16;

// The confidence logit of draft `position` (0 = the first) of a lookup
// whose match reaches `extent` tokens (NgramIndex::Propose): sigmoid of it
// estimates P(that draft is accepted | the drafts before it were), what
// ChooseVerifyLength weighs against the cost curve. Measured on the trained
// tiny's greedy text (32 held-out prompts x 256 tokens, every lookup of
// match lengths 1, 3 and 4 .. 1 replayed; the estimates hardly moved with the
// lengths tried, 2026-12-05): the first draft of a 1-token match was accepted
// 33 % of the time, of 2 tokens 52 %, of 3 - 5 75 - 78 %, of 6 or more 96 %;
// the drafts after an accepted one 77 - 85 % below 6 tokens and 96 % from 6.
// Other models' text will differ; the estimates only steer how many drafts
// are verified, never what is emitted.
float LookupDraftConfidence(int extent, int position);

class NgramIndex {
 public:
  // `window`: how many of the latest end positions stay indexed (>= 1).
  explicit NgramIndex(int64_t window = kDefaultNgramWindow) : window_(window) {}

  // `k` tokens that followed the most recent earlier occurrence of the
  // history's last `n` tokens (history = prompt ++ output ++ {last}) that
  // ends within the window (at the last `window` positions before `last`),
  // in order; where they would run past the history's end, the proposal's own
  // tokens again (the match repeats with the period between the occurrence
  // and the end, as in an overlapping copy); empty when the
  // last n tokens occur nowhere before, the history is shorter than n + 1,
  // or n is not in [1, kMaxNgramMatch] or k < 1. With `max_n` > n, the
  // lengths max_n, max_n - 1, .. n are tried in turn and the first that
  // matches proposes (a longer match predicts better than a more recent
  // shorter one); max_n <= n: n alone; max_n above kMaxNgramMatch: nothing.
  // Indexes the history up to its last-but-one token first. Calls on one
  // index must use the same lengths and a history that extends the previous
  // one (else Reset first; other lengths or a different prompt length are
  // detected and the index rebuilt). `extent`, when given and a proposal is
  // made: how far the match really reaches, the tokens that agree going back
  // from the occurrence's end and the history's (at least the length that
  // matched, at most kMaxNgramMatch).
  std::vector<int64_t> Propose(std::span<const int32_t> prompt, std::span<const int32_t> output,
                               int64_t last, int n, int k, int max_n = 0, int* extent = nullptr);

  // Indexes the n-grams of prompt ++ output (every end position), so that a
  // later Propose over it plus a sample has only its last n-gram to add: the
  // step executor calls it after every speculative row it forwards (for a
  // prompt, its last chunk), so a long prompt is indexed beside its prefill
  // rather than in the draft step. Same rules for n and the history as
  // Propose.
  void Index(std::span<const int32_t> prompt, std::span<const int32_t> output, int n,
             int max_n = 0);

  // Forgets everything (a slot that starts a new sequence).
  void Reset();

  // End positions indexed so far (tests).
  int64_t indexed() const { return indexed_; }
  // Entries held, over every length (at most window x lengths).
  int64_t entries() const;

 private:
  // The history prompt ++ output ++ {last} without copying it.
  struct History {
    std::span<const int32_t> prompt;
    std::span<const int32_t> output;
    int64_t last;

    int64_t size() const {
      return static_cast<int64_t>(prompt.size()) + static_cast<int64_t>(output.size()) + 1;
    }
    int64_t operator[](int64_t i) const {
      const auto p = static_cast<int64_t>(prompt.size());
      if (i < p) return prompt[i];
      i -= p;
      if (i < static_cast<int64_t>(output.size())) return output[i];
      return last;
    }
  };
  static uint64_t HashAt(const History& h, int64_t end, int n);
  // Starts over unless `h` extends what was indexed with the same lengths.
  void Sync(const History& h, int n, int max_n);
  // Indexes the n-grams of every length ending at indexed_ .. last_end.
  void IndexUpTo(const History& h, int64_t last_end);

  // [n - n_]: an n-gram's hash -> its last end position.
  std::vector<absl::flat_hash_map<uint64_t, int64_t>> last_end_;
  int64_t window_;            // end positions kept (the latest)
  int64_t indexed_ = 0;       // end positions < indexed_ are in last_end_
  int n_ = 0;                 // the shortest match length of the index
  int max_n_ = 0;             // and the longest
  int64_t prompt_size_ = -1;  // the prompt's length when indexed
};

}  // namespace weir::worker

#endif  // WEIR_WORKER_NGRAM_LOOKUP_H_
