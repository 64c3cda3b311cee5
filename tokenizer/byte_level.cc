#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/unicode.h"

namespace weir::tokenizer {
namespace {

struct Tables {
  std::array<char32_t, 256> to_char;
  std::array<int16_t, 324> to_byte;  // indexed by code point; max code point is 0x143
};

const Tables& GetTables() {
  static const Tables tables = [] {
    Tables t;
    t.to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      t.to_char[b] = self ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      t.to_byte[t.to_char[b]] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return tables;
}

}  // namespace

char32_t ByteToChar(uint8_t b) { return GetTables().to_char[b]; }

std::optional<uint8_t> CharToByte(char32_t cp) {
  const Tables& t = GetTables();
  if (cp >= t.to_byte.size() || t.to_byte[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(t.to_byte[cp]);
}

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) AppendUtf8(ByteToChar(static_cast<uint8_t>(c)), out);
  return out;
}

std::optional<std::string> ByteLevelToBytes(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    char32_t cp;
    i += DecodeUtf8(token, i, &cp);
    const std::optional<uint8_t> b = CharToByte(cp);
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

}  // namespace weir::tokenizer
