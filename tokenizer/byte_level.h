// tokenizer/byte_level.h
//
// The GPT-2 byte-to-character table of byte-level BPE: every byte maps to one
// printable code point ('!'..'~', U+00A1..U+00AC and U+00AE..U+00FF map to
// themselves, the remaining 68 bytes to U+0100.. in byte order).
//
// Thread safety: immutable after first use; thread-safe.

#ifndef WEIR_TOKENIZER_BYTE_LEVEL_H_
#define WEIR_TOKENIZER_BYTE_LEVEL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace weir::tokenizer {

// Returns the code point that stands for byte `b`.
char32_t ByteToChar(uint8_t b);

// Returns the byte that code point `cp` stands for, or nullopt if `cp` is not
// in the table.
std::optional<uint8_t> CharToByte(char32_t cp);

// Returns `bytes` with every byte replaced by its character (UTF-8).
std::string BytesToByteLevel(std::string_view bytes);

// Returns the bytes of a byte-level token string, or nullopt if some character
// of `token` is not in the table. REQUIRES: `token` is valid UTF-8.
std::optional<std::string> ByteLevelToBytes(std::string_view token);

}  // namespace weir::tokenizer

#endif  // WEIR_TOKENIZER_BYTE_LEVEL_H_
