#include "tokenizer/incremental_decoder.h"

#include <random>

#include "gtest/gtest.h"
#include "tokenizer/test_json.h"

namespace weir::tokenizer {
namespace {

std::unique_ptr<Tokenizer> ByteTokenizer() {
  Json j = testing::ByteLevelTokenizer({{"h", "e"}, {"l", "l"}, {"o", "Ġ"}});
  j["added_tokens"] = {testing::AddedTokenJson(300, "<eos>", true)};
  auto t = Tokenizer::FromJson(j.dump());
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

std::string Stream(const Tokenizer& tok, const std::vector<int32_t>& ids,
                   IncrementalDecoderOptions options, std::vector<std::string>* deltas = nullptr) {
  IncrementalDecoder dec(tok, std::move(options));
  std::string out;
  for (int32_t id : ids) {
    std::string d = dec.Add(id);
    if (deltas) deltas->push_back(d);
    out += d;
  }
  return out + dec.Finish();
}

TEST(IncrementalDecoderTest, HoldsIncompleteUtf8) {
  auto tok = ByteTokenizer();
  // "é" is C3 A9; "日" is E6 97 A5.
  std::vector<std::string> deltas;
  const std::string out = Stream(*tok, {'a', 0xC3, 0xA9, 0xE6, 0x97, 0xA5}, {}, &deltas);
  EXPECT_EQ(out, "a\xC3\xA9\xE6\x97\xA5");
  EXPECT_EQ(deltas, (std::vector<std::string>{"a", "", "\xC3\xA9", "", "", "\xE6\x97\xA5"}));
}

TEST(IncrementalDecoderTest, InvalidBytesBecomeReplacementAsInDecode) {
  auto tok = ByteTokenizer();
  const std::vector<int32_t> ids = {0xE6, 0x97, 'x', 0xFF, 0xF0, 0x9F};
  EXPECT_EQ(Stream(*tok, ids, {}), tok->Decode(ids, true));
}

TEST(IncrementalDecoderTest, StopStringAcrossTokens) {
  auto tok = ByteTokenizer();
  // "hello STOP tail" with STOP split over tokens.
  std::vector<int32_t> ids;
  for (char c : std::string("hello ST")) ids.push_back(static_cast<uint8_t>(c));
  ids.push_back('O');
  ids.push_back('P');
  ids.push_back('!');
  std::vector<std::string> deltas;
  IncrementalDecoderOptions o;
  o.stop_strings = {"STOP", "xyz"};
  IncrementalDecoder dec(*tok, o);
  std::string out;
  for (int32_t id : ids) {
    out += dec.Add(id);
    if (dec.stopped()) break;
  }
  out += dec.Finish();
  EXPECT_EQ(out, "hello ");
  EXPECT_TRUE(dec.stopped());
  EXPECT_EQ(dec.stop_index(), 0);
  o.include_stop_in_output = true;
  EXPECT_EQ(Stream(*tok, ids, o), "hello STOP");
  // A partial stop string at the end of the stream is emitted by Finish.
  o.stop_strings = {"!!"};
  EXPECT_EQ(Stream(*tok, ids, o), "hello STOP!");
}

TEST(IncrementalDecoderTest, SkipsSpecialTokensOnRequest) {
  auto tok = ByteTokenizer();
  EXPECT_EQ(Stream(*tok, {'a', 300, 'b'}, {.skip_special_tokens = true}), "ab");
  EXPECT_EQ(Stream(*tok, {'a', 300, 'b'}, {.skip_special_tokens = false}), "a<eos>b");
}

TEST(IncrementalDecoderTest, RandomStreamsEqualDecodeCutAtStop) {
  auto tok = ByteTokenizer();
  std::mt19937 rng(11);
  const std::vector<int32_t> alphabet = {'a', 'b', ' ', 0xC3, 0xA9, 0xE6, 0x97, 0xA5, 0xFF,
                                         256, 257, 258, 300, 0xF0, 0x9F, 0x98, 0x80};
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int32_t> ids(rng() % 40);
    for (auto& id : ids) id = alphabet[rng() % alphabet.size()];
    IncrementalDecoderOptions o;
    o.stop_strings = {"ab", "\xC3\xA9 "};
    const std::string full = tok->Decode(ids, true);
    size_t cut = std::min(full.find("ab"), full.find("\xC3\xA9 "));
    const std::string want = cut == std::string::npos ? full : full.substr(0, cut);
    EXPECT_EQ(Stream(*tok, ids, o), want);
  }
}

}  // namespace
}  // namespace weir::tokenizer
