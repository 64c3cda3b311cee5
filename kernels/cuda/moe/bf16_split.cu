// kernels/cuda/moe/bf16_split.cu — Bf16Split (see the header).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/grid_dependency.cuh"
#include "kernels/cuda/launch_status.h"
#include "kernels/cuda/moe/bf16_split.h"

namespace weir::kernels::cuda {
namespace {

constexpr int kSplitThreads = 256;

// A thread an element: its hi and lo bf16 bits into the row's three thirds.
__global__ void Bf16SplitKernel(const float* __restrict__ x, uint16_t* __restrict__ out,
                                int64_t rows, int64_t cols, bool weight_side) {
  GridDependencyPrologue();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  const float v = x[i];
  const __nv_bfloat16 hi = __float2bfloat16_rn(v);
  const __nv_bfloat16 lo = __float2bfloat16_rn(__fsub_rn(v, __bfloat162float(hi)));
  const uint16_t hi_bits = __bfloat16_as_ushort(hi), lo_bits = __bfloat16_as_ushort(lo);
  uint16_t* row = out + r * 3 * cols;
  row[c] = hi_bits;
  row[cols + c] = weight_side ? lo_bits : hi_bits;
  row[2 * cols + c] = weight_side ? hi_bits : lo_bits;
}

}  // namespace

bool SupportsBf16Split(const Bf16SplitParams& p) {
  return p.x != nullptr && p.out != nullptr && p.rows > 0 && p.cols > 0 &&
         p.rows <= (int64_t{1} << 40) / p.cols;
}

absl::Status Bf16Split(const Bf16SplitParams& p, cudaStream_t stream) {
  if (!SupportsBf16Split(p)) {
    return absl::InvalidArgumentError(absl::StrCat("Bf16Split: unsupported (rows ", p.rows,
                                                   ", cols ", p.cols, ", non-null arrays)"));
  }
  const int64_t n = p.rows * p.cols;
  const int64_t blocks = (n + kSplitThreads - 1) / kSplitThreads;
  if (blocks > INT32_MAX) return absl::InvalidArgumentError("Bf16Split: too many elements");
  Bf16SplitKernel<<<static_cast<unsigned>(blocks), kSplitThreads, 0, stream>>>(
      p.x, p.out, p.rows, p.cols, p.weight_side);
  return LaunchStatus("Bf16Split");
}

}  // namespace weir::kernels::cuda
