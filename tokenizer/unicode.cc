#include "tokenizer/unicode.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <utf8proc.h>

#include "absl/status/status.h"

namespace weir::tokenizer {
namespace {

struct CategoryRange {
  char32_t first;
  char32_t last;
  GeneralCategory category;
};

struct RegexClass {
  const char* name;
  bool full;
  const char* items;
};

#include "tokenizer/unicode_tables.inc"

constexpr std::string_view kCategoryNames[] = {
    "Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
    "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co",
};

// Length of the well-formed prefix of the sequence at `p` (1..4), or -(k) where
// k >= 1 is the length of the maximal ill-formed subpart.
int ScanSequence(const unsigned char* p, size_t avail) {
  const unsigned char b0 = p[0];
  if (b0 < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k <= need; ++k) {
    if (static_cast<size_t>(k) >= avail) return -k;
    const unsigned char b = p[k];
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) return -k;
  }
  return need + 1;
}

bool InCategories(char32_t cp, std::initializer_list<GeneralCategory> cats) {
  const GeneralCategory c = GetGeneralCategory(cp);
  for (auto want : cats) {
    if (c == want) return true;
  }
  return false;
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int n = ScanSequence(p + i, text.size() - i);
    if (n < 0) return false;
    i += n;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  size_t i = 0;
  while (i < text.size()) {
    const int n = ScanSequence(p + i, text.size() - i);
    if (n > 0) {
      out.append(text.data() + i, n);
      i += n;
    } else {
      AppendUtf8(kReplacementChar, out);
      i += -n;
    }
  }
  return out;
}

int DecodeUtf8(std::string_view text, size_t pos, char32_t* cp) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  if (p[0] < 0x80) {
    *cp = p[0];
    return 1;
  }
  if (p[0] < 0xE0) {
    *cp = ((p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    return 2;
  }
  if (p[0] < 0xF0) {
    *cp = ((p[0] & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    return 3;
  }
  *cp = ((p[0] & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  return 4;
}

void AppendUtf8(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

absl::StatusOr<std::string> Normalize(std::string_view text, NormalForm form) {
  if (text.empty()) return std::string();
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::kNfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::kNfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::kNfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &dst,
                   static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    return absl::InvalidArgumentError(std::string("unicode normalization failed: ") +
                                      utf8proc_errmsg(n));
  }
  std::string out(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  std::free(dst);
  return out;
}

GeneralCategory GetGeneralCategory(char32_t cp) {
  // First range whose last >= cp.
  const auto* it = std::lower_bound(std::begin(kCategoryRanges), std::end(kCategoryRanges), cp,
                                    [](const CategoryRange& r, char32_t c) { return r.last < c; });
  if (it == std::end(kCategoryRanges) || it->first > cp) return GeneralCategory::kCn;
  return it->category;
}

std::string_view GeneralCategoryName(GeneralCategory category) {
  return kCategoryNames[static_cast<size_t>(category)];
}

std::string_view UnicodeTablesVersion() { return kTablesUnicodeVersion; }

std::optional<RegexCategoryClass> RegexCategory(std::string_view name) {
  for (const RegexClass& c : kRegexClasses) {
    if (name == c.name) return RegexCategoryClass{c.items, c.full};
  }
  return std::nullopt;
}

bool IsWhitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool IsNumeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return InCategories(cp, {GeneralCategory::kNd, GeneralCategory::kNl, GeneralCategory::kNo});
}

bool IsWordChar(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  }
  if (cp == 0x200C || cp == 0x200D) return true;
  using G = GeneralCategory;
  return InCategories(cp, {G::kLu, G::kLl, G::kLt, G::kLm, G::kLo, G::kMn, G::kMc, G::kMe,
                           G::kNd, G::kPc, G::kNl});
}

bool IsMark(char32_t cp) {
  // utf8proc's table on purpose: HF's StripAccents uses an older table than
  // Unicode 16, and Unicode 15.0 disagrees with it on fewer code points.
  const utf8proc_category_t c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_MC || c == UTF8PROC_CATEGORY_ME;
}

std::string Lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    char32_t cp;
    const int n = DecodeUtf8(text, i, &cp);
    if (cp == 0x130) {
      out += "i\xCC\x87";
    } else {
      AppendUtf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), out);
    }
    i += n;
  }
  return out;
}

}  // namespace weir::tokenizer
