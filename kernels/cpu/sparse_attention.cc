// kernels/cpu/sparse_attention.cc

#include "kernels/cpu/sparse_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/fmath.h"

namespace weir::kernels::cpu {

absl::Status SparseAttention(const SparseAttentionArgs& a) {
  const int64_t s_len = a.queries, h_n = a.heads, d = a.head_dim, k = a.topk;
  auto sized = [](auto span, int64_t n) { return static_cast<int64_t>(span.size()) == n; };
  if (s_len < 0 || h_n <= 0 || d <= 0 || k < 0 || a.kv_len < 0 || !sized(a.q, s_len * h_n * d) ||
      !sized(a.kv, a.kv_len * d) || !sized(a.sink, h_n) || !sized(a.index, s_len * k) ||
      !sized(a.out, s_len * h_n * d)) {
    return absl::InvalidArgumentError(absl::StrCat("SparseAttention: bad shapes queries ", s_len,
                                                   " heads ", h_n, " head_dim ", d, " kv_len ",
                                                   a.kv_len, " topk ", k));
  }
  for (int32_t t : a.index) {
    if (t < -1 || t >= a.kv_len) {
      return absl::InvalidArgumentError(absl::StrCat("SparseAttention: index ", t, " of ", a.kv_len));
    }
  }
  const float scale = a.scale != 0.0f ? a.scale : 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> z(k);
  for (int64_t s = 0; s < s_len; ++s) {
    const int32_t* idx = a.index.data() + s * k;
    for (int64_t h = 0; h < h_n; ++h) {
      const float* q = a.q.data() + (s * h_n + h) * d;
      float* o = a.out.data() + (s * h_n + h) * d;
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < k; ++j) {
        if (idx[j] < 0) continue;
        const float* kv = a.kv.data() + static_cast<int64_t>(idx[j]) * d;
        z[j] = scale * fmath::LaneDot(q, kv, d);
        m = std::max(m, z[j]);
      }
      std::fill(o, o + d, 0.0f);
      if (m == -std::numeric_limits<float>::infinity()) continue;  // no valid slot
      float denom = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        if (idx[j] < 0) continue;
        const float p = fmath::ExpF(z[j] - m);
        denom += p;
        const float* kv = a.kv.data() + static_cast<int64_t>(idx[j]) * d;
        for (int64_t c = 0; c < d; ++c) o[c] += p * kv[c];
      }
      denom += fmath::ExpF(a.sink[h] - m);
      for (int64_t c = 0; c < d; ++c) o[c] /= denom;
    }
  }
  return absl::OkStatus();
}

absl::Status WindowIndices(int64_t start_pos, int64_t queries, int window, std::span<int32_t> out) {
  if (start_pos < 0 || queries <= 0 || window <= 0 || (start_pos > 0 && queries != 1)) {
    return absl::InvalidArgumentError(absl::StrCat("WindowIndices: start_pos ", start_pos,
                                                   " queries ", queries, " window ", window));
  }
  const int64_t width = start_pos == 0 ? std::min<int64_t>(queries, window) : window;
  if (static_cast<int64_t>(out.size()) != queries * width) {
    return absl::InvalidArgumentError(absl::StrCat("WindowIndices: out has ", out.size(),
                                                   " entries, expected ", queries * width));
  }
  if (start_pos == 0) {
    for (int64_t i = 0; i < queries; ++i) {
      const int64_t first = std::max<int64_t>(0, i - window + 1);
      for (int64_t j = 0; j < width; ++j) {
        const int64_t t = first + j;
        out[i * width + j] = t > i ? -1 : static_cast<int32_t>(t);
      }
    }
    return absl::OkStatus();
  }
  const int64_t oldest = start_pos % window + 1;
  for (int64_t j = 0; j < window; ++j) {
    const int64_t slot = (oldest + j) % window;
    out[j] = slot > start_pos ? -1 : static_cast<int32_t>(slot);
  }
  return absl::OkStatus();
}

absl::Status DsparkIndices(int64_t start_pos, int window, int block, std::span<int32_t> out) {
  if (start_pos < 1 || window <= 0 || block <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("DsparkIndices: start_pos ", start_pos,
                                                   " window ", window, " block ", block));
  }
  const int64_t n_ring = std::min<int64_t>(window, start_pos + 1);
  const int64_t width = n_ring + block;
  if (static_cast<int64_t>(out.size()) != block * width) {
    return absl::InvalidArgumentError(absl::StrCat("DsparkIndices: out has ", out.size(),
                                                   " entries, expected ", block * width));
  }
  for (int64_t q = 0; q < block; ++q) {
    for (int64_t j = 0; j < width; ++j) {
      out[q * width + j] = static_cast<int32_t>(j < n_ring ? j : window + (j - n_ring));
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cpu
