// grammar/vocabulary.cc

#include "grammar/vocabulary.h"

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace weir::grammar {

absl::StatusOr<std::shared_ptr<const Vocabulary>> Vocabulary::Create(
    std::vector<std::string> tokens, std::vector<int32_t> stop_token_ids,
    std::vector<int32_t> special_token_ids) {
  auto vocab = std::shared_ptr<Vocabulary>(new Vocabulary());
  vocab->kind_.assign(tokens.size(), kNormal);
  for (const std::string& t : tokens) {
    if (t.size() > 65535) return absl::InvalidArgumentError("token longer than 65535 bytes");
  }
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int32_t id : special_token_ids) {
    if (id < 0 || id >= n) return absl::InvalidArgumentError(absl::StrCat("bad special id ", id));
    vocab->kind_[id] = kSpecial;
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= n) return absl::InvalidArgumentError(absl::StrCat("bad stop id ", id));
    vocab->kind_[id] = kStop;
  }
  std::sort(stop_token_ids.begin(), stop_token_ids.end());
  stop_token_ids.erase(std::unique(stop_token_ids.begin(), stop_token_ids.end()),
                       stop_token_ids.end());
  vocab->stop_ids_ = std::move(stop_token_ids);
  vocab->tokens_ = std::move(tokens);
  size_t h = absl::HashOf(vocab->tokens_.size());
  for (int64_t i = 0; i < n; ++i) h = absl::HashOf(h, vocab->tokens_[i], int(vocab->kind_[i]));
  vocab->fingerprint_ = h;
  vocab->BuildTrie();
  return std::shared_ptr<const Vocabulary>(std::move(vocab));
}

void Vocabulary::BuildTrie() {
  for (int32_t id = 0; id < size(); ++id) {
    if (kind_[id] == kNormal && !tokens_[id].empty()) sorted_ids_.push_back(id);
  }
  std::stable_sort(sorted_ids_.begin(), sorted_ids_.end(),
                   [this](int32_t a, int32_t b) { return tokens_[a] < tokens_[b]; });
  // Preorder: walk the sorted list; each token opens nodes for its bytes past
  // the common prefix with the previous token. Open nodes are closed (their
  // subtree_end/token_end fixed) when a later token diverges above them.
  std::vector<int32_t> open;  // open[d-1] = node index at depth d
  std::vector<int32_t> parent;
  const int32_t n = static_cast<int32_t>(sorted_ids_.size());
  auto close_to = [&](size_t depth, int32_t token_index) {
    while (open.size() > depth) {
      trie_[open.back()].subtree_end = static_cast<int32_t>(trie_.size());
      trie_[open.back()].token_end = token_index;
      open.pop_back();
    }
  };
  std::string_view prev;
  for (int32_t k = 0; k < n; ++k) {
    std::string_view t = tokens_[sorted_ids_[k]];
    size_t lcp = 0;
    while (lcp < prev.size() && lcp < t.size() && prev[lcp] == t[lcp]) ++lcp;
    close_to(lcp, k);
    for (size_t d = lcp; d < t.size(); ++d) {
      parent.push_back(open.empty() ? -1 : open.back());
      open.push_back(static_cast<int32_t>(trie_.size()));
      trie_.push_back(
          TrieNode{static_cast<uint8_t>(t[d]), static_cast<uint16_t>(d + 1), 0, k, k, 0});
    }
    // Token k ends at the deepest open node (duplicates extend own_end).
    trie_[open.back()].own_end = k + 1;
    prev = t;
  }
  close_to(0, n);
  for (const TrieNode& t : trie_) max_token_bytes_ = std::max<int32_t>(max_token_bytes_, t.depth);
  subtree_bytes_.assign(trie_.size(), {});
  for (size_t j = trie_.size(); j-- > 0;) {
    if (parent[j] < 0) continue;
    subtree_bytes_[parent[j]] |= subtree_bytes_[j];
    subtree_bytes_[parent[j]].set(trie_[j].byte);
  }
}

int64_t Vocabulary::MemoryBytes() const {
  int64_t bytes = static_cast<int64_t>(trie_.size() * (sizeof(TrieNode) + 32) +
                                       sorted_ids_.size() * 4 + kind_.size());
  for (const std::string& t : tokens_) bytes += static_cast<int64_t>(t.capacity() + sizeof(t));
  return bytes;
}

}  // namespace weir::grammar
