// kernels/cpu/rope.cc

#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace weir::kernels::cpu {

RopeConfig LayerRopeConfig(int compress_ratio, int rope_dim, float rope_theta,
                           float compress_rope_theta, int64_t original_seq_len, float factor,
                           float beta_fast, float beta_slow) {
  RopeConfig config{.rope_dim = rope_dim,
                    .theta = rope_theta,
                    .original_seq_len = 0,
                    .factor = factor,
                    .beta_fast = beta_fast,
                    .beta_slow = beta_slow};
  if (compress_ratio > 0) {
    config.theta = compress_rope_theta;
    config.original_seq_len = original_seq_len;
  }
  return config;
}

absl::StatusOr<RopeTable> RopeTable::Create(const RopeConfig& config) {
  const int d = config.rope_dim;
  if (d <= 0 || d % 2 != 0 || !(config.theta > 1.0f) ||
      (config.original_seq_len > 0 && !(config.factor > 0.0f))) {
    return absl::InvalidArgumentError(absl::StrCat("RopeTable: bad rope_dim ", d, " theta ",
                                                   config.theta, " factor ", config.factor));
  }
  std::vector<float> freqs(d / 2);
  for (int i = 0; i < d / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(d);
    freqs[i] = 1.0f / std::pow(config.theta, exponent);
  }
  if (config.original_seq_len > 0) {
    const double log_theta = std::log(static_cast<double>(config.theta));
    auto corrected_dim = [&](double rotations) {
      return d * std::log(static_cast<double>(config.original_seq_len) /
                          (rotations * 2 * std::numbers::pi)) /
             (2 * log_theta);
    };
    const int64_t low =
        std::max<int64_t>(static_cast<int64_t>(std::floor(corrected_dim(config.beta_fast))), 0);
    const int64_t high =
        std::min<int64_t>(static_cast<int64_t>(std::ceil(corrected_dim(config.beta_slow))), d - 1);
    const float span = std::max(static_cast<float>(high - low), 1e-3f);
    for (int i = 0; i < d / 2; ++i) {
      const float ramp =
          std::clamp((static_cast<float>(i) - static_cast<float>(low)) / span, 0.0f, 1.0f);
      const float smooth = 1.0f - ramp;
      freqs[i] = freqs[i] / config.factor * (1.0f - smooth) + freqs[i] * smooth;
    }
  }
  return RopeTable(d, std::move(freqs));
}

absl::Status ApplyRope(const RopeTable& table, const RopeArgs& args) {
  const int d = table.rope_dim();
  if (args.num_tokens < 0 || args.num_heads <= 0 || args.head_dim < d ||
      static_cast<int64_t>(args.positions.size()) != args.num_tokens ||
      static_cast<int64_t>(args.x.size()) !=
          args.num_tokens * args.num_heads * static_cast<int64_t>(args.head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ApplyRope: x ", args.x.size(), " vs [", args.num_tokens, ", ", args.num_heads, ", ",
        args.head_dim, "], positions ", args.positions.size(), ", rope_dim ", d));
  }
  const bool inverse = args.direction == RopeDirection::kInverse;
  std::vector<float> cos_sin(static_cast<size_t>(args.num_tokens) * d);
  if (absl::Status st = RopeCosSin(table, args.positions, cos_sin); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("ApplyRope: ", st.message()));
  }
  for (int64_t t = 0; t < args.num_tokens; ++t) {
    const float* cs = cos_sin.data() + t * d;
    for (int h = 0; h < args.num_heads; ++h) {
      float* v = args.x.data() + (t * args.num_heads + h) * args.head_dim + (args.head_dim - d);
      for (int i = 0; i < d / 2; ++i) {
        const float c = cs[2 * i];
        const float s = cs[2 * i + 1];
        const float a = v[2 * i], b = v[2 * i + 1];
        if (inverse) {
          v[2 * i] = a * c + b * s;
          v[2 * i + 1] = b * c - a * s;
        } else {
          v[2 * i] = a * c - b * s;
          v[2 * i + 1] = a * s + b * c;
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RopeCosSin(const RopeTable& table, std::span<const int64_t> positions,
                        std::span<float> out) {
  const int d = table.rope_dim();
  if (out.size() != positions.size() * static_cast<size_t>(d)) {
    return absl::InvalidArgumentError(absl::StrCat("RopeCosSin: out has ", out.size(),
                                                   " floats for ", positions.size(),
                                                   " positions of rope_dim ", d));
  }
  const std::vector<float>& freqs = table.freqs();
  for (size_t t = 0; t < positions.size(); ++t) {
    if (positions[t] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("RopeCosSin: position ", positions[t]));
    }
    const float pos = static_cast<float>(positions[t]);
    float* cs = out.data() + t * d;
    for (int i = 0; i < d / 2; ++i) {
      const float angle = pos * freqs[i];
      cs[2 * i] = std::cos(angle);
      cs[2 * i + 1] = std::sin(angle);
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cpu
