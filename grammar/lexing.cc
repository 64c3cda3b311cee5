// grammar/lexing.cc

#include "grammar/lexing.h"

#include <cctype>
#include <string>

#include "absl/strings/str_format.h"
#include "grammar/utf8.h"

namespace weir::grammar {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Reads exactly `digits` hex digits at text[*pos]; -1 if malformed.
int64_t ReadHex(std::string_view text, size_t* pos, int digits) {
  int64_t value = 0;
  for (int i = 0; i < digits; ++i) {
    if (*pos >= text.size() || HexValue(text[*pos]) < 0) return -1;
    value = value * 16 + HexValue(text[(*pos)++]);
  }
  return value;
}

}  // namespace

absl::Status ErrorAt(std::string_view what, std::string_view text, size_t pos,
                     std::string_view message) {
  int line = 1, column = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return absl::InvalidArgumentError(absl::StrFormat("%s: at byte %d (line %d, column %d): %s",
                                                    std::string(what), pos, line, column,
                                                    std::string(message)));
}

int32_t ParseCommonEscape(std::string_view text, size_t* pos) {
  ++*pos;  // the backslash
  if (*pos >= text.size()) return -1;
  const char c = text[(*pos)++];
  switch (c) {
    case 'n':
      return '\n';
    case 'r':
      return '\r';
    case 't':
      return '\t';
    case 'f':
      return '\f';
    case 'v':
      return '\v';
    case '0':
      return 0;
    case 'x': {
      const int64_t v = ReadHex(text, pos, 2);
      return static_cast<int32_t>(v);
    }
    case 'u': {
      const int64_t v = ReadHex(text, pos, 4);
      if (v >= 0xD800 && v <= 0xDFFF) return -1;
      return static_cast<int32_t>(v);
    }
    case 'U': {
      const int64_t v = ReadHex(text, pos, 8);
      if (v > kMaxCodepoint || (v >= 0xD800 && v <= 0xDFFF)) return -1;
      return static_cast<int32_t>(v);
    }
    default:
      break;
  }
  const unsigned char u = static_cast<unsigned char>(c);
  if (u < 0x80 && !std::isalnum(u) && u >= 0x20) return u;  // escaped punctuation
  --*pos;
  return -1;
}

}  // namespace weir::grammar
