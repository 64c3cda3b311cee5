// tokenizer/regex.h
//
// A compiled pre-tokenizer regex (PCRE2 with JIT). Patterns are written for
// Oniguruma, the engine of Hugging Face `tokenizers`; Compile translates the
// few constructs whose meaning differs (`\s` also matches U+0085 there,
// `\uHHHH` escapes) so that matches are identical on the patterns used by
// GPT-2 and DeepSeek tokenizers.
//
// Thread safety: a compiled Regex is immutable; FindAll is thread-safe.

#ifndef WEIR_TOKENIZER_REGEX_H_
#define WEIR_TOKENIZER_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::tokenizer {

class Regex {
 public:
  // Compiles an Oniguruma-syntax `pattern` (UTF-8, Unicode classes).
  // INVALID_ARGUMENT with the compiler's message and offset if it does not
  // compile or uses an unsupported construct.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);

  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Replaces `*matches` with the [begin, end) byte ranges of successive
  // non-overlapping leftmost matches in `text`. An empty match directly after
  // the previous match is skipped. INTERNAL if the matcher fails (e.g. its
  // stack limit on pathological input).
  // REQUIRES: `text` is valid UTF-8.
  absl::Status FindAll(std::string_view text,
                       std::vector<std::pair<size_t, size_t>>* matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex(std::string pattern, void* code) : pattern_(std::move(pattern)), code_(code) {}

  std::string pattern_;
  void* code_;  // pcre2_code_8*
};

// Returns `pattern` rewritten from Oniguruma to PCRE2 syntax (exposed for
// tests). INVALID_ARGUMENT for constructs it cannot translate.
absl::StatusOr<std::string> TranslateOnigPattern(std::string_view pattern);

}  // namespace weir::tokenizer

#endif  // WEIR_TOKENIZER_REGEX_H_
