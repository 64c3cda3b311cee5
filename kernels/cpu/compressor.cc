// kernels/cpu/compressor.cc

#include "kernels/cpu/compressor.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/common/fmath.h"

namespace weir::kernels::cpu {

int64_t CompressedCount(int64_t start_pos, int64_t tokens, int ratio) {
  return (start_pos + tokens) / ratio - start_pos / ratio;
}

absl::Status CompressorPool(const CompressorPoolArgs& a) {
  const int64_t r = a.ratio, d = a.dim;
  auto sized = [](auto span, int64_t n) { return static_cast<int64_t>(span.size()) == n; };
  if (r < 1 || d <= 0 || a.start_pos < 0 || a.tokens < 0 || !sized(a.kv, a.tokens * d) ||
      !sized(a.score, a.tokens * d) || !sized(a.kv_state, r * d) ||
      !sized(a.score_state, r * d) ||
      !sized(a.out, CompressedCount(a.start_pos, a.tokens, a.ratio) * d)) {
    return absl::InvalidArgumentError(absl::StrCat("CompressorPool: bad shapes tokens ", a.tokens,
                                                   " dim ", d, " ratio ", r, " start_pos ",
                                                   a.start_pos, " out ", a.out.size()));
  }
  std::vector<float> weight(r);
  int64_t emitted = 0;
  for (int64_t i = 0; i < a.tokens; ++i) {
    const int64_t pos = a.start_pos + i;
    const int64_t slot = pos % r;
    std::copy_n(a.kv.data() + i * d, d, a.kv_state.data() + slot * d);
    std::copy_n(a.score.data() + i * d, d, a.score_state.data() + slot * d);
    if ((pos + 1) % r != 0) continue;
    float* latent = a.out.data() + emitted * d;
    for (int64_t c = 0; c < d; ++c) {
      float m = a.score_state[c];
      for (int64_t j = 1; j < r; ++j) m = std::max(m, a.score_state[j * d + c]);
      float sum = 0.0f;
      for (int64_t j = 0; j < r; ++j) sum += (weight[j] = fmath::ExpF(a.score_state[j * d + c] - m));
      float acc = 0.0f;
      for (int64_t j = 0; j < r; ++j) acc += a.kv_state[j * d + c] * (weight[j] / sum);
      latent[c] = acc;
    }
    ++emitted;
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cpu
