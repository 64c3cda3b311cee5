// kernels/cpu/engram.h
//
// Engram of DeepSeek-V4.1 (spec §4.7): n-gram hashing on compressed token
// ids, FP8 table lookup, and the per-stream gate that adds the looked-up value
// to the residual streams.
//
// Hash, per engram layer L and absolute position p:
//   t_k = history[p - k] for k = 0 .. max_ngram-1; once p - k < 0 or a DEAD
//         id (-1, image tokens) is met, that and every farther t_k is `pad`.
//   h = t_0 * m_L[0]; for n = 2 .. max_ngram: h ^= t_{n-1} * m_L[n-1];
//       for each head: row = h mod prime[L][n-2][head] + offset
//   offsets are the running sum of the layer's primes in (size, head) order.
// Multipliers (odd, from numpy default_rng(10007 * L)) and primes come from
// the model configuration; NextUnusedPrimes derives the primes.
// Gate, per token and stream k (dim d, weight = q_weight * k_weight [n, d]):
//   dot = sum_c (X_k[c] * weight[k,c]) * key_k[c] * rsqrt(mean X_k^2 + eps)
//         * rsqrt(mean key_k^2 + eps) * d^-0.5
//   gate = sigmoid(sign(dot) * sqrt(max(|dot|, 1e-6)));  X_k += gate * value
// Masked tokens (image spans) keep X unchanged. The dot (fp32) and the sums of
// squares (double) run in the kernels/common/fmath.h LaneSum order; sigmoid is
// fmath::SigmoidF.
//
// Thread safety: pure functions over caller-owned memory.

#ifndef WEIR_KERNELS_CPU_ENGRAM_H_
#define WEIR_KERNELS_CPU_ENGRAM_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::kernels::cpu {

inline constexpr int64_t kEngramDead = -1;

// Returns primes [layers][max_ngram-1][heads]: for every layer and n-gram
// size, heads primes drawn in order starting above vocab_size - 1, never
// reusing one already handed out. INVALID_ARGUMENT on non-positive sizes.
absl::StatusOr<std::vector<int64_t>> NextUnusedPrimes(int layers, int max_ngram, int heads,
                                                      int64_t vocab_size);

struct EngramHashArgs {
  std::span<const int64_t> history;      // [end_pos] compressed ids, kEngramDead for images
  std::span<const int64_t> multipliers;  // [layers, max_ngram]
  std::span<const int64_t> primes;       // [layers, max_ngram-1, heads]
  std::span<int64_t> rows;               // out [end_pos - start_pos, layers, (max_ngram-1)*heads]
  int64_t start_pos = 0;
  int layers = 0;
  int max_ngram = 0;
  int heads = 0;
  int64_t pad_id = 0;                    // compressed id of the pad token
};

// Hashes positions [start_pos, history.size()). Returns INVALID_ARGUMENT on
// mis-sized spans, max_ngram < 2, non-positive primes or negative ids other
// than kEngramDead.
absl::Status EngramHash(const EngramHashArgs& args);

// Dequantizes rows `ids` of an FP8 table (e4m3 [rows, dim], E8M0 scales
// [rows, dim/32]) into out [ids, dim]. INVALID_ARGUMENT on an id outside
// [0, table_rows) or bad sizes.
absl::Status EngramLookup(std::span<const uint8_t> table, std::span<const uint8_t> scales,
                          int64_t table_rows, int64_t dim, std::span<const int64_t> ids,
                          std::span<float> out);

struct EngramGateArgs {
  std::span<float> x;                 // [tokens, n, dim] streams, updated in place
  std::span<const float> key;         // [tokens, n, dim]
  std::span<const float> value;       // [tokens, dim]
  std::span<const float> weight;      // [n, dim] = q_weight * k_weight
  std::span<const uint8_t> token_mask;  // [tokens], 0 = no Engram (image); empty = all on
  int64_t tokens = 0;
  int hc_mult = 0;
  int64_t dim = 0;
  float eps = 1e-20f;
  bool bf16_boundaries = true;        // round the updated streams to bf16
};

// Applies the gated update. INVALID_ARGUMENT on mis-sized spans.
absl::Status EngramGate(const EngramGateArgs& args);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_ENGRAM_H_
