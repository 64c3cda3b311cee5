// grammar/vocabulary.h
//
// The model vocabulary as the grammar engine sees it: token id -> bytes, the
// stop tokens (allowed only where the grammar may end) and special tokens
// (never allowed), plus a byte trie of the ordinary tokens in preorder so that
// a walk checks each shared prefix once.
//
// Thread safety: immutable after Create; share one instance across threads.

#ifndef WEIR_GRAMMAR_VOCABULARY_H_
#define WEIR_GRAMMAR_VOCABULARY_H_

#include <bitset>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace weir::grammar {

// One trie node in preorder. The tokens of the subtree rooted here are
// sorted_ids()[token_begin, token_end); those equal to the node's prefix come
// first, ending at own_end.
struct TrieNode {
  uint8_t byte;         // the last byte of the prefix
  uint16_t depth;       // prefix length, >= 1
  int32_t subtree_end;  // preorder index after the subtree
  int32_t token_begin;
  int32_t own_end;
  int32_t token_end;
};

class Vocabulary {
 public:
  // Builds the vocabulary. `tokens[i]` are the bytes of token i. Tokens with
  // empty bytes, stop tokens and special tokens never appear in the trie.
  // Errors: INVALID_ARGUMENT for an out-of-range id or a token over 65535 bytes.
  static absl::StatusOr<std::shared_ptr<const Vocabulary>> Create(
      std::vector<std::string> tokens, std::vector<int32_t> stop_token_ids,
      std::vector<int32_t> special_token_ids);

  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  // Words in a next-token bitmask: bit (id % 32) of word (id / 32) is token id.
  int32_t mask_words() const { return (size() + 31) / 32; }
  std::string_view token(int32_t id) const { return tokens_[id]; }
  bool is_stop(int32_t id) const { return kind_[id] == kStop; }
  bool is_special(int32_t id) const { return kind_[id] == kSpecial; }
  const std::vector<int32_t>& stop_token_ids() const { return stop_ids_; }

  // Ordinary tokens sorted by bytes, and the trie over them in preorder.
  const std::vector<int32_t>& sorted_ids() const { return sorted_ids_; }
  const std::vector<TrieNode>& trie() const { return trie_; }
  // Per trie node: every byte that occurs below it (its descendants' bytes).
  // Lets a walk accept a whole subtree when the automaton loops on them.
  const std::vector<std::bitset<256>>& subtree_bytes() const { return subtree_bytes_; }
  // Length in bytes of the longest ordinary token (0 if none).
  int32_t max_token_bytes() const { return max_token_bytes_; }
  // Stable identity for cache keys (hash of all token bytes and kinds).
  uint64_t fingerprint() const { return fingerprint_; }
  int64_t MemoryBytes() const;

 private:
  enum Kind : uint8_t { kNormal, kStop, kSpecial };
  Vocabulary() = default;
  void BuildTrie();

  std::vector<std::string> tokens_;
  std::vector<Kind> kind_;
  std::vector<int32_t> stop_ids_;
  std::vector<int32_t> sorted_ids_;
  std::vector<TrieNode> trie_;
  std::vector<std::bitset<256>> subtree_bytes_;
  uint64_t fingerprint_ = 0;
  int32_t max_token_bytes_ = 0;
};

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_VOCABULARY_H_
