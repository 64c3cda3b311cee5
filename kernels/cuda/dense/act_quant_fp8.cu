#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/dense/act_quant_fp8.cuh"
#include "kernels/cuda/dense/act_quant_fp8.h"
#include "kernels/cuda/dense/fp8_mma_sm90.cuh"
#include "kernels/cuda/launch_status.h"

namespace weir::kernels::cuda::dense {
namespace {

// Fp8ActBf16: a thread 16 codes of one 32-block (a 16-byte load, one scale
// byte, two 16-byte stores); chunks = rows x cols / 16 a group, grid.y the
// group.
__global__ void Fp8ActBf16Kernel(const uint8_t* __restrict__ codes,
                                 const uint8_t* __restrict__ scales, uint16_t* __restrict__ out,
                                 int64_t chunks, int64_t code_stride, int64_t scale_stride,
                                 const int64_t* __restrict__ row_count, int64_t row_chunks) {
  GridDependencyPrologue();
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (chunk >= chunks) return;
  if (row_count != nullptr && chunk / row_chunks >= *row_count) return;
  const int64_t g = blockIdx.y;
  const int64_t e = chunk * 16;  // the first element, in the group's packed [rows, cols]
  const uint4 c = *reinterpret_cast<const uint4*>(codes + g * code_stride + e);
  const uint32_t scale = scales[g * scale_stride + e / 32];  // cols % 32 == 0: e / 32 is the block
  uint32_t lo[4], hi[4];
  fp8_gemm::Fp8ToBf16Eight(c.x, c.y, scale, lo);
  fp8_gemm::Fp8ToBf16Eight(c.z, c.w, scale, hi);
  uint4* const o = reinterpret_cast<uint4*>(out + g * chunks * 16 + e);
  o[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
  o[1] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
}

}  // namespace

absl::Status CheckActQuantFp8Params(const ActQuantFp8Params& p) {
  if (p.x == nullptr || p.codes == nullptr || p.scales == nullptr) {
    return absl::InvalidArgumentError("ActQuantFp8: null pointer");
  }
  if (p.rows <= 0 || p.cols <= 0 || p.cols % 32 != 0) {
    return absl::InvalidArgumentError(
        "ActQuantFp8: rows must be positive and cols a positive multiple of 32");
  }
  if (reinterpret_cast<uintptr_t>(p.x) % 16 != 0 || reinterpret_cast<uintptr_t>(p.codes) % 8 != 0) {
    return absl::InvalidArgumentError("ActQuantFp8: x must be 16-byte and codes 8-byte aligned");
  }
  if (p.dtype != ActDtype::kF32 && p.dtype != ActDtype::kBf16) {
    return absl::InvalidArgumentError("ActQuantFp8: unknown dtype");
  }
  return absl::OkStatus();
}

absl::Status ActQuantFp8(const ActQuantFp8Params& p, cudaStream_t stream) {
  if (absl::Status s = CheckActQuantFp8Params(p); !s.ok()) return s;
  constexpr int kThreads = 256;  // 8 elements each: 64 blocks of 32 per thread block
  const int64_t num_threads = p.rows * p.cols / 8;
  const int64_t grid = (num_threads + kThreads - 1) / kThreads;
  if (grid > int64_t{0x7FFFFFFF}) return absl::InvalidArgumentError("ActQuantFp8: too large");
  if (p.dtype == ActDtype::kBf16) {
    ActQuantFp8Kernel<true><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
        p.x, p.codes, p.scales, num_threads, p.row_count, p.cols / 8);
  } else {
    ActQuantFp8Kernel<false><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(
        p.x, p.codes, p.scales, num_threads, p.row_count, p.cols / 8);
  }
  return LaunchStatus("ActQuantFp8");
}

absl::Status CheckFp8ActBf16Params(const Fp8ActBf16Params& p) {
  if (p.codes == nullptr || p.scales == nullptr || p.out == nullptr) {
    return absl::InvalidArgumentError("Fp8ActBf16: null pointer");
  }
  if (p.rows <= 0 || p.cols <= 0 || p.cols % 32 != 0 || p.rows > (int64_t{1} << 40) / p.cols) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8ActBf16: rows ", p.rows, " and cols ", p.cols,
                     " must be positive, cols a multiple of 32, rows x cols at most 2^40"));
  }
  if (p.groups <= 0 || p.groups > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8ActBf16: groups ", p.groups, " outside [1, 65535]"));
  }
  if (reinterpret_cast<uintptr_t>(p.codes) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.out) % 16 != 0) {
    return absl::InvalidArgumentError("Fp8ActBf16: codes and out must be 16-byte aligned");
  }
  const int64_t code_bytes = p.rows * p.cols, scale_bytes = code_bytes / 32;
  if (p.code_group_stride < 0 || p.code_group_stride % 16 != 0 ||
      (p.code_group_stride != 0 && p.code_group_stride < code_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8ActBf16: code group stride ", p.code_group_stride,
                     " must be 0 or a multiple of 16 of at least rows x cols (", code_bytes, ")"));
  }
  if (p.scale_group_stride < 0 ||
      (p.scale_group_stride != 0 && p.scale_group_stride < scale_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8ActBf16: scale group stride ", p.scale_group_stride,
                     " must be 0 or at least rows x cols / 32 (", scale_bytes, ")"));
  }
  return absl::OkStatus();
}

absl::Status Fp8ActBf16(const Fp8ActBf16Params& p, cudaStream_t stream) {
  if (absl::Status s = CheckFp8ActBf16Params(p); !s.ok()) return s;
  constexpr int kThreads = 256;
  const int64_t chunks = p.rows * p.cols / 16;  // at most 2^36: 2^28 blocks
  const int64_t code_bytes = p.rows * p.cols;
  Fp8ActBf16Kernel<<<dim3(static_cast<unsigned>((chunks + kThreads - 1) / kThreads),
                          static_cast<unsigned>(p.groups)),
                     kThreads, 0, stream>>>(
      p.codes, p.scales, p.out, chunks, p.code_group_stride != 0 ? p.code_group_stride : code_bytes,
      p.scale_group_stride != 0 ? p.scale_group_stride : code_bytes / 32, p.row_count, p.cols / 16);
  return LaunchStatus("Fp8ActBf16");
}

}  // namespace weir::kernels::cuda::dense
