#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "tokenizer/unicode.h"

namespace weir::tokenizer {
namespace {

// Oniguruma's \s: the White_Space property (stable since Unicode 6.3). PCRE2's
// \s lacks U+0085 and has U+180E (White_Space before 6.3).
constexpr char kWhiteSpace[] =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

bool IsHex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Releases per-call PCRE2 match data.
struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

// Translates `\p{X}` / `\P{X}` at p[i] when X is a general category name, so
// that it means the category of unicode.h's tables (Unicode 16.0) rather than
// PCRE2's own, older ones; advances `i` to the closing brace. Returns false
// (nothing consumed) for other names, e.g. scripts, and for \P{X} inside a
// class when X gained code points (a class cannot subtract them: PCRE2's
// table is used there).
bool TranslateCategory(std::string_view p, size_t& i, bool in_class, std::string& out) {
  const size_t close = p.find('}', i + 3);
  if (close == std::string_view::npos) return false;
  const std::string_view name = p.substr(i + 3, close - (i + 3));
  const std::optional<RegexCategoryClass> cls = RegexCategory(name);
  if (!cls) return false;
  const bool negated = p[i + 1] == 'P';
  const std::string own = std::string(negated ? "\\P{" : "\\p{") + std::string(name) + "}";
  if (cls->items.empty()) {
    out += own;
  } else if (in_class) {
    if (negated) return false;
    if (!cls->full) out += own;
    out.append(cls->items);
  } else {
    out += negated ? "[^" : "[";
    if (!cls->full) out += "\\p{" + std::string(name) + "}";
    out.append(cls->items);
    out += "]";
  }
  i = close;
  return true;
}

}  // namespace

absl::StatusOr<std::string> TranslateOnigPattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) return absl::InvalidArgumentError("regex ends with a backslash");
      const char e = p[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : absl::StrCat("[", kWhiteSpace, "]");
      } else if (e == 'S') {
        if (in_class) {
          return absl::InvalidArgumentError(
              absl::StrCat("unsupported regex construct \\S inside a class in: ", std::string(p)));
        }
        out += absl::StrCat("[^", kWhiteSpace, "]");
      } else if ((e == 'p' || e == 'P') && i + 2 < p.size() && p[i + 2] == '{' &&
                 TranslateCategory(p, i, in_class, out)) {
        // Consumed through the closing brace.
        continue;
      } else if (e == 'u' && i + 5 < p.size() && IsHex(p[i + 2]) && IsHex(p[i + 3]) && IsHex(p[i + 4]) &&
                 IsHex(p[i + 5])) {
        out += absl::StrCat("\\x{", std::string(p.substr(i + 2, 4)), "}");
        i += 4;
      } else {
        out.push_back(c);
        out.push_back(e);
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' or '^]' right after '[' is literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
      continue;
    }
    if (in_class && c == '[') {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported regex construct: nested character class in: ", std::string(p)));
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  if (!IsValidUtf8(pattern)) return absl::InvalidArgumentError("regex is not valid UTF-8");
  auto translated = TranslateOnigPattern(pattern);
  if (!translated.ok()) return translated.status();
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated->data()),
                                   translated->size(), PCRE2_UTF | PCRE2_UCP, &error, &offset,
                                   nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(error, buf, sizeof(buf));
    return absl::InvalidArgumentError(absl::StrCat("regex does not compile at offset ", offset,
                                                   ": ", reinterpret_cast<const char*>(buf),
                                                   " in: ", std::string(pattern)));
  }
  // JIT failure is not fatal: the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Regex>(new Regex(std::string(pattern), code));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

absl::Status Regex::FindAll(std::string_view text,
                            std::vector<std::pair<size_t, size_t>>* matches) const {
  matches->clear();
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(code, nullptr));
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  size_t last_end = static_cast<size_t>(-1);
  while (start <= text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md.get(),
                               nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof(buf));
      return absl::InternalError(
          absl::StrCat("regex match failed: ", reinterpret_cast<const char*>(buf)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t b = ov[0], e = ov[1];
    if (b == e && b == last_end) {
      // Skip an empty match right after the previous match: advance one char.
      if (start >= text.size()) break;
      char32_t cp;
      start += DecodeUtf8(text, start, &cp);
      continue;
    }
    matches->emplace_back(b, e);
    last_end = e;
    if (e == b) {
      if (e >= text.size()) break;
      char32_t cp;
      start = e + DecodeUtf8(text, e, &cp);
    } else {
      start = e;
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::tokenizer
