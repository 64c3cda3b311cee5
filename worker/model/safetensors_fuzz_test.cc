// Deterministic randomized mutations and truncations of a valid safetensors
// image: the parser must return OK or DATA_LOSS/INVALID_ARGUMENT, and every
// span it accepts must lie inside the image.

#include <cstdint>
#include <string>

#include "gtest/gtest.h"
#include "worker/model/safetensors.h"
#include "worker/model/safetensors_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace weir::model {
namespace {

// xorshift64*: a fixed-seed generator, identical on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed | 1) {}
  uint64_t Next() {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    return s_ * 0x2545F4914F6CDD1DULL;
  }
  size_t Below(size_t n) { return n == 0 ? 0 : Next() % n; }

 private:
  uint64_t s_;
};

std::string ValidImage() {
  absl::StatusOr<std::string> image = SerializeSafetensors(
      {{"layers.0.attn.wq_a.weight", DType::kF8E4M3, {4, 8}},
       {"layers.0.attn.wq_a.scale", DType::kF8E8M0, {1, 1}},
       {"norm.weight", DType::kBF16, {8}},
       {"hc", DType::kF32, {2, 3}},
       {"empty", DType::kI64, {0, 5}}},
      {std::string(32, 'a'), std::string(1, 'b'), std::string(16, 'c'), std::string(24, 'd'), ""},
      {{"format", "pt"}});
  EXPECT_TRUE(image.ok());
  return *image;
}

void Mutate(Rng& rng, std::string& s) {
  const char kJsonBytes[] = "{}[],:\"-0123456789e.E+ \\nulltrue";
  const size_t header_end = s.size() >= 8 ? 8 + (static_cast<uint8_t>(s[0]) |
                                                  (static_cast<uint8_t>(s[1]) << 8))
                                          : s.size();
  switch (rng.Below(8)) {
    case 0:  // flip a bit anywhere
      if (!s.empty()) s[rng.Below(s.size())] ^= static_cast<char>(1 << rng.Below(8));
      break;
    case 1:  // a JSON-ish byte inside the header
      if (header_end > 8 && header_end <= s.size()) {
        s[8 + rng.Below(header_end - 8)] = kJsonBytes[rng.Below(sizeof(kJsonBytes) - 1)];
      }
      break;
    case 2:  // truncate
      s.resize(rng.Below(s.size() + 1));
      break;
    case 3:  // rewrite the header length
      if (s.size() >= 8) {
        const uint64_t n = rng.Below(3) == 0 ? rng.Next() : header_end - 8 + rng.Below(9) - 4;
        for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
      }
      break;
    case 4:  // delete a chunk
      if (!s.empty()) {
        const size_t at = rng.Below(s.size());
        s.erase(at, rng.Below(16) + 1);
      }
      break;
    case 5:  // duplicate a chunk
      if (!s.empty()) {
        const size_t at = rng.Below(s.size());
        s.insert(at, s.substr(at, rng.Below(16) + 1));
      }
      break;
    case 6:  // change a digit in the header (offsets, shapes)
      for (int tries = 0; tries < 16 && header_end <= s.size() && header_end > 8; ++tries) {
        const size_t at = 8 + rng.Below(header_end - 8);
        if (s[at] >= '0' && s[at] <= '9') {
          s[at] = static_cast<char>('0' + rng.Below(10));
          break;
        }
      }
      break;
    default:  // random byte
      if (!s.empty()) s[rng.Below(s.size())] = static_cast<char>(rng.Next());
      break;
  }
}

TEST(SafetensorsFuzzTest, MutationsNeverCrashAndSpansStayInBounds) {
  const std::string valid = ValidImage();
  Rng rng(20261129);
  int rejected = 0;
  int accepted = 0;
  constexpr int kIterations = 6000;
  for (int iter = 0; iter < kIterations; ++iter) {
    std::string s = valid;
    const int rounds = 1 + static_cast<int>(rng.Below(4));
    for (int r = 0; r < rounds; ++r) Mutate(rng, s);
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    absl::StatusOr<SafetensorsHeader> h = ParseSafetensorsHeader(bytes, "fuzz");
    LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    if (!h.ok()) {
      ++rejected;
      ASSERT_TRUE(h.status().code() == absl::StatusCode::kDataLoss ||
                  h.status().code() == absl::StatusCode::kInvalidArgument)
          << iter << ": " << h.status();
      continue;
    }
    ++accepted;
    int64_t previous_end = 0;
    for (const TensorInfo& t : h->tensors) {
      ASSERT_LE(0, t.begin);
      ASSERT_LE(t.begin, t.end);
      ASSERT_LE(h->data_offset + t.end, static_cast<int64_t>(s.size())) << iter;
      ASSERT_EQ(t.num_bytes(), t.num_elements() * DTypeSize(t.dtype)) << iter;
      if (t.num_bytes() > 0) {
        ASSERT_GE(t.begin, previous_end) << iter;
        previous_end = t.end;
      }
    }
  }
  // Both outcomes occur, so the mutations reach past the first check.
  EXPECT_GT(rejected, kIterations / 4);
  EXPECT_GT(accepted, 50);
}

}  // namespace
}  // namespace weir::model
