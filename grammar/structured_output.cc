#include "grammar/structured_output.h"

#include <algorithm>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace weir::grammar {
namespace {

absl::Status Invalid(const std::string& why) {
  return absl::InvalidArgumentError("GRAMMAR_INVALID: constraint: " + why);
}

bool IsJsonWhitespacePattern(const std::string& p) {
  static const char* const kFlexible[] = {"[ \\t\\n\\r]*", "[ \\t\\r\\n]*", "[ \\n\\t\\r]*",
                                          "[\\t\\n\\r ]*", "[\\n\\t\\r ]*", "\\s*",
                                          "[\\s]*"};
  return std::find(std::begin(kFlexible), std::end(kFlexible), p) != std::end(kFlexible);
}

}  // namespace

const std::vector<std::string>& StructuredOutputKinds() {
  static const auto* kinds =
      new std::vector<std::string>{"json_schema", "json_object", "regex", "ebnf", "choice"};
  return *kinds;
}

bool HasConstraint(const v1::StructuredOutput& proto) {
  return proto.kind_case() != v1::StructuredOutput::KIND_NOT_SET;
}

absl::StatusOr<grammar::Constraint> ConstraintFromProto(const v1::StructuredOutput& proto) {
  grammar::Constraint c;
  switch (proto.kind_case()) {
    case v1::StructuredOutput::kJsonSchema:
      c.kind = grammar::ConstraintKind::kJsonSchema;
      c.text = proto.json_schema();
      break;
    case v1::StructuredOutput::kJsonObject:
      if (!proto.json_object()) return Invalid("json_object must be true when set");
      c.kind = grammar::ConstraintKind::kJsonObject;
      break;
    case v1::StructuredOutput::kRegex:
      c.kind = grammar::ConstraintKind::kRegex;
      c.text = proto.regex();
      break;
    case v1::StructuredOutput::kEbnf:
      c.kind = grammar::ConstraintKind::kEbnf;
      c.text = proto.ebnf();
      break;
    case v1::StructuredOutput::kChoice:
      c.kind = grammar::ConstraintKind::kChoice;
      c.choices.assign(proto.choice().choices().begin(), proto.choice().choices().end());
      break;
    default:
      return Invalid("no kind set");
  }
  if (proto.has_whitespace_pattern() && !proto.whitespace_pattern().empty()) {
    if (!IsJsonWhitespacePattern(proto.whitespace_pattern())) {
      return Invalid("whitespace_pattern: only JSON whitespace (\"[ \\t\\n\\r]*\") or \"\" "
                     "is supported");
    }
    c.whitespace = grammar::JsonWhitespace::kFlexible;
  }
  return c;
}

absl::Status GrammarError(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return status;
  const std::string message(status.message());
  if (absl::StrContains(message, "GRAMMAR_")) return status;
  return absl::InvalidArgumentError("GRAMMAR_INVALID: " + message);
}

absl::StatusOr<std::shared_ptr<const grammar::Vocabulary>> BuildGrammarVocabulary(
    const tokenizer::Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> eos_ids) {
  if (vocab_size < 1 || vocab_size > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("grammar vocabulary: size ", vocab_size));
  }
  if (tokenizer.eos_id().has_value()) eos_ids.push_back(*tokenizer.eos_id());
  std::sort(eos_ids.begin(), eos_ids.end());
  eos_ids.erase(std::unique(eos_ids.begin(), eos_ids.end()), eos_ids.end());
  std::vector<int32_t> stop;
  for (int32_t id : eos_ids) {
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("grammar vocabulary: eos ", id));
    if (id < vocab_size) stop.push_back(id);
  }
  std::vector<std::string> tokens(vocab_size);
  std::vector<int32_t> special;
  for (int32_t id = 0; id < vocab_size; ++id) {
    if (std::binary_search(stop.begin(), stop.end(), id)) continue;
    if (tokenizer.IsSpecial(id)) {
      special.push_back(id);
      continue;
    }
    if (const std::string* bytes = tokenizer.DecodedBytes(id)) tokens[id] = *bytes;
  }
  return grammar::Vocabulary::Create(std::move(tokens), std::move(stop), std::move(special));
}

}  // namespace weir::grammar
