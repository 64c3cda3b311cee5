// tokenizer/test_json.h
//
// Small tokenizer.json documents for unit tests: a byte-level BPE over all 256
// byte characters plus a few merges, with GPT-2-style pre-tokenization.
//
// Thread safety: pure functions.

#ifndef WEIR_TOKENIZER_TEST_JSON_H_
#define WEIR_TOKENIZER_TEST_JSON_H_

#include <string>
#include <utility>
#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_util.h"
#include "tokenizer/unicode.h"

namespace weir::tokenizer::testing {

// Returns a tokenizer.json object: ids 0..255 are the byte characters (in
// byte order), then one id per merge of `merges` (pairs of byte-level token
// strings) in order. Byte-level pre-tokenizer (GPT-2 regex) and decoder.
inline Json ByteLevelTokenizer(const std::vector<std::pair<std::string, std::string>>& merges) {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    AppendUtf8(ByteToChar(static_cast<uint8_t>(b)), ch);
    vocab[ch] = b;
  }
  Json merge_list = Json::array();
  int next = 256;
  for (const auto& [a, b] : merges) {
    merge_list.push_back(a + " " + b);
    if (!vocab.contains(a + b)) vocab[a + b] = next++;
  }
  Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                     {"trim_offsets", true}, {"use_regex", true}};
  return Json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", Json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", byte_level},
              {"post_processor", byte_level},
              {"decoder", byte_level},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merge_list}}}};
}

// Returns an added_tokens entry.
inline Json AddedTokenJson(int id, const std::string& content, bool special, bool lstrip = false,
                           bool rstrip = false, bool single_word = false) {
  return Json{{"id", id},          {"content", content}, {"single_word", single_word},
              {"lstrip", lstrip},  {"rstrip", rstrip},   {"normalized", !special},
              {"special", special}};
}

}  // namespace weir::tokenizer::testing

#endif  // WEIR_TOKENIZER_TEST_JSON_H_
