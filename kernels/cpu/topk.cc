// kernels/cpu/topk.cc

#include "kernels/cpu/topk.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"

namespace weir::kernels::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <typename T>
bool Sized(std::span<T> s, int64_t n) {
  return static_cast<int64_t>(s.size()) == n;
}

absl::Status CheckVisible(std::span<const int64_t> visible_len, int64_t width) {
  for (int64_t v : visible_len) {
    if (v < 0 || v > width) {
      return absl::InvalidArgumentError(absl::StrCat("visible_len ", v, " outside [0, ", width, "]"));
    }
  }
  return absl::OkStatus();
}

// Indices of the `k` largest of `values` (ties: lower index; NaN ranks as
// -inf), in descending score order. REQUIRES: k <= values.size().
void TopIndices(std::span<const float> values, int64_t k, std::vector<int64_t>& order) {
  order.resize(values.size());
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](int64_t i) { return std::isnan(values[i]) ? kNegInf : values[i]; };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    return key(a) > key(b) || (key(a) == key(b) && a < b);
  });
  order.resize(k);
}

}  // namespace

absl::Status TopkPositions(const TopkArgs& args) {
  if (args.rows < 0 || args.width < 0 || args.k < 0 || !Sized(args.scores, args.rows * args.width) ||
      !Sized(args.visible_len, args.rows) || !Sized(args.out, args.rows * args.k)) {
    return absl::InvalidArgumentError(absl::StrCat("TopkPositions: bad shapes rows ", args.rows,
                                                   " width ", args.width, " k ", args.k));
  }
  if (auto s = CheckVisible(args.visible_len, args.width); !s.ok()) return s;
  std::vector<int64_t> order;
  std::vector<int32_t> kept;
  for (int64_t r = 0; r < args.rows; ++r) {
    std::span<const float> row = args.scores.subspan(r * args.width, args.width);
    TopIndices(row, std::min<int64_t>(args.k, args.width), order);
    kept.clear();
    for (int64_t pos : order) {
      if (pos < args.visible_len[r] && row[pos] > kNegInf) {
        kept.push_back(static_cast<int32_t>(pos) + args.offset);
      }
    }
    std::sort(kept.begin(), kept.end());
    int32_t* out = args.out.data() + r * args.k;
    std::fill(out, out + args.k, -1);
    std::copy(kept.begin(), kept.end(), out);
  }
  return absl::OkStatus();
}

absl::Status CandidateBlocks(const CandidateBlocksArgs& args) {
  if (args.rows < 0 || args.width < 0 || args.block_size <= 0 || args.topk_blocks <= 0 ||
      !Sized(args.scores, args.rows * args.width) || !Sized(args.visible_len, args.rows) ||
      !Sized(args.pool, args.rows * args.width)) {
    return absl::InvalidArgumentError(absl::StrCat("CandidateBlocks: bad shapes rows ", args.rows,
                                                   " width ", args.width, " block ",
                                                   args.block_size));
  }
  if (auto s = CheckVisible(args.visible_len, args.width); !s.ok()) return s;
  const int64_t b = args.block_size;
  const int64_t n_blocks = (args.width + b - 1) / b;
  std::vector<float> block_score(n_blocks);
  std::vector<int64_t> order;
  for (int64_t r = 0; r < args.rows; ++r) {
    const float* row = args.scores.data() + r * args.width;
    for (int64_t blk = 0; blk < n_blocks; ++blk) {
      float m = kNegInf;  // the last block is padded with -inf
      for (int64_t t = blk * b; t < std::min(args.width, (blk + 1) * b); ++t) m = std::max(m, row[t]);
      block_score[blk] = m;
    }
    if (args.visible_len[r] > 0) {
      block_score[(args.visible_len[r] - 1) / b] = std::numeric_limits<float>::infinity();
    }
    TopIndices(block_score, std::min<int64_t>(args.topk_blocks, n_blocks), order);
    uint8_t* pool = args.pool.data() + r * args.width;
    std::fill(pool, pool + args.width, uint8_t{0});
    for (int64_t blk : order) {
      if (!(block_score[blk] > kNegInf)) continue;
      for (int64_t t = blk * b; t < std::min(args.width, (blk + 1) * b); ++t) pool[t] = 1;
    }
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cpu
