// grammar/structured_output.h
//
// The bridge between the public StructuredOutput message and the grammar
// engine: the proto -> grammar::Constraint conversion and the grammar
// vocabulary of a served model (token id -> bytes from its tokenizer). The
// coordinator uses both to reject bad constraints before admission; the
// worker to compile the constraints it applies while sampling.
//
// Thread safety: pure functions.

#ifndef WEIR_GRAMMAR_STRUCTURED_OUTPUT_H_
#define WEIR_GRAMMAR_STRUCTURED_OUTPUT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grammar/constraint.h"
#include "grammar/vocabulary.h"
#include "proto/inference.pb.h"
#include "tokenizer/tokenizer.h"

namespace weir::grammar {

// The kinds ConstraintFromProto accepts, as ModelInfo.features names them.
const std::vector<std::string>& StructuredOutputKinds();

// True if `proto` asks for a constraint (a kind is set).
bool HasConstraint(const v1::StructuredOutput& proto);

// Converts `proto`. whitespace_pattern: unset or "" = compact JSON; a
// pattern of JSON whitespace ("[ \t\n\r]*", "\s*" and equivalents) =
// flexible. Errors: INVALID_ARGUMENT ("GRAMMAR_INVALID: ...") for no kind,
// json_object = false, or another whitespace pattern.
absl::StatusOr<grammar::Constraint> ConstraintFromProto(const v1::StructuredOutput& proto);

// Prefixes a front-end error with GRAMMAR_INVALID unless it already names
// its reason (GRAMMAR_TOO_COMPLEX); other codes are returned unchanged.
absl::Status GrammarError(const absl::Status& status);

// The grammar vocabulary of a model with `vocab_size` ids: token i is the
// bytes the tokenizer decodes it to (ids it does not know: no bytes, never
// allowed); its special tokens are never allowed, except `eos_ids` (and the
// tokenizer's EOS), which are allowed only where the grammar may end.
// Errors: INVALID_ARGUMENT if vocab_size < 1 or an eos id is out of range.
absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> BuildGrammarVocabulary(
    const tokenizer::Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> eos_ids);

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_STRUCTURED_OUTPUT_H_
