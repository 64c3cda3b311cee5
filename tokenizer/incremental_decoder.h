// tokenizer/incremental_decoder.h
//
// Streaming detokenizer: turns generated ids into text deltas. A delta never
// ends inside a UTF-8 character (bytes of an incomplete character are held
// until the character completes or proves invalid) and never contains text
// that might be the start of a stop string (held until disambiguated). The
// concatenation of all deltas plus Finish() equals Tokenizer::Decode of all
// ids, cut at the first stop string.
//
//   IncrementalDecoder dec(*tokenizer, {.skip_special_tokens = true,
//                                       .stop_strings = {"\n\nUser:"}});
//   for (int32_t id : sampled) { out += dec.Add(id); if (dec.stopped()) break; }
//   out += dec.Finish();
//
// Thread safety: not thread-safe; one decoder per sequence, used by one
// thread at a time. The tokenizer must outlive the decoder.

#ifndef WEIR_TOKENIZER_INCREMENTAL_DECODER_H_
#define WEIR_TOKENIZER_INCREMENTAL_DECODER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace weir::tokenizer {

struct IncrementalDecoderOptions {
  bool skip_special_tokens = true;
  // Generation stops at the first occurrence of any of these (empty strings
  // are ignored). The stop string itself is dropped unless
  // `include_stop_in_output`.
  std::vector<std::string> stop_strings;
  bool include_stop_in_output = false;
};

class IncrementalDecoder {
 public:
  // Does not take ownership; `tokenizer` must outlive this decoder.
  IncrementalDecoder(const Tokenizer& tokenizer, IncrementalDecoderOptions options);

  // Appends `id` and returns the text that became final. Returns "" once
  // stopped() (later ids are ignored). Unknown ids contribute nothing.
  std::string Add(int32_t id);

  // Ends the stream: returns all held text (an incomplete trailing character
  // becomes U+FFFD; a partial stop string is emitted as text).
  std::string Finish();

  // True once a stop string has been seen.
  bool stopped() const { return stopped_; }
  // Index (0-based) of the stop string that ended the stream, or -1.
  int stop_index() const { return stop_index_; }
  // Number of ids added before the stop (inclusive of the id that completed it).
  int64_t num_ids() const { return num_ids_; }

 private:
  // Moves complete text from bytes_ to text_ (all of it when `flush`), then
  // returns what of text_ can be emitted.
  std::string Drain(bool flush);

  const Tokenizer& tokenizer_;
  IncrementalDecoderOptions options_;
  std::string bytes_;  // decoded bytes not yet valid UTF-8 text
  std::string text_;   // valid text held back for stop-string matching
  bool first_token_ = true;
  bool stopped_ = false;
  int stop_index_ = -1;
  int64_t num_ids_ = 0;
};

}  // namespace weir::tokenizer

#endif  // WEIR_TOKENIZER_INCREMENTAL_DECODER_H_
