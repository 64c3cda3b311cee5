// tokenizer/bpe.h
//
// The BPE `model` of tokenizer.json: vocabulary, ranked merges, and the merge
// loop. The loop keeps symbols in a linked list and candidate merges in a
// binary heap (lowest rank first, then leftmost), so a word of n symbols
// costs O(n log n), not O(n^2). Results for words up to kMaxCachedWordBytes
// are cached.
//
// Thread safety: immutable after FromJson except for the internal cache,
// which is guarded by sharded mutexes; Encode is thread-safe.

#ifndef WEIR_TOKENIZER_BPE_H_
#define WEIR_TOKENIZER_BPE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "tokenizer/json_util.h"

namespace weir::tokenizer {

class Bpe {
 public:
  static constexpr size_t kMaxCachedWordBytes = 256;
  static constexpr size_t kCacheEntriesPerShard = 4096;

  // Builds the model from the `model` object of tokenizer.json. Supported
  // fields: vocab, merges ("a b" strings or [a, b] pairs), ignore_merges,
  // unk_token, fuse_unk, byte_fallback, and dropout /
  // continuing_subword_prefix / end_of_word_suffix only when null or empty.
  // INVALID_ARGUMENT naming the field, the merge or the token at fault.
  static absl::StatusOr<std::unique_ptr<Bpe>> FromJson(const Json& j);

  // Appends the ids of `word` to `ids`. With `byte_level`, `word` holds raw
  // bytes and each byte stands for its byte-level character; otherwise
  // `word` is UTF-8 text whose characters are looked up directly. Characters
  // missing from the vocabulary become byte-fallback tokens, the unknown
  // token, or nothing, in that order of availability (as in Hugging Face).
  void Encode(std::string_view word, bool byte_level, std::vector<int32_t>& ids) const;

  // Number of ids: one more than the largest id in the vocabulary.
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  // Returns the token string of `id`, or nullptr if no token has that id.
  const std::string* IdToToken(int32_t id) const;
  std::optional<int32_t> TokenToId(std::string_view token) const;

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  struct CacheShard {
    absl::Mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> map ABSL_GUARDED_BY(mu);
  };

  Bpe() = default;
  void InitialSymbols(std::string_view word, bool byte_level, std::vector<int32_t>& syms) const;
  void MergeSymbols(std::vector<int32_t>& syms) const;
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<std::string, int32_t> byte_vocab_;  // raw bytes -> id, byte-level tokens
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_present_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_ids_{};  // id of each byte's byte-level char, or -1
  std::array<int32_t, 256> fallback_ids_{};  // id of "<0xXX>", or -1
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  mutable std::array<CacheShard, 16> cache_;
};

}  // namespace weir::tokenizer

#endif  // WEIR_TOKENIZER_BPE_H_
