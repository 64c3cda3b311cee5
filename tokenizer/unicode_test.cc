#include "tokenizer/unicode.h"

#include "gtest/gtest.h"

namespace weir::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(UnicodeTest, SanitizeReplacesMaximalSubparts) {
  EXPECT_EQ(SanitizeUtf8("ok"), "ok");
  EXPECT_EQ(SanitizeUtf8("\xE2\x82"), kFffd);                          // truncated 3-byte
  EXPECT_EQ(SanitizeUtf8("\xE2\x82" "a"), kFffd + "a");
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), kFffd + kFffd);                  // overlong lead
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);      // surrogate
  EXPECT_EQ(SanitizeUtf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);
  EXPECT_EQ(SanitizeUtf8("\xF0\x9F\x98"), kFffd);                      // truncated emoji
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xF0\x9F\x98"));
}

TEST(UnicodeTest, NormalFormsAndLowercase) {
  EXPECT_EQ(*Normalize("e\xCC\x81", NormalForm::kNfc), "\xC3\xA9");
  EXPECT_EQ(*Normalize("\xC3\xA9", NormalForm::kNfd), "e\xCC\x81");
  EXPECT_EQ(*Normalize("\xEF\xBC\xA1", NormalForm::kNfkc), "A");  // fullwidth A
  EXPECT_EQ(Lowercase("ÀB\xC4\xB0"), "àbi\xCC\x87");
  EXPECT_EQ(Lowercase("ΟΔΟΣ ΣΑ"), "οδοσ σα");  // no final-sigma rule
}

TEST(UnicodeTest, CharacterClasses) {
  EXPECT_TRUE(IsWhitespace(0x85));
  EXPECT_TRUE(IsWhitespace(0x3000));
  EXPECT_FALSE(IsWhitespace(0x200B));
  EXPECT_TRUE(IsNumeric(0x0663));  // Arabic-Indic three
  EXPECT_TRUE(IsNumeric(0x00BD));  // one half (No)
  EXPECT_TRUE(IsWordChar(0x65E5));  // 日
  EXPECT_FALSE(IsWordChar('-'));
  EXPECT_TRUE(IsWordChar(0x1C89));  // CYRILLIC CAPITAL LETTER TJE (Unicode 16.0)
  EXPECT_TRUE(IsNumeric(0x16D70));  // KIRAT RAI DIGIT ZERO (Unicode 16.0)
}

TEST(UnicodeTest, GeneralCategoriesAreUnicode16) {
  EXPECT_EQ(UnicodeTablesVersion(), "16.0.0");
  EXPECT_EQ(GetGeneralCategory('a'), GeneralCategory::kLl);
  EXPECT_EQ(GetGeneralCategory(0x1FABF), GeneralCategory::kSo);  // GOOSE (15.0)
  EXPECT_EQ(GetGeneralCategory(0x1C89), GeneralCategory::kLu);   // 16.0
  EXPECT_EQ(GetGeneralCategory(0x0378), GeneralCategory::kCn);   // unassigned
  EXPECT_EQ(GetGeneralCategory(0xD800), GeneralCategory::kCs);
  EXPECT_EQ(GetGeneralCategory(0x10FFFD), GeneralCategory::kCo);
  EXPECT_EQ(GetGeneralCategory(0x110000), GeneralCategory::kCn);
  EXPECT_EQ(GeneralCategoryName(GeneralCategory::kSo), "So");
  // Every name has a regex class; scripts do not.
  EXPECT_TRUE(RegexCategory("L").has_value());
  EXPECT_TRUE(RegexCategory("Cn").has_value());
  EXPECT_FALSE(RegexCategory("Han").has_value());
}

}  // namespace
}  // namespace weir::tokenizer
