// grammar/grammar_corpus_test.cc
//
// Random walks over regex and EBNF constraints, each output checked by an
// independent validator: std::regex full match (ECMAScript), or a small
// hand-written checker for the recursive EBNFs that no regex can describe.

#include <functional>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "grammar/ebnf_parser.h"
#include "grammar/matcher.h"
#include "grammar/regex_parser.h"
#include "grammar/test_util.h"
#include "gtest/gtest.h"

namespace weir::grammar {
namespace {

constexpr int kWalksPerGrammar = 40;

// Patterns whose byte-level std::regex meaning equals the code-point one.
const char* const kRegexes[] = {
    "[a-z]+",
    "\\d{3}-\\d{3}-\\d{4}",
    "[A-Z][a-z]{1,10}( [A-Z][a-z]{1,10}){0,2}",
    "[\\w.+-]+@[a-z0-9-]+\\.(com|org|net)",
    "(0|[1-9]\\d*)(\\.\\d+)?",
    "-?\\d+(\\.\\d+)?([eE][+-]?\\d+)?",
    "https?://[a-z0-9.-]+(/[a-zA-Z0-9_-]+)*/?",
    "\\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\\d|3[01])",
    "([01]\\d|2[0-3]):[0-5]\\d(:[0-5]\\d)?",
    "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
    "(yes|no|maybe)",
    "#[0-9A-Fa-f]{6}",
    "v\\d+\\.\\d+\\.\\d+(-(alpha|beta|rc)\\.\\d+)?",
    "[A-Z]{2}\\d{2}[A-Z0-9]{4,20}",
    "\\(\\d{3}\\) \\d{3}-\\d{4}",
    "\"[^\"\\n]*\"",
    "(\\w+=\\w+)(&\\w+=\\w+)*",
    "\\s*[a-z_]+\\s*\\(\\s*\\)\\s*",
    "(ab|a)(bc|c)*",
    "[^,\\n]+(,[^,\\n]+){2}",
    "(true|false|null|\\d{1,5})",
    "x(y|z)?x",
    "\\[(\\d+(, \\d+)*)?\\]",
    "SELECT [a-z]+ FROM [a-z]+( WHERE [a-z]+ = \\d+)?;",
};

struct EbnfCase {
  const char* ebnf;
  std::function<bool(const std::string&)> valid;
};

std::function<bool(const std::string&)> Re(const char* pattern) {
  return [re = std::regex(pattern, std::regex::ECMAScript)](const std::string& s) {
    return std::regex_match(s, re);
  };
}

// Balanced nested lists of digits: "[" (item ("," item)*)? "]".
bool NestedList(const std::string& s, size_t& i) {
  if (i >= s.size() || s[i] != '[') return false;
  ++i;
  if (i < s.size() && s[i] == ']') return ++i, true;
  while (true) {
    if (i < s.size() && s[i] == '[') {
      if (!NestedList(s, i)) return false;
    } else if (i < s.size() && isdigit(static_cast<unsigned char>(s[i]))) {
      ++i;
    } else {
      return false;
    }
    if (i < s.size() && s[i] == ']') return ++i, true;
    if (i >= s.size() || s[i] != ',') return false;
    ++i;
  }
}

std::vector<EbnfCase> EbnfCases() {
  return {
      {"root ::= \"a\"+ \"b\"*", Re("a+b*")},
      {"root ::= word (\" \" word)*\nword ::= [a-z]+", Re("[a-z]+( [a-z]+)*")},
      {"root ::= (\"GET\" | \"POST\") \" /\" path\npath ::= [a-z0-9/]*",
       Re("(GET|POST) /[a-z0-9/]*")},
      {"root ::= key \"=\" val (\";\" key \"=\" val)*\nkey ::= [A-Z_]+\nval ::= [0-9]+ | \"'\" "
       "[^'\\n]* \"'\"",
       Re("[A-Z_]+=([0-9]+|'[^'\\n]*')(;[A-Z_]+=([0-9]+|'[^'\\n]*'))*")},
      {"root ::= \"<\" tag \">\" [a-z ]* \"</\" tag \">\"\ntag ::= \"b\" | \"i\" | \"em\"",
       Re("<(b|i|em)>[a-z ]*</(b|i|em)>")},
      {"root ::= [0-9]{1,3} (\".\" [0-9]{1,3}){3}", Re("[0-9]{1,3}(\\.[0-9]{1,3}){3}")},
      {"root ::= line+\nline ::= \"- \" [a-z]+ \"\\n\"", Re("(- [a-z]+\\n)+")},
      {"root ::= sign? digits frac?\nsign ::= \"-\" | \"+\"\ndigits ::= [1-9] [0-9]*\nfrac "
       "::= \".\" [0-9]+",
       Re("[-+]?[1-9][0-9]*(\\.[0-9]+)?")},
      {"root ::= (\"x\" | \"y\")? \"z\" (\"x\" \"y\"?)*", Re("[xy]?z(xy?)*")},
      {"root ::= \"true\" | \"false\" | \"[\" (\"1\" | \"0\")* \"]\"",
       Re("true|false|\\[[10]*\\]")},
      {"root ::= list\nlist ::= \"[\" (item (\",\" item)*)? \"]\"\nitem ::= list | [0-9]",
       [](const std::string& s) {
         size_t i = 0;
         return NestedList(s, i) && i == s.size();
       }},
      {"root ::= \"(\" root \")\" root | \"\"",
       [](const std::string& s) {
         int depth = 0;
         for (char c : s) {
           depth += c == '(' ? 1 : c == ')' ? -1 : 1000;
           if (depth < 0 || depth >= 1000) return false;
         }
         return depth == 0;
       }},
  };
}

void WalkAndValidate(const Grammar& g, const std::function<bool(const std::string&)>& valid,
                     const std::string& label, uint64_t seed) {
  auto compiled = testing::CompileForTest(g);
  ASSERT_TRUE(compiled.ok()) << label << ": " << compiled.status();
  std::mt19937_64 rng(seed);
  for (int walk = 0; walk < kWalksPerGrammar; ++walk) {
    Matcher m(*compiled);
    auto out = testing::RandomWalk(m, rng);
    ASSERT_TRUE(out.ok()) << label << ": " << out.status();
    EXPECT_TRUE(valid(*out)) << label << " produced invalid output: " << *out;
  }
}

TEST(GrammarCorpusTest, RegexWalksAreFullMatches) {
  uint64_t seed = 1;
  for (const char* pattern : kRegexes) {
    auto g = ParseRegex(pattern);
    ASSERT_TRUE(g.ok()) << pattern << ": " << g.status();
    WalkAndValidate(*g, Re(pattern), pattern, seed++);
  }
}

TEST(GrammarCorpusTest, EbnfWalksAreValid) {
  uint64_t seed = 100;
  for (const EbnfCase& c : EbnfCases()) {
    auto g = ParseEbnf(c.ebnf);
    ASSERT_TRUE(g.ok()) << c.ebnf << ": " << g.status();
    WalkAndValidate(*g, c.valid, c.ebnf, seed++);
  }
}

}  // namespace
}  // namespace weir::grammar
