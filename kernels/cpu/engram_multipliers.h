// kernels/cpu/engram_multipliers.h
//
// The Engram hash multipliers of DeepSeek-V4.1 (spec §4.7 step 2), computed
// exactly as the reference's numpy code does:
//   bound = max(1, (INT64_MAX / compressed_vocab) / 2)
//   m[L]  = numpy.random.default_rng(10007 * L).integers(0, bound, size=max_ngram) * 2 + 1
// numpy's default_rng is PCG64 (XSL-RR 128/64) seeded through SeedSequence
// (pool of 4 uint32 words, hashmix/mix), and Generator.integers draws with
// Lemire's bounded method (64-bit for bounds above 2^32, buffered 32-bit
// otherwise). Both are re-implemented here from their published algorithms.
//
// Thread safety: pure functions.

#ifndef WEIR_KERNELS_CPU_ENGRAM_MULTIPLIERS_H_
#define WEIR_KERNELS_CPU_ENGRAM_MULTIPLIERS_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace weir::kernels::cpu {

// Returns numpy.random.default_rng(seed).integers(0, high, size=count)
// (dtype int64). INVALID_ARGUMENT if seed < 0, high <= 0 or count < 0.
absl::StatusOr<std::vector<int64_t>> NumpyDefaultRngIntegers(int64_t seed, int64_t high,
                                                             int64_t count);

// Returns the multipliers [layer_ids.size(), max_ngram] for the engram layers
// `layer_ids`. INVALID_ARGUMENT on negative layer ids, max_ngram < 1 or
// compressed_vocab <= 0.
absl::StatusOr<std::vector<int64_t>> EngramMultipliers(std::span<const int> layer_ids,
                                                       int max_ngram, int64_t compressed_vocab);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_ENGRAM_MULTIPLIERS_H_
