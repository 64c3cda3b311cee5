// kernels/cpu/rope.h
//
// Rotary position embedding of DeepSeek-V4.1 (spec §1.2, §4.3): the LAST
// `rope_dim` (64) dims of each head vector, as ADJACENT pairs (2i, 2i+1)
// taken as complex numbers (interleaved, not half-split), with frequency
// f_i = theta^(-2i/rope_dim), optionally YaRN-corrected. The inverse rotation
// (conjugate) removes the query position from the attention output (§4.3.7).
//
// Frequencies and angles follow the reference's fp32 table exactly:
//   e_i = fl(2i) / rope_dim; f_i = 1 / powf(theta, e_i)
//   YaRN (original_seq_len > 0): corr(b) = d*ln(orig/(b*2pi)) / (2 ln theta)
//     (double); low = max(floor(corr(beta_fast)), 0);
//     high = min(ceil(corr(beta_slow)), d - 1);
//     ramp_i = clamp((i - low) / max(high - low, 1e-3), 0, 1); smooth = 1 - ramp;
//     f_i = f_i / factor * (1 - smooth) + f_i * smooth          (all fp32)
//   angle = fl(fl(pos) * f_i); (c, s) = (cosf, sinf)(angle)
//   forward: (a, b) -> (a*c - b*s, a*s + b*c); inverse: (a*c + b*s, b*c - a*s)
// Products are rounded one by one (no FMA). cosf/sinf come from libm; a GPU
// implementation should match them to within 1 ulp.
//
// Thread safety: RopeTable is immutable after Create and may be shared.

#ifndef WEIR_KERNELS_CPU_ROPE_H_
#define WEIR_KERNELS_CPU_ROPE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace weir::kernels::cpu {

struct RopeConfig {
  int rope_dim = 64;
  float theta = 10000.0f;
  int64_t original_seq_len = 0;  // 0 disables YaRN
  float factor = 1.0f;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
};

// Returns the RoPE config of a layer (spec §4.3): ratio-0 layers (SWA-only,
// DSpark) use `rope_theta` without YaRN; ratio > 0 layers use
// `compress_rope_theta` with YaRN over `original_seq_len`.
RopeConfig LayerRopeConfig(int compress_ratio, int rope_dim, float rope_theta,
                           float compress_rope_theta, int64_t original_seq_len, float factor,
                           float beta_fast, float beta_slow);

// Per-layer-type frequency table.
class RopeTable {
 public:
  // Returns INVALID_ARGUMENT if rope_dim is not positive and even, theta <= 1,
  // or YaRN is on with factor <= 0.
  static absl::StatusOr<RopeTable> Create(const RopeConfig& config);

  int rope_dim() const { return rope_dim_; }
  // [rope_dim / 2] fp32 frequencies.
  const std::vector<float>& freqs() const { return freqs_; }

 private:
  RopeTable(int rope_dim, std::vector<float> freqs)
      : rope_dim_(rope_dim), freqs_(std::move(freqs)) {}
  int rope_dim_;
  std::vector<float> freqs_;
};

enum class RopeDirection { kForward, kInverse };

struct RopeArgs {
  std::span<float> x;                   // [num_tokens, num_heads, head_dim], rotated in place
  std::span<const int64_t> positions;   // [num_tokens], >= 0
  int64_t num_tokens = 0;
  int num_heads = 1;
  int head_dim = 0;                     // >= table.rope_dim(); rotates the last rope_dim dims
  RopeDirection direction = RopeDirection::kForward;
};

// Rotates the last rope_dim dims of every head vector at its token's
// position. Returns INVALID_ARGUMENT on mis-sized spans, head_dim <
// rope_dim, or a negative position.
absl::Status ApplyRope(const RopeTable& table, const RopeArgs& args);

// The rotation ApplyRope uses at each position: out [positions, rope_dim / 2,
// 2] holds (cos, sin) of the angle fl(fl(pos) * freqs[i]), the same values
// bit for bit. A device backend uploads these instead of computing its own
// sin/cos (which differ from glibc's in the last ulp). INVALID_ARGUMENT on a
// negative position or a mis-sized `out`.
absl::Status RopeCosSin(const RopeTable& table, std::span<const int64_t> positions,
                        std::span<float> out);

}  // namespace weir::kernels::cpu

#endif  // WEIR_KERNELS_CPU_ROPE_H_
