// tokenizer/tokenizer.h
//
// A Hugging Face `tokenizer.json` tokenizer (byte-level BPE as DeepSeek and
// GPT-2 use it), producing the same ids as the `tokenizers` library.
//
//   ASSIGN_OR_RETURN(auto tok, Tokenizer::FromJson(json_text, config_text));
//   ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->Encode("Hello", true));
//   std::string text = tok->Decode(ids, /*skip_special_tokens=*/true);
//
// Pipeline of Encode: repair invalid UTF-8 (U+FFFD per maximal subpart) ->
// split out non-normalized added tokens -> normalize each remaining piece ->
// split out normalized added tokens -> pre-tokenize -> BPE -> post-process.
//
// Thread safety: immutable after FromJson (the BPE cache is internally
// synchronized); all methods are thread-safe.

#ifndef WEIR_TOKENIZER_TOKENIZER_H_
#define WEIR_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace weir::tokenizer {

// The fields of tokenizer_config.json that weir uses.
struct TokenizerConfig {
  std::string bos_token;      // empty if absent
  std::string eos_token;      // empty if absent
  std::string chat_template;  // Jinja source, kept for identification only
};

class Tokenizer {
 public:
  // Loads `json` (tokenizer.json) and, if non-empty, `config_json`
  // (tokenizer_config.json). INVALID_ARGUMENT naming the first malformed or
  // unsupported component or field; nothing is silently ignored except the
  // informational "version" field.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view json,
                                                             std::string_view config_json = {});

  // Loads `dir`/tokenizer.json and, if present, `dir`/tokenizer_config.json.
  // NOT_FOUND if tokenizer.json cannot be read; otherwise as FromJson.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir);

  // Returns the ids of `text`; with `add_special_tokens` the post-processor's
  // template (e.g. BOS) is applied. Invalid UTF-8 is encoded as U+FFFD.
  // INTERNAL only if the regex engine fails (e.g. its stack limit).
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special_tokens) const;

  // Returns the text of `ids`; unknown ids contribute nothing, special tokens
  // nothing when `skip_special_tokens`. Invalid UTF-8 becomes U+FFFD.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // Returns the bytes `id` contributes to decoded text before UTF-8 repair,
  // or nullptr for an unknown id. Used by IncrementalDecoder.
  const std::string* DecodedBytes(int32_t id) const;

  // Returns the token string (vocabulary form) of `id`, or nullopt.
  std::optional<std::string> IdToToken(int32_t id) const;
  // Returns the id of a token string (added tokens first), or nullopt.
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // True if `id` is an added token marked special.
  bool IsSpecial(int32_t id) const;

  // One more than the largest id (model or added).
  int32_t vocab_size() const { return vocab_size_; }
  // Ids of the config's bos/eos tokens, or nullopt if not configured.
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  const TokenizerConfig& config() const { return config_; }
  // True if decoding concatenates byte-level token bytes (ByteLevel decoder).
  bool byte_level_decoder() const { return byte_level_decoder_; }

 private:
  Tokenizer() = default;
  absl::Status LoadPostProcessor(const Json& j, int depth);
  absl::Status LoadDecoder(const Json& j, int depth);
  absl::Status LoadConfig(std::string_view config_json);
  absl::Status EncodeText(std::string_view text, std::vector<int32_t>& ids) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Bpe> model_;
  AddedVocabulary added_;
  // Post-processor template for one sequence: ids before and after it.
  std::vector<int32_t> prefix_ids_;
  std::vector<int32_t> suffix_ids_;
  bool has_template_ = false;
  bool byte_level_decoder_ = false;
  std::vector<std::string> decoded_bytes_;  // by id
  std::vector<bool> known_;                 // by id
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
  TokenizerConfig config_;
};

}  // namespace weir::tokenizer

#endif  // WEIR_TOKENIZER_TOKENIZER_H_
