#include "tokenizer/bpe.h"

#include <random>

#include "gtest/gtest.h"
#include "tokenizer/test_json.h"

namespace weir::tokenizer {
namespace {

// Textbook BPE: repeatedly merge the lowest-ranked adjacent pair, leftmost.
std::vector<std::string> ReferenceBpe(const std::string& word,
                                      const std::vector<std::pair<std::string, std::string>>& m) {
  std::vector<std::string> s;
  for (char c : word) s.emplace_back(1, c);
  for (;;) {
    size_t best_rank = m.size(), best = 0;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      for (size_t r = 0; r < best_rank; ++r) {
        if (m[r].first == s[i] && m[r].second == s[i + 1]) {
          best_rank = r;
          best = i;
          break;
        }
      }
    }
    if (best_rank == m.size()) return s;
    s[best] += s[best + 1];
    s.erase(s.begin() + best + 1);
  }
}

TEST(BpeTest, HeapMergeLoopMatchesTextbookOnLongWords) {
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"a", "b"}, {"b", "a"}, {"ab", "a"}, {"a", "a"}, {"aa", "b"}, {"ab", "ab"}, {"b", "b"},
      {"ba", "b"}, {"abab", "a"}, {"aab", "b"}};
  auto bpe = Bpe::FromJson(testing::ByteLevelTokenizer(merges)["model"]);
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string word;
    const int len = 1 + static_cast<int>(rng() % 200);  // crosses the heap threshold
    for (int i = 0; i < len; ++i) word.push_back(rng() % 3 == 0 ? 'b' : 'a');
    std::vector<int32_t> ids;
    (*bpe)->Encode(word, /*byte_level=*/true, ids);
    std::string joined;
    std::vector<std::string> got;
    for (int32_t id : ids) got.push_back(*(*bpe)->IdToToken(id));
    EXPECT_EQ(got, ReferenceBpe(word, merges)) << word;
  }
}

TEST(BpeTest, IgnoreMergesUsesWholeWordFromVocab) {
  Json j = testing::ByteLevelTokenizer({{"a", "b"}, {"b", "c"}})["model"];
  j["vocab"]["abc"] = 1000;
  std::vector<int32_t> ids;
  auto plain = Bpe::FromJson(j);
  ASSERT_TRUE(plain.ok());
  (*plain)->Encode("abc", true, ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 'c'}));
  j["ignore_merges"] = true;
  auto ignoring = Bpe::FromJson(j);
  ASSERT_TRUE(ignoring.ok());
  ids.clear();
  (*ignoring)->Encode("abc", true, ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{1000}));
}

TEST(BpeTest, UnknownCharactersUseUnkOrByteFallback) {
  Json j = {{"type", "BPE"},
            {"vocab", {{"<unk>", 0}, {"a", 1}, {"<0xC3>", 2}, {"<0xA9>", 3}}},
            {"merges", Json::array()},
            {"unk_token", "<unk>"},
            {"fuse_unk", true}};
  auto bpe = Bpe::FromJson(j);
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  std::vector<int32_t> ids;
  (*bpe)->Encode("axyz", false, ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 0}));
  j["byte_fallback"] = true;
  auto fb = Bpe::FromJson(j);
  ASSERT_TRUE(fb.ok());
  ids.clear();
  (*fb)->Encode("\xC3\xA9" "a", false, ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 3, 1}));
}

TEST(BpeTest, RejectsBrokenVocabularies) {
  EXPECT_FALSE(Bpe::FromJson(Json{{"type", "BPE"}, {"vocab", {{"a", -1}}}}).ok());
  EXPECT_FALSE(Bpe::FromJson(Json{{"type", "BPE"}, {"vocab", {{"a", "x"}}}}).ok());
  EXPECT_FALSE(Bpe::FromJson(Json{{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"unk_token", "?"}}).ok());
  EXPECT_FALSE(
      Bpe::FromJson(Json{{"type", "BPE"}, {"vocab", {{"a", 0}}}, {"merges", {"a a"}}}).ok());
}

}  // namespace
}  // namespace weir::tokenizer
