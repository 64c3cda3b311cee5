// grammar/pda_analysis.h
//
// Checks and cleanup run by Pda::Build after epsilon removal. Internal to
// the PDA builder.
//
// Thread safety: pure functions over their arguments.

#ifndef WEIR_GRAMMAR_PDA_ANALYSIS_H_
#define WEIR_GRAMMAR_PDA_ANALYSIS_H_

#include "absl/status/status.h"
#include "grammar/grammar.h"
#include "grammar/pda.h"

namespace weir::grammar {

// Returns INVALID_ARGUMENT naming a rule that can call itself before
// consuming a byte (directly or through nullable prefixes).
absl::Status CheckLeftRecursion(const Grammar& g, const Pda& pda);

// Removes edges into nodes and rules that can never finish, marks tail-call
// nodes, and drops unproductive rules (rule_start -1). Returns
// INVALID_ARGUMENT if the root matches no string, GRAMMAR_TOO_COMPLEX past
// limits.max_edges.
absl::Status TrimDeadEnds(const Grammar& g, const PdaLimits& limits, Pda& pda);

}  // namespace weir::grammar

#endif  // WEIR_GRAMMAR_PDA_ANALYSIS_H_
