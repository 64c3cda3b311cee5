// grammar/matcher.cc

#include "grammar/matcher.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace weir::grammar {
namespace {

// Bounds the matcher's memoized DFA (each state may hold a 1 KiB table), so
// a matcher's memo stays under about 1.5 MiB.
constexpr int32_t kMaxMemoStates = 1024;

}  // namespace

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar, int max_rollback)
    : grammar_(std::move(grammar)), max_rollback_(max_rollback), dfa_(grammar_->pda()) {
  Reset();
}

void Matcher::Reset() {
  current_ = Step{FrameSet{Frame{grammar_->pda().root_start(), kRootStack}}, false};
  history_.clear();
}

absl::StatusOr<FrameSet> Matcher::Advance(std::string_view bytes) {
  dfa_.TrimMemo(kMaxMemoStates);
  StackDfa::StateId s = dfa_.Intern(current_.frames);
  for (char c : bytes) {
    s = dfa_.Next(s, static_cast<uint8_t>(c));
    if (s == StackDfa::kDead) return absl::InvalidArgumentError("bytes not allowed by the grammar");
  }
  return dfa_.Frames(s);
}

void Matcher::Push(Step next) {
  history_.push_back(std::move(current_));
  if (static_cast<int>(history_.size()) > max_rollback_) history_.pop_front();
  current_ = std::move(next);
}

absl::Status Matcher::AcceptToken(int32_t token_id) {
  if (current_.terminated) return absl::FailedPreconditionError("matcher already terminated");
  const Vocabulary& vocab = grammar_->vocab();
  if (token_id < 0 || token_id >= vocab.size()) {
    return absl::InvalidArgumentError(absl::StrCat("token id ", token_id, " out of range"));
  }
  if (vocab.is_stop(token_id)) {
    if (!CanTerminate()) {
      return absl::InvalidArgumentError("stop token before the grammar can end");
    }
    Push(Step{current_.frames, true});
    return absl::OkStatus();
  }
  if (vocab.is_special(token_id) || vocab.token(token_id).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token ", token_id, " is never allowed"));
  }
  auto next = Advance(vocab.token(token_id));
  if (!next.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("token ", token_id, " not allowed here"));
  }
  Push(Step{*std::move(next), false});
  return absl::OkStatus();
}

absl::Status Matcher::AcceptBytes(std::string_view bytes) {
  if (current_.terminated) return absl::FailedPreconditionError("matcher already terminated");
  auto next = Advance(bytes);
  if (!next.ok()) return next.status();
  Push(Step{*std::move(next), false});
  return absl::OkStatus();
}

absl::Status Matcher::Rollback(int k) {
  if (k < 0 || k > static_cast<int>(history_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot roll back ", k, " tokens; ", history_.size(), " held"));
  }
  for (int i = 0; i < k; ++i) {
    current_ = std::move(history_.back());
    history_.pop_back();
  }
  return absl::OkStatus();
}

bool Matcher::CanTerminate() const { return dfa_.CanFinish(dfa_.Intern(current_.frames)); }

bool Matcher::IsTerminated() const {
  if (current_.terminated) return true;
  const StackDfa::StateId s = dfa_.Intern(current_.frames);
  return dfa_.CanFinish(s) && dfa_.AtEnd(s);
}

void Matcher::CheckUncertain(const Frame& f, const NodeTokenCache& cache, uint32_t* mask) {
  const Vocabulary& vocab = grammar_->vocab();
  const std::vector<int32_t>& sorted = vocab.sorted_ids();
  walk_.assign(1, dfa_.Intern(FrameSet{f}));
  std::string_view prev;
  for (int32_t k : cache.uncertain) {
    const int32_t id = sorted[k];
    if (mask[id >> 5] & (1u << (id & 31))) continue;
    const std::string_view t = vocab.token(id);
    size_t d = 0;  // reuse the walk over the common prefix with the last token
    const size_t limit = std::min({prev.size(), t.size(), walk_.size() - 1});
    while (d < limit && prev[d] == t[d]) ++d;
    walk_.resize(d + 1);
    StackDfa::StateId s = walk_[d];
    for (; d < t.size(); ++d) {
      s = dfa_.Next(s, static_cast<uint8_t>(t[d]));
      if (s == StackDfa::kDead) break;
      walk_.push_back(s);
    }
    prev = t;
    if (d == t.size()) mask[id >> 5] |= 1u << (id & 31);
  }
}

void Matcher::FillNextTokenBitmask(std::span<uint32_t> mask) {
  const Vocabulary& vocab = grammar_->vocab();
  std::fill(mask.begin(), mask.begin() + vocab.mask_words(), 0u);
  if (current_.terminated) return;
  dfa_.TrimMemo(kMaxMemoStates);
  // Copied: CheckUncertain may add states, which may move the state table.
  const FrameSet ready = dfa_.Ready(dfa_.Intern(current_.frames));
  for (const Frame& f : ready) {
    const NodeTokenCache& cache = grammar_->TokenCache(f.node);
    cache.OrAccepted(mask.data());
    if (!cache.uncertain.empty()) CheckUncertain(f, cache, mask.data());
  }
  if (CanTerminate()) {
    for (int32_t id : vocab.stop_token_ids()) mask[id >> 5] |= 1u << (id & 31);
  }
}

int Matcher::FillNextTokenBitmasks(std::span<const int32_t> draft, std::span<uint32_t> masks) {
  const size_t words = grammar_->vocab().mask_words();
  int rows = 0, accepted = 0;
  for (size_t i = 0; i <= draft.size(); ++i) {
    FillNextTokenBitmask(masks.subspan(i * words, words));
    ++rows;
    if (i == draft.size() || !AcceptToken(draft[i]).ok()) break;
    ++accepted;
  }
  // Cannot fail: exactly `accepted` steps were pushed and accepted <= max_rollback.
  Rollback(accepted).IgnoreError();
  return rows;
}

}  // namespace weir::grammar
