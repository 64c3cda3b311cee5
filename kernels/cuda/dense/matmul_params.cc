#include "kernels/cuda/dense/matmul_params.h"

#include <cstdint>

#include "absl/strings/str_cat.h"

namespace weir::kernels::cuda::dense {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 31;

}  // namespace

bool FloatRangesOverlap(const float* a, int64_t a_floats, const float* b, int64_t b_floats) {
  if (a == nullptr || b == nullptr) return false;
  const auto a0 = reinterpret_cast<uintptr_t>(a);
  const auto b0 = reinterpret_cast<uintptr_t>(b);
  const auto a1 = a0 + static_cast<uintptr_t>(a_floats) * sizeof(float);
  const auto b1 = b0 + static_cast<uintptr_t>(b_floats) * sizeof(float);
  return a0 < b1 && b0 < a1;
}

int64_t MatmulScratchFloats(int64_t rows, int64_t in, bool fp8_activation) {
  return fp8_activation ? rows * in : 0;
}

absl::Status CheckMatmulParams(const MatmulParams& p) {
  if (p.rows <= 0 || p.out <= 0 || p.in <= 0 || p.rows >= kMaxDim || p.out >= kMaxDim ||
      p.in >= kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat("Matmul: bad shape rows ", p.rows, " out ",
                                                   p.out, " in ", p.in));
  }
  if (p.x == nullptr || p.w == nullptr || p.y == nullptr) {
    return absl::InvalidArgumentError("Matmul: null x, w or y");
  }
  if (p.fp8_activation && (p.in % 32 != 0 || p.act_scratch == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Matmul: the FP8 activation needs in (", p.in, ") a multiple of 32 and act_scratch"));
  }
  const int64_t y_floats = p.rows * p.out;
  const int64_t x_floats = p.rows * p.in;
  const int64_t w_floats = p.out * p.in;
  const float* scratch = p.fp8_activation ? p.act_scratch : nullptr;
  if (FloatRangesOverlap(p.y, y_floats, p.x, x_floats) || FloatRangesOverlap(p.y, y_floats, p.w, w_floats) ||
      FloatRangesOverlap(p.y, y_floats, scratch, x_floats) || FloatRangesOverlap(scratch, x_floats, p.x, x_floats) ||
      FloatRangesOverlap(scratch, x_floats, p.w, w_floats)) {
    return absl::InvalidArgumentError("Matmul: y, x, w and act_scratch must not overlap");
  }
  return absl::OkStatus();
}

}  // namespace weir::kernels::cuda::dense
