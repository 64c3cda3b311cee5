#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "base/status_macros.h"
#include "tokenizer/unicode.h"

namespace weir::tokenizer {
namespace {

constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

absl::StatusOr<SplitBehavior> ParseBehavior(const std::string& s) {
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  return absl::InvalidArgumentError("unsupported split behavior '" + s + "'");
}

struct Span {
  size_t begin, end;
  bool is_match;
};

// Turns match ranges into a covering list of spans, then applies `behavior`
// exactly as Hugging Face's NormalizedString::split does. Appends the kept,
// non-empty spans of `piece` to `out`.
void SplitByMatches(std::string_view piece, const std::vector<std::pair<size_t, size_t>>& m,
                    SplitBehavior behavior, bool invert, std::vector<std::string_view>& out) {
  std::vector<Span> spans;
  spans.reserve(m.size() * 2 + 1);
  size_t prev = 0;
  for (auto [b, e] : m) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != piece.size()) spans.push_back({prev, piece.size(), invert});

  std::vector<Span> kept;  // is_match reused as "remove"
  kept.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& s : spans) kept.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      kept = spans;
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().end = s.end;
        } else {
          kept.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Span& s : kept) {
    if (!s.is_match && s.end > s.begin) out.push_back(piece.substr(s.begin, s.end - s.begin));
  }
}

}  // namespace

struct PreTokenizer::Step {
  enum class Kind { kSplit, kByteLevel, kDigits } kind;
  std::unique_ptr<Regex> regex;  // kSplit with a Regex pattern; kByteLevel with use_regex
  std::string literal;           // kSplit with a String pattern
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // kByteLevel
  bool individual_digits = false;  // kDigits
};

PreTokenizer::~PreTokenizer() = default;

absl::StatusOr<std::unique_ptr<PreTokenizer>> PreTokenizer::FromJson(const Json& j) {
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  if (!j.is_null()) {
    RETURN_IF_ERROR(p->Add(j, 0));
  }
  return p;
}

absl::Status PreTokenizer::Add(const Json& j, int depth) {
  if (depth > 16) return absl::InvalidArgumentError("pre_tokenizer nesting too deep");
  ASSIGN_OR_RETURN(std::string type, GetType(j, "pre_tokenizer"));
  if (byte_level_) {
    return absl::InvalidArgumentError("unsupported pre_tokenizer '" + type +
                                      "' after ByteLevel (ByteLevel must be last)");
  }
  auto step = std::make_unique<Step>();
  if (type == "Sequence") {
    RETURN_IF_ERROR(CheckFields(j, {"type", "pretokenizers"}, "pre_tokenizer Sequence"));
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError("pre_tokenizer Sequence needs an array 'pretokenizers'");
    }
    for (const Json& child : *it) RETURN_IF_ERROR(Add(child, depth + 1));
    return absl::OkStatus();
  } else if (type == "Split") {
    RETURN_IF_ERROR(
        CheckFields(j, {"type", "pattern", "behavior", "invert"}, "pre_tokenizer Split"));
    step->kind = Step::Kind::kSplit;
    auto pat = j.find("pattern");
    if (pat == j.end() || !pat->is_object() || pat->size() != 1) {
      return absl::InvalidArgumentError("pre_tokenizer Split needs a pattern {Regex|String}");
    }
    if (pat->contains("Regex") && (*pat)["Regex"].is_string()) {
      ASSIGN_OR_RETURN(step->regex, Regex::Compile((*pat)["Regex"].get<std::string>()));
    } else if (pat->contains("String") && (*pat)["String"].is_string()) {
      step->literal = (*pat)["String"].get<std::string>();
      if (step->literal.empty()) {
        return absl::InvalidArgumentError("pre_tokenizer Split has an empty String pattern");
      }
    } else {
      return absl::InvalidArgumentError("pre_tokenizer Split: unsupported pattern " + pat->dump());
    }
    ASSIGN_OR_RETURN(std::string behavior, GetString(j, "behavior", "pre_tokenizer Split"));
    ASSIGN_OR_RETURN(step->behavior, ParseBehavior(behavior));
    ASSIGN_OR_RETURN(step->invert, GetBool(j, "invert", "pre_tokenizer Split", false));
  } else if (type == "ByteLevel") {
    RETURN_IF_ERROR(CheckFields(j, {"type", "add_prefix_space", "trim_offsets", "use_regex"},
                                "pre_tokenizer ByteLevel"));
    step->kind = Step::Kind::kByteLevel;
    ASSIGN_OR_RETURN(step->add_prefix_space,
                     GetBool(j, "add_prefix_space", "pre_tokenizer ByteLevel", true));
    ASSIGN_OR_RETURN(bool use_regex, GetBool(j, "use_regex", "pre_tokenizer ByteLevel", true));
    if (use_regex) {
      ASSIGN_OR_RETURN(step->regex, Regex::Compile(kGpt2Pattern));
    }
    byte_level_ = true;
  } else if (type == "Digits") {
    RETURN_IF_ERROR(CheckFields(j, {"type", "individual_digits"}, "pre_tokenizer Digits"));
    step->kind = Step::Kind::kDigits;
    ASSIGN_OR_RETURN(step->individual_digits,
                     GetBool(j, "individual_digits", "pre_tokenizer Digits", false));
  } else {
    return absl::InvalidArgumentError("unsupported pre_tokenizer type '" + type + "'");
  }
  steps_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status PreTokenizer::ApplyStep(const Step& step, std::string_view piece,
                                     std::vector<std::string_view>& out,
                                     std::deque<std::string>& arena,
                                     std::vector<std::pair<size_t, size_t>>& m) const {
  switch (step.kind) {
    case Step::Kind::kByteLevel:
      if (step.add_prefix_space && piece.front() != ' ') {
        arena.push_back(" " + std::string(piece));
        piece = arena.back();
      }
      if (step.regex == nullptr) {
        out.push_back(piece);
        return absl::OkStatus();
      }
      RETURN_IF_ERROR(step.regex->FindAll(piece, &m));
      SplitByMatches(piece, m, SplitBehavior::kIsolated, false, out);
      return absl::OkStatus();
    case Step::Kind::kSplit:
      if (step.regex != nullptr) {
        RETURN_IF_ERROR(step.regex->FindAll(piece, &m));
      } else {
        m.clear();
        for (size_t pos = piece.find(step.literal); pos != std::string_view::npos;
             pos = piece.find(step.literal, pos + step.literal.size())) {
          m.emplace_back(pos, pos + step.literal.size());
        }
      }
      SplitByMatches(piece, m, step.behavior, step.invert, out);
      return absl::OkStatus();
    case Step::Kind::kDigits:
      m.clear();
      for (size_t i = 0; i < piece.size();) {
        char32_t cp;
        const int n = DecodeUtf8(piece, i, &cp);
        if (IsNumeric(cp)) m.emplace_back(i, i + n);
        i += n;
      }
      SplitByMatches(piece, m,
                     step.individual_digits ? SplitBehavior::kIsolated
                                            : SplitBehavior::kContiguous,
                     false, out);
      return absl::OkStatus();
  }
  return absl::InternalError("unknown pre-tokenizer step");
}

absl::Status PreTokenizer::Apply(std::string_view text, std::vector<std::string_view>& pieces,
                                 std::deque<std::string>& arena) const {
  if (text.empty()) return absl::OkStatus();
  std::vector<std::string_view> cur{text}, next;
  std::vector<std::pair<size_t, size_t>> scratch;
  for (const auto& step : steps_) {
    next.clear();
    for (std::string_view piece : cur) {
      RETURN_IF_ERROR(ApplyStep(*step, piece, next, arena, scratch));
    }
    cur.swap(next);
  }
  pieces.insert(pieces.end(), cur.begin(), cur.end());
  return absl::OkStatus();
}

}  // namespace weir::tokenizer
