// grammar/test_util.cc

#include "grammar/test_util.h"

#include <cctype>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grammar/pda.h"

namespace weir::grammar::testing {
namespace {

std::vector<std::string> MultiByteTokens() {
  std::set<std::string> out;
  const char* words[] = {"name",   "id",   "type",  "value", "items", "true", "false",
                         "null",   "user", "email", "the",   "and",   "data", "error",
                         "status", "ok",   "a",     "b",     "x",     "é",    "中文",
                         "ü",      "😀",    "http",  "com",   "0",     "1"};
  const char* puncts[] = {"\"", "\":", "\": ", "\", \"", "\",\"", "{\"", "{",     "}", "[",  "]",
                          "},", "}]",  "]}",   "[{",     "\\\"",  "\\n", "\\u00", ",", ", ", " ",
                          "  ", "\n",  "\n  ", ":",      "-",     ".",   "@",     "_", "/",  "\\"};
  for (const char* w : words) {
    for (const char* p : puncts) {
      out.insert(absl::StrCat(w, p));
      out.insert(absl::StrCat(p, w));
      out.insert(absl::StrCat(" ", w, p));
    }
  }
  for (const char* p : puncts) {
    for (const char* q : puncts) out.insert(absl::StrCat(p, q));
  }
  for (int i = 0; i < 1000; ++i) out.insert(absl::StrCat(i));
  for (int i = 0; i < 100; ++i) out.insert(absl::StrCat("-", i, "."));
  // Fragments of multi-byte UTF-8 (tokens may split characters).
  for (const std::string s : {"é", "中", "😀", "ü"}) {
    for (size_t k = 1; k < s.size(); ++k) {
      out.insert(s.substr(0, k));
      out.insert(s.substr(k));
    }
  }
  std::vector<std::string> tokens;
  for (const std::string& t : out) {
    if (t.size() > 1) tokens.push_back(t);
  }
  return tokens;
}

bool IsCloser(std::string_view t) {
  for (char c : t) {
    if (std::ispunct(static_cast<unsigned char>(c)) || c == '\n') return true;
  }
  return false;
}

}  // namespace

std::shared_ptr<const Vocabulary> TestVocabulary() {
  static const auto* vocab = [] {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    tokens.push_back("<eos>");
    tokens.push_back("<special>");
    for (std::string& t : MultiByteTokens()) tokens.push_back(std::move(t));
    auto v = Vocabulary::Create(std::move(tokens), {kTestStopId}, {kTestSpecialId});
    return new std::shared_ptr<const Vocabulary>(*std::move(v));
  }();
  return *vocab;
}

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> CompileForTest(
    const Grammar& grammar, std::shared_ptr<const Vocabulary> vocab) {
  auto pda = Pda::Build(grammar);
  if (!pda.ok()) return pda.status();
  return std::make_shared<const CompiledGrammar>(*std::move(pda), std::move(vocab));
}

absl::StatusOr<std::string> RandomWalk(Matcher& matcher, std::mt19937_64& rng, int soft_limit,
                                       int hard_limit) {
  const Vocabulary& vocab = matcher.grammar().vocab();
  std::vector<uint32_t> mask(vocab.mask_words());
  std::vector<int32_t> allowed, closers;
  std::string out;
  for (int step = 0; step < hard_limit; ++step) {
    if (matcher.IsTerminated()) return out;
    matcher.FillNextTokenBitmask(mask);
    allowed.clear();
    closers.clear();
    for (int32_t id = 0; id < vocab.size(); ++id) {
      if (!(mask[id >> 5] >> (id & 31) & 1)) continue;
      allowed.push_back(id);
      if (vocab.is_stop(id) || IsCloser(vocab.token(id))) closers.push_back(id);
    }
    if (allowed.empty()) return absl::InternalError(absl::StrCat("empty mask after: ", out));
    const bool can_stop = matcher.CanTerminate();
    int32_t pick;
    if (can_stop && (step >= soft_limit || rng() % 4 == 0)) {
      pick = kTestStopId;
    } else if (step >= soft_limit && rng() % 5 != 0) {
      // Prefer tokens that complete the match, then punctuation.
      std::vector<int32_t> finishing;
      for (int32_t id : allowed) {
        if (vocab.is_stop(id) || !matcher.AcceptToken(id).ok()) continue;
        if (matcher.CanTerminate()) finishing.push_back(id);
        (void)matcher.Rollback(1);
      }
      const std::vector<int32_t>& from = !finishing.empty() ? finishing
                                         : !closers.empty() ? closers
                                                            : allowed;
      pick = from[rng() % from.size()];
    } else {
      pick = allowed[rng() % allowed.size()];
    }
    if (absl::Status s = matcher.AcceptToken(pick); !s.ok()) {
      return absl::InternalError(
          absl::StrCat("masked-in token ", pick, " rejected: ", s.message(), " after: ", out));
    }
    if (!vocab.is_stop(pick)) out += vocab.token(pick);
  }
  return absl::InternalError(absl::StrCat("no termination within ", hard_limit, " tokens: ", out));
}

}  // namespace weir::grammar::testing
