// tools/bench/grammar_vocab.cc

#include "tools/bench/grammar_vocab.h"

#include <random>
#include <string>
#include <unordered_set>

namespace weir::bench {
namespace {

const char* const kOnsets[] = {"b",  "c",  "d",  "f",  "g",  "h",  "j", "k", "l",
                               "m",  "n",  "p",  "r",  "s",  "t",  "v", "w", "z",
                               "st", "tr", "ch", "sh", "th", "pr", "cl"};
const char* const kNuclei[] = {"a", "e", "i", "o", "u", "ea", "ou", "io", "ai", "y"};
const char* const kCodas[] = {"", "", "n", "r", "s", "t", "l", "nd", "ng", "st", "ck", "m"};
const char* const kPunct[] = {"\"", "{",  "}", "[", "]", ":", ",", ".", "(", ")", "-", "_",
                              "/",  "\\", "'", ";", "!", "?", "=", "<", ">", "*", "#", "@"};
const char* const kUtf8[] = {"é",  "è",  "ü",  "ñ", "ç", "中", "文", "的", "一", "是", "日", "本",
                             "語", "한", "국", "ж", "д", "λ",  "π",  "→",  "—",  "“",  "”",  "😀"};

std::string Word(std::mt19937_64& rng) {
  std::string w;
  const int syllables = 1 + static_cast<int>(rng() % 3);
  for (int s = 0; s < syllables; ++s) {
    w += kOnsets[rng() % std::size(kOnsets)];
    w += kNuclei[rng() % std::size(kNuclei)];
    w += kCodas[rng() % std::size(kCodas)];
  }
  return w;
}

std::string Piece(std::mt19937_64& rng) {
  const int kind = static_cast<int>(rng() % 100);
  if (kind < 55) {  // word piece, mostly with a leading space
    std::string w = Word(rng);
    if (rng() % 4 == 0) w[0] = static_cast<char>(w[0] - 'a' + 'A');
    if (rng() % 3 != 0) w = " " + w;
    return w;
  }
  if (kind < 62) {  // digits
    std::string d = std::to_string(rng() % 100000);
    return rng() % 2 ? d : " " + d;
  }
  if (kind < 78) {  // punctuation runs and JSON/code fragments
    std::string p;
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) p += kPunct[rng() % std::size(kPunct)];
    switch (rng() % 4) {
      case 0:
        return p + Word(rng);
      case 1:
        return Word(rng) + p;
      case 2:
        return " " + p;
      default:
        return p + (rng() % 2 ? " " : "");
    }
  }
  if (kind < 84) {  // whitespace and indentation
    std::string ws = rng() % 2 ? "\n" : "";
    ws += std::string(1 + rng() % 12, rng() % 5 ? ' ' : '\t');
    return ws;
  }
  if (kind < 96) {  // UTF-8 text
    std::string u;
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n; ++i) u += kUtf8[rng() % std::size(kUtf8)];
    return rng() % 3 ? u : " " + u;
  }
  // Fragments of multi-byte characters (byte-level BPE splits them).
  std::string u = kUtf8[rng() % std::size(kUtf8)];
  const size_t cut = 1 + rng() % (u.size() > 1 ? u.size() - 1 : 1);
  return rng() % 2 ? u.substr(0, cut) : u.substr(cut) + Word(rng);
}

}  // namespace

SyntheticVocab MakeSyntheticVocab(int32_t size, uint64_t seed) {
  constexpr int kSpecials = 8;
  SyntheticVocab v;
  std::unordered_set<std::string> seen;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(std::string(1, static_cast<char>(b)));
    seen.insert(v.tokens.back());
  }
  std::mt19937_64 rng(seed);
  while (static_cast<int32_t>(v.tokens.size()) < size - kSpecials) {
    std::string p = Piece(rng);
    if (p.size() > 1 && seen.insert(p).second) v.tokens.push_back(std::move(p));
  }
  for (int i = 0; i < kSpecials; ++i) {
    if (i == 0)
      v.stop_ids.push_back(static_cast<int32_t>(v.tokens.size()));
    else
      v.special_ids.push_back(static_cast<int32_t>(v.tokens.size()));
    v.tokens.push_back("<|special_" + std::to_string(i) + "|>");
  }
  return v;
}

}  // namespace weir::bench
