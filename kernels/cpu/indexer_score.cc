// kernels/cpu/indexer_score.cc

#include "kernels/cpu/indexer_score.h"

#include <algorithm>
#include <limits>

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
  for (int64_t s = 0; s < s_n; ++s) {
    float* row = a.out.data() + s * t_n;
    std::fill(row, row + t_n, -std::numeric_limits<float>::infinity());
    for (int64_t t = 0; t < a.visible_len[s]; ++t) {
      const float* k = a.k.data() + t * d;
      float total = 0.0f;
      for (int64_t h = 0; h < h_n; ++h) {
        const float* q = a.q.data() + (s * h_n + h) * d;
        float dot = 0.0f;
        for (int64_t c = 0; c < d; ++c) dot += q[c] * k[c];
        total += round(std::max(round(dot), 0.0f) * a.weights[s * h_n + h]);
      }
      row[t] = round(total);
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cpu
