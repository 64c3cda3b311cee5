// tokenizer/engram_vocab.h
//
// The Engram compressed vocabulary (spec model-v41.md §4.7 step 1): a
// surjective map from token ids to "compressed" ids under which tokens that
// differ only in case, accents, width or surrounding whitespace share an id.
//
// Key of token t: decode t alone (no special-token skipping, no cleanup). If
// the text contains U+FFFD the key is the raw token string. Otherwise the key
// is the text after NFKC -> NFD -> remove marks (category M) -> lowercase ->
// collapse runs of [ \t\r\n] to one space -> strip surrounding whitespace,
// where a text that is exactly one space after collapsing stays " "; an
// empty key falls back to the decoded text. Keys get compressed ids in order
// of first appearance over ids 0, 1, 2, ...
//
// Thread safety: pure functions; thread-safe.

#ifndef WEIR_TOKENIZER_ENGRAM_VOCAB_H_
#define WEIR_TOKENIZER_ENGRAM_VOCAB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace weir::tokenizer {

struct EngramVocab {
  std::vector<int32_t> compressed_id;  // [vocab_size]
  int32_t size = 0;                    // number of distinct compressed ids
};

// Returns the normalized key of `text` (the steps above, without the U+FFFD
// and empty fallbacks). REQUIRES: valid UTF-8.
absl::StatusOr<std::string> EngramNormalize(std::string_view text);

// Returns the key of token `id` under `tokenizer`, with both fallbacks.
absl::StatusOr<std::string> EngramKey(const Tokenizer& tokenizer, int32_t id);

// Returns the compressed vocabulary of `tokenizer` over ids [0, vocab_size).
absl::StatusOr<EngramVocab> BuildEngramVocab(const Tokenizer& tokenizer);

// The token map a model's Engram hashes through (ModelOptions::engram_token_map):
// `tokenizer`'s compressed ids when their count equals the model config's
// `engram_compressed_vocab_size`, else empty (the model then hashes raw ids,
// which it accepts only when that size equals its vocabulary). Errors only
// when the vocabulary cannot be built.
absl::StatusOr<std::vector<int64_t>> EngramTokenMap(const Tokenizer& tokenizer,
                                                    int64_t compressed_vocab_size);

}  // namespace weir::tokenizer

#endif  // WEIR_TOKENIZER_ENGRAM_VOCAB_H_
