#include "tokenizer/bpe_trainer.h"

#include "gtest/gtest.h"
#include "tokenizer/tokenizer.h"

namespace weir::tokenizer {
namespace {

std::vector<std::string> Corpus() {
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) {
    texts.push_back("the quick brown fox jumps over the lazy dog " + std::to_string(i * 7919) +
                    " <s> naïve café 日本語のテキスト\n");
  }
  return texts;
}

TEST(BpeTrainerTest, TrainsExactVocabularyThatRoundTrips) {
  BpeTrainerOptions o;
  o.vocab_size = 300;
  o.head_special_tokens = {"<s>", "</s>"};
  o.tail_special_tokens = {"<noise>"};
  const std::vector<std::string> texts = Corpus();
  auto json = TrainByteLevelBpe(texts, o);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*TrainByteLevelBpe(texts, o), *json);  // deterministic
  auto tok = Tokenizer::FromJson(*json);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 300);
  EXPECT_EQ((*tok)->TokenToId("<s>"), 0);
  EXPECT_EQ((*tok)->TokenToId("<noise>"), 299);
  EXPECT_TRUE((*tok)->IsSpecial(299));
  auto ids = (*tok)->Encode("the lazy dog <s> café", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(ids->front(), 0);  // BOS template
  EXPECT_LT(ids->size(), 15u);  // merges were learned
  EXPECT_EQ((*tok)->Decode(*ids, true), "the lazy dog  café");
  EXPECT_EQ((*tok)->Decode(*ids, false), "<s>the lazy dog <s> café");
}

TEST(BpeTrainerTest, RejectsImpossibleSizes) {
  BpeTrainerOptions o;
  o.vocab_size = 100;  // fewer than the 256 byte tokens
  EXPECT_EQ(TrainByteLevelBpe(Corpus(), o).status().code(), absl::StatusCode::kInvalidArgument);
  o.vocab_size = 100000;  // more merges than the corpus supports
  EXPECT_EQ(TrainByteLevelBpe(Corpus(), o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace weir::tokenizer
