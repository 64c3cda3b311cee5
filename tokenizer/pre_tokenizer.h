// tokenizer/pre_tokenizer.h
//
// The `pre_tokenizer` of tokenizer.json: splits normalized text into pieces
// that the BPE model encodes independently. Supported: `Split` (Regex or
// String pattern, all five split behaviors, `invert`), `ByteLevel` (optional
// prefix space and the GPT-2 regex), `Digits` and `Sequence`. ByteLevel must
// come last: it only marks the pieces as raw bytes for the byte-level model
// instead of rewriting them into the byte alphabet.
//
// Thread safety: immutable after FromJson; Apply is thread-safe.

#ifndef WEIR_TOKENIZER_PRE_TOKENIZER_H_
#define WEIR_TOKENIZER_PRE_TOKENIZER_H_

#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"

namespace weir::tokenizer {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  // Builds the pre-tokenizer described by `j` (null means: the whole text is
  // one piece). INVALID_ARGUMENT naming the component, field or regex error.
  static absl::StatusOr<std::unique_ptr<PreTokenizer>> FromJson(const Json& j);
  ~PreTokenizer();

  // True if the chain ends in ByteLevel: pieces are byte strings for a
  // byte-level BPE model.
  bool byte_level() const { return byte_level_; }

  // Appends the non-empty pieces of `text` to `pieces`. Pieces point into
  // `text` or into strings appended to `arena` (which must outlive them).
  // REQUIRES: `text` is valid UTF-8.
  absl::Status Apply(std::string_view text, std::vector<std::string_view>& pieces,
                     std::deque<std::string>& arena) const;

 private:
  struct Step;
  PreTokenizer() = default;
  absl::Status Add(const Json& j, int depth);
  absl::Status ApplyStep(const Step& step, std::string_view piece,
                         std::vector<std::string_view>& out, std::deque<std::string>& arena,
                         std::vector<std::pair<size_t, size_t>>& scratch) const;

  std::vector<std::unique_ptr<Step>> steps_;
  bool byte_level_ = false;
};

}  // namespace weir::tokenizer

#endif  // WEIR_TOKENIZER_PRE_TOKENIZER_H_
