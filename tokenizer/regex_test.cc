// Regex's general category classes against unicode.h's table, for every code
// point: `\p{X}` and `\P{X}`, outside and inside a character class.

#include "tokenizer/regex.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tokenizer/unicode.h"

namespace weir::tokenizer {
namespace {

bool InCategory(char32_t cp, const std::string& name) {
  const std::string_view cat = GeneralCategoryName(GetGeneralCategory(cp));
  return name.size() == 1 ? cat[0] == name[0] : cat == name;
}

// Every code point except surrogates, each as its own line-free piece.
std::string AllCodePoints(std::vector<char32_t>* cps) {
  std::string text;
  for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    cps->push_back(cp);
    AppendUtf8(cp, text);
  }
  return text;
}

// Returns the number of code points where `pattern` (matching one code point)
// disagrees with `want`, printing the first few.
int CountDisagreements(const std::string& pattern, const std::string& text,
                       const std::vector<char32_t>& cps, bool (*want)(char32_t, const std::string&),
                       const std::string& name) {
  auto re = Regex::Compile(pattern);
  EXPECT_TRUE(re.ok()) << pattern << ": " << re.status();
  if (!re.ok()) return 1;
  std::vector<std::pair<size_t, size_t>> matches;
  EXPECT_TRUE((*re)->FindAll(text, &matches).ok());
  std::vector<bool> matched(0x110000, false);
  for (auto [b, e] : matches) {
    char32_t cp;
    DecodeUtf8(text, b, &cp);
    matched[cp] = true;
  }
  int bad = 0;
  for (char32_t cp : cps) {
    if (matched[cp] != want(cp, name)) {
      if (++bad <= 3) ADD_FAILURE() << pattern << " at U+" << std::hex << uint32_t{cp};
    }
  }
  return bad;
}

TEST(RegexTest, GeneralCategoriesMatchTheTableForEveryCodePoint) {
  std::vector<char32_t> cps;
  const std::string text = AllCodePoints(&cps);
  std::vector<std::string> names;
  for (int c = 0; c <= static_cast<int>(GeneralCategory::kCo); ++c) {
    names.emplace_back(GeneralCategoryName(static_cast<GeneralCategory>(c)));
  }
  for (std::string one : {"L", "M", "N", "P", "S", "Z", "C"}) names.push_back(one);
  auto in = [](char32_t cp, const std::string& n) { return InCategory(cp, n); };
  auto out = [](char32_t cp, const std::string& n) { return !InCategory(cp, n); };
  for (const std::string& name : names) {
    EXPECT_EQ(CountDisagreements("\\p{" + name + "}", text, cps, in, name), 0) << name;
    EXPECT_EQ(CountDisagreements("\\P{" + name + "}", text, cps, out, name), 0) << name;
    EXPECT_EQ(CountDisagreements("[\\p{" + name + "}]", text, cps, in, name), 0) << name;
    EXPECT_EQ(CountDisagreements("[^\\p{" + name + "}]", text, cps, out, name), 0) << name;
  }
}

TEST(RegexTest, NewCodePointsInDeepSeekPattern) {
  // GOOSE (U+1FABF, Unicode 15.0) is So: a symbol run of its own, as in HF.
  auto re = Regex::Compile(
      "[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s+(?!\\S)|\\s+");
  ASSERT_TRUE(re.ok()) << re.status();
  std::vector<std::pair<size_t, size_t>> m;
  const std::string text = "the goose\xF0\x9F\xAA\xBF's nest";
  ASSERT_TRUE((*re)->FindAll(text, &m).ok());
  std::vector<std::string> pieces;
  for (auto [b, e] : m) pieces.push_back(text.substr(b, e - b));
  EXPECT_EQ(pieces, (std::vector<std::string>{"the", " goose", "\xF0\x9F\xAA\xBF'", "s", " nest"}));
}

}  // namespace
}  // namespace weir::tokenizer
