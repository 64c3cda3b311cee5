// kernels/cpu/engram_multipliers.cc

#include "kernels/cpu/engram_multipliers.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"

namespace weir::kernels::cpu {
namespace {

using u128 = unsigned __int128;

// numpy SeedSequence constants (bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5, kMultA = 0x931e8875;
constexpr uint32_t kInitB = 0x8b51f9dd, kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd, kMixMultR = 0x4973f715;
constexpr int kPoolSize = 4;

uint32_t HashMix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  return value ^ (value >> 16);
}

uint32_t Mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  return result ^ (result >> 16);
}

// SeedSequence(seed).generate_state(4, uint64).
void SeedSequenceState(uint64_t seed, uint64_t out[4]) {
  std::vector<uint32_t> entropy;
  do {  // little-endian 32-bit words; 0 is the single word [0]
    entropy.push_back(static_cast<uint32_t>(seed & 0xFFFFFFFFu));
    seed >>= 32;
  } while (seed > 0);
  uint32_t pool[kPoolSize];
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i) {
    pool[i] = HashMix(i < static_cast<int>(entropy.size()) ? entropy[i] : 0u, hash_const);
  }
  for (int src = 0; src < kPoolSize; ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool[dst] = Mix(pool[dst], HashMix(pool[src], hash_const));
    }
  }
  for (size_t src = kPoolSize; src < entropy.size(); ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      pool[dst] = Mix(pool[dst], HashMix(entropy[src], hash_const));
    }
  }
  uint32_t words[8];
  uint32_t hash_b = kInitB;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = pool[i % kPoolSize];
    v ^= hash_b;
    hash_b *= kMultB;
    v *= hash_b;
    words[i] = v ^ (v >> 16);
  }
  for (int i = 0; i < 4; ++i) out[i] = uint64_t{words[2 * i]} | (uint64_t{words[2 * i + 1]} << 32);
}

// PCG64 (setseq XSL-RR 128/64), as seeded by numpy.
class Pcg64 {
 public:
  explicit Pcg64(uint64_t seed) {
    uint64_t s[4];
    SeedSequenceState(seed, s);
    const u128 init_state = (u128{s[0]} << 64) | s[1];
    const u128 init_seq = (u128{s[2]} << 64) | s[3];
    state_ = 0;
    inc_ = (init_seq << 1) | 1;
    Step();
    state_ += init_state;
    Step();
  }

  uint64_t Next64() {
    Step();
    const uint64_t x = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
    const unsigned rot = static_cast<unsigned>(state_ >> 122);
    return (x >> rot) | (x << ((64 - rot) & 63));
  }

 private:
  void Step() {
    const u128 mult = (u128{2549297995355413924ULL} << 64) | 4865540595714422341ULL;
    state_ = state_ * mult + inc_;
  }
  u128 state_;
  u128 inc_;
};

}  // namespace

absl::StatusOr<std::vector<int64_t>> NumpyDefaultRngIntegers(int64_t seed, int64_t high,
                                                             int64_t count) {
  if (seed < 0 || high <= 0 || count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NumpyDefaultRngIntegers: seed ", seed, " high ", high, " count ", count));
  }
  Pcg64 rng(static_cast<uint64_t>(seed));
  const uint64_t range = static_cast<uint64_t>(high) - 1;  // inclusive range of [0, high)
  std::vector<int64_t> out(count, 0);
  if (range == 0) return out;
  if (range <= 0xFFFFFFFFull) {
    // Buffered 32-bit Lemire: each 64-bit draw serves two 32-bit values, low half first.
    const uint32_t range_excl = static_cast<uint32_t>(range) + 1;  // range < 2^32 - 1 here
    uint64_t buffer = 0;
    bool have_high_half = false;
    auto next32 = [&]() -> uint32_t {
      if (!have_high_half) {
        buffer = rng.Next64();
        have_high_half = true;
      } else {
        buffer >>= 32;
        have_high_half = false;
      }
      return static_cast<uint32_t>(buffer);
    };
    for (int64_t i = 0; i < count; ++i) {
      uint64_t m = uint64_t{next32()} * range_excl;
      uint32_t leftover = static_cast<uint32_t>(m);
      if (leftover < range_excl) {
        const uint32_t threshold = (std::numeric_limits<uint32_t>::max() -
                                    static_cast<uint32_t>(range)) % range_excl;
        while (leftover < threshold) {
          m = uint64_t{next32()} * range_excl;
          leftover = static_cast<uint32_t>(m);
        }
      }
      out[i] = static_cast<int64_t>(m >> 32);
    }
    return out;
  }
  const uint64_t range_excl = range + 1;
  for (int64_t i = 0; i < count; ++i) {
    u128 m = u128{rng.Next64()} * range_excl;
    uint64_t leftover = static_cast<uint64_t>(m);
    if (leftover < range_excl) {
      const uint64_t threshold = (std::numeric_limits<uint64_t>::max() - range) % range_excl;
      while (leftover < threshold) {
        m = u128{rng.Next64()} * range_excl;
        leftover = static_cast<uint64_t>(m);
      }
    }
    out[i] = static_cast<int64_t>(m >> 64);
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> EngramMultipliers(std::span<const int> layer_ids,
                                                       int max_ngram, int64_t compressed_vocab) {
  if (max_ngram < 1 || compressed_vocab <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("EngramMultipliers: max_ngram ", max_ngram,
                                                   " vocab ", compressed_vocab));
  }
  const int64_t bound =
      std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / compressed_vocab) / 2);
  std::vector<int64_t> out;
  for (int layer : layer_ids) {
    if (layer < 0) return absl::InvalidArgumentError(absl::StrCat("layer id ", layer));
    absl::StatusOr<std::vector<int64_t>> values =
        NumpyDefaultRngIntegers(int64_t{10007} * layer, bound, max_ngram);
    if (!values.ok()) return values.status();
    for (int64_t v : *values) out.push_back(v * 2 + 1);
  }
  return out;
}

}  // namespace weir::kernels::cpu
