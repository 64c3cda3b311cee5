// Deterministic randomized-mutation fuzzing of the tokenizer.json loader and
// of the encoder: mutated documents must load or fail with INVALID_ARGUMENT,
// never crash; loaded tokenizers must encode arbitrary bytes and round-trip
// them (byte-level BPE without a normalizer is lossless up to U+FFFD repair).

#include <random>

#include "gtest/gtest.h"
#include "tokenizer/test_json.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace weir::tokenizer {
namespace {

Json SeedDocument() {
  Json j = testing::ByteLevelTokenizer(
      {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"Ġ", "t"}, {"Ġt", "h"}, {"1", "2"}});
  j["added_tokens"] = {testing::AddedTokenJson(400, "<bos>", true),
                       testing::AddedTokenJson(401, "[mask]", false, true, true, true)};
  auto split = [](const std::string& re, const std::string& behavior) {
    return Json{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", behavior},
                {"invert", false}};
  };
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {split(R"(\p{N}{1,3})", "Isolated"), split(R"(\s+(?!\S)|\s+)", "MergedWithNext"),
        {{"type", "Digits"}, {"individual_digits", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}}}}};
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  return j;
}

std::string RandomBytes(std::mt19937& rng, size_t n) {
  static const std::vector<std::string> kPieces = {
      "hello", " the", "12345", "<bos>", "[mask]", "\xC3\xA9", "\xE6\x97\xA5", "\xF0\x9F\x98\x80",
      "\xFF", "\xC3", "\xE2\x82", "\r\n", "\t", " ", "\xC2\x85", "e\xCC\x81", "'s", "\x00"};
  std::string s;
  while (s.size() < n) {
    if (rng() % 3 == 0) {
      s.push_back(static_cast<char>(rng() % 256));
    } else {
      s += kPieces[rng() % kPieces.size()];
    }
  }
  return s;
}

// One random edit of a JSON document's text.
std::string MutateText(std::string s, std::mt19937& rng) {
  if (s.empty()) return s;
  const size_t pos = rng() % s.size();
  switch (rng() % 5) {
    case 0:
      s[pos] = static_cast<char>(rng() % 256);
      break;
    case 1:
      s.erase(pos, 1 + rng() % 16);
      break;
    case 2:
      s.insert(pos, RandomBytes(rng, 1 + rng() % 8));
      break;
    case 3:
      s.insert(pos, s.substr(rng() % s.size(), 1 + rng() % 32));
      break;
    default:
      s.resize(pos);
      break;
  }
  return s;
}

// Replaces a random node of `j` by a random value.
void MutateTree(Json& j, std::mt19937& rng, int depth = 0) {
  static const std::vector<Json> kValues = {
      nullptr, -1, 0, 1 << 30, 3.5, "", "(", "[\\p{Foo}]", "(?<=a+)b", "a{99999}", "\\",
      "(a+)+$", "x y z", Json::array(), Json::object(), Json::array({"a", "b"}), true,
      Json{{"type", "Sequence"}}, Json{{"Regex", "("}}, Json{{"String", ""}}};
  if (depth > 6 || j.is_primitive() || j.empty() || rng() % 4 == 0) {
    j = kValues[rng() % kValues.size()];
    return;
  }
  if (j.is_array()) {
    MutateTree(j[rng() % j.size()], rng, depth + 1);
    return;
  }
  auto it = j.begin();
  std::advance(it, rng() % j.size());
  if (rng() % 8 == 0) {
    j.erase(it);
  } else {
    MutateTree(*it, rng, depth + 1);
  }
}

void ExerciseIfLoads(const std::string& text, std::mt19937& rng, int* loaded) {
  auto tok = Tokenizer::FromJson(text);
  if (!tok.ok()) {
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << tok.status();
    EXPECT_FALSE(tok.status().message().empty());
    return;
  }
  ++*loaded;
  for (int i = 0; i < 3; ++i) {
    const std::string input = RandomBytes(rng, rng() % 64);
    auto ids = (*tok)->Encode(input, true);
    if (!ids.ok()) {
      EXPECT_EQ(ids.status().code(), absl::StatusCode::kInternal);
      continue;
    }
    for (int32_t id : *ids) EXPECT_LT(id, (*tok)->vocab_size());
    EXPECT_TRUE(IsValidUtf8((*tok)->Decode(*ids, false)));
  }
}

TEST(LoaderFuzzTest, MutatedDocumentsNeverCrash) {
  std::mt19937 rng(20261129);
  const Json seed = SeedDocument();
  const std::string seed_text = seed.dump();
  int loaded = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    std::string text;
    if (iter % 2 == 0) {
      text = seed_text;
      for (int k = 1 + rng() % 3; k > 0; --k) text = MutateText(std::move(text), rng);
    } else {
      Json j = seed;
      for (int k = 1 + rng() % 2; k > 0; --k) MutateTree(j, rng);
      text = j.dump();
    }
    ExerciseIfLoads(text, rng, &loaded);
  }
  // Some mutations (e.g. inside the vocabulary) leave a valid document.
  EXPECT_GT(loaded, 20);
}

TEST(LoaderFuzzTest, PathologicalDocuments) {
  EXPECT_FALSE(Tokenizer::FromJson(std::string(20000, '[') + std::string(20000, ']')).ok());
  EXPECT_FALSE(Tokenizer::FromJson("").ok());
  EXPECT_FALSE(Tokenizer::FromJson("null").ok());
  Json j = SeedDocument();
  Json nested = {{"type", "ByteLevel"}};
  for (int i = 0; i < 100; ++i) nested = {{"type", "Sequence"}, {"pretokenizers", {nested}}};
  j["pre_tokenizer"] = nested;
  auto t = Tokenizer::FromJson(j.dump());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("nesting"), std::string::npos);
}

TEST(EncoderFuzzTest, RandomBytesRoundTrip) {
  Json j = SeedDocument();
  j["normalizer"] = nullptr;  // normalization is not invertible
  auto tok = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    const std::string input = RandomBytes(rng, rng() % 200);
    auto ids = (*tok)->Encode(input, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    // ByteLevel with add_prefix_space adds a space before each piece that
    // lacks one, so compare against a tokenizer without it below.
    EXPECT_TRUE(IsValidUtf8((*tok)->Decode(*ids, false)));
  }
  j["pre_tokenizer"]["pretokenizers"][3]["add_prefix_space"] = false;
  j["added_tokens"][1]["lstrip"] = false;  // stripping drops whitespace by design
  j["added_tokens"][1]["rstrip"] = false;
  auto exact = Tokenizer::FromJson(j.dump());
  ASSERT_TRUE(exact.ok());
  for (int i = 0; i < 2000; ++i) {
    const std::string input = RandomBytes(rng, rng() % 200);
    auto ids = (*exact)->Encode(input, false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ((*exact)->Decode(*ids, false), SanitizeUtf8(input));
  }
}

}  // namespace
}  // namespace weir::tokenizer
