#include "worker/model/expert_ffn.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/common/fmath.h"
#include "kernels/cpu/swiglu.h"

namespace weir::model {

absl::Status SwigluExpertForward(Ops& ops, const ExpertWeightsF32& expert,
                                 std::span<const float> x, int64_t rows,
                                 std::span<const float> route_weight, float swiglu_limit,
                                 std::span<float> y) {
  const int64_t inter = expert.w1.out, dim = expert.w1.in;
  if (expert.w3.out != inter || expert.w3.in != dim || expert.w2.out != dim ||
      expert.w2.in != inter ||
      !(route_weight.empty() || static_cast<int64_t>(route_weight.size()) == rows)) {
    return absl::InvalidArgumentError(absl::StrCat("SwigluExpert: shapes for dim ", dim));
  }
  std::vector<float> gate(rows * inter), up(rows * inter);
  RETURN_IF_ERROR(ops.Matmul(expert.w1, x, rows, gate));
  RETURN_IF_ERROR(ops.Matmul(expert.w3, x, rows, up));
  ops.RoundBf16(gate);
  ops.RoundBf16(up);
  // fmath::ExpF gives the same bits on the GPU (kernels/cuda/decode/swiglu.h).
  kernels::cpu::SwigluRows(gate, up, route_weight, rows, inter, swiglu_limit,
                           [](float v) { return kernels::fmath::ExpF(v); });
  ops.RoundBf16(gate);
  RETURN_IF_ERROR(ops.Matmul(expert.w2, gate, rows, y));
  ops.RoundBf16(y);
  return absl::OkStatus();
}

}  // namespace weir::model
