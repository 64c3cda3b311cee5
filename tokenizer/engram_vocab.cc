#include "tokenizer/engram_vocab.h"

#include "absl/container/flat_hash_map.h"
#include "base/status_macros.h"
#include "tokenizer/unicode.h"

namespace weir::tokenizer {

absl::StatusOr<std::string> EngramNormalize(std::string_view text) {
  ASSIGN_OR_RETURN(std::string s, Normalize(text, NormalForm::kNfkc));
  ASSIGN_OR_RETURN(s, Normalize(s, NormalForm::kNfd));
  std::string no_marks;
  no_marks.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    const int n = DecodeUtf8(s, i, &cp);
    if (!IsMark(cp)) no_marks.append(s, i, n);
    i += n;
  }
  const std::string lower = Lowercase(no_marks);
  std::string collapsed;
  collapsed.reserve(lower.size());
  bool in_space = false;
  for (char c : lower) {
    const bool space = c == ' ' || c == '\t' || c == '\r' || c == '\n';
    if (!space) collapsed.push_back(c);
    if (space && !in_space) collapsed.push_back(' ');
    in_space = space;
  }
  // A lone space is protected from stripping by a private-use sentinel, which
  // (like any U+E000 already present) becomes a space again after stripping.
  constexpr std::string_view kSentinel = "\xEE\x80\x80";  // U+E000
  if (collapsed == " ") collapsed = kSentinel;
  // Strip Unicode whitespace on both ends.
  size_t begin = 0, end = collapsed.size();
  while (begin < end) {
    char32_t cp;
    const int n = DecodeUtf8(collapsed, begin, &cp);
    if (!IsWhitespace(cp)) break;
    begin += n;
  }
  while (end > begin) {
    size_t k = end - 1;
    while (k > begin && (static_cast<unsigned char>(collapsed[k]) & 0xC0) == 0x80) --k;
    char32_t cp;
    DecodeUtf8(collapsed, k, &cp);
    if (!IsWhitespace(cp)) break;
    end = k;
  }
  std::string out;
  std::string_view rest(collapsed.data() + begin, end - begin);
  for (size_t pos; (pos = rest.find(kSentinel)) != std::string_view::npos;) {
    out.append(rest.substr(0, pos));
    out.push_back(' ');
    rest.remove_prefix(pos + kSentinel.size());
  }
  out.append(rest);
  return out;
}

absl::StatusOr<std::string> EngramKey(const Tokenizer& tokenizer, int32_t id) {
  const int32_t one[] = {id};
  const std::string text = tokenizer.Decode(one, /*skip_special_tokens=*/false);
  if (text.find("\xEF\xBF\xBD") != std::string::npos) {
    return tokenizer.IdToToken(id).value_or("");
  }
  ASSIGN_OR_RETURN(std::string key, EngramNormalize(text));
  return key.empty() ? text : key;
}

absl::StatusOr<EngramVocab> BuildEngramVocab(const Tokenizer& tokenizer) {
  EngramVocab v;
  v.compressed_id.resize(tokenizer.vocab_size());
  absl::flat_hash_map<std::string, int32_t> ids;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    ASSIGN_OR_RETURN(std::string key, EngramKey(tokenizer, id));
    auto [it, inserted] = ids.emplace(std::move(key), v.size);
    if (inserted) ++v.size;
    v.compressed_id[id] = it->second;
  }
  return v;
}

absl::StatusOr<std::vector<int64_t>> EngramTokenMap(const Tokenizer& tokenizer,
                                                    int64_t compressed_vocab_size) {
  absl::StatusOr<EngramVocab> vocab = BuildEngramVocab(tokenizer);
  if (!vocab.ok()) return vocab.status();
  if (vocab->size != compressed_vocab_size) return std::vector<int64_t>();
  return std::vector<int64_t>(vocab->compressed_id.begin(), vocab->compressed_id.end());
}

}  // namespace weir::tokenizer
