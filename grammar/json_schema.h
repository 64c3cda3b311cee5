// grammar/json_schema.h
//
// JSON Schema front-end: converts a schema (JSON text) into a grammar whose
// strings are exactly the JSON documents the converter can guarantee valid.
//
// Supported keywords: type (string or list), properties, required,
// additionalProperties (bool or schema), enum, const, items, minItems,
// maxItems, anyOf, oneOf (compiled as anyOf, so its branches must be provably
// disjoint: by type, const/enum values or a required discriminator property;
// otherwise INVALID_ARGUMENT naming the branches), allOf with
// one branch, $ref to "#", "#/$defs/...", "#/definitions/..." (or any local
// JSON pointer; recursion allowed), string pattern (search semantics),
// minLength, maxLength, and minimum/maximum/exclusiveMinimum/exclusiveMaximum
// on integers (not on type number). Annotations are ignored: title, description,
// default, examples, $schema, $id, $comment, format, deprecated, readOnly,
// writeOnly. Any other keyword is rejected with INVALID_ARGUMENT naming it
// and its location. Properties are emitted in declaration order.
//
// Thread safety: pure functions.

#ifndef WEIR_GRAMMAR_JSON_SCHEMA_H_
#define WEIR_GRAMMAR_JSON_SCHEMA_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "grammar/grammar.h"
#include "grammar/json_rules.h"

namespace weir::grammar {

struct JsonSchemaOptions {
  JsonWhitespace whitespace = JsonWhitespace::kCompact;
  // When a schema has no additionalProperties keyword, treat it as false
  // (only declared properties) instead of the standard true.
  bool strict_properties = true;
  GrammarLimits limits;
};

// Returns the grammar for `schema_json`. Errors (INVALID_ARGUMENT): malformed
// JSON, unsupported keywords (named with their JSON pointer), bad values
// (e.g. minItems > maxItems, unresolvable $ref), GRAMMAR_TOO_COMPLEX past
// the limits (huge enums, nesting deeper than limits.max_nesting).
absl::StatusOr<Grammar> JsonSchemaToGrammar(std::string_view schema_json,
                                            const JsonSchemaOptions& options = {});

// Returns the grammar of any JSON object (`object_only`) or any JSON value.
absl::StatusOr<Grammar> AnyJsonGrammar(bool object_only, const JsonSchemaOptions& options = {});

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_JSON_SCHEMA_H_
