// tokenizer/bpe_trainer.h
//
// Trains a byte-level BPE tokenizer with the DeepSeek-V3/V4 pre-tokenizer and
// writes it as a Hugging Face tokenizer.json (loadable by weir and by the
// `tokenizers` library). Used by //tools:train_tokenizer for the tiny model.
//
// Id layout: `head_special_tokens` take ids 0.., then the 256 byte tokens (in
// byte order), then merges in training order, then `tail_special_tokens`,
// for exactly `vocab_size` ids. Special tokens are split out of the training
// text and never learned as merges. The first head token is BOS (template
// post-processor).
//
// Thread safety: pure function; thread-safe.

#ifndef WEIR_TOKENIZER_BPE_TRAINER_H_
#define WEIR_TOKENIZER_BPE_TRAINER_H_

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace weir::tokenizer {

struct BpeTrainerOptions {
  int vocab_size = 4096;
  std::vector<std::string> head_special_tokens;
  std::vector<std::string> tail_special_tokens;
  // Pairs seen fewer times than this are never merged; training may then stop
  // early, and the remaining ids are left unused (an error, see below).
  int64_t min_pair_count = 2;
};

// Returns the tokenizer.json text trained on `texts` (any bytes; invalid
// UTF-8 is repaired). Deterministic: the most frequent pair wins, ties go to
// the smaller pair of ids. INVALID_ARGUMENT if `vocab_size` cannot hold the
// special and byte tokens, or if the corpus is too small to learn enough
// merges to fill the vocabulary.
absl::StatusOr<std::string> TrainByteLevelBpe(std::span<const std::string> texts,
                                              const BpeTrainerOptions& options);

// Returns the DeepSeek-V3/V4 pre-tokenizer (three Split regexes, then
// ByteLevel without regex) as tokenizer.json text.
std::string DeepSeekPreTokenizerJson();

}  // namespace weir::tokenizer

#endif  // WEIR_TOKENIZER_BPE_TRAINER_H_
