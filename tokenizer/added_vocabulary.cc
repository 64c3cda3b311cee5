#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "base/status_macros.h"
#include "tokenizer/unicode.h"

namespace weir::tokenizer {
namespace {

char32_t LastChar(std::string_view s) {
  size_t k = s.size() - 1;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  char32_t cp;
  DecodeUtf8(s, k, &cp);
  return cp;
}

// Start of the whitespace run that ends `s`.
size_t TrailingSpaceStart(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t k = end - 1;
    while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
    char32_t cp;
    DecodeUtf8(s, k, &cp);
    if (!IsWhitespace(cp)) break;
    end = k;
  }
  return end;
}

// Length of the whitespace run that starts `s`.
size_t LeadingSpaceLength(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp;
    const int n = DecodeUtf8(s, i, &cp);
    if (!IsWhitespace(cp)) break;
    i += n;
  }
  return i;
}

}  // namespace

void AddedVocabulary::Matcher::Build() {
  for (auto& v : by_first_byte) v.clear();
  for (size_t i = 0; i < patterns.size(); ++i) {
    by_first_byte[static_cast<uint8_t>(patterns[i].first[0])].push_back(static_cast<int32_t>(i));
  }
  for (auto& v : by_first_byte) {
    std::stable_sort(v.begin(), v.end(), [&](int32_t a, int32_t b) {
      return patterns[a].first.size() > patterns[b].first.size();
    });
  }
}

absl::StatusOr<AddedVocabulary> AddedVocabulary::FromJson(const Json& j,
                                                          const Normalizer& normalizer) {
  AddedVocabulary v;
  if (j.is_null()) return v;
  if (!j.is_array()) return absl::InvalidArgumentError("'added_tokens' must be an array");
  for (const Json& e : j) {
    RETURN_IF_ERROR(CheckFields(
        e, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"},
        "added_tokens entry"));
    AddedToken t;
    ASSIGN_OR_RETURN(int64_t id, GetInt(e, "id", "added_tokens entry"));
    if (id < 0 || id >= (1 << 24)) return absl::InvalidArgumentError("added token id out of range");
    t.id = static_cast<int32_t>(id);
    ASSIGN_OR_RETURN(t.content, GetString(e, "content", "added_tokens entry"));
    if (t.content.empty() || !IsValidUtf8(t.content)) {
      return absl::InvalidArgumentError("added token " + std::to_string(id) +
                                        " has empty or non-UTF-8 content");
    }
    ASSIGN_OR_RETURN(t.single_word, GetBool(e, "single_word", "added token", false));
    ASSIGN_OR_RETURN(t.lstrip, GetBool(e, "lstrip", "added token", false));
    ASSIGN_OR_RETURN(t.rstrip, GetBool(e, "rstrip", "added token", false));
    ASSIGN_OR_RETURN(t.special, GetBool(e, "special", "added token", false));
    ASSIGN_OR_RETURN(t.normalized, GetBool(e, "normalized", "added token", !t.special));
    if (!v.by_id_.emplace(t.id, static_cast<int32_t>(v.tokens_.size())).second) {
      return absl::InvalidArgumentError("two added tokens have id " + std::to_string(id));
    }
    const int32_t index = static_cast<int32_t>(v.tokens_.size());
    if (t.normalized) {
      ASSIGN_OR_RETURN(std::string pattern, normalizer.Apply(t.content));
      if (!pattern.empty()) v.normalized_.patterns.emplace_back(std::move(pattern), index);
    } else {
      v.raw_.patterns.emplace_back(t.content, index);
    }
    v.tokens_.push_back(std::move(t));
  }
  v.raw_.Build();
  v.normalized_.Build();
  return v;
}

const AddedToken* AddedVocabulary::Find(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

int32_t AddedVocabulary::FindContent(std::string_view content) const {
  for (const AddedToken& t : tokens_) {
    if (t.content == content) return t.id;
  }
  return -1;
}

void AddedVocabulary::Split(std::string_view text, bool normalized_set,
                            std::vector<Segment>& out) const {
  out.clear();
  const Matcher& m = normalized_set ? normalized_ : raw_;
  if (m.empty() || text.empty()) {
    out.push_back({0, text.size(), -1});
    return;
  }
  size_t start_offset = 0;
  size_t i = 0;
  while (i < text.size()) {
    const auto& cands = m.by_first_byte[static_cast<uint8_t>(text[i])];
    int32_t found = -1;
    for (int32_t c : cands) {
      const std::string& p = m.patterns[c].first;
      if (text.compare(i, p.size(), p) == 0) {
        found = c;
        break;
      }
    }
    if (found < 0) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[m.patterns[found].second];
    size_t start = i;
    size_t stop = i + m.patterns[found].first.size();
    i = stop;
    if (tok.single_word) {
      const bool start_space = start == 0 || !IsWordChar(LastChar(text.substr(0, start)));
      char32_t next_cp = 0;
      if (stop < text.size()) DecodeUtf8(text, stop, &next_cp);
      const bool stop_space = stop == text.size() || !IsWordChar(next_cp);
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) start = std::max(TrailingSpaceStart(text.substr(0, start)), start_offset);
    if (tok.rstrip) stop += LeadingSpaceLength(text.substr(stop));
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, tok.id});
    start_offset = stop;
  }
  if (start_offset != text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace weir::tokenizer
