// kernels/cpu/indexer_score.cc

#include "kernels/cpu/indexer_score.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/numeric_formats.h"

namespace weir::kernels::cpu {

absl::Status IndexerScore(const IndexerScoreArgs& a) {
  const int64_t s_n = a.queries, h_n = a.heads, d = a.dim, t_n = a.keys;
  auto sized = [](auto span, int64_t n) { return static_cast<int64_t>(span.size()) == n; };
  if (s_n < 0 || h_n <= 0 || d <= 0 || t_n < 0 || !sized(a.q, s_n * h_n * d) ||
      !sized(a.k, t_n * d) || !sized(a.weights, s_n * h_n) || !sized(a.visible_len, s_n) ||
      !sized(a.out, s_n * t_n)) {
    return absl::InvalidArgumentError(absl::StrCat("IndexerScore: bad shapes queries ", s_n,
                                                   " heads ", h_n, " dim ", d, " keys ", t_n));
  }
  for (int64_t v : a.visible_len) {
    if (v < 0 || v > t_n) {
      return absl::InvalidArgumentError(absl::StrCat("IndexerScore: visible_len ", v));
    }
  }
  auto round = [&a](float x) { return a.round_bf16 ? RoundToBf16(x) : x; };
  // Keys in tiles of kTile, transposed once per call ([tile][c][j]), so the
  // innermost loop runs over kTile keys side by side. Every score is still
  // the same sequence of operations (dot: products added in c order from +0,
  // each rounded; total: head terms added in h order), so the bits are the
  // scalar loop's; only independent scores share vector lanes.
  // Only the keys some query sees are read (a caller's key store may be
  // much longer than what is visible yet).
  constexpr int64_t kTile = 8;
  int64_t used = 0;
  for (int64_t v : a.visible_len) used = std::max(used, v);
  const int64_t tiles = (used + kTile - 1) / kTile;
  std::vector<float> kt(static_cast<size_t>(tiles * d * kTile), 0.0f);
  for (int64_t t = 0; t < used; ++t) {
    const float* k = a.k.data() + t * d;
    float* tile = kt.data() + (t / kTile) * d * kTile + t % kTile;
    for (int64_t c = 0; c < d; ++c) tile[c * kTile] = k[c];
  }
  for (int64_t s = 0; s < s_n; ++s) {
    float* row = a.out.data() + s * t_n;
    std::fill(row, row + t_n, -std::numeric_limits<float>::infinity());
    const int64_t visible = a.visible_len[s];
    for (int64_t t0 = 0; t0 < visible; t0 += kTile) {
      const float* tile = kt.data() + (t0 / kTile) * d * kTile;
      float total[kTile] = {};
      for (int64_t h = 0; h < h_n; ++h) {
        const float* q = a.q.data() + (s * h_n + h) * d;
        float dot[kTile] = {};
        for (int64_t c = 0; c < d; ++c) {
          const float qc = q[c];
          const float* kc = tile + c * kTile;
          for (int64_t j = 0; j < kTile; ++j) dot[j] += qc * kc[j];
        }
        const float w = a.weights[s * h_n + h];
        for (int64_t j = 0; j < kTile; ++j) total[j] += round(std::max(round(dot[j]), 0.0f) * w);
      }
      const int64_t n = std::min(kTile, visible - t0);
      for (int64_t j = 0; j < n; ++j) row[t0 + j] = round(total[j]);
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cpu
