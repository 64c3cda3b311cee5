// tokenizer/normalizer.h
//
// The `normalizer` of tokenizer.json: Unicode normal forms (NFC, NFD, NFKC,
// NFKD), possibly nested in `Sequence`s. Other normalizer types fail the load.
//
// Thread safety: immutable after FromJson; Apply is thread-safe.

#ifndef WEIR_TOKENIZER_NORMALIZER_H_
#define WEIR_TOKENIZER_NORMALIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/json_util.h"
#include "tokenizer/unicode.h"

namespace weir::tokenizer {

class Normalizer {
 public:
  // Builds the normalizer described by `j` (null means identity).
  // INVALID_ARGUMENT naming the type or field if it is unsupported.
  static absl::StatusOr<std::unique_ptr<Normalizer>> FromJson(const Json& j);

  // True if Apply never changes its input.
  bool is_identity() const { return steps_.empty(); }

  // Returns the normalized `text`. REQUIRES: `text` is valid UTF-8.
  absl::StatusOr<std::string> Apply(std::string_view text) const;

 private:
  Normalizer() = default;
  absl::Status Add(const Json& j, int depth);

  std::vector<NormalForm> steps_;
};

}  // namespace weir::tokenizer

#endif  // WEIR_TOKENIZER_NORMALIZER_H_
