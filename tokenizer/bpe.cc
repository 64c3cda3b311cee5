#include "tokenizer/bpe.h"

#include <cstdio>
#include <queue>
#include <utility>

#include "absl/hash/hash.h"
#include "base/status_macros.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/unicode.h"

namespace weir::tokenizer {
namespace {

constexpr int64_t kMaxVocabId = 1 << 24;
constexpr size_t kHeapThreshold = 24;  // shorter words use the quadratic scan

absl::StatusOr<std::pair<std::string, std::string>> ParseMerge(const Json& m, size_t index) {
  if (m.is_string()) {
    const std::string& s = m.get_ref<const std::string&>();
    const size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
      return absl::InvalidArgumentError("merge " + std::to_string(index) + " '" + s +
                                        "' is not two tokens separated by one space");
    }
    return std::make_pair(s.substr(0, sp), s.substr(sp + 1));
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    return std::make_pair(m[0].get<std::string>(), m[1].get<std::string>());
  }
  return absl::InvalidArgumentError("merge " + std::to_string(index) +
                                    " must be \"a b\" or [\"a\", \"b\"]");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Bpe>> Bpe::FromJson(const Json& j) {
  RETURN_IF_ERROR(CheckFields(j,
                              {"type", "dropout", "unk_token", "continuing_subword_prefix",
                               "end_of_word_suffix", "fuse_unk", "byte_fallback",
                               "ignore_merges", "vocab", "merges"},
                              "model"));
  ASSIGN_OR_RETURN(std::string type, GetType(j, "model"));
  if (type != "BPE") return absl::InvalidArgumentError("unsupported model type '" + type + "'");
  if (j.contains("dropout") && !j["dropout"].is_null() &&
      !(j["dropout"].is_number() && j["dropout"].get<double>() == 0.0)) {
    return absl::InvalidArgumentError("unsupported model field 'dropout' (BPE dropout)");
  }
  for (const char* f : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (j.contains(f) && !j[f].is_null() && !(j[f].is_string() && j[f].get<std::string>().empty())) {
      return absl::InvalidArgumentError(std::string("unsupported model field '") + f + "'");
    }
  }
  std::unique_ptr<Bpe> bpe(new Bpe());
  ASSIGN_OR_RETURN(bpe->fuse_unk_, GetBool(j, "fuse_unk", "model", false));
  ASSIGN_OR_RETURN(bpe->byte_fallback_, GetBool(j, "byte_fallback", "model", false));
  ASSIGN_OR_RETURN(bpe->ignore_merges_, GetBool(j, "ignore_merges", "model", false));

  auto vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_object()) {
    return absl::InvalidArgumentError("model: field 'vocab' must be an object");
  }
  bpe->vocab_.reserve(vocab->size());
  int64_t max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() >= kMaxVocabId) {
      return absl::InvalidArgumentError("model: vocab entry '" + it.key() +
                                        "' needs an id in [0, 2^24)");
    }
    if (!IsValidUtf8(it.key())) return absl::InvalidArgumentError("model: vocab token not UTF-8");
    const int64_t id = it->get<int64_t>();
    bpe->vocab_[it.key()] = static_cast<int32_t>(id);
    max_id = std::max(max_id, id);
  }
  bpe->id_to_token_.resize(max_id + 1);
  bpe->id_present_.resize(max_id + 1, false);
  for (const auto& [token, id] : bpe->vocab_) {
    bpe->id_to_token_[id] = token;
    bpe->id_present_[id] = true;
  }

  auto merges = j.find("merges");
  if (merges != j.end() && !merges->is_null()) {
    if (!merges->is_array()) return absl::InvalidArgumentError("model: 'merges' must be an array");
    bpe->merges_.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      ASSIGN_OR_RETURN(auto pair, ParseMerge((*merges)[i], i));
      auto a = bpe->vocab_.find(pair.first);
      auto b = bpe->vocab_.find(pair.second);
      auto ab = bpe->vocab_.find(pair.first + pair.second);
      if (a == bpe->vocab_.end() || b == bpe->vocab_.end() || ab == bpe->vocab_.end()) {
        return absl::InvalidArgumentError("model: merge " + std::to_string(i) + " '" +
                                          pair.first + " " + pair.second +
                                          "' uses a token missing from the vocabulary");
      }
      bpe->merges_[PairKey(a->second, b->second)] = Merge{static_cast<int32_t>(i), ab->second};
    }
  }

  if (j.contains("unk_token") && !j["unk_token"].is_null()) {
    ASSIGN_OR_RETURN(std::string unk, GetString(j, "unk_token", "model"));
    auto it = bpe->vocab_.find(unk);
    if (it == bpe->vocab_.end()) {
      return absl::InvalidArgumentError("model: unk_token '" + unk + "' is not in the vocabulary");
    }
    bpe->unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    AppendUtf8(ByteToChar(static_cast<uint8_t>(b)), ch);
    auto it = bpe->vocab_.find(ch);
    bpe->byte_ids_[b] = it == bpe->vocab_.end() ? -1 : it->second;
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    auto fb = bpe->vocab_.find(hex);
    bpe->fallback_ids_[b] = fb == bpe->vocab_.end() ? -1 : fb->second;
  }
  if (bpe->ignore_merges_) {
    for (const auto& [token, id] : bpe->vocab_) {
      if (auto bytes = ByteLevelToBytes(token)) bpe->byte_vocab_[*bytes] = id;
    }
  }
  return bpe;
}

const std::string* Bpe::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !id_present_[id]) return nullptr;
  return &id_to_token_[id];
}

std::optional<int32_t> Bpe::TokenToId(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void Bpe::InitialSymbols(std::string_view word, bool byte_level,
                         std::vector<int32_t>& syms) const {
  bool last_unk = false;
  auto missing = [&](std::string_view ch) {
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && fallback_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : ch) syms.push_back(fallback_ids_[static_cast<uint8_t>(c)]);
        last_unk = false;
        return;
      }
    }
    if (unk_id_) {
      if (!(fuse_unk_ && last_unk)) syms.push_back(*unk_id_);
      last_unk = true;
    }
  };
  std::string ch;
  for (size_t i = 0; i < word.size();) {
    if (byte_level) {
      const uint8_t b = static_cast<uint8_t>(word[i++]);
      if (byte_ids_[b] >= 0) {
        syms.push_back(byte_ids_[b]);
        last_unk = false;
      } else {
        ch.clear();
        AppendUtf8(ByteToChar(b), ch);
        missing(ch);
      }
      continue;
    }
    char32_t cp;
    const int n = DecodeUtf8(word, i, &cp);
    ch.assign(word.substr(i, n));
    i += n;
    auto it = vocab_.find(ch);
    if (it != vocab_.end()) {
      syms.push_back(it->second);
      last_unk = false;
    } else {
      missing(ch);
    }
  }
}

void Bpe::MergeSymbols(std::vector<int32_t>& syms) const {
  const size_t n = syms.size();
  if (n < 2) return;
  if (n <= kHeapThreshold) {
    for (;;) {
      int32_t best_rank = INT32_MAX, best_id = -1;
      size_t best = 0;
      for (size_t i = 0; i + 1 < syms.size(); ++i) {
        auto it = merges_.find(PairKey(syms[i], syms[i + 1]));
        if (it != merges_.end() && it->second.rank < best_rank) {
          best_rank = it->second.rank;
          best_id = it->second.new_id;
          best = i;
        }
      }
      if (best_id < 0) return;
      syms[best] = best_id;
      syms.erase(syms.begin() + best + 1);
    }
  }
  struct Cand {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Cand& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    auto it = merges_.find(PairKey(syms[pos], syms[next[pos]]));
    if (it != merges_.end()) heap.push({it->second.rank, pos, it->second.new_id});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!heap.empty()) {
    const Cand top = heap.top();
    heap.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const int32_t right = next[top.pos];
    auto it = merges_.find(PairKey(syms[top.pos], syms[right]));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
    syms[top.pos] = top.new_id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    push(prev[top.pos]);
    push(top.pos);
  }
  size_t w = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) syms[w++] = syms[i];
  syms.resize(w);
}

void Bpe::Encode(std::string_view word, bool byte_level, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto& map = byte_level ? byte_vocab_ : vocab_;
    auto it = map.find(std::string(word));
    if (it != map.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  CacheShard* shard = nullptr;
  std::string key;
  if (cacheable) {
    key.reserve(word.size() + 1);
    key.assign(word);
    key.push_back(byte_level ? '\1' : '\0');
    shard = &cache_[absl::Hash<std::string>{}(key) % cache_.size()];
    absl::ReaderMutexLock lock(&shard->mu);
    auto it = shard->map.find(key);
    if (it != shard->map.end()) {
      ids.insert(ids.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> syms;
  syms.reserve(word.size());
  InitialSymbols(word, byte_level, syms);
  MergeSymbols(syms);
  ids.insert(ids.end(), syms.begin(), syms.end());
  if (cacheable) {
    absl::MutexLock lock(&shard->mu);
    if (shard->map.size() >= kCacheEntriesPerShard) shard->map.clear();
    shard->map.emplace(std::move(key), std::move(syms));
  }
}

}  // namespace weir::tokenizer
