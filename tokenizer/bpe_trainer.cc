#include "tokenizer/bpe_trainer.h"

#include <deque>
#include <queue>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "base/status_macros.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace weir::tokenizer {
namespace {

uint64_t Key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

Json SplitJson(const std::string& regex) {
  return Json{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"},
              {"invert", false}};
}

Json PreTokenizerJson() {
  return Json{
      {"type", "Sequence"},
      {"pretokenizers",
       {SplitJson(R"(\p{N}{1,3})"), SplitJson("[一-龥\u3040-ゟ゠-ヿ]+"),
        SplitJson("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
                  "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
        {{"type", "ByteLevel"},
         {"add_prefix_space", false},
         {"trim_offsets", true},
         {"use_regex", false}}}}};
}

// Words of the corpus as symbol sequences, with counts and incremental pair
// statistics.
struct Corpus {
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> counts;
  absl::flat_hash_map<uint64_t, int64_t> pair_count;
  absl::flat_hash_map<uint64_t, std::vector<int32_t>> pair_words;

  void AddPairs(int32_t w, int64_t sign) {
    const auto& s = words[w];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t k = Key(s[i], s[i + 1]);
      pair_count[k] += sign * counts[w];
      if (sign > 0) pair_words[k].push_back(w);
    }
  }
};

}  // namespace

std::string DeepSeekPreTokenizerJson() { return PreTokenizerJson().dump(); }

absl::StatusOr<std::string> TrainByteLevelBpe(std::span<const std::string> texts,
                                              const BpeTrainerOptions& options) {
  const int num_special =
      static_cast<int>(options.head_special_tokens.size() + options.tail_special_tokens.size());
  const int num_merges = options.vocab_size - num_special - 256;
  if (num_merges < 0) {
    return absl::InvalidArgumentError("vocab_size too small for the special and byte tokens");
  }
  // Split special tokens out of the text, then pre-tokenize and count words.
  Json added = Json::array();
  for (const std::string& s : options.head_special_tokens) {
    added.push_back({{"id", added.size()}, {"content", s}, {"special", true}});
  }
  ASSIGN_OR_RETURN(auto identity, Normalizer::FromJson(Json()));
  ASSIGN_OR_RETURN(AddedVocabulary specials, AddedVocabulary::FromJson(added, *identity));
  ASSIGN_OR_RETURN(auto pre, PreTokenizer::FromJson(PreTokenizerJson()));
  absl::flat_hash_map<std::string, int64_t> word_counts;
  for (const std::string& raw : texts) {
    const std::string text = SanitizeUtf8(raw);
    std::vector<Segment> segments;
    specials.Split(text, false, segments);
    for (const Segment& seg : segments) {
      if (seg.id >= 0) continue;
      std::vector<std::string_view> pieces;
      std::deque<std::string> arena;
      RETURN_IF_ERROR(pre->Apply(std::string_view(text).substr(seg.begin, seg.end - seg.begin),
                                 pieces, arena));
      for (std::string_view p : pieces) ++word_counts[std::string(p)];
    }
  }
  // Symbols: 0..255 are bytes; merges get 256.. in order.
  std::vector<std::string> symbol_bytes(256);
  for (int b = 0; b < 256; ++b) symbol_bytes[b] = std::string(1, static_cast<char>(b));
  absl::flat_hash_set<std::string> reserved(options.head_special_tokens.begin(),
                                            options.head_special_tokens.end());
  reserved.insert(options.tail_special_tokens.begin(), options.tail_special_tokens.end());

  Corpus c;
  std::vector<std::pair<std::string, int64_t>> sorted(word_counts.begin(), word_counts.end());
  std::sort(sorted.begin(), sorted.end());  // deterministic word order
  for (const auto& [w, n] : sorted) {
    std::vector<int32_t> s(w.begin(), w.end());
    for (int32_t& x : s) x &= 0xFF;
    c.words.push_back(std::move(s));
    c.counts.push_back(n);
    c.AddPairs(static_cast<int32_t>(c.words.size() - 1), +1);
  }
  using Entry = std::tuple<int64_t, int64_t, uint64_t>;  // (count, -key tie-break, key)
  std::priority_queue<Entry> heap;
  for (const auto& [k, n] : c.pair_count) heap.emplace(n, -static_cast<int64_t>(k), k);

  std::vector<std::pair<int32_t, int32_t>> merges;
  while (static_cast<int>(merges.size()) < num_merges && !heap.empty()) {
    auto [n, neg, k] = heap.top();
    heap.pop();
    const int64_t current = c.pair_count[k];
    if (current != n) {
      if (current > 0) heap.emplace(current, neg, k);
      continue;
    }
    if (n < options.min_pair_count) break;
    const int32_t a = static_cast<int32_t>(k >> 32), b = static_cast<int32_t>(k & 0xFFFFFFFF);
    const std::string merged = symbol_bytes[a] + symbol_bytes[b];
    if (reserved.contains(BytesToByteLevel(merged))) {
      c.pair_count[k] = 0;  // never learn a special token as a merge
      continue;
    }
    const int32_t id = static_cast<int32_t>(symbol_bytes.size());
    symbol_bytes.push_back(merged);
    merges.emplace_back(a, b);
    std::vector<int32_t> affected = std::move(c.pair_words[k]);
    c.pair_words.erase(k);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    absl::flat_hash_set<uint64_t> touched;
    for (int32_t w : affected) {
      auto& s = c.words[w];
      c.AddPairs(w, -1);
      std::vector<int32_t> out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == a && s[i + 1] == b) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(s[i]);
        }
      }
      s = std::move(out);
      c.AddPairs(w, +1);
      for (size_t i = 0; i + 1 < s.size(); ++i) touched.insert(Key(s[i], s[i + 1]));
    }
    for (uint64_t t : touched) {
      const int64_t cnt = c.pair_count[t];
      if (cnt > 0) heap.emplace(cnt, -static_cast<int64_t>(t), t);
    }
  }
  if (static_cast<int>(merges.size()) < num_merges) {
    return absl::InvalidArgumentError("corpus too small: learned " +
                                      std::to_string(merges.size()) + " of " +
                                      std::to_string(num_merges) + " merges");
  }

  // Assemble tokenizer.json.
  const int base = static_cast<int>(options.head_special_tokens.size());
  Json vocab = Json::object();
  Json added_tokens = Json::array();
  auto add_special = [&](const std::string& s, int id) {
    vocab[s] = id;
    added_tokens.push_back({{"id", id}, {"content", s}, {"single_word", false}, {"lstrip", false},
                            {"rstrip", false}, {"normalized", false}, {"special", true}});
  };
  for (int i = 0; i < base; ++i) add_special(options.head_special_tokens[i], i);
  std::vector<std::string> level(symbol_bytes.size());
  for (size_t i = 0; i < symbol_bytes.size(); ++i) {
    level[i] = BytesToByteLevel(symbol_bytes[i]);
    vocab[level[i]] = base + static_cast<int>(i);
  }
  Json merge_list = Json::array();
  for (auto [a, b] : merges) merge_list.push_back(Json::array({level[a], level[b]}));
  int next = base + static_cast<int>(symbol_bytes.size());
  for (const std::string& s : options.tail_special_tokens) add_special(s, next++);

  Json post = nullptr;
  if (base > 0) {
    const std::string& bos = options.head_special_tokens[0];
    post = {{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair", {{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                      {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                      {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
                      {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
            {"special_tokens", {{bos, {{"id", bos}, {"ids", {0}}, {"tokens", {bos}}}}}}};
  }
  Json tokenizer = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added_tokens},
      {"normalizer", nullptr},
      {"pre_tokenizer", PreTokenizerJson()},
      {"post_processor", post},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
        {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", merge_list}}}};
  return tokenizer.dump(1, ' ', /*ensure_ascii=*/false);
}

}  // namespace weir::tokenizer
