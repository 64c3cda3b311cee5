// grammar/schema_checker.h
//
// An independent JSON Schema validator for tests: it checks parsed documents
// against the keyword subset the front-end supports, written directly from
// the JSON Schema semantics (not from the grammar). Test-only.
//
// Thread safety: pure functions.

#ifndef WEIR_GRAMMAR_SCHEMA_CHECKER_H_
#define WEIR_GRAMMAR_SCHEMA_CHECKER_H_

#include <string>

#include "nlohmann/json.hpp"

namespace weir::grammar::testing {

// Returns "" if `value` satisfies `schema` (resolving local $ref against
// `root`), else a description of the first violation. With
// `strict_properties`, a missing additionalProperties means false in schemas
// that describe objects (type "object", properties or required).
std::string CheckSchema(const nlohmann::ordered_json& value, const nlohmann::ordered_json& schema,
                        const nlohmann::ordered_json& root, bool strict_properties);

}  // namespace weir::grammar::testing

#endif  // WEIR_GRAMMAR_SCHEMA_CHECKER_H_
