// kernels/cpu/engram.cc

#include "kernels/cpu/engram.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/common/fmath.h"
#include "kernels/common/numeric_formats.h"
#include "kernels/cpu/quant.h"

namespace weir::kernels::cpu {
namespace {

uint64_t MulMod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b % m);
}

uint64_t PowMod(uint64_t b, uint64_t e, uint64_t m) {
  uint64_t r = 1;
  for (b %= m; e > 0; e >>= 1, b = MulMod(b, b, m)) {
    if (e & 1) r = MulMod(r, b, m);
  }
  return r;
}

// Deterministic Miller-Rabin for 64-bit n.
bool IsPrime(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t p : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int s = 0;
  for (; d % 2 == 0; d /= 2) ++s;
  for (uint64_t a : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}) {
    uint64_t x = PowMod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int i = 1; i < s && composite; ++i) {
      x = MulMod(x, x, n);
      composite = x != n - 1;
    }
    if (composite) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> NextUnusedPrimes(int layers, int max_ngram, int heads,
                                                      int64_t vocab_size) {
  if (layers <= 0 || max_ngram < 2 || heads <= 0 || vocab_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("NextUnusedPrimes: layers ", layers,
                                                   " max_ngram ", max_ngram, " heads ", heads));
  }
  std::vector<int64_t> primes;
  std::unordered_set<int64_t> seen;
  for (int l = 0; l < layers; ++l) {
    for (int n = 0; n < max_ngram - 1; ++n) {
      int64_t current = vocab_size - 1;
      for (int h = 0; h < heads; ++h) {
        do {
          ++current;
        } while (!IsPrime(static_cast<uint64_t>(current)) || seen.count(current) > 0);
        seen.insert(current);
        primes.push_back(current);
      }
    }
  }
  return primes;
}

absl::Status EngramHash(const EngramHashArgs& a) {
  const int64_t end = static_cast<int64_t>(a.history.size());
  const int64_t cols = static_cast<int64_t>(a.max_ngram - 1) * a.heads;
  auto sized = [](auto span, int64_t n) { return static_cast<int64_t>(span.size()) == n; };
  if (a.layers <= 0 || a.max_ngram < 2 || a.heads <= 0 || a.start_pos < 0 || a.start_pos > end ||
      !sized(a.multipliers, int64_t{a.layers} * a.max_ngram) ||
      !sized(a.primes, int64_t{a.layers} * cols) ||
      !sized(a.rows, (end - a.start_pos) * a.layers * cols)) {
    return absl::InvalidArgumentError(absl::StrCat("EngramHash: bad shapes (positions ",
                                                   a.start_pos, "..", end, ", layers ", a.layers,
                                                   ")"));
  }
  for (int64_t p : a.primes) {
    if (p <= 0) return absl::InvalidArgumentError("EngramHash: non-positive prime");
  }
  for (int64_t id : a.history) {
    if (id < 0 && id != kEngramDead) {
      return absl::InvalidArgumentError(absl::StrCat("EngramHash: bad compressed id ", id));
    }
  }
  std::vector<int64_t> tokens(a.max_ngram);
  for (int64_t p = a.start_pos; p < end; ++p) {
    bool blocked = false;
    for (int k = 0; k < a.max_ngram; ++k) {
      blocked = blocked || p - k < 0 || a.history[p - k] == kEngramDead;
      tokens[k] = blocked ? a.pad_id : a.history[p - k];
    }
    for (int l = 0; l < a.layers; ++l) {
      const int64_t* m = a.multipliers.data() + int64_t{l} * a.max_ngram;
      const int64_t* primes = a.primes.data() + int64_t{l} * cols;
      int64_t* out = a.rows.data() + ((p - a.start_pos) * a.layers + l) * cols;
      // Products stay below 2^63 by construction of the multipliers; unsigned
      // arithmetic keeps an out-of-contract config defined (wrapping).
      uint64_t h = static_cast<uint64_t>(tokens[0]) * static_cast<uint64_t>(m[0]);
      int64_t offset = 0;
      for (int n = 1; n < a.max_ngram; ++n) {
        h ^= static_cast<uint64_t>(tokens[n]) * static_cast<uint64_t>(m[n]);
        for (int head = 0; head < a.heads; ++head) {
          const int64_t prime = primes[(n - 1) * a.heads + head];
          out[(n - 1) * a.heads + head] =
              static_cast<int64_t>(h % static_cast<uint64_t>(prime)) + offset;
          offset += prime;
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status EngramLookup(std::span<const uint8_t> table, std::span<const uint8_t> scales,
                          int64_t table_rows, int64_t dim, std::span<const int64_t> ids,
                          std::span<float> out) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (table_rows <= 0 || dim <= 0 || dim % kFp8Block != 0 ||
      static_cast<int64_t>(table.size()) != table_rows * dim ||
      static_cast<int64_t>(scales.size()) != table_rows * (dim / kFp8Block) ||
      static_cast<int64_t>(out.size()) != n * dim) {
    return absl::InvalidArgumentError(absl::StrCat("EngramLookup: bad shapes rows ", table_rows,
                                                   " dim ", dim));
  }
  const int64_t blocks = dim / kFp8Block;
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= table_rows) {
      return absl::InvalidArgumentError(absl::StrCat("EngramLookup: row ", ids[i], " of ",
                                                     table_rows));
    }
    RETURN_IF_ERROR(DequantizeFp8(table.subspan(ids[i] * dim, dim),
                                  scales.subspan(ids[i] * blocks, blocks), kFp8Block,
                                  out.subspan(i * dim, dim)));
  }
  return absl::OkStatus();
}

absl::Status EngramGate(const EngramGateArgs& a) {
  const int64_t t_n = a.tokens, n = a.hc_mult, d = a.dim;
  auto sized = [](auto span, int64_t len) { return static_cast<int64_t>(span.size()) == len; };
  if (t_n <= 0 || n <= 0 || d <= 0 || !sized(a.x, t_n * n * d) || !sized(a.key, t_n * n * d) ||
      !sized(a.value, t_n * d) || !sized(a.weight, n * d) ||
      !(a.token_mask.empty() || sized(a.token_mask, t_n))) {
    return absl::InvalidArgumentError(absl::StrCat("EngramGate: bad shapes tokens ", t_n, " hc ",
                                                   n, " dim ", d));
  }
  const float inv_sqrt_dim = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  auto rsqrt_mean_sq = [&](const float* v) {
    const double sum = fmath::LaneSumSquares(v, d);
    return 1.0f / std::sqrt(static_cast<float>(sum) / static_cast<float>(d) + a.eps);
  };
  for (int64_t t = 0; t < t_n; ++t) {
    const bool on = a.token_mask.empty() || a.token_mask[t] != 0;
    const float* value = a.value.data() + t * d;
    for (int64_t k = 0; k < n; ++k) {
      float* x = a.x.data() + (t * n + k) * d;
      const float* key = a.key.data() + (t * n + k) * d;
      float gate = 0.0f;
      if (on) {
        const float* w = a.weight.data() + k * d;
        const float sum = fmath::LaneSum<float>(
            d, [&](int64_t c) { return fmath::FMul(fmath::FMul(x[c], w[c]), key[c]); });
        const float dot = sum * (rsqrt_mean_sq(x) * rsqrt_mean_sq(key)) * inv_sqrt_dim;
        const float mag = std::sqrt(std::max(std::fabs(dot), 1e-6f));
        gate = fmath::SigmoidF(std::copysign(mag, dot));
      }
      for (int64_t c = 0; c < d; ++c) {
        const float v = x[c] + gate * value[c];
        x[c] = a.bf16_boundaries ? RoundToBf16(v) : v;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cpu
