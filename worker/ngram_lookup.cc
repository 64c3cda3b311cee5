// worker/ngram_lookup.cc

#include "worker/ngram_lookup.h"

#include <algorithm>

namespace weir::worker {

void NgramIndex::Reset() {
  last_end_.clear();
  indexed_ = 0;
  n_ = 0;
  max_n_ = 0;
  prompt_size_ = -1;
}

// A 64-bit hash of the n tokens ending at `end` (inclusive).
uint64_t NgramIndex::HashAt(const History& h, int64_t end, int n) {
  uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(n);
  for (int64_t i = end - n + 1; i <= end; ++i) {
    x ^= static_cast<uint64_t>(h[i]) + 0x9e3779b97f4a7c15ull + (x << 6) + (x >> 2);
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 31;
  }
  return x;
}

void NgramIndex::Sync(const History& h, int n, int max_n) {
  // A prompt that grew once output was indexed (not how the executor fills
  // them), other lengths or a shorter history: start over.
  const auto prompt = static_cast<int64_t>(h.prompt.size());
  const bool moved =
      prompt_size_ >= 0 && prompt != prompt_size_ && indexed_ > std::min(prompt_size_, prompt);
  if (n != n_ || max_n != max_n_ || moved || indexed_ > h.size() - 1) Reset();
  n_ = n;
  max_n_ = max_n;
  last_end_.resize(max_n - n + 1);
  prompt_size_ = prompt;
}

void NgramIndex::IndexUpTo(const History& h, int64_t last_end) {
  // Every n-gram ending at last_end or before, the newest winning; the one
  // ending `window_` positions before each leaves, unless a newer occurrence
  // took its place.
  for (int64_t end = std::max<int64_t>(indexed_, n_ - 1); end <= last_end; ++end) {
    const int64_t old = end - window_;
    for (int n = n_; n <= max_n_ && n <= end + 1; ++n) {
      absl::flat_hash_map<uint64_t, int64_t>& map = last_end_[n - n_];
      map[HashAt(h, end, n)] = end;
      if (old >= n - 1) {
        const auto it = map.find(HashAt(h, old, n));
        if (it != map.end() && it->second == old) map.erase(it);
      }
    }
  }
  indexed_ = std::max(indexed_, last_end + 1);
}

int64_t NgramIndex::entries() const {
  int64_t total = 0;
  for (const auto& map : last_end_) total += static_cast<int64_t>(map.size());
  return total;
}

void NgramIndex::Index(std::span<const int32_t> prompt, std::span<const int32_t> output, int n,
                       int max_n) {
  max_n = std::max(n, max_n);
  if (n < 1 || max_n > kMaxNgramMatch) return;
  // The history with a stand-in last token, never read: the ends indexed
  // stop before it.
  const History h{prompt, output, 0};
  Sync(h, n, max_n);
  IndexUpTo(h, h.size() - 2);
}

float LookupDraftConfidence(int extent, int position) {
  // Logits of the measured rates (see the header).
  if (extent >= 6) return 3.2f;                        // every draft: 96 %
  if (position > 0) return extent <= 1 ? 1.2f : 1.6f;  // later drafts: 77 %, 83 - 85 %
  if (extent <= 1) return -0.7f;                       // the first: 33 %
  if (extent == 2) return 0.1f;                        // 52 %
  return 1.15f;                                        // 3 - 5 tokens: 75 - 78 %
}

std::vector<int64_t> NgramIndex::Propose(std::span<const int32_t> prompt,
                                         std::span<const int32_t> output, int64_t last, int n,
                                         int k, int max_n, int* extent) {
  std::vector<int64_t> out;
  max_n = std::max(n, max_n);
  if (n < 1 || max_n > kMaxNgramMatch || k < 1) return out;
  const History h{prompt, output, last};
  const int64_t size = h.size();
  Sync(h, n, max_n);
  if (size < n + 1) return out;
  IndexUpTo(h, size - 2);  // every n-gram ending before the last token
  // The longest length that matches proposes.
  for (int len = std::min<int64_t>(max_n, size - 1); len >= n; --len) {
    const auto it = last_end_[len - n].find(HashAt(h, size - 1, len));
    if (it == last_end_[len - n].end()) continue;
    const int64_t end = it->second;
    bool same = true;  // a hash collision proposes nothing at this length
    for (int i = 0; i < len && same; ++i) same = h[end - i] == h[size - 1 - i];
    if (!same) continue;
    // The tokens after the occurrence; where they run past the history, the
    // proposal repeats itself (an overlapping copy: a loop of period p < k
    // proposes k tokens of the loop).
    for (int64_t j = 0; j < k; ++j) {
      const int64_t from = end + 1 + j;
      out.push_back(from < size ? h[from] : out[from - size]);
    }
    if (extent != nullptr) {
      int reach = len;
      while (reach < kMaxNgramMatch && end - reach >= 0 && h[end - reach] == h[size - 1 - reach]) {
        ++reach;
      }
      *extent = reach;
    }
    return out;
  }
  return out;
}

}  // namespace weir::worker
