// grammar/choice_list.cc
//
// ChoicesToGrammar (declared in regex_parser.h): an alternation of literals.

#include <utility>

#include "base/status_macros.h"
#include "grammar/regex_parser.h"

namespace weir::grammar {

absl::StatusOr<Grammar> ChoicesToGrammar(const std::vector<std::string>& choices,
                                         const GrammarLimits& limits) {
  if (choices.empty()) return absl::InvalidArgumentError("choice list is empty");
  Grammar g(limits);
  const RuleId root = g.DeclareRule("root");
  std::vector<ExprId> alts;
  for (const std::string& c : choices) {
    ASSIGN_OR_RETURN(ExprId lit, g.AddString(c));
    alts.push_back(lit);
  }
  ASSIGN_OR_RETURN(ExprId body, g.AddAlt(std::move(alts)));
  g.DefineRule(root, body);
  g.set_root(root);
  return g;
}

}  // namespace weir::grammar
