#include "tokenizer/engram_vocab.h"

#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace weir::tokenizer {
namespace {

std::string ReadRunfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  std::ifstream in(std::string(srcdir ? srcdir : ".") + "/" + (ws ? ws : "") + "/" + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(EngramVocabTest, NormalizesCaseAccentsWidthAndSpaces) {
  EXPECT_EQ(*EngramNormalize("  Héllo\t\nWORLD  "), "hello world");
  EXPECT_EQ(*EngramNormalize("\xEF\xBC\xA1"), "a");         // fullwidth A (NFKC)
  EXPECT_EQ(*EngramNormalize("\xEF\xAC\x81"), "fi");        // ligature
  EXPECT_EQ(*EngramNormalize("\xC4\xB0"), "i");             // İ: NFD drops the dot
  EXPECT_EQ(*EngramNormalize(" "), " ");                    // a lone space survives
  EXPECT_EQ(*EngramNormalize("\t\n"), " ");                 // collapses to a lone space
  EXPECT_EQ(*EngramNormalize("\xE3\x80\x80"), " ");         // NFKC: ideographic space -> " "
  EXPECT_EQ(*EngramNormalize("\xE2\x80\xA8"), "");          // line separator strips away
  EXPECT_EQ(*EngramNormalize("a\xEE\x80\x80" "b"), "a b");  // U+E000 becomes a space
}

TEST(EngramVocabTest, TinyTokenizerSharesIdsAmongVariants) {
  auto tok = Tokenizer::FromJson(ReadRunfile("models/random/tiny/tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto v = BuildEngramVocab(**tok);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->compressed_id.size(), static_cast<size_t>((*tok)->vocab_size()));
  EXPECT_LT(v->size, (*tok)->vocab_size());
  EXPECT_GT(v->size, (*tok)->vocab_size() / 2);
  // First-seen order: each id is at most one more than every earlier id.
  int32_t max_seen = -1;
  for (int32_t c : v->compressed_id) {
    EXPECT_LE(c, max_seen + 1);
    max_seen = std::max(max_seen, c);
  }
  EXPECT_EQ(max_seen + 1, v->size);
  auto id = [&](const char* token) { return *(*tok)->TokenToId(token); };
  EXPECT_EQ(v->compressed_id[id("the")], v->compressed_id[id("Ġthe")]);
  EXPECT_EQ(v->compressed_id[id("The")], v->compressed_id[id("Ġthe")]);
  EXPECT_NE(v->compressed_id[id("Ġthe")], v->compressed_id[id("Ġa")]);
  // A lone byte of a multi-byte character decodes to U+FFFD: keyed by token.
  EXPECT_EQ(*EngramKey(**tok, id("Ã")), "Ã");
  // Special tokens are normalized too (NFKC turns the fullwidth bars into '|').
  EXPECT_EQ(*EngramKey(**tok, 0), "<|begin▁of▁sentence|>");
}

TEST(EngramVocabTest, TokenMapOnlyForTheConfigsCompressedSize) {
  auto tok = Tokenizer::FromJson(ReadRunfile("models/random/tiny/tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto v = BuildEngramVocab(**tok);
  ASSERT_TRUE(v.ok()) << v.status();
  auto map = EngramTokenMap(**tok, v->size);
  ASSERT_TRUE(map.ok()) << map.status();
  ASSERT_EQ(map->size(), v->compressed_id.size());
  for (size_t i = 0; i < map->size(); ++i) EXPECT_EQ((*map)[i], v->compressed_id[i]) << i;
  // Any other size: the model hashes raw ids.
  auto raw = EngramTokenMap(**tok, (*tok)->vocab_size());
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_TRUE(raw->empty());
}

}  // namespace
}  // namespace weir::tokenizer
