// tokenizer/added_vocabulary.h
//
// Added and special tokens of tokenizer.json ("added_tokens"). They are found
// in the text before pre-tokenization: tokens with normalized=false in the
// raw text, tokens with normalized=true in the normalized text. Matching is
// leftmost-longest and non-overlapping; `single_word` discards matches glued
// to word characters, `lstrip` / `rstrip` absorb neighbouring whitespace.
//
// Thread safety: immutable after Create; all methods are thread-safe.

#ifndef WEIR_TOKENIZER_ADDED_VOCABULARY_H_
#define WEIR_TOKENIZER_ADDED_VOCABULARY_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"

namespace weir::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// A piece of text: an added token (id >= 0) or plain text (id == -1), as the
// byte range [begin, end) of the string that was split.
struct Segment {
  size_t begin;
  size_t end;
  int32_t id;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;

  // Parses the "added_tokens" array. Patterns of normalized tokens are
  // normalized with `normalizer`. INVALID_ARGUMENT on a malformed entry, an
  // empty or non-UTF-8 content, or two tokens with the same id.
  static absl::StatusOr<AddedVocabulary> FromJson(const Json& j, const Normalizer& normalizer);

  // Replaces `out` with segments covering all of `text`, matching the
  // normalized (`normalized_set`) or the raw token set. REQUIRES: valid UTF-8.
  void Split(std::string_view text, bool normalized_set, std::vector<Segment>& out) const;

  // Returns the token with `id`, or nullptr.
  const AddedToken* Find(int32_t id) const;
  // Returns the id of the token whose content is `content`, or -1.
  int32_t FindContent(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  struct Matcher {
    std::vector<std::pair<std::string, int32_t>> patterns;  // (pattern, token index)
    std::array<std::vector<int32_t>, 256> by_first_byte;    // pattern indices, longest first
    bool empty() const { return patterns.empty(); }
    void Build();
  };

  std::vector<AddedToken> tokens_;
  absl::flat_hash_map<int32_t, int32_t> by_id_;  // id -> index in tokens_
  Matcher raw_;
  Matcher normalized_;
};

}  // namespace weir::tokenizer

#endif  // WEIR_TOKENIZER_ADDED_VOCABULARY_H_
