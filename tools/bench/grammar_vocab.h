// tools/bench/grammar_vocab.h
//
// A deterministic synthetic byte-level vocabulary with the shape of a large
// BPE vocabulary (word pieces with and without a leading space, capitalized
// forms, digit runs, punctuation and JSON fragments, whitespace runs, CJK and
// accented UTF-8, split UTF-8 bytes), for grammar benchmarks.
//
// Thread safety: pure function.

#ifndef WEIR_TOOLS_BENCH_GRAMMAR_VOCAB_H_
#define WEIR_TOOLS_BENCH_GRAMMAR_VOCAB_H_

#include <cstdint>
#include <string>
#include <vector>

namespace weir::bench {

struct SyntheticVocab {
  std::vector<std::string> tokens;   // id -> bytes
  std::vector<int32_t> stop_ids;     // e.g. end of sentence
  std::vector<int32_t> special_ids;  // never generated under a grammar
};

// Returns `size` tokens: ids 0..255 are the single bytes, the last few are
// special tokens, the rest are distinct multi-byte pieces drawn from `seed`.
// REQUIRES: size >= 1024.
SyntheticVocab MakeSyntheticVocab(int32_t size, uint64_t seed);

}  // namespace weir::bench

#endif  // WEIR_TOOLS_BENCH_GRAMMAR_VOCAB_H_
